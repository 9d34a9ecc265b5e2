//! The `Proof` header (protocol.md §2) on a session route and on a machine-credential route:
//! every way a proof can be wrong is refused (PROOF_INVALID on a session route,
//! LAUNCHER_INVALID on a machine route), and the boundaries are accepted.

use countersign_e2e::http::*;
use countersign_proto::claims;
use countersign_proto::jws::{self, Header};
use countersign_proto::{ProofClaims, SigningKey};
use serde_json::{Value, json};

type R = anyhow::Result<()>;

/// An edit of a proof's claims.
type Edit = Box<dyn Fn(&mut ProofClaims)>;

/// A route under test: the request, a proof of the other kind (correct in every other way),
/// another holder's kid, the code every broken proof gets, and the success status.
struct Target {
    method: &'static str,
    path: String,
    body: Vec<u8>,
    other: String,
    stranger_kid: String,
    code: &'static str,
    ok: u16,
}

/// Who signs the proofs under test.
enum Signer<'a> {
    Session(&'a Session),
    Machine(&'a Machine),
}

impl Signer<'_> {
    fn spec(&self, method: &str, path: &str, body: &[u8]) -> ProofSpec {
        match self {
            Signer::Session(s) => s.proof_spec(method, path, body),
            Signer::Machine(m) => m.proof_spec(method, path, body),
        }
    }
    fn key(&self) -> &SigningKey {
        match self {
            Signer::Session(s) => &s.key,
            Signer::Machine(m) => &m.key,
        }
    }
    fn kid(&self) -> String {
        match self {
            Signer::Session(s) => s.enrollment_id.clone(),
            Signer::Machine(m) => m.credential_id.clone(),
        }
    }
    fn typ(&self) -> &'static str {
        match self {
            Signer::Session(_) => claims::TYP_SESSION_PROOF,
            Signer::Machine(_) => claims::TYP_LAUNCHER_PROOF,
        }
    }
}

