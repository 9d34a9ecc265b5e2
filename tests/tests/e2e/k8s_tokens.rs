//! The ServiceAccount token verifier against a real issuer over HTTP on loopback: OIDC discovery,
//! JWKS by URL and from a file, RS256 and ES256 tokens with the claim layout of real projected
//! tokens, every refusal, key rotation with a rate-limited refresh, and an issuer that is down
//! or never answers.

use chrono::TimeZone;
use countersign_broker_core::clock::Time;
use countersign_broker_core::{ErrorCode, ServiceAccountToken};
use countersign_e2e::k8s::{AUDIENCE, Issuer, IssuerKey, Pod, TokenSpec, black_hole};
use countersign_k8s_tokens::{JwksSource, K8sTokenVerifier, VerifierConfig};
use serde_json::json;

type R = anyhow::Result<()>;

const ACCOUNT: &str = "payments/api";

fn t0() -> Time {
    chrono::Utc
        .with_ymd_and_hms(2031, 3, 4, 5, 6, 7)
        .single()
        .unwrap_or_default()
}

fn secs(n: i64) -> chrono::Duration {
    chrono::Duration::seconds(n)
}

fn verifier(issuer: &Issuer, source: JwksSource) -> anyhow::Result<K8sTokenVerifier> {
    let mut c = VerifierConfig::new(&issuer.url, AUDIENCE, source);
    c.timeout = std::time::Duration::from_secs(2);
    Ok(K8sTokenVerifier::new(c)?)
}

async fn code(v: &K8sTokenVerifier, token: &str, now: Time) -> Option<ErrorCode> {
    v.verify_token(token, now).await.err().map(|e| e.code)
}

async fn accepted(v: &K8sTokenVerifier, token: &str, now: Time) -> ServiceAccountToken {
    match v.verify_token(token, now).await {
        Ok(sa) => sa,
        Err(e) => panic!("token refused: {e}"),
    }
}

#[tokio::test]
async fn rs256_and_es256_projected_tokens_verify_through_discovery() -> R {
    let (rsa, ec) = (IssuerKey::rsa(), IssuerKey::ec());
    let issuer = Issuer::start(&[&rsa, &ec]).await?;
    let v = verifier(&issuer, JwksSource::Discovery)?;
    let now = t0().timestamp();
    let pod = Pod::new("api-7d9f8b6c5-x2x9q");
    for key in [&rsa, &ec] {
        let spec = issuer.projected(ACCOUNT, now).for_pod(pod.clone());
        let sa = accepted(&v, &key.mint(&spec), t0()).await;
        assert_eq!(sa.account(), ACCOUNT);
        assert_eq!(sa.namespace, "payments");
        assert_eq!(sa.name, "api");
        assert_eq!(sa.subject, "system:serviceaccount:payments:api");
        assert_eq!(sa.pod_uid.as_deref(), Some(pod.uid.as_str()));
        assert_eq!(sa.expires_at.timestamp(), now + 600);
    }
    // A token bound to no pod (a launcher's own projected token) names no pod.
    let sa = accepted(&v, &rsa.mint(&issuer.projected(ACCOUNT, now)), t0()).await;
    assert_eq!(sa.pod_uid, None);
    // `aud` as a single string, and among other audiences.
    let mut spec = issuer.projected(ACCOUNT, now);
    spec.aud = vec!["vault".into(), AUDIENCE.into()];
    accepted(&v, &ec.mint(&spec), t0()).await;
    // One discovery and one JWKS fetch served all of these: the keys are cached.
    assert_eq!((issuer.discovery_fetches(), issuer.jwks_fetches()), (1, 1));
    Ok(())
}

