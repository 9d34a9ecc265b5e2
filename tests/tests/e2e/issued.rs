//! Dynamic secrets through the core (issue 49), on real SQLite and PostgreSQL storage, with the
//! real PostgreSQL issuer making login roles on the test server: a credential minted at the
//! first release and the same one answered after, every end destroying it (a login with it then
//! fails), a failed mint leaving nothing, a crash between the issuer's call and the release
//! destroyed by the end, the orphan sweep, two destroyers racing, and the audit chain naming
//! mint and destroy.

use std::sync::Arc;

use chrono::Duration;
use countersign_broker_core::broker::IssuedSecret;
use countersign_broker_core::issuer::{Issued, IssuedState, Issuer, credential_name};
use countersign_broker_core::policy::Tier;
use countersign_broker_core::{ErrorCode, Storage};
use countersign_e2e::core::{CoreFixture, Session, login, secret};
use countersign_issuer_postgres::{PostgresIssuer, PostgresIssuerConfig};
use sqlx::Connection;
use zeroize::Zeroizing;

const SECRET: &str = "APP_DB";

fn admin_url() -> Option<String> {
    std::env::var("COUNTERSIGN_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty())
}

/// An issuer on the test server with a prefix of its own (the server's admin makes the roles).
fn issuer(roles: Vec<String>) -> Option<(Arc<PostgresIssuer>, String)> {
    let url = admin_url()?;
    let prefix = format!("cst{}_", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let mut c = PostgresIssuerConfig::new(roles);
    c.prefix = prefix.clone();
    let i = PostgresIssuer::new(c, Zeroizing::new(url)).expect("issuer");
    Some((Arc::new(i), prefix))
}

async fn declare(f: &CoreFixture, issuer: Arc<PostgresIssuer>, tier: Tier) {
    f.broker.set_issued_secrets([IssuedSecret {
        name: secret(SECRET),
        owner: login("owner@x.io"),
        tier,
        issuer,
    }]);
    f.reload().await;
}

/// A session holding an automatic grant of the issued secret: (session, machine, grant).
async fn granted(
    f: &CoreFixture,
) -> (
    Session,
    countersign_e2e::core::Machine,
    countersign_broker_core::ids::GrantId,
) {
    let m = f.machine_login(&login("dev@x.io"), "vm").await;
    let s = f.enroll(&m, "pid-1").await.expect("enroll");
    let r = f.request(&s, &[SECRET], Some(600)).await.expect("request");
    let g = r.request.grant_id.expect("granted at once");
    (s, m, g)
}

async fn can_log_in(url: &str) -> bool {
    match sqlx::PgConnection::connect(url).await {
        Ok(c) => {
            let _ = c.close().await;
            true
        }
        Err(_) => false,
    }
}

async fn value(f: &CoreFixture, s: &Session, g: countersign_broker_core::ids::GrantId) -> String {
    let v = f.values(s, g).await.expect("values");
    v.into_iter()
        .find(|(n, _)| n == SECRET)
        .map(|(_, v)| v)
        .expect("the issued secret's value")
}

async fn row(f: &CoreFixture, g: countersign_broker_core::ids::GrantId) -> Issued {
    f.broker
        .issued_of(g)
        .await
        .expect("read")
        .into_iter()
        .next()
        .expect("a credential row")
}

async fn audit_kinds(f: &CoreFixture, g: countersign_broker_core::ids::GrantId) -> Vec<String> {
    let mut tx = f.storage.read().await.expect("read");
    let subject = format!("grant:{g}");
    tx.audit_entries(0, 10_000)
        .await
        .expect("entries")
        .into_iter()
        .filter(|e| e.subject == subject)
        .map(|e| e.kind)
        .collect()
}

/// The row a broker that recorded the mint, called the issuer and died before storing the
/// release leaves: minting, its claim ending `claim` from now (negative: lapsed).
async fn dead_minter(
    f: &CoreFixture,
    g: countersign_broker_core::ids::GrantId,
    name: &str,
    claim: Duration,
) {
    let mut tx = f.sql.begin().await.expect("begin");
    tx.put_issued(&Issued {
        grant_id: g,
        secret: secret(SECRET),
        issuer: "postgres".into(),
        name: name.to_string(),
        state: IssuedState::Minting,
        claimed_until: Some(f.now() + claim),
        sealed_value: None,
        expires_at: None,
        created_at: f.now(),
        destroyed_at: None,
        attempts: 0,
        last_error: None,
        next_attempt_at: None,
    })
    .await
    .expect("row");
    tx.commit().await.expect("commit");
}

macro_rules! both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if !countersign_e2e::core::postgres_configured() {
                        return;
                    }
                    let f = countersign_e2e::core::CoreFixture::sqlite_exclusive().await;
                    super::$name(&f).await;
                    f.finish().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    let Some(f) = countersign_e2e::core::CoreFixture::postgres().await else {
                        return;
                    };
                    super::$name(&f).await;
                    f.finish().await;
                }
            )*
        }
    };
}

