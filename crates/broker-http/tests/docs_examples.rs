//! Every example configuration in the docs is one the broker (or the console) accepts.
//!
//! Each fenced ```` ```toml ```` block of `README.md`, `docs/*.md` and `crates/*/README.md` is
//! loaded the way `countersign-broker serve` loads its file (`Config::load`: the parser with
//! `deny_unknown_fields`, then the environment overrides and their checks), then given the
//! checks `serve` makes before it connects anywhere: the token issuer's key source, the cloud
//! store's names and endpoint, the notification receiver's URL. The info string says what a
//! block is:
//!
//! - `toml`: a whole `broker.toml`;
//! - `toml fragment`: sections of one, loaded after a minimal base (`public_url`,
//!   `seal_key_file`, and a local `[store]` unless the fragment has its own);
//! - `toml console`: a whole `console.toml`, loaded with the console's `Config::load`;
//! - `toml console fragment`: sections of one, loaded after a `public_url`.
//!
//! A block that fails is reported with its file and line. A ```` ```toml ```` block with any
//! other info string fails too, so that no example escapes the check by its label.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use countersign_broker_http::config::{Config, StoreConfig};

/// A fenced TOML block: where it is and what it says it is.
struct Block {
    file: PathBuf,
    line: usize,
    kind: String,
    text: String,
}

/// What a fragment is loaded after: the required keys, and a local store unless the fragment
/// shows a `[store]`.
const FRAGMENT_BASE: &str =
    "public_url = \"https://broker.example.com\"\nseal_key_file = \"/etc/countersign/seal.key\"\n";
