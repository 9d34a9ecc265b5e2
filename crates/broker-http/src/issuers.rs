//! `[[issued]]`: the dynamic secrets an operator declares (issue 49), and the issuers built
//! from them. Each declares a secret by name, owner and tier, as a stored secret's tags would,
//! and exactly one issuer section:
//!
//! ```toml
//! [[issued]]
//! name = "APP_DATABASE"
//! owner = "dana@example.com"
//! tier = "owner"                       # automatic | owner | shared | locked; default owner
//! admin_file = "/etc/countersign/app-db-admin-url"   # or admin_store_resource = "…"
//! [issued.postgres]
//! roles = ["app_read"]
//! prefix = "cs_app_"
//! ```
//!
//! The issuer's own admin credential never comes from the broker's database: from a file
//! (`admin_file`: a PostgreSQL URL; for AWS, the credential_process JSON
//! `{"AccessKeyId": …, "SecretAccessKey": …}`), or from the configured secret store by its name
//! there (`admin_store_resource`), read once at start. An AWS issuer without either uses the
//! SDK's default credential chain.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, bail};
use countersign_broker_core::broker::IssuedSecret;
use countersign_broker_core::ids::{Login, SecretName};
use countersign_broker_core::policy::{PolicyEntry, Tier};
use countersign_broker_core::{Issuer, SecretStore};
use countersign_issuer_aws::{AdminCredentials, AwsIamIssuer, AwsIamIssuerConfig};
use countersign_issuer_postgres::{PostgresIssuer, PostgresIssuerConfig};
use serde::Deserialize;
use zeroize::Zeroizing;

/// One `[[issued]]` declaration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuedConfig {
    /// The secret's name, as sessions request it.
    pub name: String,
    /// Who approves it at the `owner` tier.
    pub owner: String,
    /// `automatic`, `owner`, `shared` or `locked`; default `owner`.
    #[serde(default)]
    pub tier: Option<String>,
    /// A file holding the issuer's admin credential.
    #[serde(default)]
    pub admin_file: Option<PathBuf>,
    /// The secret store's name for the issuer's admin credential (an ARN, a resource name, a
    /// local key).
    #[serde(default)]
    pub admin_store_resource: Option<String>,
    #[serde(default)]
    pub postgres: Option<PostgresIssuerConfig>,
    #[serde(default)]
    pub aws_iam: Option<AwsIamIssuerConfig>,
}

/// Builds every declared issued secret: names, owners and tiers checked, prefixes distinct
/// per kind, admin credentials read.
pub async fn build(
    declared: &[IssuedConfig],
    store: &dyn SecretStore,
) -> anyhow::Result<Vec<IssuedSecret>> {
    let mut out: Vec<IssuedSecret> = Vec::with_capacity(declared.len());
    for d in declared {
        let what = format!("[[issued]] {}", d.name);
        let name = SecretName::parse(&d.name)
            .map_err(|e| anyhow::anyhow!("{what}: name: {}", e.message()))?;
        let owner = Login::parse(&d.owner).with_context(|| {
            format!("{what}: owner must be a person's login (an e-mail address)")
        })?;
        let tier = Tier::from_tag(d.tier.as_deref())
            .with_context(|| format!("{what}: tier must be automatic, owner, shared or locked"))?;
        let issuer = issuer(d, store).await.with_context(|| what.clone())?;
        if out.iter().any(|s| s.name == name) {
            bail!("{what}: declared twice");
        }
        if out.iter().any(|s| {
            s.issuer.kind() == issuer.kind()
                && (s.issuer.prefix().starts_with(issuer.prefix())
                    || issuer.prefix().starts_with(s.issuer.prefix()))
        }) {
            bail!(
                "{what}: its prefix overlaps another issued secret's of the same kind: each needs a prefix of its own, or one's sweep would destroy the other's credentials"
            );
        }
        out.push(IssuedSecret {
            name,
            owner,
            tier,
            issuer,
        });
    }
    Ok(out)
}

async fn issuer(d: &IssuedConfig, store: &dyn SecretStore) -> anyhow::Result<Arc<dyn Issuer>> {
    if d.admin_file.is_some() && d.admin_store_resource.is_some() {
        bail!("admin_file and admin_store_resource exclude each other");
    }
    match (&d.postgres, &d.aws_iam) {
        (Some(pg), None) => {
            let url = admin(d, store)
                .await?
                .context("a PostgreSQL issuer needs admin_file or admin_store_resource")?;
            let url = Zeroizing::new(url.trim().to_string());
            Ok(Arc::new(
                PostgresIssuer::new(pg.clone(), url).map_err(|e| anyhow::anyhow!("{e}"))?,
            ))
        }
        (None, Some(aws)) => {
            let creds = match admin(d, store).await? {
                None => AdminCredentials::DefaultChain,
                Some(text) => aws_credentials(&text)?,
            };
            Ok(Arc::new(
                AwsIamIssuer::new(aws.clone(), creds)
                    .await
                    .map_err(|e| anyhow::anyhow!("{e}"))?,
            ))
        }
        _ => bail!("exactly one of [issued.postgres] and [issued.aws_iam]"),
    }
}

/// The admin credential's text, from the file or the store; none when neither is configured.
async fn admin(
    d: &IssuedConfig,
    store: &dyn SecretStore,
) -> anyhow::Result<Option<Zeroizing<String>>> {
    if let Some(path) = &d.admin_file {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .with_context(|| format!("read admin_file {}", path.display()))?,
        );
        return Ok(Some(text));
    }
    let Some(resource) = &d.admin_store_resource else {
        return Ok(None);
    };
    // The store reads a value by its entry; only the resource name matters to it.
    let entry = PolicyEntry {
        name: SecretName::parse(&d.name).map_err(|e| anyhow::anyhow!("{}", e.message()))?,
        owner: Login::parse(&d.owner).context("owner")?,
        tier: Tier::Locked,
        resource_name: resource.clone(),
        issuer: None,
    };
    let v = store
        .read_value(&entry)
        .await
        .map_err(|e| anyhow::anyhow!("read admin_store_resource {resource}: {e}"))?;
    Ok(Some(Zeroizing::new(v.expose().to_string())))
}

/// An AWS key pair from credential_process JSON.
fn aws_credentials(text: &str) -> anyhow::Result<AdminCredentials> {
    #[derive(Deserialize)]
    #[serde(rename_all = "PascalCase")]
    struct Pair {
        access_key_id: String,
        secret_access_key: String,
        #[serde(default)]
        session_token: Option<String>,
    }
    let p: Pair = serde_json::from_str(text).map_err(|_| {
        anyhow::anyhow!(
            "the AWS admin credential must be JSON with AccessKeyId and SecretAccessKey"
        )
    })?;
    Ok(AdminCredentials::Static {
        access_key_id: p.access_key_id,
        // Moved, not copied, into buffers zeroized on drop.
        secret_access_key: Zeroizing::new(p.secret_access_key),
        session_token: p.session_token.map(Zeroizing::new),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_admin_json_reads_and_refuses_other_text() {
        let c = aws_credentials(r#"{"AccessKeyId":"AKIA1","SecretAccessKey":"s3cr3t"}"#);
        assert!(
            matches!(c, Ok(AdminCredentials::Static { ref access_key_id, .. }) if access_key_id == "AKIA1")
        );
        let e = aws_credentials("AKIA1 s3cr3t").err().map(|e| e.to_string());
        assert!(
            e.is_some_and(|e| !e.contains("s3cr3t")),
            "the error never echoes the text"
        );
    }
}
