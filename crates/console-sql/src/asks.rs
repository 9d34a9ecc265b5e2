//! [`countersign_console_core::work::AskTx`] on SQLite and PostgreSQL.

use async_trait::async_trait;
use countersign_console_core::work::AskTx;

use crate::SqlTx;

#[async_trait]
impl AskTx for SqlTx {}