both!(
    minted_once_reused_and_destroyed_by_revoke,
    every_end_destroys,
    a_refused_mint_leaves_nothing,
    a_crash_after_the_issuer_call_is_destroyed_by_the_end,
    the_sweep_destroys_orphans_and_unstored_ends,
    two_destroyers_race_one_destroys,
    audit_verify_reports_a_credential_that_outlived_its_grant,
    a_destroy_a_crashed_destroyer_claimed_is_taken_again_after_the_lease,
    an_end_destroys_at_once_while_a_dead_minter_holds_its_claim,
    a_mint_that_finds_its_grant_ended_destroys_what_it_made,
    a_start_takes_over_a_dead_destroyers_claim,
);

async fn minted_once_reused_and_destroyed_by_revoke(f: &CoreFixture) {
    let (issuer, prefix) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    let (s, _m, g) = granted(f).await;
    let url = value(f, &s, g).await;
    assert!(url.starts_with("postgres://"), "a connection URL");
    assert!(
        url.contains(&credential_name(&prefix, g)),
        "the grant's role"
    );
    assert!(can_log_in(&url).await, "the credential works");
    assert_eq!(
        value(f, &s, g).await,
        url,
        "every release answers the same one"
    );
    assert_eq!(row(f, g).await.state, IssuedState::Live);
    assert_eq!(
        issuer.list().await.expect("list"),
        vec![credential_name(&prefix, g)]
    );

    f.revoke_by_holder(&s, g).await.expect("revoke");
    assert_eq!(
        row(f, g).await.state,
        IssuedState::Destroying,
        "queued with the end"
    );
    assert!(
        f.broker.take_destroy_queued(),
        "the destroyer is told at once"
    );
    let r = f.broker.destroy_due(16).await.expect("destroy");
    assert_eq!(r.destroyed, 1);
    assert_eq!(row(f, g).await.state, IssuedState::Destroyed);
    assert!(!can_log_in(&url).await, "the credential stopped working");
    assert!(issuer.list().await.expect("list").is_empty());
    let kinds = audit_kinds(f, g).await;
    assert!(kinds.contains(&"credential_mint".to_string()), "{kinds:?}");
    assert!(
        kinds.contains(&"credential_destroy".to_string()),
        "{kinds:?}"
    );
    assert_eq!(
        f.values(&s, g).await.map_err(|e| e.code).err(),
        Some(ErrorCode::GRANT_NOT_LIVE)
    );
}

