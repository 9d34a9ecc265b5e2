//! A broker database for the one-shot audit commands (`audit verify`, `export`,
//! `accept-head`): a fresh SQLite file with its sealing key, audit entries appended to it as the
//! broker appends them.

use std::path::PathBuf;

use countersign_broker_core::Storage;
use countersign_broker_core::audit::{self, AuditEvent};
use countersign_broker_core::seal::Sealer;
use countersign_broker_sql::SqlStorage;
use zeroize::Zeroizing;

/// A SQLite database and its sealing key in a temporary directory (removed on drop).
pub struct AuditDb {
    pub dir: tempfile::TempDir,
    pub url: String,
    pub key_file: PathBuf,
    pub sealer: Sealer,
}

impl AuditDb {
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let key = Zeroizing::new(vec![7u8; 32]);
        let key_file = dir.path().join("seal.key");
        std::fs::write(&key_file, countersign_proto::b64::encode(&key))?;
        Ok(AuditDb {
            url: format!("sqlite://{}?mode=rwc", dir.path().join("b.db").display()),
            key_file,
            sealer: Sealer::new(&key).ok_or_else(|| anyhow::anyhow!("a short key"))?,
            dir,
        })
    }

    /// `--database-url <url> --seal-key-file <key>`, for a one-shot command.
    pub fn args(&self) -> Vec<String> {
        vec![
            "--database-url".into(),
            self.url.clone(),
            "--seal-key-file".into(),
            self.key_file.display().to_string(),
        ]
    }

    /// Appends `n` release entries numbered from `from` (subject `session:<i>`, which names no
    /// sealed row that `audit verify` would look for; bodies naming `SECRET_<i>`):
    /// the new head's hash.
    pub async fn append(&self, from: usize, n: usize) -> anyhow::Result<String> {
        let e = |e: countersign_broker_core::storage::StorageError| anyhow::anyhow!("{e}");
        let storage = SqlStorage::connect(&self.url).await.map_err(e)?;
        let events: Vec<AuditEvent> = (from..from + n)
            .map(|i| AuditEvent {
                kind: "release",
                subject: format!("session:{i}"),
                body: serde_json::json!({ "names": [format!("SECRET_{i}")] }).to_string(),
            })
            .collect();
        let mut tx = storage.begin().await.map_err(e)?;
        let head = audit::append(&mut *tx, &self.sealer, chrono::Utc::now(), &events)
            .await
            .map_err(e)?;
        tx.commit().await.map_err(e)?;
        storage.close().await;
        let (_, hash) = head.ok_or_else(|| anyhow::anyhow!("nothing appended"))?;
        Ok(hash)
    }
}
