//! Dev mode: the broker and the console in one process, both on loopback.
//!
//! The broker runs from its own library (`countersign_broker_http::server::build` and
//! `serve_listener`) on the state `countersign-broker dev` keeps in the same directory: its
//! SQLite database, sealing key, console token and demo secrets are created on first run in
//! the same files and formats, so either command can start from the other's state. The console
//! keeps its own SQLite database there (`console.db`), talks to the broker with that console
//! token, and offers dev mode's local sign-in (an e-mail, loopback only).
//!
//! The broker's expiry notifications go to the console's webhook (`/hooks/broker`, protocol
//! §8), signed with a secret both share (`webhook-secret`, made on first run), so a request
//! left to expire reaches its session as a message out of the box.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::config::{BrokerConfig, Config};

/// The person dev mode's demo secrets belong to (as `countersign-broker dev` writes them).
pub use countersign_broker_http::dev::DEV_PERSON;

/// The broker and the console, running.
#[derive(Debug)]
pub struct Dev {
    pub broker: countersign_broker_http::Running,
    pub console: crate::Running,
    pub broker_url: String,
    pub console_url: String,
    pub dir: PathBuf,
}

impl Dev {
    /// Tells the person where things are and what to do next.
    pub fn print(&self) {
        let token = std::fs::read_to_string(self.dir.join("console-token")).unwrap_or_default();
        println!("Countersign (dev mode): broker and approval console");
        println!(
            "  console:       {}   (sign in as {DEV_PERSON})",
            self.console_url
        );
        println!("  broker:        {}", self.broker_url);
        println!("  state:         {}", self.dir.display());
        println!("  console token: {}", token.trim());
        println!(
            "  demo secrets:  DEMO_AUTOMATIC (automatic), DEMO_OWNER (owner {DEV_PERSON}), DEMO_SHARED (shared), DEMO_LOCKED (locked)"
        );
        println!(
            "Next: open {} and sign in as {DEV_PERSON}; an agent's request for DEMO_OWNER or DEMO_SHARED appears in its inbox. (Broker API: {}/v1/openapi.json)",
            self.console_url, self.broker_url
        );
    }

    pub async fn shutdown(self, grace: Duration) {
        self.console.shutdown(grace).await;
        self.broker.shutdown(grace).await;
    }
}

/// What dev mode can be asked to do differently (tests).
#[derive(Debug, Clone, Default)]
pub struct DevOptions {
    /// Seconds a credential request stays pending (the broker's default otherwise).
    pub request_pending_seconds: Option<i64>,
}

/// Starts both on 127.0.0.1 (port 0 picks a free one), creating dev state in `dir` on first run.
pub async fn start(dir: &Path, broker_port: u16, console_port: u16) -> anyhow::Result<Dev> {
    start_with(dir, broker_port, console_port, DevOptions::default()).await
}

/// The broker's webhook secret in the dev state (`whsec_` and 32 random bytes, made once).
fn webhook_secret(dir: &Path) -> anyhow::Result<PathBuf> {
    use base64::Engine as _;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let path = dir.join("webhook-secret");
    if !path.exists() {
        let key =
            countersign_console_core::clock::random::<32>(&countersign_console_core::SystemEntropy);
        let text = format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(key)
        );
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .with_context(|| format!("write {}", path.display()))?;
    }
    Ok(path)
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
    let console_url = format!("http://{console_addr}");
    // The broker's dev state and configuration, exactly as `countersign-broker dev` makes them,
    // with its expiry notifications sent to this console.
    let mut broker_config = countersign_broker_http::dev::dev_config(dir, broker_addr)?;
    let secret = webhook_secret(dir)?;
    broker_config.notifications = Some(countersign_broker_http::config::NotificationsConfig {
        url: format!("{console_url}/hooks/broker"),
        secret_file: secret.clone(),
        timeout_seconds: 10,
        retry_initial_seconds: 1,
        retry_max_seconds: 60,
        max_attempts: 100,
    });
    if let Some(s) = options.request_pending_seconds {
        broker_config.durations.request_pending = s;
    }
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

    let mut config = Config::new(&console_url);
    config.listen = console_addr;
    config.database_url = format!("sqlite://{}?mode=rwc", dir.join("console.db").display());
    config.broker = Some(BrokerConfig {
        url: broker_url.clone(),
        console_token_file: Some(dir.join("console-token")),
        timeout_seconds: 10,
        webhook_secret_file: Some(secret),
    });
    config.local_sign_in = true;
    config.local_sign_in_hint = Some(DEV_PERSON.to_owned());
    let state = crate::build(&config, Arc::new(countersign_console_core::SystemClock)).await?;
    let console = crate::serve(state, console_listener).await?;
    Ok(Dev {
        broker,
        console,
        broker_url,
        console_url,
        dir: dir.to_owned(),
    })
}
