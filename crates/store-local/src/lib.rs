//! A secret store kept in one TOML file, read afresh on every call so that an edit (a rotation,
//! a new owner, a deletion) is seen at once. It implements the core's [`SecretStore`] with the
//! same rules as the cloud stores (protocol.md §5): a secret under the prefix is served unless it
//! is scheduled for deletion, lacks an owner, has no current value, is encrypted with another
//! key, or has an unknown tier.
//!
//! ```toml
//! prefix = "agents/"
//! key = "local"                       # the key every agent secret must name
//!
//! [[secret]]
//! name = "agents/github-token"        # prefix + the agent name, lower case, `_` as `-`
//! owner = "ada@example.com"
//! tier = "owner"                      # automatic | owner | shared | locked; absent = owner
//! value = "ghp_..."                   # absent = no current value
//! key = "local"                       # absent = the store's key
//! deleted = false                     # true = scheduled for deletion
//! ```

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use countersign_broker_core::ids::{Login, SecretName};
use countersign_broker_core::policy::{PolicyEntry, Refusal, Tier};
use countersign_broker_core::secrets::{
    Inspection, Listing, SecretStore, SecretValue, Settings, StoreError,
};
use serde::Deserialize;
use zeroize::{Zeroize, Zeroizing};

/// The store's name in settings.
pub const STORE_NAME: &str = "local-file-store";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    prefix: String,
    #[serde(default = "default_key")]
    key: String,
    #[serde(default)]
    secret: Vec<Secret>,
}

fn default_key() -> String {
    "local".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Secret {
    name: String,
    owner: Option<String>,
    tier: Option<String>,
    value: Option<String>,
    key: Option<String>,
    #[serde(default)]
    deleted: bool,
}

impl Drop for Secret {
    fn drop(&mut self) {
        if let Some(v) = self.value.as_mut() {
            v.zeroize();
        }
    }
}

/// A secret store in a TOML file.
#[derive(Debug, Clone)]
pub struct LocalFileStore {
    path: PathBuf,
    prefix: String,
}

impl LocalFileStore {
    /// Opens the store at `path`, reading it once to check it parses.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, StoreError> {
        let path = path.as_ref().to_path_buf();
        let file = read(&path).await?;
        Ok(Self {
            path,
            prefix: file.prefix.clone(),
        })
    }

    /// Writes a store file (used by dev mode to seed demo secrets). Refuses to overwrite.
    pub async fn create(path: impl AsRef<Path>, contents: &str) -> Result<(), StoreError> {
        use tokio::io::AsyncWriteExt;
        let mut f = tokio::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode_0600()
            .open(path.as_ref())
            .await
            .map_err(|e| StoreError::Other(format!("create store file: {e}")))?;
        f.write_all(contents.as_bytes())
            .await
            .map_err(|e| StoreError::Other(format!("write store file: {e}")))?;
        Ok(())
    }

    fn inspect_in(&self, file: &File, name: &SecretName) -> Inspection {
        let stored = format!("{}{}", file.prefix, name.stored_suffix());
        let Some(s) = file.secret.iter().find(|s| s.name == stored) else {
            return Inspection::Refused(Refusal::Absent);
        };
        judge(file, s, name.clone())
    }
}

fn judge(file: &File, s: &Secret, name: SecretName) -> Inspection {
    if s.deleted {
        return Inspection::Refused(Refusal::Absent);
    }
    let Some(owner) = s.owner.as_deref().and_then(Login::parse) else {
        return Inspection::Refused(Refusal::OwnerTagMissing);
    };
    if s.value.is_none() {
        return Inspection::Refused(Refusal::NoCurrentValue);
    }
    if s.key.as_deref().unwrap_or(&file.key) != file.key {
        return Inspection::Refused(Refusal::WrongEncryptionKey);
    }
    let Some(tier) = Tier::from_tag(s.tier.as_deref()) else {
        return Inspection::Refused(Refusal::TierUnknown);
    };
    Inspection::Served(PolicyEntry {
        name,
        owner,
        tier,
        resource_name: s.name.clone(),
        issuer: None,
    })
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for tokio::fs::OpenOptions {
    #[cfg(unix)]
    fn mode_0600(&mut self) -> &mut Self {
        self.mode(0o600)
    }
    #[cfg(not(unix))]
    fn mode_0600(&mut self) -> &mut Self {
        self
    }
}

async fn read(path: &Path) -> Result<File, StoreError> {
    let text = Zeroizing::new(tokio::fs::read_to_string(path).await.map_err(
        |e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                StoreError::Unavailable(format!("store file {} not found", path.display()))
            }
            _ => {
                StoreError::Unavailable(format!("read store file {}: {}", path.display(), e.kind()))
            }
        },
    )?);
    // The parse error's text could quote a value: report only where it is.
    toml::from_str::<File>(&text).map_err(|e| {
        let at = e
            .span()
            .map(|s| format!(" at byte {}", s.start))
            .unwrap_or_default();
        StoreError::Other(format!("store file {} does not parse{at}", path.display()))
    })
}

