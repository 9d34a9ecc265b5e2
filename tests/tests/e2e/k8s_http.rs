//! Services and pods end to end: the real broker, started from a configuration file that trusts a
//! token issuer serving OIDC discovery and JWKS on loopback, spoken to over HTTP with real
//! RS256/ES256 ServiceAccount tokens and ES256 launcher and session keys.
//!
//! Token login (minting and extending the service's credential, every refusal, KEY_HOLDS_LIVE_
//! CREDENTIAL, the per-account rate limit), pod enrollment and renewal with `pod_token`, who may
//! end a pod's enrollment, the operator and console routes with a service's login, and a signing
//! key rotated while the broker runs.

use countersign_broker_core::clock::rfc3339;
use countersign_e2e::http::{ADA, BOB, EnrollSpec, Machine, Resp, Session, new_key};
use countersign_e2e::k8s::{
    Issuer, IssuerKey, K8sBroker, K8sConfig, Pod, TokenSpec, discovery_section,
};
use serde_json::{Value, json};

type R = anyhow::Result<()>;

const SERVICE: &str = "payments";
const API: &str = "payments/api";
const WORKER: &str = "payments/worker";
const CRON: &str = "reports/cron";
const INTRUDER: &str = "payments/intruder";
const OWNED: &str = "ADA_SECRET";
const AUTO: &str = "AUTO_TOKEN";

struct World {
    issuer: Issuer,
    key: IssuerKey,
    broker: K8sBroker,
}

impl World {
    async fn start() -> anyhow::Result<Self> {
        Self::start_with(|_| {}).await
    }

    async fn start_with(tune: impl FnOnce(&mut K8sConfig)) -> anyhow::Result<Self> {
        let key = IssuerKey::rsa();
        let issuer = Issuer::start(&[&key]).await?;
        let mut c = K8sConfig {
            token_issuer: Some(discovery_section(&issuer)),
            service_logins: vec![
                (SERVICE.into(), vec![API.into(), WORKER.into()]),
                ("reports".into(), vec![CRON.into()]),
            ],
            secrets: vec![
                (OWNED.into(), ADA.into(), "owner".into()),
                (AUTO.into(), ADA.into(), "automatic".into()),
            ],
            ..Default::default()
        };
        tune(&mut c);
        let broker = K8sBroker::start(c).await?;
        Ok(Self {
            issuer,
            key,
            broker,
        })
    }

    fn now(&self) -> i64 {
        self.broker.now()
    }

    /// A fresh projected token for `account` (ten minutes, the broker's audience).
    fn token(&self, account: &str) -> String {
        self.key.mint(&self.issuer.projected(account, self.now()))
    }

    /// A fresh projected token for `account` bound to `pod`.
    fn pod_token(&self, account: &str, pod: &Pod) -> String {
        self.key.mint(
            &self
                .issuer
                .projected(account, self.now())
                .for_pod(pod.clone()),
        )
    }

    async fn login(
        &self,
        account: &str,
        key: &countersign_proto::SigningKey,
    ) -> anyhow::Result<Resp> {
        self.broker
            .token_login(&self.token(account), key, SERVICE)
            .await
    }

    /// The service logged in as `account` with a fresh key.
    async fn service(&self, account: &str) -> anyhow::Result<Machine> {
        self.broker
            .service_machine(&self.token(account), new_key(), SERVICE)
            .await
    }

    /// A pod enrolled by `m` with its token.
    async fn enroll_pod(&self, m: &Machine, account: &str, pod: &Pod) -> anyhow::Result<Session> {
        let mut spec = EnrollSpec::pod(&pod.uid, None);
        spec.pod_token = Some(self.pod_token(account, pod));
        m.enroll_with(&spec).await
    }

    /// The launcher credential list item for `id`, as any signed-in person sees it.
    async fn listed(&self, id: &str) -> anyhow::Result<Option<Value>> {
        let list = self.broker.conn.credentials(BOB).await?.expect(200);
        Ok(list
            .get("credentials")
            .as_array()
            .and_then(|a| a.iter().find(|c| c["credential_id"] == json!(id)).cloned()))
    }
}

fn at(secs: i64) -> String {
    rfc3339(&chrono::DateTime::from_timestamp(secs, 0).unwrap_or_default())
}

