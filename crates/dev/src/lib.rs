//! # countersign-dev
//!
//! Dev mode: the broker and the console in one process, both on loopback. This crate sits above
//! both servers (it depends on `countersign-broker-http` and `countersign-console-http`, which
//! do not depend on each other), and owns the `countersign-console` binary (`serve`, `dev`:
//! `src/main.rs`) and the console's end-to-end tests against a real broker (`tests/console`).
//!
//! The broker runs from its own library (`countersign_broker_http::server::build` and
//! `serve_listener`) on the state `countersign-broker dev` keeps in the same directory: its
//! SQLite database, sealing key, console token and demo secrets are created on first run in
//! the same files and formats, so either command can start from the other's state. The console
//! keeps its own SQLite database there (`console.db`), talks to the broker with that console
//! token, and offers dev mode's local sign-in (an e-mail, loopback only).
//!
//! One console URL is printed, `http://localhost:<port>`, and everything works there: sign-in,
//! every form, passkeys (WebAuthn takes a domain, never an IP address, as its relying party).
//! The console listens on `127.0.0.1` and, where the machine has it, on `[::1]` at the same
//! port (a browser may try either for `localhost`); a browser's request from
//! `http://127.0.0.1:<port>` counts as the console's own too (dev mode only:
//! [`countersign_console_http::config::DevHooks`]). The Passkeys page shows a fresh enrollment code for the
//! person signed in ([`enroll_code`]).
//!
//! The broker's expiry notifications go to the console's webhook (`/hooks/broker`, protocol
//! §8), signed with a secret both share (`webhook-secret`, made on first run), so a request
//! left to expire reaches its session as a message out of the box. Notifications are on: every
//! notice is kept in the dev mailbox (`mailbox.jsonl`, shown at `/notifications/mailbox`), as
//! e-mail and webhooks would carry it.
//!
//! Agents use the console's API with the shared agent token (`agent-token`, made on first
//! run; an agent names its session in `actor`), printed apart from the broker's console token,
//! which is for the broker's API only. `--config FILE` adds the console's optional tables
//! (`[code_hosting]`, `[delivery_targets]`, `[agents]`, `[notifications]`: [`DevExtras`]), so
//! the delivery timeline can be tried on one's own repository, and notices sent to one's own
//! mail server or webhook, without a full `serve` configuration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use countersign_console_http::config::{
    AgentsConfig, BrokerConfig, CodeHostingConfig, Config, DevHooks,
};
use countersign_console_http::notify::NotificationsConfig;

/// The person dev mode's demo secrets belong to (as `countersign-broker dev` writes them).
pub use countersign_broker_http::dev::DEV_PERSON;

/// The broker and the console, running.
#[derive(Debug)]
pub struct Dev {
    pub broker: countersign_broker_http::Running,
    pub console: countersign_console_http::Running,
    pub broker_url: String,
    /// `http://localhost:<port>`: the one URL printed, where everything works.
    pub console_url: String,
    pub dir: PathBuf,
    /// The console's second listener, on `[::1]` at the same port (where the machine has
    /// IPv6 loopback): its stopper and its task.
    v6: Option<V6Listener>,
}

/// The console's `[::1]` listener: its stopper and its task.
type V6Listener = (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<std::io::Result<()>>,
);