/// Every broken proof for `method path body`, by name. `other` is a proof of the other kind
/// (launcher for a session route and vice versa), correct in every other way.
fn broken(tb: &TestBroker, who: &Signer<'_>, t: &Target) -> Vec<(String, Option<String>)> {
    let (method, path, body) = (t.method, t.path.as_str(), t.body.as_slice());
    let (other, stranger_kid) = (t.other.clone(), t.stranger_kid.as_str());
    let key = who.key();
    let spec = || who.spec(method, path, body);
    let claims_value = |c: &ProofClaims| serde_json::to_value(c).expect("claims");
    let sign_value = |h: &Header, c: &Value| jws::sign(key, h, c).expect("sign");
    let now = tb.now_secs();
    let mut out: Vec<(String, Option<String>)> = vec![
        ("no Proof header".into(), None),
        ("empty".into(), Some(String::new())),
        ("garbage".into(), Some("garbage".into())),
        ("three empty parts".into(), Some("..".into())),
        ("the other kind's proof".into(), Some(other)),
    ];
    let mut push = |what: &str, token: String| out.push((what.to_owned(), Some(token)));

    let s = spec();
    push(
        "alg none",
        forged_token(
            &json!({ "alg": "none", "typ": who.typ(), "kid": who.kid() }),
            &claims_value(&s.claims),
        ),
    );
    push(
        "alg HS256",
        forged_token(
            &json!({ "alg": "HS256", "typ": who.typ(), "kid": who.kid() }),
            &claims_value(&s.claims),
        ),
    );
    let mut h = s.header.clone();
    h.typ = "JWT".into();
    push("typ JWT", jws::sign(key, &h, &s.claims).expect("sign"));
    let mut h = s.header.clone();
    h.typ = claims::TYP_SECRET_REQUEST.into();
    push(
        "typ of a request object",
        jws::sign(key, &h, &s.claims).expect("sign"),
    );
    let mut h = s.header.clone();
    h.kid = Some(random_uuid());
    push("unknown kid", jws::sign(key, &h, &s.claims).expect("sign"));
    let mut h = s.header.clone();
    h.kid = Some("not-a-uuid".into());
    push(
        "kid not a uuid",
        jws::sign(key, &h, &s.claims).expect("sign"),
    );
    let mut h = s.header.clone();
    h.kid = Some(stranger_kid.into());
    push(
        "another holder's kid",
        jws::sign(key, &h, &s.claims).expect("sign"),
    );
    push(
        "jwk instead of kid",
        jws::sign(
            key,
            &Header::with_jwk(who.typ(), key.public_jwk()),
            &s.claims,
        )
        .expect("sign"),
    );
    push(
        "kid and crit",
        sign_value(&s.header, &claims_value(&s.claims)).replacen(
            &countersign_proto::b64::encode(
                serde_json::to_string(&s.header).expect("header").as_bytes(),
            ),
            &countersign_proto::b64::encode(
                json!({ "alg": "ES256", "typ": who.typ(), "kid": who.kid(), "crit": ["x"] })
                    .to_string()
                    .as_bytes(),
            ),
            1,
        ),
    );
    push("signed by another key", s.sign(&new_key()));
    let mut bad_sig = s.sign(key);
    let last = bad_sig.pop().map(|c| if c == 'A' { 'B' } else { 'A' });
    bad_sig.extend(last);
    push("signature altered", bad_sig);

    let edits: Vec<(&str, Edit)> = vec![
        (
            "wrong htm",
            Box::new(|c| {
                c.htm = if c.htm == "GET" {
                    "POST".into()
                } else {
                    "GET".into()
                }
            }),
        ),
        ("lower-case htm", Box::new(|c| c.htm = c.htm.to_lowercase())),
        (
            "htu of another path",
            Box::new(|c| c.htu = format!("{}x", c.htu)),
        ),
        (
            "htu of another host",
            Box::new(|c| c.htu = c.htu.replace("127.0.0.1", "localhost")),
        ),
        (
            "htu with a query",
            Box::new(|c| c.htu = format!("{}?a=b", c.htu)),
        ),
        (
            "htu https",
            Box::new(|c| c.htu = c.htu.replace("http://", "https://")),
        ),
        ("iat 61 s old", Box::new(move |c| c.iat = now - 61)),
        ("iat 61 s ahead", Box::new(move |c| c.iat = now + 61)),
        ("empty jti", Box::new(|c| c.jti = String::new())),
        ("jti too long", Box::new(|c| c.jti = "j".repeat(257))),
    ];
    for (what, edit) in edits {
        let mut s = spec();
        edit(&mut s.claims);
        push(what, s.sign(key));
    }
    let s = spec();
    if body.is_empty() {
        let mut c = s.claims.clone();
        c.bh = Some(claims::body_hash(b"{}"));
        push(
            "bh without a body",
            jws::sign(key, &s.header, &c).expect("sign"),
        );
    } else {
        let mut c = s.claims.clone();
        c.bh = None;
        push(
            "bh missing with a body",
            jws::sign(key, &s.header, &c).expect("sign"),
        );
        let mut c = s.claims.clone();
        c.bh = Some(claims::body_hash(b"another body"));
        push(
            "bh of another body",
            jws::sign(key, &s.header, &c).expect("sign"),
        );
        let mut c = s.claims.clone();
        c.bh = Some(claims::body_hash(body).to_lowercase() + "x");
        push("bh malformed", jws::sign(key, &s.header, &c).expect("sign"));
    }
    let mut v = claims_value(&s.claims);
    v["iat"] = json!(now.to_string());
    push("iat a string", sign_value(&s.header, &v));
    let mut v = claims_value(&s.claims);
    v.as_object_mut().map(|o| o.remove("jti"));
    push("jti missing", sign_value(&s.header, &v));
    let mut v = claims_value(&s.claims);
    v.as_object_mut().map(|o| o.remove("htu"));
    push("htu missing", sign_value(&s.header, &v));
    out
}

/// Sends each broken proof and expects `code`; then a good proof twice (replay), and the
/// skew boundaries accepted.
async fn check_route(tb: &TestBroker, who: &Signer<'_>, t: Target) -> R {
    let (method, path, body, code, ok) =
        (t.method, t.path.as_str(), t.body.as_slice(), t.code, t.ok);
    for (what, proof) in broken(tb, who, &t) {
        let r = tb.with_proof(method, path, proof.as_deref(), body).await?;
        assert_eq!(
            (r.status, r.code()),
            (401, code),
            "{method} {path}, {what}: {}",
            r.text
        );
        r.refused(401, code);
    }
    // A good proof works once.
    let good = who.spec(method, path, body).sign(who.key());
    tb.with_proof(method, path, Some(&good), body)
        .await?
        .expect(ok);
    tb.with_proof(method, path, Some(&good), body)
        .await?
        .refused(401, code);
    // The same jti in a fresh proof is a replay too.
    let mut again = who.spec(method, path, body);
    let first: ProofClaims = {
        let payload = good.split('.').nth(1).expect("payload");
        serde_json::from_slice(&countersign_proto::b64::decode(payload)?)?
    };
    again.claims.jti = first.jti;
    again.claims.iat += 1;
    tb.with_proof(method, path, Some(&again.sign(who.key())), body)
        .await?
        .refused(401, code);
    Ok(())
}

