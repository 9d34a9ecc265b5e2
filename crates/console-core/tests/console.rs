//! The console's domain on SQLite in memory (the real storage), a fake identity provider and broker, and a
//! manual clock: sessions and sign-ins lapse on time, tokens are kept as hashes, the inbox
//! remembers record facts and asks the broker for the pending list alone.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{Duration, TimeZone, Utc};
use countersign_console_core::broker::{
    Approval, BrokerClient, CredentialRecord, GrantItem, MachineLogin, PendingItem, SessionIds,
};
use countersign_console_core::idp::{AuthStart, IdentityProvider, IdpError, VerifiedIdentity};
use countersign_console_core::{
    Caller, Clock, Console, ConsoleConfig, Error, ErrorCode, Login, ManualClock, Parts, Storage,
    SystemEntropy,
};
use countersign_console_sql::SqlStorage;

#[derive(Debug, Default)]
struct FakeIdp {
    email: Mutex<Option<(String, Option<bool>)>>,
    started: AtomicUsize,
}

#[async_trait]
impl IdentityProvider for FakeIdp {
    fn name(&self) -> String {
        "fake".into()
    }
    async fn begin(&self) -> Result<AuthStart, IdpError> {
        let n = self.started.fetch_add(1, Ordering::SeqCst);
        Ok(AuthStart {
            url: format!("https://idp.example/authorize?state=s{n}"),
            state: format!("s{n}"),
            nonce: format!("n{n}"),
            pkce_verifier: format!("v{n}"),
        })
    }
    async fn finish(
        &self,
        code: &str,
        verifier: &str,
        nonce: &str,
    ) -> Result<VerifiedIdentity, IdpError> {
        // The fake's code is "code-<n>", paired with verifier v<n> and nonce n<n>.
        let n = code.trim_start_matches("code-");
        if verifier != format!("v{n}") || nonce != format!("n{n}") {
            return Err(IdpError::Refused("pkce or nonce".into()));
        }
        let (email, verified) = self.email.lock().expect("lock").clone().unwrap_or_default();
        Ok(VerifiedIdentity {
            subject: "s".into(),
            email: Some(email),
            email_verified: verified,
        })
    }
}

#[derive(Debug, Default)]
struct FakeBroker {
    records: Mutex<Vec<CredentialRecord>>,
    record_reads: AtomicUsize,
}

fn record(id: &str, approver: &str, at: chrono::DateTime<Utc>) -> CredentialRecord {
    CredentialRecord {
        record_id: id.into(),
        request_id: None,
        kind: "agent_secret".into(),
        state: "pending".into(),
        approver: approver.into(),
        enrollment: None,
        session: SessionIds::default(),
        identifiers: vec!["ADA_SECRET".into()],
        service: None,
        reason: "why".into(),
        lifetime_seconds: Some(60),
        rules_version: "r".into(),
        expires_at: at + Duration::minutes(30),
        requested_at: at,
        decided: None,
    }
}

#[async_trait]
impl BrokerClient for FakeBroker {
    async fn pending(&self, approver: &Login) -> Result<Vec<PendingItem>, Error> {
        Ok(self
            .records
            .lock()
            .expect("lock")
            .iter()
            .filter(|r| {
                r.state == "pending" && (r.approver == approver.as_str() || r.approver == "anyone")
            })
            .map(|r| PendingItem {
                record_id: r.record_id.clone(),
                request_id: r.request_id.clone(),
                kind: r.kind.clone(),
                identifiers: r.identifiers.clone(),
                requested_at: r.requested_at,
                session: r.session.clone(),
            })
            .collect())
    }
    async fn record(&self, id: &str) -> Result<CredentialRecord, Error> {
        self.record_reads.fetch_add(1, Ordering::SeqCst);
        self.records
            .lock()
            .expect("lock")
            .iter()
            .find(|r| r.record_id == id)
            .cloned()
            .ok_or_else(|| Error::broker("NOT_FOUND", 404, "no such credential request"))
    }
    async fn approve(
        &self,
        id: &str,
        approver: &Login,
        _code: Option<&str>,
    ) -> Result<Approval, Error> {
        let mut rs = self.records.lock().expect("lock");
        let r = rs
            .iter_mut()
            .find(|r| r.record_id == id)
            .ok_or_else(|| Error::broker("NOT_FOUND", 404, "x"))?;
        if r.approver != approver.as_str() && r.approver != "anyone" {
            return Err(Error::broker(
                "NOT_APPROVER",
                403,
                "only the record's approver may decide it",
            ));
        }
        r.state = "approved".into();
        Ok(Approval {
            credential_id: None,
            grant_id: Some("g".into()),
            state: "approved".into(),
        })
    }
    async fn deny(&self, _: &str, _: &Login, _: Option<&str>) -> Result<String, Error> {
        Ok("denied".into())
    }
    async fn lookup(&self, _: &str) -> Result<CredentialRecord, Error> {
        Err(Error::broker(
            "NO_SUCH_CODE",
            404,
            "no pending machine login has this code",
        ))
    }
    async fn machine_logins(&self, _: &Login) -> Result<Vec<MachineLogin>, Error> {
        Ok(vec![])
    }
    async fn revoke_machine_login(&self, _: &str, _: &Login) -> Result<String, Error> {
        Ok("revoked".into())
    }
    async fn grants(&self, _: &Login) -> Result<Vec<GrantItem>, Error> {
        Ok(vec![])
    }
    async fn revoke_grant(&self, _: &str, _: &Login) -> Result<String, Error> {
        Ok("revoked".into())
    }
}

