//! The broker over the local store (`countersign-store-local`), end to end: a TOML file the
//! operator edits, read afresh by the broker's real `LocalFileStore` at every call, and the real
//! server over HTTP. The secret-store contract (`stores_contract`) runs here as it does against
//! the cloud stores; the store going away is its file going away.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use anyhow::Context;
use async_trait::async_trait;
use countersign_broker_core::secrets::SecretStore;
use countersign_e2e::http::*;
use countersign_store_local::LocalFileStore;
use serde::Serialize;
use serde_json::{Value, json};

use crate::stores_common::*;
use crate::stores_contract::contract_suite;

type R = anyhow::Result<()>;

/// The key every served secret names (the file's `key`); another one is refused.
const KEY: &str = "local";

/// The store file, as `countersign-store-local` reads it.
#[derive(Serialize)]
struct File<'a> {
    prefix: &'a str,
    key: &'a str,
    secret: Vec<Secret<'a>>,
}

#[derive(Serialize)]
struct Secret<'a> {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tier: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    deleted: bool,
}

/// The store file, what it holds, and the broker's store over it.
struct LocalService {
    dir: TempDir,
    secrets: Mutex<Vec<StoredSecret>>,
    store: Arc<dyn SecretStore>,
}

impl LocalService {
    fn path(&self) -> PathBuf {
        self.dir.path().join("secrets.toml")
    }

    /// Where the file is while the store is away.
    fn away(&self) -> PathBuf {
        self.dir.path().join("secrets.toml.away")
    }

    /// Edits the secrets and writes the file again, atomically (the broker may read it at any
    /// moment).
    fn edit(&self, f: impl FnOnce(&mut Vec<StoredSecret>)) -> R {
        let mut secrets = self.secrets.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut secrets);
        write(&self.path(), &secrets)
    }

    /// Edits secret `name`.
    fn edit_one(&self, name: &str, f: impl FnOnce(&mut StoredSecret)) -> R {
        self.edit(|v| {
            if let Some(s) = v.iter_mut().find(|s| s.name == name) {
                f(s);
            }
        })
    }
}

fn write(path: &std::path::Path, secrets: &[StoredSecret]) -> R {
    let file = File {
        prefix: PREFIX,
        key: KEY,
        secret: secrets
            .iter()
            .map(|s| Secret {
                name: s.stored_name(),
                owner: s.owner.as_deref(),
                tier: s.tier.as_deref(),
                value: s.value.as_deref(),
                key: s.key.as_deref().map(|_| "other"),
                deleted: s.deleted,
            })
            .collect(),
    };
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, toml::to_string(&file)?).context("write the store file")?;
    std::fs::rename(&tmp, path).context("replace the store file")
}

#[async_trait]
impl Service for LocalService {
    async fn start(secrets: &[StoredSecret], _: StdDuration) -> anyhow::Result<Option<Self>> {
        let dir = TempDir::new()?;
        let path = dir.path().join("secrets.toml");
        write(&path, secrets)?;
        let store = LocalFileStore::open(&path)
            .await
            .map_err(|e| anyhow::anyhow!("local store: {e}"))?;
        Ok(Some(LocalService {
            dir,
            secrets: Mutex::new(secrets.to_vec()),
            store: Arc::new(store),
        }))
    }

    fn store(&self) -> Arc<dyn SecretStore> {
        self.store.clone()
    }

    fn settings(&self) -> Value {
        json!({ "store": "local-file-store", "secrets_prefix": PREFIX })
    }

    async fn tag(&self, name: &str, key: &str, value: Option<&str>) -> R {
        let value = value.map(str::to_owned);
        self.edit_one(name, |s| match key {
            "owner" => s.owner = value,
            _ => s.tier = value,
        })
    }

    async fn create(&self, s: &StoredSecret) -> R {
        self.edit(|v| v.push(s.clone()))
    }

    /// Marks it deleted (as scheduled for deletion).
    async fn delete(&self, name: &str) -> R {
        self.edit_one(name, |s| s.deleted = true)
    }

    async fn rotate(&self, name: &str, value: &str) -> R {
        self.edit_one(name, |s| s.value = Some(value.to_owned()))
    }

    /// The file goes away: every read fails (unavailable).
    async fn stop(&mut self) -> R {
        std::fs::rename(self.path(), self.away()).context("move the store file away")
    }

    /// The file comes back, `name` rotated meanwhile.
    async fn come_back(&mut self, name: &str, value: &str) -> anyhow::Result<Comeback> {
        std::fs::remove_file(self.away()).context("remove the moved file")?;
        self.rotate(name, value).await?;
        Ok(Comeback::SameNames)
    }
}

contract_suite!(LocalService);