#[tokio::test]
async fn a_token_login_mints_the_service_credential_and_each_login_extends_it() -> R {
    let w = World::start().await?;
    let t0 = w.now();
    let key = new_key();
    let first = w.login(API, &key).await?.expect(200);
    let id = first.s("credential_id");
    assert_eq!(
        first.s("expires_at"),
        at(t0 + 600),
        "the token's own expiry"
    );
    let item = w.listed(&id).await?.expect("listed for anyone signed in");
    assert_eq!(item["host"], json!(API));
    assert_eq!(item["service"], json!(SERVICE));
    assert_eq!(item["subject"], json!("system:serviceaccount:payments:api"));
    assert_eq!(item["approved_by"], json!(""));
    assert_eq!(item["issued_at"], json!(at(t0)));
    assert_eq!(item["expires_at"], json!(at(t0 + 600)));
    assert_eq!(item["expired"], json!(false));

    // Five minutes on, the kubelet's rotated token logs in again: the same credential, issued
    // at the first login, expiring at the new token's expiry.
    w.broker.advance(300);
    let again = w.login(API, &key).await?.expect(200);
    assert_eq!(again.s("credential_id"), id);
    assert_eq!(again.s("expires_at"), at(t0 + 900));
    let item = w.listed(&id).await?.expect("listed");
    assert_eq!(
        (item["issued_at"].clone(), item["expires_at"].clone()),
        (json!(at(t0)), json!(at(t0 + 900)))
    );

    // An hour-long token issued 40 minutes ago: later still, and never past the token's exp.
    let spec = w.issuer.projected(API, t0 - 2400).at(t0 - 2400, 3600);
    let r = w
        .broker
        .token_login(&w.key.mint(&spec), &key, SERVICE)
        .await?
        .expect(200);
    assert_eq!(r.s("expires_at"), at(t0 + 1200));
    // A token issued a little ahead (within the skew) and living an hour: capped to an hour
    // after the login.
    let now = w.now();
    let spec = w.issuer.projected(API, now + 30).at(now + 30, 3600);
    let r = w
        .broker
        .token_login(&w.key.mint(&spec), &key, SERVICE)
        .await?
        .expect(200);
    assert_eq!(r.s("expires_at"), at(now + 3600));
    assert_eq!(r.s("credential_id"), id);

    // Once expired it stays listed only while a session it enrolled runs; the same key then
    // logs in to a new credential.
    w.broker.advance(3601);
    assert!(w.listed(&id).await?.is_none());
    let fresh = w.login(API, &key).await?.expect(200);
    assert_ne!(fresh.s("credential_id"), id);
    Ok(())
}

#[tokio::test]
async fn token_login_refusals() -> R {
    let w = World::start().await?;
    let now = w.now();
    let key = new_key();
    let login = |token: String| {
        let key = &key;
        let b = &w.broker;
        async move { b.token_login(&token, key, SERVICE).await }
    };
    // An account the service-logins setting does not list, or lists for another service.
    login(w.token(INTRUDER))
        .await?
        .refused(403, "ACCOUNT_NOT_LISTED");
    login(w.token(CRON))
        .await?
        .refused(403, "ACCOUNT_NOT_LISTED");
    // The token kubelet mounts by default: a year long.
    let year = TokenSpec::default_mounted(&w.issuer.url, API, Pod::new("api-0"), now);
    login(w.key.mint(&year))
        .await?
        .refused(401, "TOKEN_TOO_LONG_LIVED");
    // Minted for another audience.
    let mut spec = w.issuer.projected(API, now);
    spec.aud = vec!["vault".into()];
    login(w.key.mint(&spec))
        .await?
        .refused(401, "TOKEN_INVALID");
    // Expired.
    let spec = w.issuer.projected(API, now - 700);
    login(w.key.mint(&spec))
        .await?
        .refused(401, "TOKEN_EXPIRED");
    // Forged: a key the issuer does not publish, under its kid; and alg none.
    let forger = IssuerKey::rsa().with_kid(w.key.kid());
    login(forger.mint(&w.issuer.projected(API, now)))
        .await?
        .refused(401, "TOKEN_INVALID");
    let none = w.key.sign_raw(
        &json!({ "alg": "none" }),
        &w.issuer.projected(API, now).claims(),
    );
    let none = format!(
        "{}.",
        none.rsplit_once('.').map(|(a, _)| a).unwrap_or_default()
    );
    login(none).await?.refused(401, "TOKEN_INVALID");
    // A bad login object: REQUEST_INVALID; a body without a token: INVALID_REQUEST.
    let body = json!({ "token": w.token(API), "request": "x.y.z" });
    w.broker
        .conn
        .open("POST", "/v1/launcher-credentials/token", Some(&body))
        .await?
        .refused(400, "REQUEST_INVALID");
    let body = json!({ "request": w.broker.token_login_request(&key, SERVICE) });
    w.broker
        .conn
        .open("POST", "/v1/launcher-credentials/token", Some(&body))
        .await?
        .refused(400, "INVALID_REQUEST");
    Ok(())
}

