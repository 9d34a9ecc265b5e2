//! `KEYGEN` and `SIGN` through the helper's real socket server and request handling, asked by
//! this test process (its real pid and ancestry, identified by SO_PEERCRED and `/proc`).
//!
//! Two stand-ins, and only these:
//! - the key source: aws-lc-rs does not fail to make a key or to sign on demand, so [`Faulty`]
//!   wraps the real one ([`AwsLc`]) and fails when told to, through [`Helper::with_keys`];
//! - the broker: the real one is not a dependency of this crate (the CLI's end-to-end tests run
//!   the helper against it). [`stand_in_broker`] answers the one route the helper calls here,
//!   `POST /v1/enrollments`, and only with a launcher proof that verifies under the stored
//!   credential's key.
#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use countersign_launcher_helper::keys::{AwsLc, Claims, Keys};
use countersign_launcher_helper::store::{CredentialStore, Stored};
use countersign_launcher_helper::{Helper, HelperConfig, server};
use countersign_launcher_proto::messages::CredentialKind;
use countersign_proto::jws::{self, Header};
use countersign_proto::{JwsError, SigningKey, claims};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UnixStream};

const CREDENTIAL: &str = "7d444840-9dc0-11d1-b245-5ffdce74fad2";
const ENROLLMENT: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

/// The real keys, failing to make a key or to sign while told to.
#[derive(Debug, Default)]
struct Faulty {
    keygen: AtomicBool,
    sign: AtomicBool,
}

impl Keys for Faulty {
    fn generate(&self) -> Result<SigningKey, JwsError> {
        if self.keygen.load(Ordering::SeqCst) {
            return Err(JwsError::Crypto);
        }
        AwsLc.generate()
    }

    fn sign(
        &self,
        key: &SigningKey,
        header: &Header,
        claims: Claims<'_>,
    ) -> Result<String, JwsError> {
        if self.sign.load(Ordering::SeqCst) {
            return Err(JwsError::Crypto);
        }
        AwsLc.sign(key, header, claims)
    }
}

/// A broker answering enrollments made with `machine`'s launcher proofs.
async fn stand_in_broker(machine: &SigningKey) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let key = machine.verifying_key().clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let key = key.clone();
            tokio::spawn(async move { answer(stream, &key).await });
        }
    });
    url
}

/// One HTTP/1.1 exchange, then the connection is closed.
async fn answer(stream: TcpStream, key: &countersign_proto::VerifyingKey) {
    let mut r = BufReader::new(stream);
    let mut request_line = String::new();
    r.read_line(&mut request_line).await.unwrap();
    let (mut length, mut proof) = (0, None);
    loop {
        let mut h = String::new();
        r.read_line(&mut h).await.unwrap();
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':').unwrap();
        match name.to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap(),
            "proof" => proof = Some(value.trim().to_owned()),
            _ => {}
        }
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body).await.unwrap();
    let launcher_proof = proof.and_then(|p| {
        jws::parse(&p)
            .ok()
            .filter(|p| p.typ() == claims::TYP_LAUNCHER_PROOF && p.kid() == Some(CREDENTIAL))?
            .verify(key)
            .ok()
    });
    let mut parts = request_line.split_whitespace();
    let (status, answer) = match (parts.next(), parts.next(), launcher_proof) {
        (_, _, None) => (
            "401 Unauthorized",
            json!({"code": "LAUNCHER_INVALID", "error": "no valid launcher proof"}),
        ),
        (Some("POST"), Some("/v1/enrollments"), Some(_)) => (
            "201 Created",
            json!({"enrollment_id": ENROLLMENT, "lease_expires_at": "2999-01-01T00:00:00.000Z"}),
        ),
        _ => (
            "404 Not Found",
            json!({"code": "NOT_FOUND", "error": "no such route"}),
        ),
    };
    let answer = answer.to_string();
    let head = format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        answer.len()
    );
    let mut stream = r.into_inner();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(answer.as_bytes()).await.unwrap();
}

/// A helper holding a stored person's credential for the stand-in broker, serving its socket,
/// with the key source `keys`.
struct Fixture {
    keys: Arc<Faulty>,
    socket: PathBuf,
    dir: PathBuf,
}

