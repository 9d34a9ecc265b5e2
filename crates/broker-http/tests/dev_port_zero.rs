//! `countersign-broker dev --port 0`: the real binary binds a port the system picks, prints its
//! public URL with that port, and a launcher proof bound to that URL (`htu`) is accepted.
//! Before the fix the public URL said port 0 and every proof failed "htu does not match".

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use countersign_proto::SigningKey;
use countersign_proto::claims::{self, MachineLoginClaims, ProofClaims};
use countersign_proto::jws::{self, Header};
use serde_json::{Value, json};

type R = anyhow::Result<()>;

/// The dev broker process and its state directory, both gone on drop.
struct Dev {
    child: Child,
    dir: PathBuf,
}

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn jti() -> String {
    claims::new_jti().unwrap_or_default()
}

fn s(v: &Value, f: &str) -> String {
    v[f].as_str().unwrap_or_default().to_owned()
}

/// Starts `dev --port 0` and reads the URL and console token it prints.
async fn start() -> anyhow::Result<(Dev, String, String)> {
    let dir = std::env::temp_dir().join(format!(
        "countersign-dev-port0-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let mut child = Command::new(env!("CARGO_BIN_EXE_countersign-broker"))
        .args(["dev", "--port", "0", "--dir"])
        .arg(&dir)
        .env("RUST_LOG", "warn")
        .env_remove("COUNTERSIGN_LISTEN")
        .env_remove("COUNTERSIGN_PUBLIC_URL")
        .env_remove("COUNTERSIGN_PORT")
        .env_remove("COUNTERSIGN_DEV_DIR")
        .env_remove("COUNTERSIGN_CONSOLE_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("start countersign-broker dev")?;
    let stdout = child.stdout.take().context("stdout")?;
    let dev = Dev { child, dir };
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
    let (_dev, base, console) = start().await?;
    let port = base
        .rsplit_once(':')
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .context("a URL with a port")?;
    assert_ne!(port, 0, "{base}");
    assert!(base.starts_with("http://127.0.0.1:"), "{base}");

    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()?;
    let post = |path: &str, headers: Vec<(&'static str, String)>, body: &Value| {
        let mut rb = http.post(format!("{base}{path}"));
        for (k, v) in headers {
            rb = rb.header(k, v);
        }
        let rb = rb
            .header("content-type", "application/json")
            .body(body.to_string());
        async move {
            let r = rb.send().await?;
            let status = r.status().as_u16();
            let v: Value = serde_json::from_str(&r.text().await?).unwrap_or(Value::Null);
            anyhow::Ok((status, v))
        }
    };
    let bearer = || vec![("authorization", format!("Bearer {console}"))];
    const PERSON: &str = "dev@countersign.local";

    // A machine login, approved through the console routes.
    let machine = SigningKey::generate()?;
    let login = jws::sign(
        &machine,
        &Header::with_jwk(claims::TYP_MACHINE_LOGIN, machine.public_jwk()),
        &MachineLoginClaims {
            iat: now(),
            exp: now() + 120,
            jti: jti(),
            login_hint: PERSON.into(),
            host: "laptop".into(),
            authorization_details: None,
        },
    )?;
    let (st, started) = post(
        "/v1/launcher-credentials",
        vec![],
        &json!({ "request": login }),
    )
    .await?;
    assert_eq!(st, 202, "{started}");
    let code = s(&started, "code");
    let (st, record) = post(
        "/v1/machine-logins/lookup",
        bearer(),
        &json!({ "code": code }),
    )
    .await?;
    assert_eq!(st, 200, "{record}");
    let (st, approved) = post(
        &format!(
            "/v1/credential-requests/{}/approve",
            s(&record, "record_id")
        ),
        bearer(),
        &json!({ "approver": PERSON, "code": code }),
    )
    .await?;
    assert_eq!(st, 200, "{approved}");
    let credential = s(&approved, "credential_id");

    // A proof bound to the printed URL: accepted (it was "htu does not match" on port 0).
    let session = SigningKey::generate()?;
    let body = json!({
        "kind": "session",
        "runtime_id": "rt-dev",
        "thumbprint": session.thumbprint(),
        "jwk": session.public_jwk(),
    });
    let proof = jws::sign(
        &machine,
        &Header::with_kid(claims::TYP_LAUNCHER_PROOF, &credential),
        &ProofClaims {
            htm: "POST".into(),
            htu: claims::htu(&base, "/v1/enrollments"),
            iat: now(),
            jti: jti(),
            bh: Some(claims::body_hash(body.to_string().as_bytes())),
        },
    )?;
    let (st, enrolled) = post("/v1/enrollments", vec![("proof", proof)], &body).await?;
    assert_eq!(st, 201, "{enrolled}");
    Ok(())
}