#[tokio::test]
async fn a_key_holds_one_live_credential() -> R {
    let w = World::start().await?;
    let key = new_key();
    w.login(API, &key).await?.expect(200);
    // Another account of the same service, or another service, with the same key.
    w.login(WORKER, &key)
        .await?
        .refused(409, "KEY_HOLDS_LIVE_CREDENTIAL");
    w.broker
        .token_login(&w.token(CRON), &key, "reports")
        .await?
        .refused(409, "KEY_HOLDS_LIVE_CREDENTIAL");
    // A person's machine's key.
    let person_key = new_key();
    let bytes = person_key.to_pkcs8()?;
    let same = countersign_proto::SigningKey::from_pkcs8(&bytes)?;
    w.broker
        .conn
        .machine_login_with_key(person_key, ADA, "laptop")
        .await?;
    w.login(API, &same)
        .await?
        .refused(409, "KEY_HOLDS_LIVE_CREDENTIAL");
    Ok(())
}

#[tokio::test]
async fn token_logins_are_rate_limited_per_service_account_after_verification() -> R {
    let w = World::start().await?;
    let key = new_key();
    // Tokens that do not verify do not spend the account's quota.
    let forger = IssuerKey::rsa().with_kid(w.key.kid());
    for _ in 0..35 {
        w.broker
            .token_login(
                &forger.mint(&w.issuer.projected(API, w.now())),
                &key,
                SERVICE,
            )
            .await?
            .refused(401, "TOKEN_INVALID");
    }
    for _ in 0..30 {
        w.login(API, &key).await?.expect(200);
    }
    let r = w.login(API, &key).await?;
    r.refused(429, "RATE_LIMITED");
    assert!(r.error().contains("ServiceAccount"), "{}", r.error());
    let retry: u64 = r.header("retry-after").unwrap_or_default().parse()?;
    assert!((1..=60).contains(&retry), "Retry-After {retry}");
    // Another account is not limited by it.
    w.login(WORKER, &new_key()).await?.expect(200);
    // A minute later the account logs in again.
    w.broker.advance(60);
    w.login(API, &key).await?.expect(200);
    Ok(())
}

#[tokio::test]
async fn pods_enroll_with_a_token_naming_their_uid() -> R {
    let w = World::start().await?;
    let m = w.service(API).await?;
    let pod = Pod::new("api-6f7c9-abcde");
    let s = w.enroll_pod(&m, API, &pod).await?;
    let me = s
        .call("GET", "/v1/enrollments/self", None)
        .await?
        .expect(200);
    assert_eq!(
        (me.get("kind"), me.get("operator")),
        (&json!("pod"), &Value::Null)
    );

    let enroll = |runtime: &str, token: String| {
        let mut spec = EnrollSpec::pod(runtime, None);
        spec.pod_token = Some(token);
        let m = &m;
        async move { m.enroll(&spec, &new_key()).await }
    };
    let other = Pod::new("api-6f7c9-zzzzz");
    // A token for another pod.
    enroll(&Pod::new("x").uid, w.pod_token(API, &other))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    // A token of an account not listed for the credential's service, or listed for another.
    enroll(&other.uid, w.pod_token(INTRUDER, &other))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    enroll(&other.uid, w.pod_token(CRON, &other))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    // A token bound to no pod, a default-mounted one, a forged one.
    enroll(&other.uid, w.token(API))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    let year = TokenSpec::default_mounted(&w.issuer.url, API, other.clone(), w.now());
    enroll(&other.uid, w.key.mint(&year))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    let forger = IssuerKey::rsa().with_kid(w.key.kid());
    let forged = forger.mint(&w.issuer.projected(API, w.now()).for_pod(other.clone()));
    enroll(&other.uid, forged)
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    // An expired one.
    let old = w
        .issuer
        .projected(API, w.now() - 700)
        .for_pod(other.clone());
    enroll(&other.uid, w.key.mint(&old))
        .await?
        .refused(403, "POD_TOKEN_EXPIRED");
    // Another account listed for the same service may enroll its own pod.
    enroll(&other.uid, w.pod_token(WORKER, &other))
        .await?
        .expect(201);
    // The same pod again while live.
    enroll(&pod.uid, w.pod_token(API, &pod))
        .await?
        .refused(409, "ALREADY_ENROLLED");

    // A pod enrolled through a person's machine cannot prove a token.
    let ada = w.broker.conn.machine_login(ADA).await?;
    let mut spec = EnrollSpec::pod(&other.uid, None);
    spec.pod_token = Some(w.pod_token(API, &other));
    ada.enroll(&spec, &new_key())
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    Ok(())
}

