//! [`countersign_console_core::work::MessageTx`] on SQLite and PostgreSQL.

use async_trait::async_trait;
use countersign_console_core::work::MessageTx;

use crate::SqlTx;

#[async_trait]
impl MessageTx for SqlTx {}