impl Dev {
    /// The console's agent token: the bearer agents use with the console's API (`/api/v1`,
    /// naming their session in `actor`).
    pub fn agent_token(&self) -> String {
        std::fs::read_to_string(self.dir.join(AGENT_TOKEN_FILE))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// What dev mode prints: where things are, the tokens (each labelled for the API that
    /// takes it), and what to do next.
    pub fn banner(&self) -> String {
        let broker_token =
            std::fs::read_to_string(self.dir.join("console-token")).unwrap_or_default();
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        line("Countersign (dev mode): broker and approval console".into());
        line(format!(
            "  console:       {}   (sign in as {DEV_PERSON})",
            self.console_url
        ));
        line(format!("  broker:        {}", self.broker_url));
        line(format!("  state:         {}", self.dir.display()));
        line(format!(
            "  agent token:   {}   (for the console API: Authorization: Bearer …, name your session in `actor`)",
            self.agent_token()
        ));
        line(format!(
            "  broker console token: {}   (for the broker API, not the console's)",
            broker_token.trim()
        ));
        line(format!(
            "  demo secrets:  DEMO_AUTOMATIC (automatic), DEMO_OWNER (owner {DEV_PERSON}), DEMO_SHARED (shared), DEMO_LOCKED (locked), DEMO_PASSKEY (owner, approved with a passkey)"
        ));
        if std::env::var_os(countersign_broker_http::dev::DEV_POSTGRES_VAR).is_some() {
            line(format!(
                "  dynamic:       DEMO_DATABASE (owner {DEV_PERSON}): a PostgreSQL login made for each grant, dropped when it ends; try `countersign run --secret DEMO_DATABASE --reason \"try it\" -- psql -c 'select current_user'` (PGHOST, PGUSER, PGPASSWORD … are set)"
            ));
        } else {
            line(format!(
                "  dynamic:       set {}=postgres://… (an admin URL) to try DEMO_DATABASE, a PostgreSQL login made for each grant",
                countersign_broker_http::dev::DEV_POSTGRES_VAR
            ));
        }
        match self.enroll_code() {
            Ok(code) => line(format!(
                "  passkeys:      {}/passkeys   (first passkey's enrollment code, 15 min, single use: {code}; the page shows a fresh one)",
                self.console_url
            )),
            Err(e) => line(format!("  passkeys:      no enrollment code: {e}")),
        }
        line(format!(
            "  notifications: {}/notifications/mailbox   (the dev mailbox: every notice, as e-mail and webhooks would carry it)",
            self.console_url
        ));
        line(format!(
            "Next: open {} and sign in as {DEV_PERSON}; an agent's request for DEMO_OWNER or DEMO_SHARED appears in its inbox (DEMO_PASSKEY: add a passkey on the Passkeys page first). (Console API: {}/api/v1; broker API: {}/v1/openapi.json)",
            self.console_url, self.console_url, self.broker_url
        ));
        out
    }

    /// An enrollment code for the dev person's first passkey, as
    /// `countersign-broker passkeys enroll-code` makes one with the dev state's seal key.
    pub fn enroll_code(&self) -> anyhow::Result<String> {
        enroll_code(&self.dir, DEV_PERSON)
    }

    /// Prints [`Dev::banner`].
    pub fn print(&self) {
        print!("{}", self.banner());
    }

    pub async fn shutdown(self, grace: Duration) {
        if let Some((stop, task)) = self.v6 {
            let _ = stop.send(true);
            let _ = tokio::time::timeout(grace, task).await;
        }
        self.console.shutdown(grace).await;
        self.broker.shutdown(grace).await;
    }
}

/// An enrollment code for `person`'s first passkey, 15 minutes, single use, as
/// `countersign-broker passkeys enroll-code` makes one with the dev state's seal key.
pub fn enroll_code(dir: &Path, person: &str) -> anyhow::Result<String> {
    let key = countersign_broker_http::config::read_seal_key(&dir.join("seal.key"))?;
    let sealer = countersign_broker_core::seal::Sealer::new(&key).context("seal key")?;
    let person = countersign_broker_core::ids::Login::parse(person).context("login")?;
    Ok(countersign_broker_core::passkey::enroll_code(
        &sealer,
        &countersign_broker_core::SystemEntropy,
        &person,
        chrono::Utc::now(),
        chrono::Duration::minutes(15),
    )
    .map_err(anyhow::Error::msg)?
    .value)
}

/// The console's URL in dev mode, where passkeys work: `localhost` (WebAuthn takes a domain,
/// not `127.0.0.1`).
fn console_url(port: u16) -> String {
    format!("http://localhost:{port}")
}

/// The dev mailbox's file in the dev state.
pub const MAILBOX_FILE: &str = "mailbox.jsonl";

/// The file in the dev state holding the console's shared agent token.
pub const AGENT_TOKEN_FILE: &str = "agent-token";

/// What dev mode can be asked to do differently (`--config`, tests).
#[derive(Debug, Clone, Default)]
pub struct DevOptions {
    /// Seconds a credential request stays pending (the broker's default otherwise).
    pub request_pending_seconds: Option<i64>,
    /// The console's optional tables (`countersign-console dev --config FILE`).
    pub extras: DevExtras,
}

/// `countersign-console dev --config FILE`: the console's optional tables, as `serve`'s
/// configuration writes them; anything else in the file is refused (dev mode makes the rest).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DevExtras {
    #[serde(default)]
    pub code_hosting: Option<CodeHostingConfig>,
    #[serde(default)]
    pub delivery_targets: Option<countersign_console_core::work::delivery::Targets>,
    #[serde(default)]
    pub agents: Option<AgentsConfig>,
    /// `[notifications]` as `serve` takes it (SMTP, the generic webhook's secret); dev mode's
    /// mailbox is on with it or without it.
    #[serde(default)]
    pub notifications: Option<NotificationsConfig>,
}

