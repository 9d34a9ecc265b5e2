//! Speaking to a broker process over HTTP with real ES256 keys: a machine login approved through
//! the console routes, a session enrolled under it, a secret request, a grant's values. Each
//! call opens a fresh connection: no pooled one outlives it (SIGTERM's graceful shutdown is not
//! kept waiting).

use std::time::Duration;

use anyhow::bail;
use countersign_proto::SigningKey;
use countersign_proto::claims::{
    self, AuthorizationDetail, MachineLoginClaims, ProofClaims, SecretRequestClaims,
};
use countersign_proto::jws::{self, Header};
use reqwest::Method as M;
use serde_json::{Value, json};

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

pub fn jti() -> String {
    claims::new_jti().unwrap_or_default()
}

/// String field `f` of `v` (empty if none).
pub fn s(v: &Value, f: &str) -> String {
    v[f].as_str().unwrap_or_default().to_owned()
}

/// A client of one broker, holding its console token.
#[derive(Debug, Clone)]
pub struct Client {
    pub base: String,
    console: String,
}

impl Client {
    pub fn new(base: &str, console_token: &str) -> Self {
        Self {
            base: base.to_owned(),
            console: console_token.to_owned(),
        }
    }

    /// The console's `authorization` header.
    pub fn bearer(&self) -> [(&'static str, String); 1] {
        [("authorization", format!("Bearer {}", self.console))]
    }

    /// Sends a request: the answer's status and JSON body (`null` if none).
    pub async fn send(
        &self,
        method: M,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let (status, text) = self.send_text(method, path, headers, body).await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    /// Sends a request: the answer's status and text.
    pub async fn send_text(
        &self,
        method: M,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, String)> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(20))
            .build()?;
        let mut rb = http.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            rb = rb.header(*k, v);
        }
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let r = rb.send().await?;
        let status = r.status().as_u16();
        Ok((status, r.text().await?))
    }

    /// Sends a request that must answer `status`: its body.
    pub async fn expect(
        &self,
        status: u16,
        method: M,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let (s, v) = self.send(method, path, headers, body).await?;
        if s != status {
            bail!("{path}: expected {status}, got {s}: {v}");
        }
        Ok(v)
    }

    /// A `Proof` header of type `typ` for `method path` with `body`, signed by `key` named
    /// `kid`.
    pub fn proof(
        &self,
        typ: &str,
        kid: &str,
        key: &SigningKey,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> String {
        let c = ProofClaims {
            htm: method.into(),
            htu: claims::htu(&self.base, path),
            iat: now(),
            jti: jti(),
            bh: body.map(|b| claims::body_hash(b.to_string().as_bytes())),
        };
        jws::sign(key, &Header::with_kid(typ, kid), &c).unwrap_or_default()
    }

    /// Waits (up to 20 s) until `/healthz` answers 200.
    pub async fn wait_healthy(&self) -> anyhow::Result<()> {
        for _ in 0..400 {
            if let Ok((200, _)) = self.send(M::GET, "/healthz", &[], None).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the broker did not become healthy")
    }
}

/// A person's machine, logged in and approved through the console routes.
#[derive(Debug)]
pub struct Machine {
    pub key: SigningKey,
    pub credential: String,
}

impl Machine {
    /// `person`'s machine `host` logs in: it starts, the console looks the code up and
    /// approves it with the code typed again.
    pub async fn login(c: &Client, person: &str, host: &str) -> anyhow::Result<Machine> {
        let key = SigningKey::generate()?;
        let login = jws::sign(
            &key,
            &Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk()),
            &MachineLoginClaims {
                iat: now(),
                exp: now() + 120,
                jti: jti(),
                login_hint: person.into(),
                host: host.into(),
                authorization_details: None,
            },
        )?;
        let body = json!({ "request": login });
        let started = c
            .expect(202, M::POST, "/v1/launcher-credentials", &[], Some(&body))
            .await?;
        let code = s(&started, "code");
        let lookup = json!({ "code": code });
        let path = "/v1/machine-logins/lookup";
        let record = c
            .expect(200, M::POST, path, &c.bearer(), Some(&lookup))
            .await?;
        let path = format!(
            "/v1/credential-requests/{}/approve",
            s(&record, "record_id")
        );
        let approval = json!({ "approver": person, "code": code });
        let approved = c
            .expect(200, M::POST, &path, &c.bearer(), Some(&approval))
            .await?;
        Ok(Machine {
            key,
            credential: s(&approved, "credential_id"),
        })
    }

    /// A launcher call: `method path` with `body`, with the machine's proof.
    pub async fn call(
        &self,
        c: &Client,
        method: M,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let typ = claims::TYP_LAUNCHER_PROOF;
        let proof = c.proof(
            typ,
            &self.credential,
            &self.key,
            method.as_str(),
            path,
            body,
        );
        c.send(method, path, &[("proof", proof)], body).await
    }

    /// Enrolls a session (runtime `runtime`): the answer's status and body, and the session's
    /// key.
    pub async fn enroll(
        &self,
        c: &Client,
        runtime: &str,
    ) -> anyhow::Result<(u16, Value, SigningKey)> {
        let key = SigningKey::generate()?;
        let body = json!({
            "kind": "session",
            "runtime_id": runtime,
            "thumbprint": key.thumbprint(),
            "jwk": key.public_jwk(),
        });
        let (status, v) = self
            .call(c, M::POST, "/v1/enrollments", Some(&body))
            .await?;
        Ok((status, v, key))
    }

    /// A session enrolled under the machine.
    pub async fn session(&self, c: &Client, runtime: &str) -> anyhow::Result<Session> {
        let (status, v, key) = self.enroll(c, runtime).await?;
        if status != 201 {
            bail!("enroll: {status} {v}");
        }
        Ok(Session {
            key,
            enrollment: s(&v, "enrollment_id"),
        })
    }
}