async fn every_end_destroys(f: &CoreFixture) {
    let (issuer, _) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    // Expiry: the sweep stores it, and the end queues the destroy.
    let (s1, m, g1) = granted(f).await;
    let u1 = value(f, &s1, g1).await;
    // Session end: the machine ends the session.
    let s2 = f.enroll(&m, "pid-2").await.expect("enroll");
    let r2 = f
        .request(&s2, &[SECRET], Some(3600))
        .await
        .expect("request");
    let g2 = r2.request.grant_id.expect("granted");
    let u2 = value(f, &s2, g2).await;
    f.unenroll(&m, &s2).await.expect("end the session");
    f.advance(Duration::seconds(601));
    f.sweep().await;
    let r = f.broker.destroy_due(16).await.expect("destroy");
    assert_eq!(r.destroyed, 2, "{r:?}");
    assert!(!can_log_in(&u1).await, "expiry destroyed it");
    assert!(!can_log_in(&u2).await, "the session's end destroyed it");
    // The machine login's end (an operator's cascade) ends every session and its grants.
    let s3 = f.enroll(&m, "pid-3").await.expect("enroll");
    let r3 = f
        .request(&s3, &[SECRET], Some(3600))
        .await
        .expect("request");
    let g3 = r3.request.grant_id.expect("granted");
    let u3 = value(f, &s3, g3).await;
    f.revoke_machine_by_approver(&login("dev@x.io"), m.credential_id)
        .await
        .expect("end the machine login");
    f.broker.destroy_due(16).await.expect("destroy");
    assert!(
        !can_log_in(&u3).await,
        "the machine login's end destroyed it"
    );
    assert!(issuer.list().await.expect("list").is_empty());
    let _ = s1;
}

async fn a_refused_mint_leaves_nothing(f: &CoreFixture) {
    let (issuer, _) = issuer(vec!["no_such_role_cs49".into()]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    let (s, _m, g) = granted(f).await;
    let e = f.values(&s, g).await.map_err(|e| e.code).err();
    assert_eq!(e, Some(ErrorCode::ISSUER_UNAVAILABLE));
    assert_eq!(ErrorCode::ISSUER_UNAVAILABLE.status(), 503);
    assert!(
        issuer.list().await.expect("list").is_empty(),
        "nothing half-made"
    );
    let c = row(f, g).await;
    assert_eq!(
        c.state,
        IssuedState::Minting,
        "recorded, for the end to destroy"
    );
    assert_eq!(
        c.claimed_until, None,
        "the claim given back: the next release tries again"
    );
}

async fn a_crash_after_the_issuer_call_is_destroyed_by_the_end(f: &CoreFixture) {
    let (issuer, prefix) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    let (s, _m, g) = granted(f).await;
    // A broker that recorded the mint, called the issuer and died before storing the release:
    // the row says minting (its claim lapsed), the issuer holds the role.
    let name = credential_name(&prefix, g);
    let minted = issuer.mint(&name, None).await.expect("mint");
    dead_minter(f, g, &name, Duration::seconds(-1)).await;
    assert!(can_log_in(minted.value.expose()).await);
    // The next release takes the lapsed claim and mints again: the old password stops working.
    let url = value(f, &s, g).await;
    assert!(!can_log_in(minted.value.expose()).await, "replaced");
    assert!(can_log_in(&url).await);
    f.revoke_by_holder(&s, g).await.expect("revoke");
    f.broker.destroy_due(16).await.expect("destroy");
    assert!(!can_log_in(&url).await);
    assert!(issuer.list().await.expect("list").is_empty());
}

async fn the_sweep_destroys_orphans_and_unstored_ends(f: &CoreFixture) {
    let (issuer, prefix) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    // An orphan: a role under the prefix no grant backs (a database restored from before it).
    let stray = countersign_broker_core::ids::GrantId(uuid::Uuid::new_v4());
    let orphan = issuer
        .mint(&credential_name(&prefix, stray), None)
        .await
        .expect("mint");
    // An end no write stored yet: the grant expired, and no sweep ran.
    let (s, _m, g) = granted(f).await;
    let url = value(f, &s, g).await;
    f.advance(Duration::seconds(601));
    let r = f.broker.reconcile_issued().await.expect("reconcile");
    assert_eq!((r.queued, r.orphans, r.failures), (1, 1, 0), "{r:?}");
    assert!(
        !can_log_in(orphan.value.expose()).await,
        "the orphan is gone"
    );
    f.broker.destroy_due(16).await.expect("destroy");
    assert!(
        !can_log_in(&url).await,
        "the expired grant's credential is gone"
    );
    assert!(issuer.list().await.expect("list").is_empty());
    let kinds = audit_kinds(f, stray).await;
    assert_eq!(
        kinds,
        vec!["credential_destroy".to_string()],
        "the orphan's end is in the chain"
    );
}

async fn two_destroyers_race_one_destroys(f: &CoreFixture) {
    let (issuer, _) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    let (s, _m, g) = granted(f).await;
    let url = value(f, &s, g).await;
    f.revoke_by_holder(&s, g).await.expect("revoke");
    let (a, b) = tokio::join!(f.broker.destroy_due(16), f.broker.destroy_due(16));
    let (a, b) = (a.expect("a"), b.expect("b"));
    assert_eq!(a.destroyed + b.destroyed, 1, "{a:?} {b:?}");
    assert_eq!(a.failed + b.failed, 0);
    assert!(!can_log_in(&url).await);
    let kinds = audit_kinds(f, g).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "credential_destroy").count(),
        1,
        "one destroy entry"
    );
}