#[async_trait]
impl SecretStore for LocalFileStore {
    fn settings(&self) -> Settings {
        Settings {
            store: STORE_NAME.into(),
            secrets_prefix: self.prefix.clone(),
            ..Settings::default()
        }
    }

    async fn list(&self) -> Result<Listing, StoreError> {
        let file = read(&self.path).await?;
        let mut listing = Listing::default();
        for s in &file.secret {
            let Some(suffix) = s.name.strip_prefix(&file.prefix) else {
                continue;
            };
            let Some(name) = SecretName::from_stored_suffix(suffix) else {
                continue;
            };
            match judge(&file, s, name.clone()) {
                Inspection::Served(e) => listing.served.push(e),
                Inspection::Refused(Refusal::Absent) => {}
                Inspection::Refused(r) => listing.refused.push((name, r)),
            }
        }
        Ok(listing)
    }

    async fn inspect(&self, name: &SecretName) -> Result<Inspection, StoreError> {
        let file = read(&self.path).await?;
        Ok(self.inspect_in(&file, name))
    }

    async fn read_value(&self, entry: &PolicyEntry) -> Result<SecretValue, StoreError> {
        let file = read(&self.path).await?;
        let s = file
            .secret
            .iter()
            .find(|s| s.name == entry.resource_name && !s.deleted)
            .ok_or(StoreError::NotFound)?;
        let v = s.value.as_ref().ok_or(StoreError::NotFound)?;
        Ok(SecretValue::new(Zeroizing::new(v.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn serves_and_refuses_by_the_rules() -> Result<(), Box<dyn std::error::Error>> {
        let dir = std::env::temp_dir().join(format!("cs-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("secrets.toml");
        let _ = std::fs::remove_file(&path);
        std::fs::write(
            &path,
            r#"
prefix = "agents/"
[[secret]]
name = "agents/good"
owner = "a@x.io"
tier = "automatic"
value = "v1"
[[secret]]
name = "agents/no-owner"
value = "v"
[[secret]]
name = "agents/no-value"
owner = "a@x.io"
[[secret]]
name = "agents/other-key"
owner = "a@x.io"
value = "v"
key = "other"
[[secret]]
name = "agents/odd-tier"
owner = "a@x.io"
value = "v"
tier = "weird"
[[secret]]
name = "agents/gone"
owner = "a@x.io"
value = "v"
deleted = true
"#,
        )?;
        let store = LocalFileStore::open(&path).await?;
        let listing = store.list().await?;
        assert_eq!(listing.served.len(), 1);
        assert_eq!(listing.refused.len(), 4);
        let n = |s: &str| SecretName::parse(s).map_err(|e| e.to_string());
        let cases = [
            ("GOOD", None),
            ("NO_OWNER", Some(Refusal::OwnerTagMissing)),
            ("NO_VALUE", Some(Refusal::NoCurrentValue)),
            ("OTHER_KEY", Some(Refusal::WrongEncryptionKey)),
            ("ODD_TIER", Some(Refusal::TierUnknown)),
            ("GONE", Some(Refusal::Absent)),
            ("NEVER", Some(Refusal::Absent)),
        ];
        for (name, want) in cases {
            let got = match store.inspect(&n(name)?).await? {
                Inspection::Served(_) => None,
                Inspection::Refused(r) => Some(r),
            };
            assert_eq!(got, want, "{name}");
        }
        let v = store.read_value(&listing.served[0]).await?;
        assert_eq!(v.expose(), "v1");
        assert_eq!(format!("{v:?}"), "SecretValue(..)");
        Ok(())
    }
}