#[tokio::test]
async fn every_refusal_has_its_code() -> R {
    let (rsa, ec) = (IssuerKey::rsa(), IssuerKey::ec());
    let issuer = Issuer::start(&[&rsa, &ec]).await?;
    let v = verifier(&issuer, JwksSource::Discovery)?;
    let now = t0().timestamp();
    let good = || issuer.projected(ACCOUNT, now).for_pod(Pod::new("api-0"));
    use ErrorCode::*;

    // A default-mounted token: a year long, the API server's audience.
    let year = TokenSpec::default_mounted(&issuer.url, ACCOUNT, Pod::new("api-0"), now);
    assert_eq!(
        code(&v, &rsa.mint(&year), t0()).await,
        Some(TOKEN_TOO_LONG_LIVED)
    );
    // A projected token asked for two hours.
    let long = good().at(now, 7200);
    assert_eq!(
        code(&v, &ec.mint(&long), t0()).await,
        Some(TOKEN_TOO_LONG_LIVED)
    );
    // Expired (ten minutes long, issued eleven minutes ago), and at its exp exactly.
    let old = good().at(now - 660, 600);
    assert_eq!(code(&v, &rsa.mint(&old), t0()).await, Some(TOKEN_EXPIRED));
    assert_eq!(
        code(&v, &rsa.mint(&good()), t0() + secs(600)).await,
        Some(TOKEN_EXPIRED)
    );
    // Wrong audience, wrong issuer, not yet valid.
    let mut aud = good();
    aud.aud = vec!["someone-else".into()];
    assert_eq!(code(&v, &rsa.mint(&aud), t0()).await, Some(TOKEN_INVALID));
    let mut iss = good();
    iss.iss = "https://other-cluster.example".into();
    assert_eq!(code(&v, &ec.mint(&iss), t0()).await, Some(TOKEN_INVALID));
    let future = good().at(now + 300, 600);
    assert_eq!(
        code(&v, &rsa.mint(&future), t0()).await,
        Some(TOKEN_INVALID)
    );
    // A sub that disagrees with the kubernetes.io claim.
    let mut claims = good().claims();
    claims["sub"] = json!("system:serviceaccount:payments:admin");
    let t = rsa.sign_raw(&json!({ "alg": "RS256", "kid": rsa.kid() }), &claims);
    assert_eq!(code(&v, &t, t0()).await, Some(TOKEN_INVALID));

    // Forged: signed by a key the issuer does not publish, under a published kid.
    for (forger, real) in [(IssuerKey::rsa(), &rsa), (IssuerKey::ec(), &ec)] {
        let forger = forger.with_kid(real.kid());
        assert_eq!(
            code(&v, &forger.mint(&good()), t0()).await,
            Some(TOKEN_INVALID)
        );
    }
    // A payload swapped under a genuine signature.
    let genuine = rsa.mint(&good());
    let mut parts: Vec<String> = genuine.split('.').map(str::to_owned).collect();
    let mut claims = good().claims();
    claims["kubernetes.io"]["namespace"] = json!("kube-system");
    claims["sub"] = json!("system:serviceaccount:kube-system:api");
    parts[1] = countersign_proto::b64::encode(claims.to_string().as_bytes());
    assert_eq!(code(&v, &parts.join("."), t0()).await, Some(TOKEN_INVALID));
    // alg none (empty signature, or any bytes), and HS256 keyed with the public key (the
    // algorithm-confusion attack).
    let payload = countersign_proto::b64::encode(good().claims().to_string().as_bytes());
    for header in [
        json!({ "alg": "none" }),
        json!({ "alg": "none", "kid": rsa.kid() }),
        json!({ "alg": "HS256", "kid": rsa.kid() }),
        json!({ "alg": "RS256", "kid": rsa.kid(), "crit": ["exp"] }),
    ] {
        let h = countersign_proto::b64::encode(header.to_string().as_bytes());
        let input = format!("{h}.{payload}");
        let hmac = aws_lc_rs::hmac::sign(
            &aws_lc_rs::hmac::Key::new(
                aws_lc_rs::hmac::HMAC_SHA256,
                rsa.jwk().to_string().as_bytes(),
            ),
            input.as_bytes(),
        );
        for sig in [String::new(), countersign_proto::b64::encode(hmac.as_ref())] {
            let t = format!("{input}.{sig}");
            assert_eq!(code(&v, &t, t0()).await, Some(TOKEN_INVALID), "{header}");
        }
    }
    // An ES256 token claiming RS256 and the reverse.
    let t = ec.sign_raw(
        &json!({ "alg": "RS256", "kid": ec.kid() }),
        &good().claims(),
    );
    assert_eq!(code(&v, &t, t0()).await, Some(TOKEN_INVALID));
    // Garbage.
    for t in ["", "a.b.c", "...", "not a token", &"A".repeat(20_000)] {
        assert_eq!(code(&v, t, t0()).await, Some(TOKEN_INVALID), "{t:.20}");
    }
    // The refusals never quote the token.
    let e = v.verify_token(&genuine, t0() + secs(601)).await.err();
    let msg = e.map(|e| e.message().to_owned()).unwrap_or_default();
    assert!(!msg.contains(&genuine[..20]));
    Ok(())
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_the_refresh_interval_allows() -> R {
    let old = IssuerKey::rsa();
    let issuer = Issuer::start(&[&old]).await?;
    let v = verifier(&issuer, JwksSource::Url(issuer.jwks_url()))?;
    let now = t0().timestamp();
    accepted(&v, &old.mint(&issuer.projected(ACCOUNT, now)), t0()).await;
    assert_eq!(issuer.jwks_fetches(), 1);

    // The cluster rotates: a new key signs, the old one is retired.
    let new = IssuerKey::ec();
    issuer.publish(&new);
    issuer.retire(&old);
    let token = new.mint(&issuer.projected(ACCOUNT, now));
    // Within 10 s of the last fetch the unknown kid is refused without asking the issuer...
    assert_eq!(
        code(&v, &token, t0() + secs(5)).await,
        Some(ErrorCode::TOKEN_INVALID)
    );
    assert_eq!(issuer.jwks_fetches(), 1);
    // ...and a flood of made-up kids does not make it ask either.
    for _ in 0..20 {
        let stranger = IssuerKey::ec();
        let t = stranger.mint(&issuer.projected(ACCOUNT, now));
        assert_eq!(
            code(&v, &t, t0() + secs(9)).await,
            Some(ErrorCode::TOKEN_INVALID)
        );
    }
    assert_eq!(issuer.jwks_fetches(), 1);
    // Once the interval has passed, the unknown kid triggers one fetch, and the token verifies.
    let sa = accepted(&v, &token, t0() + secs(10)).await;
    assert_eq!(sa.account(), ACCOUNT);
    assert_eq!(issuer.jwks_fetches(), 2);
    // The retired key no longer verifies (the refreshed set does not hold it), and asking
    // again so soon does not fetch.
    let t = old.mint(&issuer.projected(ACCOUNT, now));
    assert_eq!(
        code(&v, &t, t0() + secs(11)).await,
        Some(ErrorCode::TOKEN_INVALID)
    );
    assert_eq!(issuer.jwks_fetches(), 2);
    Ok(())
}

#[tokio::test]
async fn keys_are_refetched_when_stale_and_kept_when_the_issuer_is_down() -> R {
    let key = IssuerKey::ec();
    let issuer = Issuer::start(&[&key]).await?;
    let v = verifier(&issuer, JwksSource::Discovery)?;
    let now = t0().timestamp();
    accepted(&v, &key.mint(&issuer.projected(ACCOUNT, now)), t0()).await;
    assert_eq!(issuer.jwks_fetches(), 1);
    // An hour later the keys are stale and fetched again before use.
    let later = t0() + chrono::Duration::hours(1);
    let spec = issuer.projected(ACCOUNT, later.timestamp());
    accepted(&v, &key.mint(&spec), later).await;
    assert_eq!(issuer.jwks_fetches(), 2);
    // Another hour, the issuer is down: the stale keys still verify.
    issuer.set_down(true);
    let later = later + chrono::Duration::hours(1);
    let spec = issuer.projected(ACCOUNT, later.timestamp());
    accepted(&v, &key.mint(&spec), later).await;
    // A kid the cache does not know, with the issuer down: unavailable (503), not a verdict
    // on the token.
    let rotated = IssuerKey::rsa();
    let t = rotated.mint(&issuer.projected(ACCOUNT, later.timestamp()));
    let e = v.verify_token(&t, later + secs(30)).await.err();
    assert_eq!(
        e.as_ref().map(|e| e.code),
        Some(ErrorCode::DATABASE_UNAVAILABLE)
    );
    assert!(
        e.is_some_and(|e| e.message().starts_with("token issuer keys:")),
        "names the step"
    );
    // Back up: the rotated key is fetched and verifies.
    issuer.set_down(false);
    issuer.publish(&rotated);
    accepted(&v, &t, later + secs(60)).await;
    Ok(())
}

#[tokio::test]
async fn an_unreachable_or_lying_issuer_is_unavailable_not_a_verdict() -> R {
    let key = IssuerKey::rsa();
    let issuer = Issuer::start(&[&key]).await?;
    let now = t0().timestamp();
    let token = key.mint(&issuer.projected(ACCOUNT, now));

    // Down from the start: nothing cached, 503.
    issuer.set_down(true);
    let v = verifier(&issuer, JwksSource::Discovery)?;
    assert_eq!(
        code(&v, &token, t0()).await,
        Some(ErrorCode::DATABASE_UNAVAILABLE)
    );
    issuer.set_down(false);
    // Within the refresh interval it does not ask again; after it, it does.
    assert_eq!(
        code(&v, &token, t0() + secs(1)).await,
        Some(ErrorCode::DATABASE_UNAVAILABLE)
    );
    accepted(&v, &token, t0() + secs(10)).await;

    // A server that accepts and never answers: the fetch times out (2 s), it does not hang.
    let (url, _hole) = black_hole().await?;
    let mut c = VerifierConfig::new(
        &issuer.url,
        AUDIENCE,
        JwksSource::Url(format!("{url}/jwks")),
    );
    c.timeout = std::time::Duration::from_secs(1);
    let v = K8sTokenVerifier::new(c)?;
    let started = std::time::Instant::now();
    assert_eq!(
        code(&v, &token, t0()).await,
        Some(ErrorCode::DATABASE_UNAVAILABLE)
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));

    // Discovery naming another issuer is not trusted.
    let other = Issuer::start(&[&key]).await?;
    let mut c = VerifierConfig::new(&issuer.url, AUDIENCE, JwksSource::Discovery);
    c.issuer = other.url.clone() + "/"; // the document says other.url, without the slash
    let v = K8sTokenVerifier::new(c)?;
    assert_eq!(v.refresh(t0()).await.ok(), None);
    Ok(())
}

