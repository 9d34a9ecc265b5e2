//! Dev mode's state: on first run, a directory with a sealing key, a console token and a local
//! store of demo secrets of every tier; the broker's configuration over it. `countersign-broker
//! dev` and `countersign-console dev` both start from it, so either can pick up the other's state.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::Context;

use crate::config::{Config, Durations, LimitsConfig, StoreConfig};

/// The person dev mode's demo secrets belong to.
pub const DEV_PERSON: &str = "dev@countersign.local";

/// The broker's dev configuration, listening on `listen`, creating its state in `dir` on first
/// run. Environment overrides are not applied here: the caller decides.
pub fn dev_config(dir: &Path, listen: SocketAddr) -> anyhow::Result<Config> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    restrict(dir, 0o700)?;
    let seal = dir.join("seal.key");
    if !seal.exists() {
        write_secret(&seal, &countersign_proto::b64::encode(&random::<32>()))?;
    }
    let token = dir.join("console-token");
    if !token.exists() {
        write_secret(
            &token,
            &format!("cs-dev-{}", countersign_proto::b64::encode(&random::<24>())),
        )?;
    }
    let secrets = dir.join("secrets.toml");
    if !secrets.exists() {
        write_secret(&secrets, &demo_secrets())?;
    }
    let db = dir.join("broker.db");
    Ok(Config {
        listen,
        public_url: format!("http://{listen}"),
        database_url: format!("sqlite://{}?mode=rwc", db.display()),
        seal_key_file: seal,
        console_token_file: Some(token),
        tls: None,
        store: StoreConfig::Local { path: secrets },
        limits: LimitsConfig::default(),
        durations: Durations::default(),
        service_logins: Default::default(),
        token_issuer: None,
        notifications: None,
        passkeys: None,
        approval: Vec::new(),
        // Dev mode keeps its state together, under its directory.
        audit_state_file: Some(dir.join("broker.db.audit-state.json")),
        otlp_endpoint: None,
        issued: Vec::new(),
    })
}

/// The variable that gives dev mode a PostgreSQL to make `DEMO_DATABASE` credentials on.
pub const DEV_POSTGRES_VAR: &str = "COUNTERSIGN_DEV_POSTGRES_URL";

/// The dynamic secret dev mode declares when a PostgreSQL is given.
pub const DEMO_DATABASE: &str = "DEMO_DATABASE";

/// Declares `DEMO_DATABASE` on `config` when `admin_url` (from [`DEV_POSTGRES_VAR`]) is given:
/// a login role made per grant on that PostgreSQL, able to read every table
/// (`pg_read_all_data`), dropped when the grant ends. The URL is kept in a file of the dev
/// directory (mode 0600), as an operator's would be. Answers whether it declared it.
pub fn declare_demo_database(
    config: &mut Config,
    dir: &Path,
    admin_url: Option<&str>,
) -> anyhow::Result<bool> {
    let Some(url) = admin_url.map(str::trim).filter(|u| !u.is_empty()) else {
        return Ok(false);
    };
    let file = dir.join("demo-database-admin-url");
    // Written anew each start: the variable may name another database than last time.
    if file.exists() {
        std::fs::remove_file(&file).with_context(|| format!("remove {}", file.display()))?;
    }
    write_secret(&file, url)?;
    let mut pg =
        countersign_issuer_postgres::PostgresIssuerConfig::new(vec!["pg_read_all_data".into()]);
    pg.prefix = "cs_demo_".into();
    config.issued.push(crate::issuers::IssuedConfig {
        name: DEMO_DATABASE.into(),
        owner: DEV_PERSON.into(),
        tier: Some("owner".into()),
        admin_file: Some(file),
        admin_store_resource: None,
        postgres: Some(pg),
        aws_iam: None,
    });
    Ok(true)
}

fn demo_secrets() -> String {
    let v = |p: &str| format!("{p}-{}", countersign_proto::b64::encode(&random::<12>()));
    format!(
        r#"# Dev mode's demo secrets (a local file store; edit freely, it is reread on every use).
prefix = "agents/"
key = "local"

[[secret]]
name = "agents/demo-automatic"
owner = "{DEV_PERSON}"
tier = "automatic"
value = "{}"

[[secret]]
name = "agents/demo-owner"
owner = "{DEV_PERSON}"
tier = "owner"
value = "{}"

[[secret]]
name = "agents/demo-shared"
owner = "{DEV_PERSON}"
tier = "shared"
value = "{}"

[[secret]]
name = "agents/demo-locked"
owner = "{DEV_PERSON}"
tier = "locked"
value = "{}"

# Approved only with the owner's passkey where the console's dev mode runs it
# ([[approval]] in docs/passkeys.md).
[[secret]]
name = "agents/demo-passkey"
owner = "{DEV_PERSON}"
tier = "owner"
value = "{}"
"#,
        v("auto"),
        v("owner"),
        v("shared"),
        v("locked"),
        v("passkey")
    )
}

fn random<const N: usize>() -> [u8; N] {
    countersign_broker_core::clock::random::<N>(&countersign_broker_core::SystemEntropy)
}

fn write_secret(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(contents.as_bytes())?;
    Ok(())
}

fn restrict(path: &Path, mode: u32) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    let _ = mode;
    Ok(())
}