#[tokio::test]
async fn renewals_need_the_token_once_a_pod_renewed_with_one() -> R {
    let w = World::start().await?;
    let m = w.service(API).await?;
    let pod = Pod::new("api-1");
    let s = w.enroll_pod(&m, API, &pod).await?;
    let path = format!("/v1/enrollments/{}/renew", s.enrollment_id);
    let renew = |token: Option<String>| {
        let (s, path) = (&s, &path);
        async move {
            s.call("POST", path, Some(&json!({ "pod_token": token })))
                .await
        }
    };
    // Not yet renewed with a token: a renewal without one is accepted.
    renew(None).await?.expect(200);
    w.broker.advance(60);
    let r = renew(Some(w.pod_token(API, &pod))).await?.expect(200);
    assert_eq!(r.s("lease_expires_at"), at(w.now() + 15 * 60));
    // From now on the token is required.
    renew(None).await?.refused(403, "POD_TOKEN_REQUIRED");
    s.call("POST", &path, Some(&json!({})))
        .await?
        .refused(403, "POD_TOKEN_REQUIRED");
    // It must name this pod and the account enrolled, and be live.
    renew(Some(w.pod_token(API, &Pod::new("api-2"))))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    renew(Some(w.pod_token(WORKER, &pod)))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    let old = w.issuer.projected(API, w.now() - 700).for_pod(pod.clone());
    renew(Some(w.key.mint(&old)))
        .await?
        .refused(403, "POD_TOKEN_EXPIRED");
    renew(Some(w.pod_token(API, &pod))).await?.expect(200);
    // A pod that never showed a token renews without one.
    let plain = m.enroll_pod(&Pod::new("api-3").uid, Some("web")).await?;
    plain.renew().await?.expect(200);
    Ok(())
}

#[tokio::test]
async fn only_the_enrolling_machine_login_ends_a_pods_enrollment() -> R {
    let w = World::start().await?;
    let (m1, m2) = (w.service(API).await?, w.service(WORKER).await?);
    let ada = w.broker.conn.machine_login(ADA).await?;
    let pod = Pod::new("api-1");
    let s = w.enroll_pod(&m1, API, &pod).await?;
    m2.unenroll(&s.enrollment_id)
        .await?
        .refused(403, "NOT_ENROLLING_CREDENTIAL");
    ada.unenroll(&s.enrollment_id)
        .await?
        .refused(403, "NOT_ENROLLING_CREDENTIAL");
    s.renew().await?.expect(200);
    m1.unenroll(&s.enrollment_id).await?.expect(204);
    s.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    Ok(())
}