/// `iat` exactly 60 s either side is accepted (GET routes, where success is repeatable).
async fn skew_boundaries(tb: &TestBroker, who: &Signer<'_>, path: &str) -> R {
    for d in [-60, 60] {
        let mut s = who.spec("GET", path, b"");
        s.claims.iat += d;
        tb.with_proof("GET", path, Some(&s.sign(who.key())), b"")
            .await?
            .expect(200);
    }
    Ok(())
}

#[tokio::test]
async fn session_routes_refuse_every_broken_proof() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let stranger = m.enroll_session("stranger").await?;
    let who = Signer::Session(&s);

    let path = "/v1/enrollments/self";
    let other = m.launcher_proof("GET", path, b"");
    check_route(
        &tb,
        &who,
        Target {
            method: "GET",
            path: path.to_owned(),
            body: Vec::new(),
            other,
            stranger_kid: stranger.enrollment_id.clone(),
            code: "PROOF_INVALID",
            ok: 200,
        },
    )
    .await?;
    skew_boundaries(&tb, &who, path).await?;

    let body = serde_json::to_vec(&json!({ "request": s.secret_request(&[AUTO], "why", None) }))?;
    let other = m.launcher_proof("POST", "/v1/requests", &body);
    check_route(
        &tb,
        &who,
        Target {
            method: "POST",
            path: "/v1/requests".to_owned(),
            body: body.clone(),
            other,
            stranger_kid: stranger.enrollment_id.clone(),
            code: "PROOF_INVALID",
            ok: 200,
        },
    )
    .await?;

    // The renew route gives PROOF_INVALID for a broken proof too (ENROLLMENT_NOT_LIVE only
    // for an ended enrollment).
    let path = format!("/v1/enrollments/{}/renew", s.enrollment_id);
    let other = m.launcher_proof("POST", &path, b"");
    check_route(
        &tb,
        &who,
        Target {
            method: "POST",
            path: path.clone(),
            body: Vec::new(),
            other,
            stranger_kid: stranger.enrollment_id.clone(),
            code: "PROOF_INVALID",
            ok: 200,
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn machine_routes_refuse_every_broken_proof() -> R {
    let tb = TestBroker::start().await?;
    let m = tb.machine_login(ADA).await?;
    let stranger = tb.machine_login(BOB).await?;
    let s = m.enroll_session("rt").await?;
    let who = Signer::Machine(&m);

    let path = "/v1/operator/machines";
    let other = s.proof("GET", path, b"");
    check_route(
        &tb,
        &who,
        Target {
            method: "GET",
            path: path.to_owned(),
            body: Vec::new(),
            other,
            stranger_kid: stranger.credential_id.clone(),
            code: "LAUNCHER_INVALID",
            ok: 200,
        },
    )
    .await?;
    skew_boundaries(&tb, &who, path).await?;

    let body = serde_json::to_vec(&EnrollSpec::session("new-rt").body(&new_key()))?;
    let other = s.proof("POST", "/v1/enrollments", &body);
    check_route(
        &tb,
        &who,
        Target {
            method: "POST",
            path: "/v1/enrollments".to_owned(),
            body: body.clone(),
            other,
            stranger_kid: stranger.credential_id.clone(),
            code: "LAUNCHER_INVALID",
            ok: 201,
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_proof_is_bound_to_the_configured_public_url_and_the_path_as_sent() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    // Reached as localhost, the broker still checks htu against its public URL (127.0.0.1).
    let port = tb.base_url.rsplit(':').next().expect("port");
    let proof = s.proof("GET", "/v1/enrollments/self", b"");
    let r = tb
        .client
        .get(format!("http://localhost:{port}/v1/enrollments/self"))
        .header("proof", &proof)
        .send()
        .await?;
    assert_eq!(
        r.status().as_u16(),
        200,
        "htu names the public URL, not the Host header"
    );
    // The query is not part of htu.
    let proof = s.proof("GET", "/v1/enrollments/self", b"");
    tb.with_proof("GET", "/v1/enrollments/self?x=1", Some(&proof), b"")
        .await?
        .expect(200);
    Ok(())
}

#[tokio::test]
async fn proofs_of_ended_enrollments_and_revoked_credentials_are_refused() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    m.unenroll(&s.enrollment_id).await?.expect(204);
    let r = s.describe().await?;
    r.refused(401, "PROOF_INVALID");
    tb.revoke_credential(&m.credential_id, ADA)
        .await?
        .expect(200);
    m.operator_machines()
        .await?
        .refused(401, "LAUNCHER_INVALID");
    Ok(())
}

/// Sends `proof` for `GET /v1/enrollments/self` to `tb`.
async fn describe_with(tb: &TestBroker, proof: &str) -> anyhow::Result<Resp> {
    tb.conn
        .send_with(
            &tb.conn.client,
            "GET",
            "/v1/enrollments/self",
            &[("proof", proof)],
            None,
        )
        .await
}

/// `s`, talking to `tb`.
fn on(tb: &TestBroker, s: &Session) -> anyhow::Result<Session> {
    Ok(Session {
        key: SigningKey::from_pkcs8(&s.key.to_pkcs8()?)?,
        enrollment_id: s.enrollment_id.clone(),
        credential_id: s.credential_id.clone(),
        conn: tb.conn.clone(),
    })
}

/// How many `jti`s of sessions the database holds, and how many proof horizons.
async fn stored_once_values(tb: &TestBroker) -> anyhow::Result<(i64, i64)> {
    use sqlx::{Connection, Row};
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&tb.database_url).await?;
    let row = sqlx::query(
        "SELECT \
           (SELECT COUNT(*) FROM once_values WHERE scope LIKE 'session:%') AS jtis, \
           (SELECT COUNT(*) FROM once_values WHERE scope = 'proof-horizon') AS horizons",
    )
    .fetch_one(&mut c)
    .await?;
    Ok((row.try_get("jtis")?, row.try_get("horizons")?))
}

/// A proof accepted by a SQLite broker, replayed to the same broker after a crash (its
/// server gone without a graceful stop, a new one started on the same database file with empty
/// memory), is refused: its `iat` is not after the proof horizon the first process recorded,
/// and the broker cannot tell it from an honest one, so it answers 503 (ask again) rather than
/// 401. So is a fresh proof signed in that second (the price of keeping `jti`s in memory); once
/// the clock is past the horizon, fresh proofs are accepted.
#[tokio::test]
async fn a_proof_replayed_after_a_crash_is_refused() -> R {
    let mut before = TestBroker::start().await?;
    assert!(before.database_url.starts_with("sqlite:"));
    let (_machine, session) = before.session_of(ADA).await?;
    let proof = session.proof("GET", "/v1/enrollments/self", b"");
    describe_with(&before, &proof).await?.expect(200);
    before.crash().await;

    let after = TestBroker::builder().replica_of(&before).start().await?;
    // The first process kept its jti in memory alone: the second cannot tell the replay from
    // an honest proof signed just before the crash. Refused, but as undecided (503, ask again
    // with a fresh proof), not blamed on the client (issue 50).
    let replayed = describe_with(&after, &proof).await?;
    replayed.refused(503, "DATABASE_UNAVAILABLE");
    assert_eq!(replayed.header("retry-after"), Some("1"));
    assert!(
        replayed
            .error()
            .contains("cannot yet tell this proof from a replay"),
        "{}",
        replayed.error()
    );
    // Once the database holds it, the same proof is a replay the broker knows: 401.
    describe_with(&after, &proof)
        .await?
        .refused(401, "PROOF_INVALID");
    // Signed in the second the first process may still have accepted proofs in: undecided.
    let same_second = session.proof("GET", "/v1/enrollments/self", b"");
    describe_with(&after, &same_second)
        .await?
        .refused(503, "DATABASE_UNAVAILABLE");
    // The session itself survived the restart: a fresh proof past the horizon is accepted.
    after.advance(chrono::Duration::seconds(2));
    let fresh = session.proof("GET", "/v1/enrollments/self", b"");
    describe_with(&after, &fresh).await?.expect(200);
    describe_with(&after, &fresh)
        .await?
        .refused(401, "PROOF_INVALID");
    after.shutdown().await;
    before.shutdown().await;
    Ok(())
}

/// After a graceful stop the successor pays nothing for the memory its predecessor kept: the
/// predecessor wrote its live `jti`s through and released its horizon, so a replayed proof is
/// refused by the database, and a fresh proof signed in the same second is accepted.
#[tokio::test]
async fn after_a_graceful_stop_a_replay_is_refused_and_fresh_proofs_pass_at_once() -> R {
    let mut before = TestBroker::start().await?;
    let (_machine, session) = before.session_of(ADA).await?;
    let proof = session.proof("GET", "/v1/enrollments/self", b"");
    describe_with(&before, &proof).await?.expect(200);
    assert_eq!(
        stored_once_values(&before).await?.0,
        0,
        "a proof was written through before the stop"
    );
    before.stop().await;
    assert!(
        stored_once_values(&before).await?.0 >= 1,
        "the graceful stop did not write the live jtis through"
    );

    let after = TestBroker::builder().replica_of(&before).start().await?;
    let replayed = describe_with(&after, &proof).await?;
    replayed.refused(401, "PROOF_INVALID");
    assert!(
        replayed.error().contains("replayed"),
        "{}",
        replayed.error()
    );
    // The same second, on the same clock: accepted, the horizon having been released.
    let same_second = session.proof("GET", "/v1/enrollments/self", b"");
    describe_with(&after, &same_second).await?.expect(200);
    after.shutdown().await;
    before.shutdown().await;
    Ok(())
}

/// Proof `jti`s cost no database write on SQLite: after many proof-verified reads the database
/// holds no session `jti`, only the proof horizon. And a proof accepted on memory alone by a
/// second process (past its write-through minute) is still refused by a third, each process
/// having crashed rather than stopped.
#[tokio::test]
async fn proof_jtis_stay_in_memory_and_their_replay_is_refused_after_each_restart() -> R {
    let mut first = TestBroker::start().await?;
    let (_machine, session) = first.session_of(ADA).await?;
    for i in 0..20 {
        if i % 5 == 0 {
            first.advance(chrono::Duration::seconds(1));
        }
        session.describe().await?.expect(200);
    }
    let (jtis, horizons) = stored_once_values(&first).await?;
    assert_eq!(jtis, 0, "session jtis were written to the database");
    assert!(horizons >= 1, "no proof horizon recorded");
    first.crash().await;

    let mut second = TestBroker::builder().replica_of(&first).start().await?;
    let session = on(&second, &session)?;
    // Within the skew after the first process's horizon, proofs are written through (the
    // first may have written such a proof through); past it, memory alone.
    second.advance(chrono::Duration::seconds(2));
    session.describe().await?.expect(200);
    let (jtis_near_floor, _) = stored_once_values(&second).await?;
    assert_eq!(
        jtis_near_floor, 1,
        "a proof near the floor is written through"
    );
    second.advance(chrono::Duration::seconds(70));
    let proof = session.proof("GET", "/v1/enrollments/self", b"");
    describe_with(&second, &proof).await?.expect(200);
    assert_eq!(
        stored_once_values(&second).await?.0,
        1,
        "a proof past the write-through minute is remembered in memory only"
    );
    second.crash().await;

    let third = TestBroker::builder().replica_of(&first).start().await?;
    // Refused: undecided (503) the first time, the second process's memory being gone; a
    // replay the database knows from then on (401).
    let replayed = describe_with(&third, &proof).await?;
    replayed.refused(503, "DATABASE_UNAVAILABLE");
    describe_with(&third, &proof)
        .await?
        .refused(401, "PROOF_INVALID");
    third.shutdown().await;
    second.shutdown().await;
    first.shutdown().await;
    Ok(())
}

/// A proof dated ahead of the broker's clock (within the skew) is written through, and its
/// replay to a broker restarted after a crash, past the first process's horizon, is refused by
/// the database.
#[tokio::test]
async fn a_proof_dated_ahead_replayed_after_a_restart_is_refused() -> R {
    let mut before = TestBroker::start().await?;
    let (_machine, session) = before.session_of(ADA).await?;
    let mut spec = session.proof_spec("GET", "/v1/enrollments/self", b"");
    spec.claims.iat += 40;
    let ahead = spec.sign(&session.key);
    describe_with(&before, &ahead).await?.expect(200);
    assert_eq!(stored_once_values(&before).await?.0, 1, "written through");
    before.crash().await;

    let after = TestBroker::builder().replica_of(&before).start().await?;
    let session = on(&after, &session)?;
    // Past the floor, and the proof's `iat` within the second process's own horizon: neither
    // the floor nor the horizon would write it through, only the minute after the floor.
    after.advance(chrono::Duration::seconds(45));
    let replayed = describe_with(&after, &ahead).await?;
    replayed.refused(401, "PROOF_INVALID");
    assert!(
        replayed.error().contains("replayed"),
        "{}",
        replayed.error()
    );
    // While a fresh proof is accepted.
    session.describe().await?.expect(200);
    after.shutdown().await;
    before.shutdown().await;
    Ok(())
}