impl DevExtras {
    /// Reads `FILE`.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("read dev config {}", path.display()))?;
        toml::from_str(&text).with_context(|| {
            format!(
                "parse dev config {} (it takes [code_hosting], [delivery_targets], [agents] and [notifications])",
                path.display()
            )
        })
    }
}

/// The console's shared agent token in the dev state (`csa_` and 32 random bytes, made once).
fn agent_token(dir: &Path) -> anyhow::Result<PathBuf> {
    use base64::Engine as _;
    secret_file(&dir.join(AGENT_TOKEN_FILE), |key| {
        format!(
            "csa_{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key)
        )
    })
}

/// A secret of the dev state at `path`: written once, only its owner may read it, from 32
/// random bytes that `text` writes out; a later start keeps it.
fn secret_file(path: &Path, text: impl FnOnce([u8; 32]) -> String) -> anyhow::Result<PathBuf> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    if !path.exists() {
        let key =
            countersign_console_core::clock::random::<32>(&countersign_console_core::SystemEntropy);
        let text = text(key);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(path.to_path_buf())
}

/// Starts both on loopback (port 0 picks a free one), creating dev state in `dir` on first run.
pub async fn start(dir: &Path, broker_port: u16, console_port: u16) -> anyhow::Result<Dev> {
    start_with(dir, broker_port, console_port, DevOptions::default()).await
}

/// The broker's webhook secret in the dev state (`whsec_` and 32 random bytes, made once).
fn webhook_secret(dir: &Path) -> anyhow::Result<PathBuf> {
    use base64::Engine as _;
    secret_file(&dir.join("webhook-secret"), |key| {
        format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        )
    })
}

/// The broker's dev configuration for this console: `countersign-broker dev`'s, with its expiry
/// notifications sent to the console at `console_addr` (signed with the webhook secret
/// answered beside it, written in the state the broker's configuration creates), passkeys at
/// `localhost`, and DEMO_PASSKEY approved only with one.
fn broker_config(
    dir: &Path,
    broker_addr: SocketAddr,
    console_addr: SocketAddr,
    options: &DevOptions,
) -> anyhow::Result<(countersign_broker_http::config::Config, PathBuf)> {
    // The broker's dev state and configuration, exactly as `countersign-broker dev` makes them,
    // with its expiry notifications sent to this console.
    let mut broker_config = countersign_broker_http::dev::dev_config(dir, broker_addr)?;
    let secret = webhook_secret(dir)?;
    broker_config.notifications = Some(countersign_broker_http::config::NotificationsConfig {
        url: format!("http://{console_addr}/hooks/broker"),
        secret_file: secret.clone(),
        timeout_seconds: 10,
        retry_initial_seconds: 1,
        retry_max_seconds: 60,
        max_attempts: 100,
    });
    if let Some(s) = options.request_pending_seconds {
        broker_config.durations.request_pending = s;
    }
    // Passkeys at `localhost` (WebAuthn takes a domain, not 127.0.0.1), and DEMO_PASSKEY
    // approved only with one.
    broker_config.passkeys = Some(countersign_broker_http::config::PasskeysConfig {
        rp_id: "localhost".into(),
        origins: vec![console_url(console_addr.port())],
    });
    broker_config.approval = vec![countersign_broker_http::config::ApprovalRuleConfig {
        tier: None,
        secret: Some("DEMO_PASSKEY".into()),
        machine_logins: false,
        approval: "passkey".into(),
        device_bound: false,
        aaguids: Vec::new(),
    }];
    // DEMO_DATABASE, a PostgreSQL login made per grant, when a PostgreSQL is given.
    let pg = std::env::var(countersign_broker_http::dev::DEV_POSTGRES_VAR).ok();
    countersign_broker_http::dev::declare_demo_database(&mut broker_config, dir, pg.as_deref())?;
    Ok((broker_config, secret))
}

