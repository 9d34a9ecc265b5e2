//! A person's inbox kept between reads and patched from the events since (issue 13), on
//! SQLite and on PostgreSQL (when `COUNTERSIGN_TEST_POSTGRES_URL` names a server): after each
//! kind of write, the answer the console keeps is the answer a console that keeps nothing
//! reads, byte for byte, and its typed rows are what its JSON says.

mod common;

use std::sync::Arc;

use chrono::{Duration, Utc};
use countersign_console_core::console::asks::{
    AnswerIn, AskPatch, CloseAs, CloseIn, NewAsk, NewComment, OptionIn,
};
use countersign_console_core::console::{ConsoleConfig, IssuePatch, NewIssue};
use countersign_console_core::work::Actor;
use countersign_console_core::{Console, Human, Login, ManualClock, Parts, SystemEntropy};
use countersign_console_sql::SqlStorage;
use serde_json::{Value, json};

fn console(s: &Arc<SqlStorage>, clock: &Arc<ManualClock>) -> Console {
    Console::new(
        Parts {
            storage: s.clone(),
            broker: None,
            idp: None,
            clock: clock.clone(),
            entropy: Arc::new(SystemEntropy),
            presence: None,
            service_tokens: None,
        },
        ConsoleConfig::default(),
        None,
    )
}

fn ask(q: &str) -> NewAsk {
    NewAsk {
        question: q.into(),
        options: vec![
            OptionIn {
                id: Some("yes".into()),
                label: "Yes".into(),
            },
            OptionIn {
                id: Some("no".into()),
                label: "No".into(),
            },
        ],
        block: None,
        actor: None,
    }
}

/// Ada (as the inbox's reader and as an actor) and the agent session that asks her.
fn people() -> (Human, Actor, Actor) {
    let login = Login::parse("ada@example.com").expect("login");
    let ada = Human {
        login: login.clone(),
        csrf_token: String::new(),
        session_key: String::new(),
    };
    let agent = Actor::Agent {
        owner: None,
        service: None,
        session: countersign_console_core::ids::SessionId::parse("s-1"),
    };
    (ada, Actor::User { login }, agent)
}