/// A session enrolled under a machine.
#[derive(Debug)]
pub struct Session {
    pub key: SigningKey,
    pub enrollment: String,
}

impl Session {
    /// A session call: `POST path` with `body`, with the session's proof.
    pub async fn post(
        &self,
        c: &Client,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let typ = claims::TYP_SESSION_PROOF;
        let proof = c.proof(typ, &self.enrollment, &self.key, "POST", path, body);
        c.send(M::POST, path, &[("proof", proof)], body).await
    }

    /// Asks for agent secret `name` (in notification session `session_id`, lasting `lifetime`
    /// seconds or the session): the answer, which must be 200.
    pub async fn request(
        &self,
        c: &Client,
        name: &str,
        session_id: Option<&str>,
        lifetime: Option<u64>,
    ) -> anyhow::Result<Value> {
        match self.ask(c, name, session_id, lifetime).await? {
            (200, made) => Ok(made),
            (status, v) => bail!("request {name}: {status} {v}"),
        }
    }

    /// Asks for agent secret `name` as [`Session::request`] does, with a request object and a
    /// proof signed afresh: the answer's status and body, whatever they are.
    pub async fn ask(
        &self,
        c: &Client,
        name: &str,
        session_id: Option<&str>,
        lifetime: Option<u64>,
    ) -> anyhow::Result<(u16, Value)> {
        let request = jws::sign(
            &self.key,
            &Header::with_kid(claims::TYP_SECRET_REQUEST, &self.enrollment),
            &SecretRequestClaims {
                iat: now(),
                exp: now() + 120,
                jti: jti(),
                aud: c.base.clone(),
                authorization_details: vec![AuthorizationDetail::agent_secret(name)],
                reason: "process test".into(),
                lifetime_seconds: lifetime,
            },
        )?;
        let body = json!({ "request": request, "session_id": session_id });
        self.post(c, "/v1/requests", Some(&body)).await
    }

    /// An automatic grant of `name` (lasting `lifetime` seconds or the session): its id.
    pub async fn grant(
        &self,
        c: &Client,
        name: &str,
        lifetime: Option<u64>,
    ) -> anyhow::Result<String> {
        let made = self.request(c, name, None, lifetime).await?;
        if s(&made, "state") != "granted" {
            bail!("not granted: {made}");
        }
        Ok(s(&made, "grant_id"))
    }

    /// Asks for `grant`'s values: the status and body.
    pub async fn values(&self, c: &Client, grant: &str) -> anyhow::Result<(u16, Value)> {
        self.post(c, &format!("/v1/grants/{grant}/values"), None)
            .await
    }
}
