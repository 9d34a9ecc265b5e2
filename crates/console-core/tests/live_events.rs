//! Every event a write appends reaches the live stream without the caller doing anything: the
//! console on SQLite in memory (the real storage), its live event watch subscribed, and each
//! kind of write run through the console's API. After each, the watch stands at the log's
//! last event id (every appended event is published), and a refused write publishes nothing.

use std::sync::Arc;

use chrono::{TimeZone, Utc};
use countersign_console_core::console::asks::{
    AnswerIn, ApprovalIn, AskPatch, CloseAs, CloseIn, NewAsk, NewComment,
};
use countersign_console_core::console::documents::{At, Upload};
use countersign_console_core::doc::{EditOp, Quote};
use countersign_console_core::ids::SessionId;
use countersign_console_core::work::Actor;
use countersign_console_core::work::messages::Target;
use countersign_console_core::{
    Console, ConsoleConfig, IssuePatch, Login, ManualClock, NewIssue, Parts, SystemEntropy,
};
use countersign_console_sql::SqlStorage;
use serde_json::json;
use tokio::sync::watch;

async fn console() -> Console {
    let clock = Arc::new(ManualClock::new(
        Utc.with_ymd_and_hms(2031, 3, 4, 5, 6, 7)
            .single()
            .expect("time"),
    ));
    let storage = Arc::new(
        SqlStorage::connect("sqlite::memory:")
            .await
            .expect("in-memory SQLite"),
    );
    Console::new(
        Parts {
            storage,
            broker: None,
            idp: None,
            clock,
            entropy: Arc::new(SystemEntropy),
            presence: None,
            service_tokens: None,
        },
        ConsoleConfig::default(),
        None,
    )
}

/// The stream's side: the watch the live event streams wait on, and the last id it saw.
struct Stream {
    rx: watch::Receiver<i64>,
    seen: i64,
}

impl Stream {
    /// After a write: it appended at least one event, and the watch woke to the log's last id
    /// (so every event it appended, each at or below that id, reaches a live stream).
    async fn arrived(&mut self, console: &Console, what: &str) {
        let last = console.last_event_id().await.expect("last event id");
        assert!(last > self.seen, "{what}: the write appended no event");
        assert!(
            self.rx.has_changed().expect("watch open"),
            "{what}: the live stream was not woken"
        );
        assert_eq!(
            *self.rx.borrow_and_update(),
            last,
            "{what}: an appended event did not reach the live stream"
        );
        let events = console.events_after(self.seen, 1000).await.expect("events");
        assert!(
            events.iter().all(|e| e.id <= last),
            "{what}: events above the published id"
        );
        self.seen = last;
    }

    /// After a refused write: nothing was published, and the log did not move.
    async fn nothing(&mut self, console: &Console, what: &str) {
        assert!(
            !self.rx.has_changed().expect("watch open"),
            "{what}: a refused write woke the stream"
        );
        let last = console.last_event_id().await.expect("last event id");
        assert_eq!(last, self.seen, "{what}: a refused write appended an event");
    }
}

fn person() -> Actor {
    Actor::User {
        login: Login::parse("ada@example.com").expect("login"),
    }
}

fn agent(session: &SessionId) -> Actor {
    Actor::Agent {
        owner: None,
        service: None,
        session: Some(session.clone()),
    }
}

fn input<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).expect("input")
}

/// The work area and the asks: projects, issues, claims, repository mappings, comments, asks
/// and the inbox, each appending its event.
#[tokio::test]
async fn every_write_of_the_work_and_asks_reaches_the_live_stream() {
    let c = console().await;
    let mut s = Stream {
        rx: c.events_watch(),
        seen: 0,
    };
    let ada = person();
    let session = SessionId::named("live-events-1").expect("session");
    let bot = agent(&session);

    c.issues()
        .create_project(&ada, "LIVE", "Live events")
        .await
        .expect("project");
    s.arrived(&c, "project created").await;
    c.issues()
        .create_project(&ada, "LIVE", "Again")
        .await
        .expect_err("a taken key");
    s.nothing(&c, "project refused").await;

    let new: NewIssue = input(json!({ "project": "LIVE", "title": "First issue" }));
    let (issue, created) = c.issues().create_issue(&ada, new).await.expect("issue");
    assert!(created);
    s.arrived(&c, "issue created").await;
    let key = issue.key.to_string();

    let patch: IssuePatch = input(json!({ "title": "First issue, renamed" }));
    c.issues()
        .update_issue(&ada, &key, patch)
        .await
        .expect("update");
    s.arrived(&c, "issue updated").await;

    c.issues().claim(&bot, &key, false).await.expect("claim");
    s.arrived(&c, "issue claimed").await;
    c.issues().release(&bot, &key).await.expect("release");
    s.arrived(&c, "claim released").await;
    c.issues()
        .unsubscribe(&ada, &key, &session)
        .await
        .expect("unsubscribe");
    s.arrived(&c, "session unsubscribed").await;

    c.put_repo_mapping(&ada, "acme", "widgets", "LIVE", true)
        .await
        .expect("mapping");
    s.arrived(&c, "repository mapped").await;
    c.delete_repo_mapping(&ada, "acme", "widgets")
        .await
        .expect("unmapped");
    s.arrived(&c, "repository unmapped").await;

    c.session_event("session.updated", &bot, json!({ "title": "a title" }))
        .await
        .expect("session event");
    s.arrived(&c, "session event").await;

    let comment = c
        .asks()
        .comment_on_issue(
            &ada,
            &key,
            NewComment {
                body: "A first comment".into(),
                ..Default::default()
            },
        )
        .await
        .expect("comment");
    s.arrived(&c, "comment added").await;
    c.asks()
        .edit_comment(&ada, comment.comment.id, "A first comment, edited")
        .await
        .expect("comment edited");
    s.arrived(&c, "comment edited").await;

    let ask = c
        .asks()
        .open_issue_ask(
            &bot,
            &key,
            input::<NewAsk>(json!({ "question": "Which way?", "options": [{ "label": "Left" }, { "label": "Right" }] })),
        )
        .await
        .expect("ask");
    s.arrived(&c, "ask opened").await;
    let id = ask.head.id;
    c.asks()
        .reword_ask(
            &bot,
            id,
            AskPatch {
                question: Some("Which way now?".into()),
                ..Default::default()
            },
        )
        .await
        .expect("reworded");
    s.arrived(&c, "ask reworded").await;
    for follow in [true, false] {
        let other = SessionId::named("live-events-other").expect("session");
        c.asks()
            .follow_ask(&agent(&other), id, &other, follow)
            .await
            .expect("follow");
        s.arrived(
            &c,
            if follow {
                "ask followed"
            } else {
                "ask unfollowed"
            },
        )
        .await;
    }
    c.asks()
        .answer_ask(
            &ada,
            id,
            AnswerIn {
                options: vec!["1".into()],
                text: None,
            },
        )
        .await
        .expect("answered");
    s.arrived(&c, "ask answered").await;
    let second = c
        .asks()
        .open_issue_ask(
            &bot,
            &key,
            input::<NewAsk>(json!({ "question": "Anything else?" })),
        )
        .await
        .expect("second ask");
    s.arrived(&c, "second ask opened").await;
    let id = second.head.id;
    c.asks()
        .close_ask(
            &bot,
            id,
            CloseIn {
                state: CloseAs::Resolved,
                note: None,
                actor: None,
            },
        )
        .await
        .expect("closed");
    s.arrived(&c, "ask resolved").await;
    c.asks()
        .answer_ask(&ada, id, AnswerIn::default())
        .await
        .expect_err("a resolved ask takes no answer");
    s.nothing(&c, "answer refused").await;
}