async fn scenario(s: Arc<SqlStorage>) {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let c = console(&s, &clock);
    let (ada, person, agent) = people();
    // Each step's answer: the kept one against one read by a console that keeps nothing.
    let check = |why: &'static str| {
        let (c, s, clock, ada) = (&c, &s, &clock, &ada);
        async move {
            let kept = c.asks().inbox_asks(ada, None, None).await.expect("inbox");
            let fresh = console(s, clock)
                .asks()
                .inbox_asks(ada, None, None)
                .await
                .expect("inbox afresh");
            assert_eq!(
                String::from_utf8_lossy(&kept.json()),
                String::from_utf8_lossy(&fresh.json()),
                "{why}"
            );
            let typed = serde_json::to_value(kept.inbox()).expect("typed");
            let json: Value = serde_json::from_slice(&kept.json()).expect("json");
            assert_eq!(typed, json, "{why}: the typed rows are the JSON's");
            json
        }
    };
    c.issues()
        .create_project(&person, "INBX", "Inbox")
        .await
        .expect("project");
    let mut issues = Vec::new();
    for t in ["One", "Two"] {
        let (i, _) = c
            .issues()
            .create_issue(
                &person,
                NewIssue {
                    project: Some("INBX".into()),
                    title: Some(t.into()),
                    ..Default::default()
                },
            )
            .await
            .expect("issue");
        issues.push(i.key.to_string());
    }
    let mut asks = Vec::new();
    for n in 0..5 {
        clock.advance(Duration::milliseconds(5));
        let a = c
            .asks()
            .open_issue_ask(&agent, &issues[n % 2], ask(&format!("Question {n}?")))
            .await
            .expect("ask");
        asks.push(a.head.id);
    }
    let v = check("five asks").await;
    assert_eq!(v["human_turn"].as_array().map(Vec::len), Some(5));

    c.asks()
        .answer_ask(
            &person,
            asks[0],
            AnswerIn {
                options: vec!["yes".into()],
                text: None,
            },
        )
        .await
        .expect("answer");
    let v = check("an answer takes the ask out of the inbox").await;
    assert_eq!(v["agent_turn"].as_array().map(Vec::len), Some(0));
    assert_eq!(v["human_turn"].as_array().map(Vec::len), Some(4));

    c.asks()
        .reword_ask(
            &agent,
            asks[1],
            AskPatch {
                question: Some("Question one, reworded?".into()),
                ..Default::default()
            },
        )
        .await
        .expect("reword");
    check("a reworded ask").await;

    c.asks()
        .close_ask(
            &agent,
            asks[2],
            CloseIn {
                state: CloseAs::Retracted,
                note: None,
                actor: None,
            },
        )
        .await
        .expect("close");
    check("a retracted ask leaves").await;

    c.asks()
        .snooze(&ada, asks[3], c.now() + Duration::hours(1))
        .await
        .expect("snooze");
    let v = check("a snooze").await;
    assert_eq!(v["snoozed"].as_array().map(Vec::len), Some(1));
    c.asks().unsnooze(&ada, asks[3]).await.expect("unsnooze");
    check("an un-snooze").await;

    c.asks()
        .comment_on_issue(
            &agent,
            &issues[0],
            NewComment {
                body: "Following up on the answer.".into(),
                ask: Some(asks[0].to_string()),
                ..Default::default()
            },
        )
        .await
        .expect("reply");
    check("the agent's reply on its answered ask").await;

    c.issues()
        .update_issue(
            &person,
            &issues[1],
            IssuePatch {
                title: Some("Two, renamed".into()),
                ..Default::default()
            },
        )
        .await
        .expect("update");
    check("an issue update").await;

    c.session_event("session.updated", &agent, json!({}))
        .await
        .expect("session");
    check("an event no inbox shows").await;

    clock.advance(Duration::milliseconds(5));
    c.asks()
        .open_issue_ask(&agent, &issues[1], ask("A late question?"))
        .await
        .expect("ask");
    let v = check("a new ask").await;
    assert_eq!(v["human_turn"].as_array().map(Vec::len), Some(4));
}

#[tokio::test]
async fn kept_inbox_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("i.db").display());
    scenario(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
}

#[tokio::test]
async fn kept_inbox_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    scenario(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
    common::drop_postgres(&url).await;
}

/// An inbox over a megabyte, whose answers are written into the buffers of answers no longer
/// read (`SpareBuffer`): after each write in it, the kept answer is still the one a console
/// that keeps nothing reads, byte for byte, and as long as it should be.
#[tokio::test]
async fn a_large_kept_inbox_reuses_its_buffers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display());
    let s = Arc::new(SqlStorage::connect(&url).await.expect("connect"));
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let c = console(&s, &clock);
    let (ada, person, agent) = people();
    c.issues()
        .create_project(&person, "BIG", "Big")
        .await
        .expect("project");
    let (issue, _) = c
        .issues()
        .create_issue(
            &person,
            NewIssue {
                project: Some("BIG".into()),
                title: Some("Many questions".into()),
                ..Default::default()
            },
        )
        .await
        .expect("issue");
    let key = issue.key.to_string();
    let long = "Which of these is it? ".repeat(80);
    let mut asks = Vec::new();
    for n in 0..700 {
        let a = c
            .asks()
            .open_issue_ask(&agent, &key, ask(&format!("{n}: {long}")))
            .await
            .expect("ask");
        asks.push(a.head.id);
    }
    let mut sizes = Vec::new();
    for (turn, id) in asks.iter().take(4).enumerate() {
        // A shorter wording each time: an answer written over a longer one must not keep
        // the longer one's tail.
        c.asks()
            .reword_ask(
                &agent,
                *id,
                AskPatch {
                    question: Some(format!("Reworded {turn}?")),
                    ..Default::default()
                },
            )
            .await
            .expect("reword");
        let kept = c.asks().inbox_asks(&ada, None, None).await.expect("inbox");
        let fresh = console(&s, &clock)
            .asks()
            .inbox_asks(&ada, None, None)
            .await
            .expect("inbox afresh");
        let (kept, fresh) = (kept.json(), fresh.json());
        assert!(kept.len() > 1 << 20, "{} bytes", kept.len());
        assert!(kept[..] == fresh[..], "after reword {turn}");
        serde_json::from_slice::<Value>(&kept).expect("json");
        sizes.push(kept.len());
    }
    assert!(sizes.windows(2).all(|w| w[1] < w[0]), "{sizes:?}");
}

