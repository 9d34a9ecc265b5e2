//! What every command shares: the helper client, the output mode, and calls to the broker
//! signed by the helper (a session proof, or a launcher proof for the operator routes).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use countersign_broker_client::{Answer, Auth, BrokerClient};
use countersign_launcher_proto::Client;
use serde::Serialize;
use serde_json::Value;

use crate::exit::Fail;

/// Shared by every command.
#[derive(Debug)]
pub struct Ctx {
    pub helper: Client,
    pub socket: PathBuf,
    /// Print results as JSON.
    pub json: bool,
    /// Prompts and progress animations are allowed.
    pub interactive: bool,
    pub poll: Duration,
    broker: OnceLock<BrokerClient>,
}

impl Ctx {
    pub fn new(socket: PathBuf, json: bool, interactive: bool, poll: Duration) -> Self {
        Self {
            helper: Client::new(&socket),
            socket,
            json,
            interactive,
            poll,
            broker: OnceLock::new(),
        }
    }

    /// A broker client for the helper's broker (asked once).
    ///
    /// # Errors
    /// When the helper cannot be asked, or its broker URL is not usable.
    pub fn broker(&self) -> Result<&BrokerClient, Fail> {
        if let Some(b) = self.broker.get() {
            return Ok(b);
        }
        let status = self.helper.status()?;
        let client = BrokerClient::new(
            &status.broker_url,
            Duration::from_secs(30),
            concat!("countersign-launcher/", env!("CARGO_PKG_VERSION")),
        )?;
        Ok(self.broker.get_or_init(|| client))
    }

    /// Calls a session route with a session proof from the helper; a 503 (the broker's database
    /// in a failover, a proof it cannot decide yet) is sent again with a fresh proof, backing off
    /// (`BrokerError::retry_delay`).
    ///
    /// # Errors
    /// The helper's refusal (`NOT_A_SESSION`, `NOT_ENROLLED`, ...) or the broker's.
    pub async fn session_call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Answer, Fail> {
        let bytes = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(json_fail)?;
        let broker = self.broker()?;
        let answer = countersign_broker_client::retrying(|| async {
            let p = self.helper.sign_proof(method, path, bytes.as_deref())?;
            Ok::<_, Fail>(
                broker
                    .send(method, &p.url, bytes.as_deref(), Auth::Proof(&p.proof))
                    .await,
            )
        })
        .await?;
        Ok(answer?)
    }

    /// Calls an operator route with a launcher proof from the helper, retrying a 503 as
    /// [`Ctx::session_call`] does.
    ///
    /// # Errors
    /// The helper's refusal (`IN_SESSION`, `NO_CREDENTIAL`, ...) or the broker's.
    pub async fn launcher_call(&self, method: &str, path: &str) -> Result<Answer, Fail> {
        let broker = self.broker()?;
        let answer = countersign_broker_client::retrying(|| async {
            let p = self.helper.sign_launcher_proof(method, path, None)?;
            Ok::<_, Fail>(
                broker
                    .send(method, &p.url, None, Auth::Proof(&p.proof))
                    .await,
            )
        })
        .await?;
        Ok(answer?)
    }

    /// Prints a result: `value` as one JSON line with --json, else `human` (if any).
    pub fn print(&self, value: &impl Serialize, human: impl FnOnce() -> String) {
        let mut out = std::io::stdout().lock();
        let text = if self.json {
            serde_json::to_string(value).unwrap_or_default()
        } else {
            human()
        };
        if !text.is_empty() {
            let _ = writeln!(out, "{text}");
            let _ = out.flush();
        }
    }

    /// A note for people on stderr (not shown with --json).
    pub fn note(&self, text: &str) {
        if !self.json {
            eprintln!("{text}");
        }
    }

    /// Whether a progress animation may be drawn on stderr.
    #[must_use]
    pub fn animate(&self) -> bool {
        self.interactive && !self.json && std::io::stderr().is_terminal()
    }
}

pub fn json_fail(e: serde_json::Error) -> Fail {
    Fail::failure(format!("JSON: {e}"))
}

/// A spinner on stderr while waiting, or a single note when it cannot animate.
#[derive(Debug)]
pub struct Progress(Option<indicatif::ProgressBar>);

impl Progress {
    pub fn start(ctx: &Ctx, message: String) -> Self {
        if ctx.animate() {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_message(message);
            bar.enable_steady_tick(Duration::from_millis(120));
            Self(Some(bar))
        } else {
            ctx.note(&message);
            Self(None)
        }
    }

    pub fn set(&self, message: String) {
        if let Some(b) = &self.0 {
            b.set_message(message);
        }
    }

    pub fn done(self) {
        if let Some(b) = self.0 {
            b.finish_and_clear();
        }
    }
}
