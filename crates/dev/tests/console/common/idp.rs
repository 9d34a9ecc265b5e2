//! A small OpenID provider on loopback: discovery, JWKS, an authorize endpoint that signs in
//! whoever the test names next (no form), and a token endpoint that checks the client, the
//! redirect URI and PKCE (S256) and issues an ES256 `id_token`. Switches make it misbehave.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use countersign_proto::jws::{self, Header};
use countersign_proto::{SigningKey, b64, claims};
use serde_json::json;

/// How the provider misbehaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Tamper {
    #[default]
    None,
    /// The id_token carries another nonce.
    WrongNonce,
    /// The id_token is signed with a key the JWKS does not hold.
    WrongKey,
    /// The id_token is for another client.
    WrongAudience,
    /// `email_verified` is false.
    Unverified,
}

struct Grant {
    redirect_uri: String,
    challenge: String,
    nonce: String,
    login: String,
}

struct Inner {
    issuer: String,
    key: SigningKey,
    other_key: SigningKey,
    next_login: Mutex<String>,
    redirects: Mutex<Vec<String>>,
    codes: Mutex<HashMap<String, Grant>>,
    tamper: Mutex<Tamper>,
    pkce_checked: AtomicUsize,
}

pub struct TestIdp {
    pub issuer: String,
    inner: Arc<Inner>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for TestIdp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

const KID: &str = "test-key-1";

impl TestIdp {
    pub async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let issuer = format!("http://{}", listener.local_addr()?);
        let inner = Arc::new(Inner {
            issuer: issuer.clone(),
            key: SigningKey::generate()?,
            other_key: SigningKey::generate()?,
            next_login: Mutex::new(String::new()),
            redirects: Mutex::new(Vec::new()),
            codes: Mutex::new(HashMap::new()),
            tamper: Mutex::new(Tamper::None),
            pkce_checked: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .route("/authorize", get(authorize))
            .route("/token", post(token))
            .with_state(inner.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self {
            issuer,
            inner,
            server,
        })
    }

    pub fn set_next_login(&self, email: &str) {
        *self
            .inner
            .next_login
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = email.to_owned();
    }

    pub fn register_redirect(&self, uri: &str) {
        self.inner
            .redirects
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(uri.to_owned());
    }

    pub fn tamper(&self, t: Tamper) {
        *self.inner.tamper.lock().unwrap_or_else(|e| e.into_inner()) = t;
    }

    /// How many code exchanges passed the PKCE check.
    pub fn pkce_checked(&self) -> usize {
        self.inner.pkce_checked.load(Ordering::SeqCst)
    }
}

type St = State<Arc<Inner>>;

async fn discovery(State(i): St) -> Response {
    Json(json!({
        "issuer": i.issuer,
        "authorization_endpoint": format!("{}/authorize", i.issuer),
        "token_endpoint": format!("{}/token", i.issuer),
        "jwks_uri": format!("{}/jwks", i.issuer),
        "response_types_supported": ["code"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["ES256"],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["openid", "email", "profile"],
        "token_endpoint_auth_methods_supported": ["client_secret_basic"],
    }))
    .into_response()
}

async fn jwks(State(i): St) -> Response {
    let k = i.key.public_jwk();
    Json(json!({ "keys": [{
        "kty": k.kty, "crv": k.crv, "x": k.x, "y": k.y, "kid": KID, "use": "sig", "alg": "ES256"
    }]}))
    .into_response()
}

fn bad(msg: &str) -> Response {
    (
        StatusCode::BAD_REQUEST,
        Json(json!({ "error": "invalid_request", "error_description": msg })),
    )
        .into_response()
}

async fn authorize(State(i): St, Query(q): Query<HashMap<String, String>>) -> Response {
    let get = |k: &str| q.get(k).cloned().unwrap_or_default();
    if get("response_type") != "code" || get("client_id") != super::CLIENT_ID {
        return bad("response_type or client_id");
    }
    if !get("scope").split(' ').any(|s| s == "openid") {
        return bad("scope lacks openid");
    }
    if get("code_challenge_method") != "S256" || get("code_challenge").is_empty() {
        return bad("PKCE S256 is required");
    }
    let redirect = get("redirect_uri");
    if !i
        .redirects
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&redirect)
    {
        return bad("redirect_uri not registered");
    }
    let code = uuid::Uuid::new_v4().simple().to_string();
    i.codes.lock().unwrap_or_else(|e| e.into_inner()).insert(
        code.clone(),
        Grant {
            redirect_uri: redirect.clone(),
            challenge: get("code_challenge"),
            nonce: get("nonce"),
            login: i
                .next_login
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        },
    );
    let mut url = match url::Url::parse(&redirect) {
        Ok(u) => u,
        Err(_) => return bad("redirect_uri"),
    };
    url.query_pairs_mut()
        .append_pair("code", &code)
        .append_pair("state", &get("state"));
    (StatusCode::FOUND, [(header::LOCATION, url.to_string())]).into_response()
}

async fn token(
    State(i): St,
    headers: HeaderMap,
    Form(f): Form<HashMap<String, String>>,
) -> Response {
    use base64::Engine;
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!(
            "{}:{}",
            super::CLIENT_ID,
            super::CLIENT_SECRET
        ))
    );
    if headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        != Some(expected.as_str())
    {
        return (
            StatusCode::UNAUTHORIZED,
            Json(json!({ "error": "invalid_client" })),
        )
            .into_response();
    }
    let get = |k: &str| f.get(k).cloned().unwrap_or_default();
    if get("grant_type") != "authorization_code" {
        return bad("grant_type");
    }
    let Some(g) = i
        .codes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&get("code"))
    else {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": "invalid_grant" })),
        )
            .into_response();
    };
    if g.redirect_uri != get("redirect_uri") {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": "invalid_grant" })),
        )
            .into_response();
    }
    if claims::body_hash(get("code_verifier").as_bytes()) != g.challenge {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({ "error": "invalid_grant", "error_description": "PKCE" })),
        )
            .into_response();
    }
    i.pkce_checked.fetch_add(1, Ordering::SeqCst);
    let tamper = *i.tamper.lock().unwrap_or_else(|e| e.into_inner());
    let now = chrono::Utc::now().timestamp();
    let c = json!({
        "iss": i.issuer,
        "sub": format!("sub-{}", b64::encode(g.login.as_bytes())),
        "aud": if tamper == Tamper::WrongAudience { "someone-else" } else { super::CLIENT_ID },
        "iat": now,
        "exp": now + 300,
        "nonce": if tamper == Tamper::WrongNonce { "not-the-nonce".to_owned() } else { g.nonce },
        "email": g.login,
        "email_verified": tamper != Tamper::Unverified,
    });
    let key = if tamper == Tamper::WrongKey {
        &i.other_key
    } else {
        &i.key
    };
    let Ok(id_token) = jws::sign(key, &Header::with_kid("JWT", KID), &c) else {
        return (StatusCode::INTERNAL_SERVER_ERROR, "sign").into_response();
    };
    Json(json!({
        "access_token": uuid::Uuid::new_v4().simple().to_string(),
        "token_type": "Bearer",
        "expires_in": 300,
        "id_token": id_token,
    }))
    .into_response()
}
