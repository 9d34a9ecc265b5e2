//! The console's storage contract on SQLite, and on PostgreSQL when
//! `COUNTERSIGN_TEST_POSTGRES_URL` names a server (`COUNTERSIGN_REQUIRE_POSTGRES=1` makes it
//! mandatory).

mod common;

use chrono::{Duration, TimeZone, Utc};
use countersign_console_core::ids::{Login, TokenId};
use countersign_console_core::storage::{
    BrowserSession, Decision, PersonalToken, SignInAttempt, Storage,
};
use countersign_console_sql::SqlStorage;

fn login(s: &str) -> Login {
    Login::parse(s).unwrap_or_else(|| panic!("login {s}"))
}

async fn contract(s: &SqlStorage) {
    let t0 = Utc
        .with_ymd_and_hms(2031, 3, 4, 5, 6, 7)
        .single()
        .unwrap_or_default();
    let tag = uuid::Uuid::new_v4().simple().to_string();
    let ada = login(&format!("ada-{tag}@example.com"));

    // Sessions.
    let sess = BrowserSession {
        key: format!("k-{tag}"),
        login: ada.clone(),
        csrf_token: "csrf".into(),
        created_at: t0,
        expires_at: t0 + Duration::hours(1),
    };
    s.put_session(&sess).await.expect("put session");
    assert_eq!(
        s.get_session(&sess.key).await.expect("get"),
        Some(sess.clone())
    );
    assert_eq!(s.get_session("nope").await.expect("get"), None);

    // Attempts are taken once.
    let a = SignInAttempt {
        key: format!("a-{tag}"),
        nonce: "n".into(),
        pkce_verifier: "v".into(),
        return_to: "/grants".into(),
        expires_at: t0 + Duration::minutes(10),
    };
    s.put_attempt(&a).await.expect("put attempt");
    assert_eq!(s.take_attempt(&a.key).await.expect("take"), Some(a.clone()));
    assert_eq!(s.take_attempt(&a.key).await.expect("take again"), None);

    // Tokens.
    let tok = PersonalToken {
        id: TokenId(uuid::Uuid::new_v4()),
        owner: ada.clone(),
        name: "ci".into(),
        hash: format!("h-{tag}"),
        created_at: t0,
        expires_at: None,
        revoked_at: None,
    };
    s.put_token(&tok).await.expect("put token");
    assert_eq!(
        s.live_tokens(&ada, t0).await.expect("list"),
        vec![tok.clone()]
    );
    // A token with an expiry is live until it, not at it.
    let brief = PersonalToken {
        id: TokenId(uuid::Uuid::new_v4()),
        hash: format!("h2-{tag}"),
        // Listed by creation time: a second later than the first.
        created_at: t0 + Duration::seconds(1),
        expires_at: Some(t0 + Duration::hours(1)),
        ..tok.clone()
    };
    s.put_token(&brief).await.expect("put token");
    assert_eq!(
        s.live_tokens(&ada, t0).await.expect("list"),
        vec![tok.clone(), brief.clone()]
    );
    assert_eq!(
        s.live_tokens(&ada, t0 + Duration::hours(1))
            .await
            .expect("list"),
        vec![tok.clone()]
    );
    assert_eq!(
        s.token_by_hash(&brief.hash).await.expect("by hash"),
        Some(brief.clone())
    );
    assert_eq!(
        s.token_by_hash(&tok.hash).await.expect("by hash"),
        Some(tok.clone())
    );
    let bob = login(&format!("bob-{tag}@example.com"));
    assert!(
        !s.revoke_token(&bob, tok.id, t0)
            .await
            .expect("revoke other")
    );
    assert!(s.revoke_token(&ada, tok.id, t0).await.expect("revoke"));
    assert!(
        !s.revoke_token(&ada, tok.id, t0)
            .await
            .expect("revoke again")
    );
    assert_eq!(
        s.live_tokens(&ada, t0).await.expect("list"),
        vec![brief.clone()]
    );
    assert_eq!(
        s.token_by_hash(&tok.hash)
            .await
            .expect("by hash")
            .and_then(|t| t.revoked_at),
        Some(t0)
    );

    // People.
    s.saw_person(&ada, t0).await.expect("saw");
    s.saw_person(&ada, t0 + Duration::hours(1))
        .await
        .expect("saw again");
    assert!(s.people().await.expect("people").contains(&ada));
    assert!(s.has_person(&ada).await.expect("has person"));
    let nobody = login(&format!("nobody-{tag}@example.com"));
    assert!(!s.has_person(&nobody).await.expect("has person"));

    // Decisions: newest first per person, the latest per record; kept in the database, so a
    // restart or another replica sees them.
    let rec = format!("rec-{tag}");
    for (i, event) in ["approved", "denied"].into_iter().enumerate() {
        s.record_decision(&Decision {
            login: ada.clone(),
            record_id: format!("{rec}-{i}"),
            event: event.into(),
            at: t0 + Duration::minutes(i as i64),
        })
        .await
        .expect("record decision");
    }
    let mine = s.decisions_of(&ada, 10).await.expect("decisions");
    assert_eq!(
        mine.iter()
            .map(|d| (d.record_id.as_str(), d.event.as_str()))
            .collect::<Vec<_>>(),
        [
            (format!("{rec}-1").as_str(), "denied"),
            (format!("{rec}-0").as_str(), "approved")
        ]
    );
    assert_eq!(s.decisions_of(&ada, 1).await.expect("decisions").len(), 1);
    assert!(
        s.decisions_of(&nobody, 10)
            .await
            .expect("decisions")
            .is_empty()
    );
    assert_eq!(
        s.decision_on(&format!("{rec}-0"))
            .await
            .expect("decision on")
            .map(|d| d.login),
        Some(ada.clone())
    );
    assert_eq!(s.decision_on("nope").await.expect("decision on"), None);

    // Purge.
    s.put_attempt(&SignInAttempt {
        key: format!("b-{tag}"),
        ..a.clone()
    })
    .await
    .expect("put attempt");
    assert!(
        s.purge_expired(t0 + Duration::hours(2))
            .await
            .expect("purge")
            >= 2
    );
    assert_eq!(s.get_session(&sess.key).await.expect("get"), None);
    s.delete_session(&sess.key).await.expect("delete absent");
    s.ping().await.expect("ping");
}

#[tokio::test]
async fn sqlite_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
    let s = SqlStorage::connect(&url).await.expect("connect");
    contract(&s).await;
    s.close().await;
    // Reopening finds the schema in place.
    let s = SqlStorage::connect(&url).await.expect("reconnect");
    s.ping().await.expect("ping");
}

#[tokio::test]
async fn sqlite_memory() {
    let s = SqlStorage::connect("sqlite::memory:")
        .await
        .expect("connect");
    contract(&s).await;
}

#[tokio::test]
async fn postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    let s = SqlStorage::connect(&url).await.expect("connect");
    contract(&s).await;
    common::drop_postgres(&url).await;
}
