//! The launcher credential at rest: one JSON file, `launcher-credential.json`, in the helper's
//! state directory (by default `$XDG_STATE_HOME/countersign`, else
//! `~/.local/state/countersign`). The directory is made mode 0700 and the file 0600; the file is
//! written whole to a temporary file of mode 0600 and renamed over the old one, so a crash never
//! leaves half a key. It holds the credential id, what the broker said of it, and the machine
//! key as PKCS#8 (base64url). A ServiceAccount token given inline is never written; a token
//! file's path is, so the helper can log in again after a restart.
//!
//! The key is not encrypted at rest: the file is as safe as the user's account (like an SSH key
//! without a passphrase), and it lets the helper restart without a person approving again.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use countersign_launcher_proto::messages::CredentialKind;
use countersign_proto::{SigningKey, b64};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// The file name inside the state directory.
pub const FILE: &str = "launcher-credential.json";

/// What is kept on disk.
#[derive(Serialize, Deserialize)]
pub struct Stored {
    pub version: u32,
    /// The broker this credential belongs to (its public URL).
    pub broker_url: String,
    pub credential_id: String,
    pub kind: CredentialKind,
    pub host: String,
    #[serde(default)]
    pub login: Option<String>,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub token_file: Option<String>,
    /// PKCS#8 DER of the machine key, base64url.
    pub key_pkcs8: Zeroizing<String>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("credential_id", &self.credential_id)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Stored {
    /// The machine key.
    ///
    /// # Errors
    /// When the stored key is not a P-256 PKCS#8 key.
    pub fn key(&self) -> anyhow::Result<SigningKey> {
        let der = Zeroizing::new(b64::decode(&self.key_pkcs8)?);
        Ok(SigningKey::from_pkcs8(&der)?)
    }

    /// Encodes a key for storing.
    ///
    /// # Errors
    /// When the key cannot be exported.
    pub fn encode_key(key: &SigningKey) -> anyhow::Result<Zeroizing<String>> {
        let der = key.to_pkcs8()?;
        Ok(Zeroizing::new(b64::encode(&der)))
    }
}

/// The credential file in one state directory.
#[derive(Debug, Clone)]
pub struct CredentialStore {
    dir: PathBuf,
}

impl CredentialStore {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The file's path.
    #[must_use]
    pub fn path(&self) -> PathBuf {
        self.dir.join(FILE)
    }

    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the stored credential, if any. A file others can read is made 0600 first.
    ///
    /// # Errors
    /// When the file exists but cannot be read or parsed.
    pub fn load(&self) -> anyhow::Result<Option<Stored>> {
        let path = self.path();
        let meta = match std::fs::metadata(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(path = %path.display(), "credential file was readable by others; making it 0600");
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        }
        let text = Zeroizing::new(std::fs::read_to_string(&path)?);
        Ok(Some(serde_json::from_str(&text)?))
    }

    /// Writes the credential (atomically, mode 0600).
    ///
    /// # Errors
    /// When the directory or file cannot be written.
    pub fn save(&self, stored: &Stored) -> anyhow::Result<()> {
        ensure_private_dir(&self.dir)?;
        let text = Zeroizing::new(serde_json::to_vec_pretty(stored)?);
        let tmp = self.dir.join(format!(".{FILE}.tmp-{}", std::process::id()));
        {
            let _ = std::fs::remove_file(&tmp);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&text)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, self.path())?;
        Ok(())
    }

    /// Removes the credential file; `Ok(false)` when there was none.
    ///
    /// # Errors
    /// When it exists and cannot be removed.
    pub fn remove(&self) -> anyhow::Result<bool> {
        match std::fs::remove_file(self.path()) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Creates `dir` (and parents) and makes it 0700.
///
/// # Errors
/// When it cannot be created or its mode set.
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_with_private_modes() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("countersign-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = CredentialStore::new(dir.join("state"));
        assert!(store.load()?.is_none());
        let key = SigningKey::generate()?;
        let stored = Stored {
            version: 1,
            broker_url: "http://b".into(),
            credential_id: "c".into(),
            kind: CredentialKind::Person,
            host: "h".into(),
            login: Some("a@b.c".into()),
            service: None,
            expires_at: None,
            token_file: None,
            key_pkcs8: Stored::encode_key(&key)?,
        };
        store.save(&stored)?;
        let mode = |p: &Path| std::fs::metadata(p).map(|m| m.permissions().mode() & 0o777);
        assert_eq!(mode(&store.path())?, 0o600);
        assert_eq!(mode(store.dir())?, 0o700);
        let back = store.load()?.ok_or_else(|| anyhow::anyhow!("not stored"))?;
        assert_eq!(back.key()?.thumbprint(), key.thumbprint());
        assert!(!format!("{back:?}").contains(back.key_pkcs8.as_str()));
        std::fs::set_permissions(store.path(), std::fs::Permissions::from_mode(0o644))?;
        store.load()?;
        assert_eq!(mode(&store.path())?, 0o600);
        assert!(store.remove()?);
        assert!(!store.remove()?);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