async fn findings(f: &CoreFixture) -> Vec<String> {
    countersign_broker_http::audit::inspect(&f.sql, f.broker.sealer(), None, None)
        .await
        .expect("inspect")
        .findings
        .iter()
        .map(|x| x.to_string())
        .collect()
}

async fn audit_verify_reports_a_credential_that_outlived_its_grant(f: &CoreFixture) {
    let (issuer, _) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    let (s, _m, g) = granted(f).await;
    let url = value(f, &s, g).await;
    f.revoke_by_holder(&s, g).await.expect("revoke");
    assert_eq!(
        findings(f).await,
        Vec::<String>::new(),
        "a pending destroy is no finding"
    );
    f.broker.destroy_due(16).await.expect("destroy");
    assert_eq!(
        findings(f).await,
        Vec::<String>::new(),
        "destroyed: nothing to report"
    );

    // A second grant's credential marked destroyed by a write straight into the database
    // (no destroy entry, nothing pending), while the role lives on.
    let (s2, _m2, g2) = granted(f).await;
    let url2 = value(f, &s2, g2).await;
    f.revoke_by_holder(&s2, g2).await.expect("revoke");
    {
        let mut c = row(f, g2).await;
        c.state = IssuedState::Destroyed;
        let mut tx = f.sql.begin().await.expect("begin");
        tx.put_issued(&c).await.expect("put");
        tx.commit().await.expect("commit");
    }
    let found = findings(f).await;
    assert!(
        found.iter().any(|x| x.contains(&g2.to_string())
            && x.contains("no destroy entry and no pending destroy")),
        "{found:?}"
    );
    // The sweep destroys what the issuer still holds for it.
    let r = f.broker.reconcile_issued().await.expect("reconcile");
    assert_eq!(r.orphans, 1, "{r:?}");
    assert!(!can_log_in(&url2).await);
    let _ = url;
}

