//! The console on the formation: the real `countersign-console` binary (`serve`, built by the
//! `countersign-dev` package beside this one's binary in the target directory), on the
//! formation's URL with a database of its own, in front of replica A; under a load of its own:
//! a client with the shared agent token that creates projects, sending a 503 again with
//! back-off, whose acknowledged (201) projects must all be listed after each failover.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use reqwest::Method as M;
use serde_json::json;

use crate::common::client::Client;
use crate::common::process::{CONSOLE_TOKEN, free_port};

const SHARED_TOKEN: &str = "failover-shared-agent-token-0123456789";

/// The console binary beside the broker's, if it was built.
pub fn binary() -> Option<PathBuf> {
    let broker = PathBuf::from(env!("CARGO_BIN_EXE_countersign-broker"));
    let console = broker.parent()?.join("countersign-console");
    console.is_file().then_some(console)
}

pub struct Console {
    child: Child,
    pub client: Client,
    pub log: PathBuf,
    /// Projects created (201), and every status the console answered the load.
    pub created: Mutex<Vec<String>>,
    pub statuses: Mutex<Vec<(Instant, u16)>>,
    pub unexpected: Mutex<Vec<String>>,
    pub stop: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Console {
    /// Writes the configuration in `dir` and starts `serve`; waits until `/healthz` answers.
    pub async fn start(
        binary: &PathBuf,
        dir: &std::path::Path,
        database_url: &str,
        broker: &str,
    ) -> anyhow::Result<Console> {
        let port = free_port()?;
        let base = format!("http://127.0.0.1:{port}");
        std::fs::write(dir.join("shared-token"), SHARED_TOKEN)?;
        std::fs::write(dir.join("console-broker-token"), CONSOLE_TOKEN)?;
        let config = format!(
            "listen = \"127.0.0.1:{port}\"\npublic_url = \"{base}\"\ndatabase_url = {database_url:?}\nshared_token_file = {:?}\n\n[broker]\nurl = \"{broker}\"\nconsole_token_file = {:?}\n",
            dir.join("shared-token"),
            dir.join("console-broker-token"),
        );
        let config_file = dir.join("console.toml");
        std::fs::write(&config_file, config)?;
        let log = dir.join("console.log");
        let mut cmd = Command::new(binary);
        cmd.args(["serve", "--config"])
            .arg(&config_file)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("COUNTERSIGN_") {
                cmd.env_remove(k);
            }
        }
        let child = cmd.spawn().context("start countersign-console")?;
        let console = Console {
            child,
            client: Client::new(&base, SHARED_TOKEN),
            log,
            created: Mutex::default(),
            statuses: Mutex::default(),
            unexpected: Mutex::default(),
            stop: AtomicBool::new(false),
        };
        if let Err(e) = console.client.wait_healthy().await {
            bail!("{e}; console log:\n{}", console.log_text());
        }
        Ok(console)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The load: a project created every 100 ms until stopped, each sent again on 503 with
    /// back-off (50 ms doubling to 500 ms). A 409 `PROJECT_EXISTS` after a 503 or a broken
    /// call is an earlier attempt that committed, not an acknowledgement.
    pub async fn load(&self) {
        let mut n = 0u32;
        while !self.stop.load(Ordering::SeqCst) {
            n += 1;
            let key = format!("F{n}");
            let body =
                json!({ "key": key, "name": format!("Failover {n}"), "actor": "failover-test" });
            let mut wait = Duration::from_millis(50);
            let mut retried = false;
            loop {
                match self
                    .client
                    .send(
                        M::POST,
                        "/api/v1/projects",
                        &self.client.bearer(),
                        Some(&body),
                    )
                    .await
                {
                    Ok((status, v)) => {
                        lock(&self.statuses).push((Instant::now(), status));
                        match status {
                            201 => lock(&self.created).push(key.clone()),
                            503 => retried = true,
                            409 if retried => {}
                            _ => lock(&self.unexpected).push(format!("create {key}: {status} {v}")),
                        }
                        if status != 503 {
                            break;
                        }
                    }
                    Err(_) => retried = true,
                }
                if self.stop.load(Ordering::SeqCst) {
                    return;
                }
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_millis(500));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits (up to `within`) until `/readyz` answers 200.
    pub async fn wait_ready(&self, within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok((200, _)) = self.client.send(M::GET, "/readyz", &[], None).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the console was not ready within {within:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every acknowledged project is listed: the number checked.
    pub async fn check_projects(&self) -> anyhow::Result<usize> {
        let created = lock(&self.created).clone();
        let (status, text) = self
            .client
            .send_text(M::GET, "/api/v1/projects", &self.client.bearer(), None)
            .await?;
        if status != 200 {
            bail!("list projects: {status} {text}");
        }
        let missing: Vec<&String> = created
            .iter()
            .filter(|k| !text.contains(&format!("\"{k}\"")))
            .collect();
        if !missing.is_empty() {
            bail!("acknowledged projects missing after the failover: {missing:?}");
        }
        Ok(created.len())
    }

    /// The console's answers by status.
    pub fn by_status(&self) -> std::collections::BTreeMap<u16, usize> {
        let mut m = std::collections::BTreeMap::new();
        for (_, s) in lock(&self.statuses).iter() {
            *m.entry(*s).or_default() += 1;
        }
        m
    }

    /// The span of the 503s the console answered between `from` and `to`.
    pub fn unavailable_between(&self, from: Instant, to: Instant) -> Option<(Instant, Instant)> {
        let s = lock(&self.statuses);
        let mut it = s
            .iter()
            .filter(|(at, st)| *st == 503 && *at >= from && *at <= to);
        let first = it.next()?.0;
        let last = it.next_back().map_or(first, |(at, _)| *at);
        Some((first, last))
    }

    pub fn created_count(&self) -> usize {
        lock(&self.created).len()
    }

    pub fn unexpected(&self) -> Vec<String> {
        lock(&self.unexpected).clone()
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