struct Fixture {
    console: Console,
    clock: Arc<ManualClock>,
    idp: Arc<FakeIdp>,
    broker: Arc<FakeBroker>,
    storage: Arc<SqlStorage>,
}

async fn fixture(config: ConsoleConfig) -> Fixture {
    let clock = Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2031, 3, 4, 5, 6, 7)
            .single()
            .expect("time"),
    ));
    let idp = Arc::new(FakeIdp::default());
    let broker = Arc::new(FakeBroker::default());
    let storage = Arc::new(
        SqlStorage::connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite"),
    );
    let console = Console::new(
        Parts {
            storage: storage.clone(),
            broker: Some(broker.clone()),
            idp: Some(idp.clone()),
            clock: clock.clone(),
            entropy: Arc::new(SystemEntropy),
            presence: None,
            service_tokens: None,
        },
        config,
        Some("shared-token-0123456789"),
    );
    Fixture {
        console,
        clock,
        idp,
        broker,
        storage,
    }
}

#[tokio::test]
async fn sign_in_binds_the_browser_and_sessions_lapse() {
    let f = fixture(ConsoleConfig::default()).await;
    *f.idp.email.lock().expect("lock") = Some(("Ada@Example.COM".into(), Some(true)));
    let start = f
        .console
        .begin_sign_in(Some("//evil.example/x"))
        .await
        .expect("begin");
    // Another browser's state, or none: refused (and the attempt is not consumed).
    let e = f
        .console
        .finish_sign_in(&start.state, "code-0", Some("other"))
        .await
        .expect_err("other browser");
    assert!(e.is(ErrorCode::SIGN_IN_FAILED));
    let (s, back) = f
        .console
        .finish_sign_in(&start.state, "code-0", Some(&start.state))
        .await
        .expect("finish");
    assert_eq!(back, "/", "an off-site return is dropped");
    assert_eq!(s.human.login.as_str(), "ada@example.com");
    // Each attempt is used once.
    assert!(
        f.console
            .finish_sign_in(&start.state, "code-0", Some(&start.state))
            .await
            .is_err()
    );
    // The session holds for 12 hours, then lapses.
    assert_eq!(
        f.console
            .session(&s.token)
            .await
            .expect("session")
            .login
            .as_str(),
        "ada@example.com"
    );
    f.clock.advance(Duration::hours(12));
    assert!(
        f.console
            .session(&s.token)
            .await
            .expect_err("lapsed")
            .is(ErrorCode::UNAUTHENTICATED)
    );
    assert!(f.console.purge().await.expect("purge") >= 1);
    // Only the session token's hash is stored.
    assert!(
        f.storage
            .get_session(&s.token)
            .await
            .expect("get")
            .is_none()
    );
}

#[tokio::test]
async fn slow_or_unverified_sign_ins_are_refused() {
    let f = fixture(ConsoleConfig {
        allowed_domains: vec!["example.com".into()],
        ..ConsoleConfig::default()
    })
    .await;
    *f.idp.email.lock().expect("lock") = Some(("ada@example.com".into(), Some(true)));
    let start = f.console.begin_sign_in(None).await.expect("begin");
    f.clock.advance(Duration::minutes(11));
    assert!(
        f.console
            .finish_sign_in(&start.state, "code-0", Some(&start.state))
            .await
            .is_err()
    );

    *f.idp.email.lock().expect("lock") = Some(("ada@example.com".into(), None));
    let start = f.console.begin_sign_in(None).await.expect("begin");
    let e = f
        .console
        .finish_sign_in(&start.state, "code-1", Some(&start.state))
        .await
        .expect_err("unverified");
    assert!(e.message.contains("not verified"));

    *f.idp.email.lock().expect("lock") = Some(("eve@elsewhere.example".into(), Some(true)));
    let start = f.console.begin_sign_in(None).await.expect("begin");
    let e = f
        .console
        .finish_sign_in(&start.state, "code-2", Some(&start.state))
        .await
        .expect_err("domain");
    assert!(e.message.contains("domain"));

    assert!(
        f.console
            .sign_in_local(&format!("x@{}", "example.com"))
            .await
            .expect_err("off")
            .is(ErrorCode::LOCAL_SIGN_IN_OFF)
    );
}