/// The AWS IAM issuer through the core, against moto: the first release makes a user with a key
/// (released as credential_process JSON and the two AWS variables), the next release answers
/// the same key, and the holder's revoke deletes the user. Skipped without moto_server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_iam_user_per_grant_destroyed_by_revoke() {
    use countersign_issuer_aws::{AdminCredentials, AwsIamIssuer, AwsIamIssuerConfig};
    use countersign_store_aws::moto::{Moto, moto_or_skip};
    let Some(bin) = moto_or_skip() else { return };
    let moto = Moto::start(bin).await.expect("moto");
    let config = AwsIamIssuerConfig {
        endpoint_url: Some(moto.endpoint()),
        inline_policy: Some(
            r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:ListUsers","Resource":"*"}]}"#
                .into(),
        ),
        ..AwsIamIssuerConfig::new(vec![])
    };
    let admin = AdminCredentials::Static {
        access_key_id: "testing".into(),
        secret_access_key: Zeroizing::new("testing".into()),
        session_token: None,
    };
    let issuer = Arc::new(AwsIamIssuer::new(config, admin).await.expect("issuer"));
    let f = CoreFixture::sqlite_exclusive().await;
    f.broker.set_issued_secrets([IssuedSecret {
        name: secret(SECRET),
        owner: login("owner@x.io"),
        tier: Tier::Automatic,
        issuer: issuer.clone(),
    }]);
    f.reload().await;
    let (s, _m, g) = granted(&f).await;
    let caller = f.caller(&s).await;
    let released = f.broker.release_values(&caller, g).await.expect("release");
    let json: serde_json::Value =
        serde_json::from_str(released.values[0].1.expose()).expect("credential_process JSON");
    let key = json["AccessKeyId"].as_str().expect("a key id").to_string();
    let vars: Vec<&str> = released.parts[0]
        .1
        .iter()
        .map(|(k, _)| k.as_str())
        .collect();
    assert_eq!(vars, ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]);
    let again = f.broker.release_values(&caller, g).await.expect("release");
    assert!(again.values[0].1.expose().contains(&key), "the same key");
    assert_eq!(
        issuer.list().await.expect("list"),
        vec![credential_name(issuer.prefix(), g)]
    );
    f.revoke_by_holder(&s, g).await.expect("revoke");
    let r = f.broker.destroy_due(16).await.expect("destroy");
    assert_eq!(r.destroyed, 1, "{r:?}");
    assert!(
        issuer.list().await.expect("list").is_empty(),
        "the user is gone"
    );
    f.finish().await;
}

/// A destroyer that claimed a destroy and died (the chaos run's SIGKILL after a revoke) holds
/// it only for the lease, which the server sets to its reconciler's period: after it, the next
/// pass destroys the credential, once.
async fn a_destroy_a_crashed_destroyer_claimed_is_taken_again_after_the_lease(f: &CoreFixture) {
    let (issuer, _) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    f.broker.set_destroy_lease(Duration::seconds(5));
    let (s, _m, g) = granted(f).await;
    let url = value(f, &s, g).await;
    f.revoke_by_holder(&s, g).await.expect("revoke");
    // The dead destroyer's claim.
    let claimed = f
        .broker
        .claim_outbox("destroy", 16, Duration::seconds(5))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1);
    let r = f.broker.destroy_due(16).await.expect("destroy");
    assert_eq!(r.destroyed, 0, "held by the claim");
    assert!(can_log_in(&url).await);
    f.advance(Duration::seconds(6));
    let r = f.broker.destroy_due(16).await.expect("destroy");
    assert_eq!(r.destroyed, 1, "taken again once the lease lapsed: {r:?}");
    assert!(!can_log_in(&url).await);
    let kinds = audit_kinds(f, g).await;
    assert_eq!(
        kinds.iter().filter(|k| *k == "credential_destroy").count(),
        1
    );
}

/// A broker killed after the issuer made the credential and before it stored the release (the
/// chaos run's SIGKILL mid-mint) leaves the row minting under a claim that has not lapsed. The
/// grant's end destroys the credential at once: it does not wait out the dead minter's claim.
async fn an_end_destroys_at_once_while_a_dead_minter_holds_its_claim(f: &CoreFixture) {
    let (issuer, prefix) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    let (s, _m, g) = granted(f).await;
    let name = credential_name(&prefix, g);
    let minted = issuer.mint(&name, None).await.expect("mint");
    dead_minter(f, g, &name, Duration::seconds(30)).await;
    assert!(can_log_in(minted.value.expose()).await);
    f.revoke_by_holder(&s, g).await.expect("revoke");
    let r = f.broker.destroy_due(16).await.expect("destroy");
    assert_eq!(r.destroyed, 1, "not put off by the claim: {r:?}");
    assert!(!can_log_in(minted.value.expose()).await);
    assert!(issuer.list().await.expect("list").is_empty());
    assert_eq!(row(f, g).await.state, IssuedState::Destroyed);
}

/// An issuer that, once called, lets the test end the grant and another replica's destroyer run
/// (finding nothing to destroy yet) before it makes the credential: the release's mint then
/// finds its grant ended.
#[derive(Debug)]
struct Paused {
    inner: Arc<PostgresIssuer>,
    called: tokio::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
    go: tokio::sync::Mutex<Option<tokio::sync::oneshot::Receiver<()>>>,
}