/// A person's answers and credential decisions in one list, newest first (issue 27), paged;
/// an answered ask is in no inbox.
async fn answers_and_decisions(s: Arc<SqlStorage>) {
    use countersign_console_core::Storage;
    use countersign_console_core::console::asks::Decided;
    use countersign_console_core::storage::Decision;
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let c = console(&s, &clock);
    let (ada, person, agent) = people();
    c.issues()
        .create_project(&person, "DCD", "Decided")
        .await
        .expect("project");
    let (i, _) = c
        .issues()
        .create_issue(
            &person,
            NewIssue {
                project: Some("DCD".into()),
                title: Some("One".into()),
                ..Default::default()
            },
        )
        .await
        .expect("issue");
    let key = i.key.to_string();
    // Alternately: an answer (options and words together), a credential decision.
    for n in 0..3 {
        clock.advance(Duration::minutes(1));
        let a = c
            .asks()
            .open_issue_ask(&agent, &key, ask(&format!("Question {n}?")))
            .await
            .expect("ask");
        clock.advance(Duration::minutes(1));
        let answered = c
            .asks()
            .answer_ask(
                &person,
                a.head.id,
                AnswerIn {
                    options: vec!["yes".into()],
                    text: Some(format!("and why {n}")),
                },
            )
            .await
            .expect("answer");
        assert_eq!(answered.turn, None, "answered: nobody's turn");
        clock.advance(Duration::minutes(1));
        s.record_decision(&Decision {
            login: ada.login.clone(),
            record_id: format!("{n:064x}"),
            event: "approved".into(),
            at: c.now(),
        })
        .await
        .expect("decision");
    }
    let inbox = c.asks().inbox_asks(&ada, None, None).await.expect("inbox");
    let v: Value = serde_json::from_slice(&inbox.json()).expect("json");
    assert_eq!(v["human_turn"], json!([]));
    assert_eq!(v["agent_turn"], json!([]));

    let all = c
        .asks()
        .answers_and_decisions(&ada, 10, 0)
        .await
        .expect("all");
    assert!(!all.more);
    let kinds: Vec<&str> = all
        .rows
        .iter()
        .map(|d| match d {
            Decided::Ask(_) => "answer",
            Decided::Credential(_) => "decision",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "decision", "answer", "decision", "answer", "decision", "answer"
        ]
    );
    assert!(all.rows.windows(2).all(|w| w[0].at() >= w[1].at()));
    match &all.rows[1] {
        Decided::Ask(r) => {
            let a = r.answer.as_ref().expect("an answer row");
            assert_eq!(a.options, ["yes"]);
            assert_eq!(a.text.as_deref(), Some("and why 2"));
        }
        other => panic!("{other:?}"),
    }
    let page = c
        .asks()
        .answers_and_decisions(&ada, 4, 2)
        .await
        .expect("page");
    assert_eq!(page.rows, all.rows[2..6].to_vec());
    assert!(!page.more);
    let first = c
        .asks()
        .answers_and_decisions(&ada, 2, 0)
        .await
        .expect("first");
    assert_eq!(first.rows, all.rows[..2].to_vec());
    assert!(first.more);
}

#[tokio::test]
async fn answers_and_decisions_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("d.db").display());
    answers_and_decisions(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
}

#[tokio::test]
async fn answers_and_decisions_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    answers_and_decisions(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
    common::drop_postgres(&url).await;
}