#[tokio::test]
async fn keys_from_a_file_are_reread_on_refresh() -> R {
    let (a, b) = (IssuerKey::rsa(), IssuerKey::ec());
    let issuer = Issuer::start(&[&a]).await?;
    let dir = countersign_e2e::http::TempDir::new()?;
    let path = dir.path().join("jwks.json");
    std::fs::write(&path, issuer.jwks_document().to_string())?;
    let v = verifier(&issuer, JwksSource::File(path.clone()))?;
    assert_eq!(v.refresh(t0()).await.ok(), Some(1));
    let now = t0().timestamp();
    accepted(&v, &a.mint(&issuer.projected(ACCOUNT, now)), t0()).await;
    issuer.publish(&b);
    std::fs::write(&path, issuer.jwks_document().to_string())?;
    accepted(
        &v,
        &b.mint(&issuer.projected(ACCOUNT, now)),
        t0() + secs(10),
    )
    .await;
    assert_eq!(v.key_count(), 2);
    // The file never touched the network.
    assert_eq!(issuer.jwks_fetches(), 0);
    // Configuration mistakes are refused up front.
    assert!(
        K8sTokenVerifier::new(VerifierConfig::new(
            "issuer",
            AUDIENCE,
            JwksSource::Discovery
        ))
        .is_err()
    );
    assert!(
        K8sTokenVerifier::new(VerifierConfig::new(&issuer.url, " ", JwksSource::Discovery))
            .is_err()
    );
    assert!(
        K8sTokenVerifier::new(VerifierConfig::new(
            &issuer.url,
            AUDIENCE,
            JwksSource::Url("file:///etc/jwks".into())
        ))
        .is_err()
    );
    Ok(())
}