#[tokio::test]
async fn tokens_csrf_and_the_inbox() {
    let f = fixture(ConsoleConfig {
        local_sign_in: true,
        ..ConsoleConfig::default()
    })
    .await;
    let ada = f
        .console
        .sign_in_local("ADA@example.com")
        .await
        .expect("local")
        .human;
    assert!(
        f.console
            .sign_in_local("nope")
            .await
            .expect_err("bad")
            .is(ErrorCode::LOGIN_INPUT)
    );
    // A page prints the token masked afresh each time; any masking passes, the bare token
    // (never printed) does not.
    let masked = ada.masked_csrf(&countersign_console_core::clock::SystemEntropy);
    assert!(f.console.check_csrf(&ada, Some(&masked)).is_ok());
    assert!(f.console.check_csrf(&ada, Some(&ada.csrf_token)).is_err());
    assert!(f.console.check_csrf(&ada, Some("x")).is_err());
    assert!(f.console.check_csrf(&ada, None).is_err());

    // Tokens: the shared one, a personal one, revoked.
    assert_eq!(
        f.console
            .authenticate_bearer("shared-token-0123456789")
            .await
            .expect("shared"),
        Caller::Agent {
            owner: None,
            service: None
        }
    );
    let m = f
        .console
        .mint_token(&ada, Some("ci"), None)
        .await
        .expect("mint");
    assert!(m.token.starts_with("csp_") && m.token.len() == 4 + 43);
    assert_eq!(
        f.console
            .authenticate_bearer(&m.token)
            .await
            .expect("personal"),
        Caller::Agent {
            owner: Some(ada.login.clone()),
            service: None
        }
    );
    assert!(
        f.console
            .mint_token(&ada, Some(&"x".repeat(101)), None)
            .await
            .expect_err("long")
            .is(ErrorCode::TOKEN_INPUT)
    );
    // An expiry: in the future, at most 365 days ahead; the token stops at it.
    let now = f.clock.now();
    for bad in [now, now + Duration::days(366)] {
        assert!(
            f.console
                .mint_token(&ada, None, Some(bad))
                .await
                .expect_err("expiry")
                .is(ErrorCode::TOKEN_INPUT)
        );
    }
    let brief = f
        .console
        .mint_token(&ada, Some("brief"), Some(now + Duration::hours(1)))
        .await
        .expect("mint");
    assert!(f.console.authenticate_bearer(&brief.token).await.is_ok());
    assert_eq!(f.console.tokens(&ada).await.expect("list").len(), 2);
    f.clock.advance(Duration::hours(1));
    assert!(
        f.console
            .authenticate_bearer(&brief.token)
            .await
            .expect_err("expired")
            .is(ErrorCode::UNAUTHENTICATED)
    );
    assert_eq!(f.console.tokens(&ada).await.expect("list").len(), 1);
    f.console
        .revoke_token(
            &ada,
            countersign_console_core::ids::TokenId::parse(&m.info.id).expect("an id"),
        )
        .await
        .expect("revoke");
    assert!(f.console.authenticate_bearer(&m.token).await.is_err());
    assert!(
        f.console
            .revoke_token(
                &ada,
                countersign_console_core::ids::TokenId::parse(&m.info.id).expect("an id")
            )
            .await
            .is_err()
    );

    // The inbox reads each record's facts once.
    let now = f.clock.now();
    f.broker.records.lock().expect("lock").extend([
        record("r1", "ada@example.com", now),
        record("r2", "anyone", now),
        record("r3", "bob@example.com", now),
    ]);
    for _ in 0..3 {
        let inbox = f.console.inbox(&ada).await.expect("inbox").expect("broker");
        assert_eq!(
            inbox
                .iter()
                .map(|r| r.record_id.as_str())
                .collect::<Vec<_>>(),
            ["r1", "r2"]
        );
    }
    assert_eq!(f.broker.record_reads.load(Ordering::SeqCst), 2);
    f.console
        .approve(&ada, "r1", None, None)
        .await
        .expect("approve");
    assert_eq!(
        f.console
            .inbox(&ada)
            .await
            .expect("inbox")
            .expect("broker")
            .len(),
        1
    );
    let e = f
        .console
        .approve(&ada, "r3", None, None)
        .await
        .expect_err("not hers");
    assert_eq!((e.code_str(), e.status()), ("NOT_APPROVER", 403));
}