const FRAGMENT_STORE: &str =
    "[store]\nkind = \"local\"\npath = \"/etc/countersign/secrets.toml\"\n";

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files whose examples are checked.
fn doc_files() -> anyhow::Result<Vec<PathBuf>> {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    for dir in [root.join("docs"), root.join("crates")] {
        for entry in std::fs::read_dir(&dir).with_context(|| format!("list {}", dir.display()))? {
            let path = entry?.path();
            let candidate = if path.is_dir() {
                path.join("README.md")
            } else {
                path
            };
            if candidate.is_file() && candidate.extension().is_some_and(|e| e == "md") {
                files.push(candidate);
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The fenced blocks whose info string starts with `toml`.
fn toml_blocks(file: &Path) -> anyhow::Result<Vec<Block>> {
    let text = std::fs::read_to_string(file).with_context(|| format!("read {}", file.display()))?;
    let mut blocks = Vec::new();
    let mut open: Option<Block> = None;
    let mut in_other_fence = false;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(b) = &mut open {
            if trimmed.starts_with("```") {
                blocks.extend(open.take());
            } else {
                b.text.push_str(line);
                b.text.push('\n');
            }
        } else if trimmed.starts_with("```") {
            let info = trimmed.trim_start_matches('`').trim();
            if in_other_fence {
                in_other_fence = false;
            } else if info == "toml" || info.starts_with("toml ") {
                open = Some(Block {
                    file: file.to_path_buf(),
                    line: i + 1,
                    kind: info.to_owned(),
                    text: String::new(),
                });
            } else {
                in_other_fence = true;
            }
        }
    }
    if let Some(b) = open {
        bail!(
            "{}:{}: the toml block is not closed",
            file.display(),
            b.line
        );
    }
    Ok(blocks)
}

/// Writes `contents` to `dir/name`.
fn temp_file(dir: &tempfile::TempDir, name: &str, contents: &str) -> anyhow::Result<PathBuf> {
    let path = dir.path().join(name);
    std::fs::write(&path, contents)?;
    Ok(path)
}

/// What `serve` checks of a loaded configuration before it connects to anything.
async fn serve_checks(c: &Config, dir: &tempfile::TempDir) -> anyhow::Result<()> {
    if let Some(t) = &c.token_issuer {
        t.verifier_config(None).map_err(anyhow::Error::msg)?;
    }
    if let Some(n) = &c.notifications {
        // The receiver's URL and the delivery settings, with a real secret file in place of
        // the example's path.
        let mut n = n.clone();
        n.secret_file = temp_file(
            dir,
            "webhook-secret",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )?;
        countersign_broker_http::notify::Notifier::new(&n)?;
    }
    match &c.store {
        StoreConfig::Local { .. } => {}
        StoreConfig::CloudA {
            secrets_prefix,
            key_arn,
            account_id,
            region,
            endpoint_url,
            timeout_seconds,
        } => {
            let mut a = countersign_store_aws::AwsStoreConfig::new(
                secrets_prefix,
                key_arn,
                account_id,
                region,
            );
            a.endpoint_url = endpoint_url.clone();
            a.timeout = std::time::Duration::from_secs(*timeout_seconds);
            a.validate().map_err(|e| anyhow::anyhow!("{e}"))?;
        }
        StoreConfig::CloudB {
            secrets_prefix,
            key_name,
            endpoint,
            timeout_seconds,
        } => {
            // The store's own checks of its names; anonymous credentials, so that building the
            // client asks no metadata server (building makes no call to the service).
            let mut g = countersign_store_gcp::GcpStoreConfig::new(secrets_prefix, key_name);
            g.endpoint = endpoint.clone();
            g.timeout = std::time::Duration::from_secs(*timeout_seconds);
            g.credentials = countersign_store_gcp::GcpCredentials::Anonymous;
            countersign_store_gcp::GcpSecretStore::new(g)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    Ok(())
}

/// Loads one block as what its info string says; the loaded broker configuration, if it is one.
async fn check(block: &Block) -> anyhow::Result<Option<Config>> {
    let dir = tempfile::tempdir()?;
    match block.kind.as_str() {
        "toml" | "toml fragment" => {
            let text = if block.kind == "toml" {
                block.text.clone()
            } else {
                let has_store = block.text.lines().any(|l| l.trim() == "[store]");
                let store = if has_store { "" } else { FRAGMENT_STORE };
                format!("{FRAGMENT_BASE}{store}{}", block.text)
            };
            let c = Config::load(&temp_file(&dir, "broker.toml", &text)?)?;
            serve_checks(&c, &dir).await?;
            Ok(Some(c))
        }
        "toml console" | "toml console fragment" => {
            let text = if block.kind == "toml console" {
                block.text.clone()
            } else {
                format!(
                    "public_url = \"https://console.example.com\"\n{}",
                    block.text
                )
            };
            countersign_console_http::config::Config::load(&temp_file(
                &dir,
                "console.toml",
                &text,
            )?)?;
            Ok(None)
        }
        other => bail!(
            "unknown info string {other:?}: use `toml` (a whole broker.toml), `toml fragment`, \
             `toml console` or `toml console fragment`"
        ),
    }
}

#[tokio::test]
async fn every_example_configuration_in_the_docs_is_accepted() -> anyhow::Result<()> {
    let mut failures = Vec::new();
    let mut loaded = Vec::new();
    let mut count = 0;
    for file in doc_files()? {
        for block in toml_blocks(&file)? {
            count += 1;
            match check(&block).await {
                Ok(c) => loaded.extend(c),
                Err(e) => failures.push(format!(
                    "{}:{}: {e:#}",
                    block
                        .file
                        .strip_prefix(repo_root())
                        .unwrap_or(&block.file)
                        .display(),
                    block.line
                )),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {count} example configurations are refused:\n{}",
        failures.len(),
        failures.join("\n")
    );
    // The docs show every store and every form of key source (docs/operators.md).
    let has = |f: &dyn Fn(&Config) -> bool| loaded.iter().any(f);
    assert!(has(&|c| matches!(c.store, StoreConfig::Local { .. })));
    assert!(has(&|c| matches!(
        &c.store,
        StoreConfig::CloudA {
            endpoint_url: Some(_),
            ..
        }
    )));
    assert!(has(&|c| matches!(
        &c.store,
        StoreConfig::CloudB {
            endpoint: Some(_),
            ..
        }
    )));
    assert!(has(&|c| c
        .token_issuer
        .as_ref()
        .is_some_and(|t| t.discovery)));
    assert!(has(&|c| c
        .token_issuer
        .as_ref()
        .is_some_and(|t| t.jwks_url.is_some())));
    assert!(has(&|c| c
        .token_issuer
        .as_ref()
        .is_some_and(|t| t.jwks_file.is_some())));
    assert!(has(&|c| c.notifications.is_some() && c.tls.is_some()));
    Ok(())
}

/// The check refuses what the broker refuses: a misspelt key, a store key of another kind, an
/// issuer with two key sources, a cloud A key alias, and names the file and line.
#[tokio::test]
async fn a_wrong_example_is_refused_with_its_place() -> anyhow::Result<()> {
    let md = "# t\n\n```toml fragment\n[token_issuer]\nissuer = \"https://i\"\naudience = \"a\"\n\
        discovery = true\njwks_file = \"/k\"\n```\n\n```toml\npublic_url = \"https://b\"\n\
        seal_key_file = \"/s\"\n[store]\nkind = \"cloud-a\"\nsecrets_prefix = \"agents/\"\n\
        key_arn = \"alias/agents\"\naccount_id = \"1\"\nregion = \"eu-west-1\"\n```\n\n\
        ```toml\npublic_url = \"https://b\"\nseal_key_file = \"/s\"\n[store]\nkind = \"local\"\n\
        path = \"/p\"\npage_size = 10\n```\n\n```toml fragment\n[limits]\nbody_limit = 1\n```\n\n\
        ```toml secrets\nA = 1\n```\n";
    let dir = tempfile::tempdir()?;
    let file = temp_file(&dir, "wrong.md", md)?;
    let blocks = toml_blocks(&file)?;
    assert_eq!(
        blocks.iter().map(|b| b.line).collect::<Vec<_>>(),
        vec![3, 11, 22, 31, 36]
    );
    for b in &blocks {
        assert!(check(b).await.is_err(), "line {} was accepted", b.line);
    }
    Ok(())
}

/// Collects the field names a `Deserialize` struct asks for, without any input.
struct FieldNames<'a>(&'a mut Vec<&'static str>);

impl<'de> serde::Deserializer<'de> for FieldNames<'_> {
    type Error = serde::de::value::Error;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(serde::de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0.extend(fields);
        Err(serde::de::Error::custom("names collected"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

fn field_names<T: serde::de::DeserializeOwned>() -> Vec<&'static str> {
    let mut names = Vec::new();
    let _ = T::deserialize(FieldNames(&mut names));
    names
}

/// Every key the broker accepts is documented in docs/operators.md (a key added to the
/// configuration without a line there fails here).
#[test]
fn every_key_the_broker_accepts_is_documented() -> anyhow::Result<()> {
    use countersign_broker_http::config::{
        ApprovalRuleConfig, Durations, LimitsConfig, NotificationsConfig, PasskeysConfig, Tls,
        TokenIssuerConfig,
    };
    let doc = std::fs::read_to_string(repo_root().join("docs/operators.md"))?;
    let sections = [
        ("top level", field_names::<Config>()),
        ("[tls]", field_names::<Tls>()),
        ("[token_issuer]", field_names::<TokenIssuerConfig>()),
        ("[notifications]", field_names::<NotificationsConfig>()),
        ("[limits]", field_names::<LimitsConfig>()),
        ("[durations]", field_names::<Durations>()),
        ("[passkeys]", field_names::<PasskeysConfig>()),
        ("[[approval]]", field_names::<ApprovalRuleConfig>()),
        (
            "[[issued]]",
            field_names::<countersign_broker_http::issuers::IssuedConfig>(),
        ),
        (
            "[issued.postgres]",
            field_names::<countersign_issuer_postgres::PostgresIssuerConfig>(),
        ),
        (
            "[issued.aws_iam]",
            field_names::<countersign_issuer_aws::AwsIamIssuerConfig>(),
        ),
    ];
    let mut missing = Vec::new();
    for (section, names) in &sections {
        assert!(!names.is_empty(), "{section}: no field names collected");
        for name in names {
            // A key is a table row; a section is its own heading.
            if !doc.contains(&format!("| `{name}` |"))
                && !doc.contains(&format!("`[{name}]`"))
                && !doc.contains(&format!("`[[{name}]]`"))
            {
                missing.push(format!("{section} `{name}`"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "keys the broker accepts that docs/operators.md does not document: {missing:?}"
    );
    Ok(())
}
