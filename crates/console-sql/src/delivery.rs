//! [`countersign_console_core::work::DeliveryTx`] on SQLite and PostgreSQL.

use async_trait::async_trait;
use countersign_console_core::work::DeliveryTx;

use crate::SqlTx;

#[async_trait]
impl DeliveryTx for SqlTx {}