/// Documents (uploads, edits, versions, block asks, approvals, reviews) and messages: the
/// writes whose events used to be handed back to their callers in lists.
#[tokio::test]
async fn every_write_of_documents_and_messages_reaches_the_live_stream() {
    let c = console().await;
    let mut s = Stream {
        rx: c.events_watch(),
        seen: 0,
    };
    let ada = person();
    let session = SessionId::named("live-events-2").expect("session");
    let bot = agent(&session);
    c.issues()
        .create_project(&ada, "DOCS", "Documents")
        .await
        .expect("project");
    s.arrived(&c, "project created").await;
    let new: NewIssue = input(json!({ "project": "DOCS", "title": "With a document" }));
    let (issue, _) = c.issues().create_issue(&ada, new).await.expect("issue");
    s.arrived(&c, "issue created").await;
    let key = issue.key.to_string();

    let upload = |content: &str| Upload {
        filename: "plan.md".into(),
        slug: None,
        content_type: "text/markdown".into(),
        content: content.as_bytes().to_vec(),
    };
    let doc = c
        .documents()
        .upload(
            &bot,
            At::Issue(&key),
            upload("# Plan\n\nFirst paragraph.\n"),
        )
        .await
        .expect("upload");
    s.arrived(&c, "document created").await;
    let id = doc.id;

    let op = EditOp::Replace {
        quote: Quote::exact("First paragraph."),
        text: "The first paragraph.".into(),
        block: None,
        block_token: None,
    };
    c.documents()
        .edit(&bot, id, None, std::slice::from_ref(&op))
        .await
        .expect("edit");
    s.arrived(&c, "document edited").await;
    c.documents()
        .edit(&bot, id, None, std::slice::from_ref(&op))
        .await
        .expect_err("the quote is gone");
    s.nothing(&c, "edit refused").await;

    c.documents()
        .name_version(&ada, id, "first")
        .await
        .expect("named version");
    s.arrived(&c, "version named").await;
    c.documents()
        .upload(&bot, At::Issue(&key), upload("# Plan\n\nA new version.\n"))
        .await
        .expect("new version");
    s.arrived(&c, "document versioned").await;

    c.asks()
        .comment_on_document(
            &ada,
            id,
            NewComment {
                body: "On the plan".into(),
                ..Default::default()
            },
        )
        .await
        .expect("document comment");
    s.arrived(&c, "document comment").await;

    let blocks = c.documents().blocks(id).await.expect("blocks");
    let first = serde_json::to_value(&blocks).expect("blocks json");
    let block = first["blocks"][0]["id"]
        .as_str()
        .expect("a block id")
        .to_owned();
    let ask = c
        .asks()
        .open_document_ask(
            &bot,
            id,
            input::<NewAsk>(json!({ "question": "Is the plan right?", "block": block })),
        )
        .await
        .expect("block ask");
    s.arrived(&c, "block ask opened").await;
    c.asks()
        .close_ask(
            &bot,
            ask.head.id,
            CloseIn {
                state: CloseAs::Retracted,
                note: None,
                actor: None,
            },
        )
        .await
        .expect("block ask retracted");
    s.arrived(&c, "block ask retracted").await;

    c.asks()
        .request_approval(
            &bot,
            id,
            ApprovalIn {
                summary: Some("Please approve".into()),
                actor: None,
            },
        )
        .await
        .expect("approval requested");
    s.arrived(&c, "approval requested").await;

    c.messages()
        .post_on_issue(
            &ada,
            &key,
            "Hello, agents",
            Target::Session(session.to_string()),
            None,
        )
        .await
        .expect("message");
    s.arrived(&c, "message posted").await;
}
