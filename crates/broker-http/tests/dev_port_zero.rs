//! `countersign-broker dev --port 0`: the real binary binds a port the system picks, prints its
//! public URL with that port, and a launcher proof bound to that URL (`htu`) is accepted.
//! Before the fix the public URL said port 0 and every proof failed "htu does not match".

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

mod common;

use anyhow::{Context, bail};
use common::client::{Client, Machine};
use common::process::BrokerProcess;

type R = anyhow::Result<()>;

/// Starts `dev --port 0` in a state directory under `dir` and reads the URL and console token
/// it prints.
async fn start(dir: &std::path::Path) -> anyhow::Result<(BrokerProcess, String, String)> {
    let mut dev = BrokerProcess::spawn(
        common::process::command(["dev", "--port", "0", "--dir"])
            .arg(dir.join("dev"))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
    )?;
    let stdout = dev.stdout().context("stdout")?;
    let read = tokio::task::spawn_blocking(move || -> anyhow::Result<(String, String)> {
        let (mut url, mut token) = (None, None);
        for line in BufReader::new(stdout).lines() {
            let line = line?;
            if let Some(u) = line.strip_prefix("Countersign broker (dev mode) at ") {
                url = Some(u.trim().to_owned());
            }
            if let Some(t) = line.trim().strip_prefix("console token:") {
                token = Some(t.trim().to_owned());
            }
            if let (Some(u), Some(t)) = (&url, &token) {
                return Ok((u.clone(), t.clone()));
            }
        }
        bail!("dev mode ended before printing its URL and console token")
    });
    let (url, token) = tokio::time::timeout(Duration::from_secs(60), read)
        .await
        .context("dev mode printed nothing in time")???;
    Ok((dev, url, token))
}

#[tokio::test]
async fn dev_on_port_zero_advertises_the_bound_port_and_proofs_verify() -> R {
    let dir = tempfile::tempdir()?;
    let (_dev, base, console) = start(dir.path()).await?;
    let port = base
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .context("a URL with a port")?;
    assert_ne!(port, 0, "{base}");
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");

    // A machine login, approved through the console routes; a proof bound to the printed URL
    // is accepted (it was "htu does not match" on port 0).
    let c = Client::new(&base, &console);
    let machine = Machine::login(&c, "dev@countersign.local", "laptop").await?;
    let (status, enrolled, _) = machine.enroll(&c, "rt-dev").await?;
    assert_eq!(status, 201, "{enrolled}");
    Ok(())
}
