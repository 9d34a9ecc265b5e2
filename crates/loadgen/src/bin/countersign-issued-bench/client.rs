//! The session's side of a dynamic secret over HTTP: request it (automatic tier, so the answer
//! carries the grant), release the grant's values (the first release mints the credential),
//! revoke the grant; each call with a fresh session proof, so that a call tried again after
//! the broker died is a new call. An answer is what the broker said, or that it said nothing
//! (the process was killed, or is not listening yet): the chaos loop tries again on the
//! latter, and never takes a dead broker for a refusal. It also tries again on a proof or
//! request object refused as replayed: after a crash, the SQLite broker refuses every proof
//! signed at or before its predecessor's last proof horizon (a second or two; issue 28 in
//! `docs/decisions.md`), so an honest call signed in the same second is refused once, and the
//! same call signed a moment later is not.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use countersign_loadgen::login;
use countersign_proto::claims::{self, AuthorizationDetail, ProofClaims, SecretRequestClaims};
use countersign_proto::{Header, SigningKey, jws};
use serde_json::{Value, json};

use crate::broker::{PERSON, SECRET, Settings};

/// What one call came back with.
pub enum Answer {
    /// 2xx, with its JSON body.
    Ok(Value),
    /// The broker refused: the status, the catalogue's code and the message.
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    /// No answer: the connection failed or closed (a broker killed, or not started yet).
    Down,
}

impl Answer {
    /// A refusal of the call's proof or request object as a replay.
    pub fn replayed(&self) -> bool {
        matches!(self, Self::Refused { status: 401, message, .. } if message.ends_with("replayed"))
    }

    /// The broker's "try again": 503 DATABASE_UNAVAILABLE (a restart's proof floor, a
    /// database failing over).
    pub fn undecided(&self) -> bool {
        matches!(self, Self::Refused { status: 503, code, .. } if code == "DATABASE_UNAVAILABLE")
    }

    /// The body, or an error naming what came back instead.
    pub fn ok(self, what: &str) -> anyhow::Result<Value> {
        match self {
            Self::Ok(v) => Ok(v),
            Self::Refused {
                status,
                code,
                message,
            } => bail!("{what}: the broker answered {status} {code}: {message}"),
            Self::Down => bail!("{what}: no answer from the broker"),
        }
    }
}

/// One enrolled session of the one person's machine.
pub struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
    key: SigningKey,
    enrollment: String,
    /// Calls refused as replayed and sent again (signed afresh).
    pub replays: AtomicUsize,
    /// Calls answered 503 DATABASE_UNAVAILABLE and sent again (signed afresh).
    pub undecided: AtomicUsize,
}

impl Api {
    /// Logs a machine in (approved with the console token) and enrolls a session.
    pub async fn setup(http: reqwest::Client, s: &Settings) -> anyhow::Result<Self> {
        let (machine, credential) =
            login::machine_login(&http, &s.base, &s.token, PERSON, "issued-bench").await?;
        let (key, enrollment) =
            login::enroll(&http, &s.base, &machine, &credential, "issued-bench-1").await?;
        Ok(Self {
            http,
            base: s.base.clone(),
            token: s.token.clone(),
            key,
            enrollment,
            replays: AtomicUsize::new(0),
            undecided: AtomicUsize::new(0),
        })
    }

