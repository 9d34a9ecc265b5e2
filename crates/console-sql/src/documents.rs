//! [`countersign_console_core::work::DocumentTx`] on SQLite and PostgreSQL.

use async_trait::async_trait;
use countersign_console_core::work::DocumentTx;

use crate::SqlTx;

#[async_trait]
impl DocumentTx for SqlTx {}