#[async_trait::async_trait]
impl Issuer for Paused {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn prefix(&self) -> &str {
        self.inner.prefix()
    }
    async fn mint(
        &self,
        name: &str,
        until: Option<countersign_broker_core::clock::Time>,
    ) -> Result<countersign_broker_core::issuer::Minted, countersign_broker_core::issuer::IssuerError>
    {
        if let Some(called) = self.called.lock().await.take() {
            let _ = called.send(());
        }
        if let Some(go) = self.go.lock().await.take() {
            let _ = go.await;
        }
        self.inner.mint(name, until).await
    }
    async fn destroy(
        &self,
        name: &str,
    ) -> Result<(), countersign_broker_core::issuer::IssuerError> {
        self.inner.destroy(name).await
    }
    async fn list(&self) -> Result<Vec<String>, countersign_broker_core::issuer::IssuerError> {
        self.inner.list().await
    }
}

async fn a_mint_that_finds_its_grant_ended_destroys_what_it_made(f: &CoreFixture) {
    let (inner, _) = issuer(vec![]).expect("postgres configured");
    let (called_tx, called_rx) = tokio::sync::oneshot::channel();
    let (go_tx, go_rx) = tokio::sync::oneshot::channel();
    let paused = Arc::new(Paused {
        inner: inner.clone(),
        called: tokio::sync::Mutex::new(Some(called_tx)),
        go: tokio::sync::Mutex::new(Some(go_rx)),
    });
    f.broker.set_issued_secrets([IssuedSecret {
        name: secret(SECRET),
        owner: login("owner@x.io"),
        tier: Tier::Automatic,
        issuer: paused,
    }]);
    f.reload().await;
    let (s, _m, g) = granted(f).await;
    let release = f.values(&s, g);
    let end = async {
        called_rx.await.expect("the release called the issuer");
        f.revoke_by_holder(&s, g).await.expect("revoke");
        // The end's destroy runs first (another replica's destroyer), before the issuer makes
        // anything.
        let r = f.broker.destroy_due(16).await.expect("destroy");
        assert_eq!(r.destroyed, 1, "{r:?}");
        go_tx.send(()).expect("the mint waits");
    };
    let (released, ()) = tokio::join!(release, end);
    let e = released.expect_err("the grant ended while the issuer worked");
    assert_eq!(e.code, ErrorCode::GRANT_NOT_LIVE);
    assert!(
        inner.list().await.expect("list").is_empty(),
        "what the mint made after the destroy is destroyed by the minter"
    );
    assert_eq!(row(f, g).await.state, IssuedState::Destroyed);
}

/// A broker killed mid-destroy and started again (the chaos run's kills in a row) takes over
/// the destroy its dead self claimed at once, not after the lease: a start's first pass
/// destroys it.
async fn a_start_takes_over_a_dead_destroyers_claim(f: &CoreFixture) {
    let (issuer, _) = issuer(vec![]).expect("postgres configured");
    declare(f, issuer.clone(), Tier::Automatic).await;
    let (s, _m, g) = granted(f).await;
    let url = value(f, &s, g).await;
    f.revoke_by_holder(&s, g).await.expect("revoke");
    let claimed = f
        .broker
        .claim_outbox("destroy", 16, Duration::seconds(60))
        .await
        .expect("claim");
    assert_eq!(claimed.len(), 1, "the dead destroyer's claim");
    assert_eq!(
        f.broker.destroy_due(16).await.expect("destroy").destroyed,
        0
    );
    assert_eq!(f.broker.take_over_destroys().await.expect("take over"), 1);
    assert!(
        f.broker.take_destroy_queued(),
        "the destroyer is told at once"
    );
    let r = f.broker.destroy_due(16).await.expect("destroy");
    assert_eq!(r.destroyed, 1, "{r:?}");
    assert!(!can_log_in(&url).await);
    assert_eq!(f.broker.take_over_destroys().await.expect("again"), 0);
}