    fn proof(&self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<String> {
        let c = ProofClaims {
            htm: method.into(),
            htu: claims::htu(&self.base, path),
            iat: chrono::Utc::now().timestamp(),
            jti: claims::new_jti()?,
            bh: (!body.is_empty()).then(|| claims::body_hash(body)),
        };
        Ok(jws::sign(
            &self.key,
            &Header::with_kid(claims::TYP_SESSION_PROOF, &self.enrollment),
            &c,
        )?)
    }

    /// A session-proved POST of `body` (empty: none).
    async fn post(&self, path: &str, body: Vec<u8>) -> anyhow::Result<Answer> {
        let proof = self.proof("POST", path, &body)?;
        let mut rb = self
            .http
            .post(format!("{}{path}", self.base))
            .header("proof", proof);
        if !body.is_empty() {
            rb = rb.header("content-type", "application/json").body(body);
        }
        Ok(answer(rb.send().await).await)
    }

    /// Requests the issued secret for `lifetime` seconds; the answer of an automatic request
    /// names its grant (`grant_id`).
    pub async fn request(&self, lifetime: u64) -> anyhow::Result<Answer> {
        let now = chrono::Utc::now().timestamp();
        let object = jws::sign(
            &self.key,
            &Header::with_kid(claims::TYP_SECRET_REQUEST, &self.enrollment),
            &SecretRequestClaims {
                iat: now,
                exp: now + 300,
                jti: claims::new_jti()?,
                aud: self.base.clone(),
                authorization_details: vec![AuthorizationDetail::agent_secret(SECRET)],
                reason: "issued-bench".into(),
                lifetime_seconds: Some(lifetime),
            },
        )?;
        let body = serde_json::to_vec(&json!({ "request": object }))?;
        self.post("/v1/requests", body).await
    }

    /// `POST /v1/grants/{id}/values`: the first one mints the credential.
    pub async fn values(&self, grant: &str) -> anyhow::Result<Answer> {
        self.post(&format!("/v1/grants/{grant}/values"), Vec::new())
            .await
    }

    /// `POST /v1/grants/{id}/revoke`.
    pub async fn revoke(&self, grant: &str) -> anyhow::Result<Answer> {
        self.post(&format!("/v1/grants/{grant}/revoke"), Vec::new())
            .await
    }

    /// The person's live grants, as the console lists them.
    pub async fn live_grants(&self) -> anyhow::Result<Vec<String>> {
        let r = self
            .http
            .get(format!("{}/v1/grants?approver={PERSON}", self.base))
            .bearer_auth(&self.token)
            .send()
            .await;
        let v = answer(r).await.ok("GET /v1/grants")?;
        let list = v["grants"].as_array().context("grants")?;
        Ok(list
            .iter()
            .filter(|g| g["state"] == "live")
            .filter_map(|g| g["grant_id"].as_str().map(str::to_owned))
            .collect())
    }

    /// Retries `call` while the broker gives no answer, or answers that it cannot decide yet
    /// (503 DATABASE_UNAVAILABLE: a call signed in the second a restarted broker cannot tell
    /// from a replay, with `Retry-After`), or refuses it as replayed (brokers before issue 50
    /// answered that second so), for up to `within`; each try signs a fresh proof.
    pub async fn until_answered<F, Fut>(
        &self,
        within: Duration,
        mut call: F,
    ) -> anyhow::Result<Answer>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<Answer>>,
    {
        let started = Instant::now();
        loop {
            match call().await? {
                Answer::Down if started.elapsed() < within => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                a if (a.replayed() || a.undecided()) && started.elapsed() < within => {
                    let counter = if a.replayed() {
                        &self.replays
                    } else {
                        &self.undecided
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                a => return Ok(a),
            }
        }
    }
}

/// The grant a request's answer names.
pub fn grant_of(v: &Value) -> anyhow::Result<String> {
    Ok(v["grant_id"]
        .as_str()
        .context("an automatic request's answer names its grant")?
        .to_owned())
}

/// The released URL of the issued secret.
pub fn url_of(v: &Value) -> anyhow::Result<String> {
    Ok(v["values"][SECRET]
        .as_str()
        .context("the release answers the secret's URL")?
        .to_owned())
}

async fn answer(r: reqwest::Result<reqwest::Response>) -> Answer {
    let Ok(r) = r else {
        return Answer::Down;
    };
    let status = r.status().as_u16();
    let Ok(text) = r.text().await else {
        return Answer::Down;
    };
    let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
    if (200..300).contains(&status) {
        return Answer::Ok(body);
    }
    Answer::Refused {
        status,
        code: body["code"].as_str().unwrap_or("").to_owned(),
        message: body["error"].as_str().unwrap_or("").to_owned(),
    }
}