impl Fixture {
    async fn start(tag: &str) -> Self {
        // Short: a Unix socket path must fit in 108 bytes.
        let dir = std::env::temp_dir().join(format!("cs-keys-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let machine = SigningKey::generate().unwrap();
        let broker_url = stand_in_broker(&machine).await;
        CredentialStore::new(dir.join("state"))
            .save(&Stored {
                version: 1,
                broker_url: broker_url.clone(),
                credential_id: CREDENTIAL.into(),
                kind: CredentialKind::Person,
                host: "test-host".into(),
                login: Some("ada@example.com".into()),
                service: None,
                expires_at: Some("2999-01-01T00:00:00.000Z".into()),
                token_file: None,
                key_pkcs8: Stored::encode_key(&machine).unwrap(),
            })
            .unwrap();
        let keys = Arc::new(Faulty::default());
        let helper = Helper::new(HelperConfig::new(&broker_url, dir.join("state")))
            .unwrap()
            .with_keys(keys.clone());
        let socket = dir.join("l.sock");
        let listener = server::bind(&socket).unwrap();
        tokio::spawn(server::serve(
            Arc::new(helper),
            listener,
            std::future::pending(),
        ));
        Self { keys, socket, dir }
    }

    /// One request on a new connection, and its answer.
    async fn ask(&self, request: Value) -> Value {
        let mut s = UnixStream::connect(&self.socket).await.unwrap();
        s.write_all(format!("{request}\n").as_bytes())
            .await
            .unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).await.unwrap();
        serde_json::from_str(&line).unwrap()
    }

    async fn register(&self) {
        let v = self.ask(json!({"op": "register", "label": "keys"})).await;
        assert_eq!(v["result"], "registered", "{v}");
        assert_eq!(v["state"], "enrolled", "{v}");
        assert_eq!(v["enrollment_id"], ENROLLMENT, "{v}");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The refusal `code` with exactly the message `error`: the answer holds nothing else, so no
/// key material.
fn assert_refused(v: &Value, code: &str, error: &str) {
    assert_eq!(
        v,
        &json!({"result": "error", "code": code, "error": error}),
        "{v}"
    );
}

const SESSION_KEYGEN: &str = "the session key could not be made";
const MACHINE_KEYGEN: &str = "the machine key could not be made";
const SIGN: &str = "signing failed";

fn sign_proof() -> Value {
    json!({"op": "sign_proof", "method": "GET", "path": "/v1/enrollments/self"})
}

fn sign_request() -> Value {
    json!({"op": "sign_request", "secrets": ["GITHUB_TOKEN"], "reason": "open the release PR"})
}

/// A session key that cannot be made is `KEYGEN`, and leaves no session behind: the caller is
/// still outside every session, and registering again once keys can be made succeeds. (The
/// failing key source is a stand-in: aws-lc-rs does not fail on demand.)
#[tokio::test]
async fn register_answers_keygen_and_leaves_nothing_registered() {
    let f = Fixture::start("reg").await;
    f.keys.keygen.store(true, Ordering::SeqCst);
    for wait in [true, false] {
        let v = f.ask(json!({"op": "register", "wait": wait})).await;
        assert_refused(&v, "KEYGEN", SESSION_KEYGEN);
    }
    let v = f.ask(json!({"op": "status"})).await;
    assert_eq!(v["caller"]["standing"], "outside", "{v}");
    assert_eq!(v["sessions"], json!([]), "{v}");

    f.keys.keygen.store(false, Ordering::SeqCst);
    f.register().await;
    let v = f.ask(sign_proof()).await;
    assert_eq!(v["result"], "proof", "{v}");
}

/// A machine key that cannot be made is `KEYGEN` for a person's machine login and a service's
/// token login; the credential held stays. (The failing key source is a stand-in: aws-lc-rs
/// does not fail on demand.)
#[tokio::test]
async fn logins_answer_keygen_when_the_machine_key_cannot_be_made() {
    let f = Fixture::start("login").await;
    f.keys.keygen.store(true, Ordering::SeqCst);
    let v = f
        .ask(json!({"op": "login_start", "login": "ada@example.com"}))
        .await;
    assert_refused(&v, "KEYGEN", MACHINE_KEYGEN);
    let v = f
        .ask(json!({"op": "token_login", "service": "svc", "token": "a-token"}))
        .await;
    assert_refused(&v, "KEYGEN", MACHINE_KEYGEN);
    let v = f.ask(json!({"op": "status"})).await;
    assert_eq!(v["login_pending"], false, "{v}");
    assert_eq!(v["credential"]["credential_id"], CREDENTIAL, "{v}");
}

/// Signing a session proof or a secret request for an enrolled session is `SIGN` when the
/// signature cannot be made, and works again once it can. (The failing key source is a
/// stand-in: aws-lc-rs does not fail on demand.)
#[tokio::test]
async fn signing_for_an_enrolled_session_answers_sign() {
    let f = Fixture::start("sess").await;
    f.register().await;
    f.keys.sign.store(true, Ordering::SeqCst);
    assert_refused(&f.ask(sign_proof()).await, "SIGN", SIGN);
    assert_refused(&f.ask(sign_request()).await, "SIGN", SIGN);
    let v = f.ask(json!({"op": "status"})).await;
    assert_eq!(v["caller"]["session"]["state"], "enrolled", "{v}");

    f.keys.sign.store(false, Ordering::SeqCst);
    let v = f.ask(sign_proof()).await;
    assert_eq!(v["result"], "proof", "{v}");
    assert_eq!(v["kid"], ENROLLMENT, "{v}");
    let v = f.ask(sign_request()).await;
    assert_eq!(v["result"], "signed_request", "{v}");
}

/// A launcher proof, a machine login request or a token login request that cannot be signed is
/// `SIGN`, before anything is sent. (The failing key source is a stand-in: aws-lc-rs does not
/// fail on demand.)
#[tokio::test]
async fn launcher_signing_and_logins_answer_sign() {
    let f = Fixture::start("launch").await;
    f.keys.sign.store(true, Ordering::SeqCst);
    let v = f
        .ask(json!({"op": "sign_launcher_proof", "method": "GET", "path": "/v1/operator/machines"}))
        .await;
    assert_refused(&v, "SIGN", SIGN);
    let v = f
        .ask(json!({"op": "login_start", "login": "ada@example.com"}))
        .await;
    assert_refused(&v, "SIGN", SIGN);
    let v = f
        .ask(json!({"op": "token_login", "service": "svc", "token": "a-token"}))
        .await;
    assert_refused(&v, "SIGN", SIGN);

    f.keys.sign.store(false, Ordering::SeqCst);
    let v = f
        .ask(json!({"op": "sign_launcher_proof", "method": "GET", "path": "/v1/operator/machines"}))
        .await;
    assert_eq!(v["result"], "proof", "{v}");
    assert_eq!(v["kid"], CREDENTIAL, "{v}");
}