/// The console's configuration in dev mode: its SQLite database in the dev state, the broker
/// at `broker_url` with the dev state's console token and webhook secret, dev sign-in, the
/// agent token, `--config`'s tables, notifications on with the dev mailbox, and the dev hooks
/// (the `127.0.0.1` origin beside the printed `localhost`, and the Passkeys page's enrollment
/// codes).
fn console_config(
    dir: &Path,
    console_addr: SocketAddr,
    broker_url: &str,
    secret: PathBuf,
    options: DevOptions,
) -> anyhow::Result<Config> {
    let mut config = Config::new(&console_url(console_addr.port()));
    config.listen = console_addr;
    config.database_url = format!("sqlite://{}?mode=rwc", dir.join("console.db").display());
    config.broker = Some(BrokerConfig {
        url: broker_url.to_owned(),
        console_token_file: Some(dir.join("console-token")),
        timeout_seconds: 10,
        webhook_secret_file: Some(secret),
    });
    config.local_sign_in = true;
    config.local_sign_in_hint = Some(DEV_PERSON.to_owned());
    config.shared_token_file = Some(agent_token(dir)?);
    config.code_hosting = options.extras.code_hosting;
    config.delivery_targets = options.extras.delivery_targets;
    config.agents = options.extras.agents;
    // Notifications are on, each notice kept in the dev mailbox; `[notifications]` may add
    // SMTP and the generic webhook, as `serve` takes them.
    let mut notifications = options.extras.notifications.unwrap_or_default();
    notifications.mailbox = Some(dir.join(MAILBOX_FILE));
    config.notifications = Some(notifications);
    let seal_dir = dir.to_owned();
    config.dev = Some(DevHooks {
        also_origin: Some(format!(
            "http://{}",
            SocketAddr::from(([127, 0, 0, 1], console_addr.port()))
        )),
        enroll_code: Arc::new(move |person| enroll_code(&seal_dir, person)),
    });
    Ok(config)
}

/// The console's second listener, on `[::1]`: the same router and state, stopped by the
/// sender it answers beside its task.
fn serve_v6(
    l: tokio::net::TcpListener,
    state: Arc<countersign_console_http::AppState>,
) -> V6Listener {
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let app = countersign_console_http::server::router(state)
        .into_make_service_with_connect_info::<SocketAddr>();
    let task = tokio::spawn(async move {
        axum::serve(l, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    (stop, task)
}

/// [`start`], with [`DevOptions`].
pub async fn start_with(
    dir: &Path,
    broker_port: u16,
    console_port: u16,
    options: DevOptions,
) -> anyhow::Result<Dev> {
    let broker_listener =
        std::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], broker_port)))
            .with_context(|| format!("bind the broker on 127.0.0.1:{broker_port}"))?;
    let broker_addr = broker_listener.local_addr()?;
    let broker_url = format!("http://{broker_addr}");
    let console_listener =
        tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], console_port)))
            .await
            .with_context(|| format!("bind the console on 127.0.0.1:{console_port}"))?;
    let console_addr = console_listener.local_addr()?;
    let console_url = console_url(console_addr.port());
    // `localhost` may reach `[::1]` first: the console answers there too, where the machine
    // has IPv6 loopback (a browser falls back to 127.0.0.1 where it has not).
    let v6_listener = match tokio::net::TcpListener::bind(SocketAddr::from((
        std::net::Ipv6Addr::LOCALHOST,
        console_addr.port(),
    )))
    .await
    {
        Ok(l) => Some(l),
        Err(e) => {
            tracing::debug!(error = %e, "the console does not listen on [::1]");
            None
        }
    };
    let (broker_config, secret) = broker_config(dir, broker_addr, console_addr, &options)?;
    let state = countersign_broker_http::server::build(
        &broker_config,
        Arc::new(countersign_broker_core::SystemClock),
    )
    .await?;
    let broker = countersign_broker_http::server::serve_listener(
        state,
        broker_listener,
        None,
        chrono::Duration::seconds(broker_config.durations.policy_reload),
    )
    .await?;

    let config = console_config(dir, console_addr, &broker_url, secret, options)?;
    let state =
        countersign_console_http::build(&config, Arc::new(countersign_console_core::SystemClock))
            .await?;
    let v6 = v6_listener.map(|l| serve_v6(l, state.clone()));
    let console = countersign_console_http::serve(state, console_listener).await?;
    Ok(Dev {
        broker,
        console,
        broker_url,
        console_url,
        dir: dir.to_owned(),
        v6,
    })
}