#[tokio::test]
async fn a_services_login_has_no_operator_routes_and_anyone_may_revoke_it() -> R {
    let w = World::start().await?;
    let m = w.service(API).await?;
    let pod = Pod::new("api-1");
    let s = w.enroll_pod(&m, API, &pod).await?;
    // Pods are sessions: an automatic secret is granted and released.
    let r = s.request(&[AUTO]).await?.expect(200);
    assert_eq!(r.s("state"), "granted");
    let grant = r.s("grant_id");
    let values = s.values(&grant).await?.expect(200);
    assert!(
        values.get("values")[AUTO]
            .as_str()
            .is_some_and(|v| v.starts_with("v-"))
    );

    // The operator routes are a person's.
    m.operator_machines()
        .await?
        .refused(403, "SERVICE_CREDENTIAL");
    m.operator_grants()
        .await?
        .refused(403, "SERVICE_CREDENTIAL");
    m.operator_revoke_grant(&grant)
        .await?
        .refused(403, "SERVICE_CREDENTIAL");
    m.operator_revoke_machine(&m.credential_id)
        .await?
        .refused(403, "SERVICE_CREDENTIAL");
    // A person's operator route does not reach a service's login.
    let ada = w.broker.conn.machine_login(ADA).await?;
    ada.operator_revoke_machine(&m.credential_id)
        .await?
        .refused(404, "NOT_FOUND");
    let mine = ada.operator_machines().await?.expect(200);
    assert!(
        mine.get("credentials")
            .as_array()
            .is_some_and(|a| a.iter().all(|c| c["service"].is_null()))
    );

    // Anyone signed in sees the service's login and may revoke it; its pods end with it.
    assert!(w.listed(&m.credential_id).await?.is_some());
    let r = w
        .broker
        .conn
        .revoke_credential(&m.credential_id, "someone@example.com")
        .await?
        .expect(200);
    assert_eq!(r.s("state"), "revoked");
    assert!(w.listed(&m.credential_id).await?.is_none());
    s.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    s.values(&grant).await?.refused(401, "PROOF_INVALID");
    m.enroll(&EnrollSpec::pod(&Pod::new("api-2").uid, None), &new_key())
        .await?
        .refused(401, "LAUNCHER_INVALID");
    Ok(())
}

#[tokio::test]
async fn a_signing_key_rotated_while_the_broker_runs_is_fetched() -> R {
    let w = World::start().await?;
    w.login(API, &new_key()).await?.expect(200);
    let fetches = w.issuer.jwks_fetches();
    let rotated = IssuerKey::ec();
    w.issuer.publish(&rotated);
    w.issuer.retire(&w.key);
    let token = rotated.mint(&w.issuer.projected(API, w.now()));
    let key = new_key();
    // Within the refresh interval the unknown kid is refused without a fetch; then fetched.
    w.broker
        .token_login(&token, &key, SERVICE)
        .await?
        .refused(401, "TOKEN_INVALID");
    assert_eq!(w.issuer.jwks_fetches(), fetches);
    w.broker.advance(10);
    w.broker
        .token_login(&token, &key, SERVICE)
        .await?
        .expect(200);
    assert_eq!(w.issuer.jwks_fetches(), fetches + 1);
    // The retired key's tokens no longer verify.
    w.login(API, &new_key())
        .await?
        .refused(401, "TOKEN_INVALID");
    Ok(())
}

#[tokio::test]
async fn the_issuer_may_be_configured_by_jwks_url_or_file() -> R {
    let key = IssuerKey::ec();
    let issuer = Issuer::start(&[&key]).await?;
    let dir = countersign_e2e::http::TempDir::new()?;
    let file = dir.path().join("jwks.json");
    std::fs::write(&file, issuer.jwks_document().to_string())?;
    for source in [
        format!("jwks_url = {:?}", issuer.jwks_url()),
        format!("jwks_file = {:?}", file.display().to_string()),
    ] {
        let b = K8sBroker::start(K8sConfig {
            token_issuer: Some(format!(
                "issuer = {:?}\naudience = {:?}\n{source}",
                issuer.url,
                countersign_e2e::k8s::AUDIENCE
            )),
            service_logins: vec![(SERVICE.into(), vec![API.into()])],
            ..Default::default()
        })
        .await?;
        let token = key.mint(&issuer.projected(API, b.now()));
        b.token_login(&token, &new_key(), SERVICE)
            .await?
            .expect(200);
    }
    assert_eq!(issuer.discovery_fetches(), 0);
    // Two sources, or none, is a configuration error at start.
    for bad in [
        format!("jwks_url = {:?}\ndiscovery = true", issuer.jwks_url()),
        String::new(),
    ] {
        let r = K8sBroker::start(K8sConfig {
            token_issuer: Some(format!(
                "issuer = {:?}\naudience = \"a\"\n{bad}",
                issuer.url
            )),
            ..Default::default()
        })
        .await;
        assert!(r.is_err(), "{bad}");
    }
    Ok(())
}