#[tokio::test]
async fn keys_may_be_fetched_with_a_bearer_token_reread_each_time() -> R {
    let key = IssuerKey::ec();
    let issuer = Issuer::start(&[&key]).await?;
    issuer.require_bearer(Some("first-token"));
    let dir = countersign_e2e::http::TempDir::new()?;
    let file = dir.path().join("token");
    let now = t0().timestamp();
    let token = key.mint(&issuer.projected(ACCOUNT, now));
    // Without the token the issuer refuses: unavailable.
    let v = verifier(&issuer, JwksSource::Discovery)?;
    assert_eq!(
        code(&v, &token, t0()).await,
        Some(ErrorCode::DATABASE_UNAVAILABLE)
    );
    // With it (trailing newline as a mounted file has it), the keys are fetched.
    std::fs::write(&file, "first-token\n")?;
    let mut c = VerifierConfig::new(&issuer.url, AUDIENCE, JwksSource::Discovery);
    c.bearer_token_file = Some(file.clone());
    let v = K8sTokenVerifier::new(c)?;
    accepted(&v, &token, t0()).await;
    // The file is reread at each fetch (the kubelet rotates it).
    issuer.require_bearer(Some("second-token"));
    std::fs::write(&file, "second-token")?;
    let rotated = IssuerKey::rsa();
    issuer.publish(&rotated);
    accepted(
        &v,
        &rotated.mint(&issuer.projected(ACCOUNT, now)),
        t0() + secs(10),
    )
    .await;
    Ok(())
}
