//! The launcher credential held: what is answered when there is none, and keeping it at rest
//! (`store`).

use super::*;

impl Helper {
    pub(super) fn held(&self) -> Result<Held, HelperError> {
        self.st().credential.clone().ok_or_else(|| {
            err(
                HelperCode::NoCredential,
                "this helper holds no launcher credential: log the machine in first (`countersign login`)",
            )
        })
    }

    pub(super) fn save(&self, held: &Held) -> anyhow::Result<()> {
        if self.cfg.no_store {
            return Ok(());
        }
        self.store.save(&Stored {
            version: 1,
            broker_url: self.broker.base_url().to_owned(),
            credential_id: held.id.clone(),
            kind: held.kind,
            host: held.host.clone(),
            login: held.login.clone(),
            service: held.service.clone(),
            expires_at: held.expires_at.clone(),
            token_file: match &held.token {
                Some(TokenSource::File(p)) => Some(p.display().to_string()),
                _ => None,
            },
            key_pkcs8: Stored::encode_key(&held.key)?,
        })
    }
}
