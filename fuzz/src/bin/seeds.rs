//! Writes the seed corpus (`fuzz/corpus/<target>/seed-*`): valid inputs of every shape, real
//! ES256 tokens signed with the fixed fuzz key. Run once (`cargo run --bin seeds` in `fuzz/`)
//! and commit the files; libFuzzer adds what it finds beside them.

use std::path::Path;

use countersign_fuzz::checks::{ENROLLMENT_KID, PUBLIC_URL, fixed_key, sign_raw};
use countersign_proto::claims::{self, AuthorizationDetail};
use countersign_proto::{Header, b64};
use serde_json::json;

fn write(target: &str, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(format!("seed-{name}")), bytes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let key = fixed_key().ok_or("the fixed key does not load")?;
    let now = 1_750_000_000_i64;
    let proof = json!({"htm": "POST", "htu": claims::htu(PUBLIC_URL, "/v1/requests"),
        "iat": now, "jti": "6a1f0b7e", "bh": claims::body_hash(b"{}")});
    let request = json!({"iat": now, "exp": now + 60, "jti": "r-1", "aud": PUBLIC_URL,
        "authorization_details": [AuthorizationDetail::agent_secret("GITHUB_TOKEN")],
        "reason": "deploy", "lifetime_seconds": 900});
    let login = json!({"iat": now, "exp": now + 60, "jti": "l-1",
        "login_hint": "ada@example.com", "host": "build-7"});
    let token_login = json!({"iat": now, "exp": now + 60, "jti": "t-1",
        "authorization_details": [AuthorizationDetail::launcher_credential("payments")]});

    // jws: whole tokens, by kid and by embedded jwk.
    let kid = Header::with_kid(claims::TYP_SESSION_PROOF, ENROLLMENT_KID);
    let embedded = Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk());
    let t = sign_raw(&kid, &serde_json::to_vec(&proof)?).ok_or("sign")?;
    write("jws", "proof-kid", t.as_bytes())?;
    let t = sign_raw(&embedded, &serde_json::to_vec(&login)?).ok_or("sign")?;
    write("jws", "machine-login-jwk", t.as_bytes())?;
    let t = sign_raw(&kid, &serde_json::to_vec(&request)?).ok_or("sign")?;
    write("jws", "secret-request", t.as_bytes())?;

    // proof: claim sets.
    write("proof", "with-body", &serde_json::to_vec(&proof)?)?;
    let get =
        json!({"htm": "GET", "htu": claims::htu(PUBLIC_URL, "/v1/grants"), "iat": now, "jti": "x"});
    write("proof", "no-body", &serde_json::to_vec(&get)?)?;

    // request_object: a selector byte, then a claim set.
    for (sel, name, claims) in [
        (0u8, "machine-login", &login),
        (1, "token-login", &token_login),
        (2, "secret-request", &request),
    ] {
        let mut bytes = vec![sel];
        bytes.extend(serde_json::to_vec(claims)?);
        write("request_object", name, &bytes)?;
    }

    // k8s_token: a selector byte, then a token, a claim set or a JWKS.
    let sa = json!({"iss": "https://kubernetes.default.svc.cluster.local", "aud": ["countersign"],
        "sub": "system:serviceaccount:payments:api", "iat": now - 60, "exp": now + 600,
        "nbf": now - 60, "kubernetes.io": {"namespace": "payments",
        "serviceaccount": {"name": "api", "uid": "5f0c3b7a-1d2e-4f3a-8b9c-0d1e2f3a4b5c"},
        "pod": {"name": "api-7d9f", "uid": "8e1d2c3b-4a5f-4e6d-9c8b-7a6f5e4d3c2b"}}});
    let k8s_header = json!({"alg": "ES256", "kid": "k1"});
    let input = format!(
        "{}.{}",
        b64::encode(&serde_json::to_vec(&k8s_header)?),
        b64::encode(&serde_json::to_vec(&sa)?)
    );
    let sig = key.sign(input.as_bytes())?;
    let mut bytes = vec![0u8];
    bytes.extend(format!("{input}.{}", b64::encode(&sig)).into_bytes());
    write("k8s_token", "token", &bytes)?;
    let mut bytes = vec![1u8];
    bytes.extend(serde_json::to_vec(&sa)?);
    write("k8s_token", "claims", &bytes)?;
    let mut jwk = serde_json::to_value(key.public_jwk())?;
    if let Some(o) = jwk.as_object_mut() {
        o.insert("kid".into(), json!("k1"));
        o.insert("alg".into(), json!("ES256"));
        o.insert("use".into(), json!("sig"));
    }
    let mut bytes = vec![2u8];
    bytes.extend(serde_json::to_vec(&json!({"keys": [jwk]}))?);
    write("k8s_token", "jwks", &bytes)?;

    // helper_line: requests as the CLI sends them, several to a connection.
    write("helper_line", "status", b"{\"op\":\"status\"}\n")?;
    write("helper_line", "session", b"{\"op\":\"register\",\"session_id\":\"s-1\",\"wait\":false}\n{\"op\":\"sign_proof\",\"method\":\"GET\",\"path\":\"/v1/grants\"}\r\n{\"op\":\"sign_launcher_proof\",\"method\":\"POST\",\"path\":\"/v1/enrollments\",\"bh\":\"abc\"}\n")?;
    write("helper_line", "login", b"{\"op\":\"login_start\",\"login\":\"ada@example.com\",\"host\":\"build-7\"}\n{\"op\":\"login_poll\"}\n")?;
    write("helper_line", "sign-request", b"{\"op\":\"sign_request\",\"secrets\":[\"GITHUB_TOKEN\"],\"reason\":\"deploy\",\"lifetime_seconds\":900}\n")?;

    // json_body: the routes' bodies.
    let enroll = json!({"kind": "session", "runtime_id": "claude-code", "slot": "a",
        "thumbprint": key.thumbprint(), "jwk": key.public_jwk()});
    write("json_body", "enroll", &serde_json::to_vec(&enroll)?)?;
    write(
        "json_body",
        "request",
        br#"{"request":"eyJh.eyJi.c2ln","session_id":"0193b6a4-7c1e-7d2a-9f3b-2a4c5e6f7a8b"}"#,
    )?;
    write(
        "json_body",
        "token-login",
        br#"{"token":"a.b.c","request":"d.e.f"}"#,
    )?;
    write(
        "json_body",
        "decision",
        br#"{"approver":"ada@example.com","code":"ABCD-1234"}"#,
    )?;
    write("json_body", "renew", br#"{"pod_token":"a.b.c"}"#)?;
    Ok(())
}
