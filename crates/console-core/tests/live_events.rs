//! Every event a write appends reaches the live stream without the caller doing anything: the
//! console on SQLite in memory (the real storage), its live event watch subscribed, and each
//! kind of write run through the console's API. After each, the watch stands at the log's
//! last event id (every appended event is published), and a refused write publishes nothing.
//! Likewise every delivery a write opens reaches the session's link once its transaction
//! committed, handed over by the unit of work, not by the write's own code.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use chrono::{TimeZone, Utc};
use countersign_console_core::console::asks::{
    AnswerIn, ApprovalIn, AskPatch, CloseAs, CloseIn, NewAsk, NewComment,
};
use countersign_console_core::console::documents::{At, Upload};
use countersign_console_core::console::{NewBroadcast, Presence};
use countersign_console_core::doc::{EditOp, Quote};
use countersign_console_core::ids::SessionId;
use countersign_console_core::work::Actor;
use countersign_console_core::work::messages::{
    AttemptState, Deliverable, Delivery, LiveSession, Mode, Target,
};
use countersign_console_core::{
    Console, ConsoleConfig, Human, IssuePatch, Login, ManualClock, NewIssue, Parts, SystemEntropy,
};
use countersign_console_sql::SqlStorage;
use serde_json::json;
use tokio::sync::watch;

async fn console(presence: Option<Arc<dyn Presence>>) -> Console {
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
            presence,
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
    let c = console(None).await;
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
    let c = console(None).await;
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

/// This replica's session links, as the console's server holds them: each delivery handed
/// over is kept with the live watch's id at that moment (what was committed and published),
/// and taken or refused as `take` says.
#[derive(Debug, Default)]
struct Links {
    handed: Mutex<Vec<(Delivery, i64)>>,
    take: AtomicBool,
    watch: OnceLock<watch::Receiver<i64>>,
}

impl Presence for Links {
    fn replica(&self) -> &str {
        "replica-1"
    }

    fn deliver(&self, d: &Delivery) -> bool {
        let published = self.watch.get().map_or(-1, |w| *w.borrow());
        if let Ok(mut h) = self.handed.lock() {
            h.push((d.clone(), published));
        }
        self.take.load(Ordering::SeqCst)
    }
}

impl Links {
    /// After a write: it handed over exactly one delivery, of `item`'s attempt `attempt`,
    /// after its transaction committed (the watch already stood at the log's last id, but for
    /// the `later` events appended after the hand-over).
    async fn handed_one(
        &self,
        c: &Console,
        item: Deliverable,
        attempt: i64,
        later: i64,
        what: &str,
    ) {
        let handed: Vec<_> = self.handed.lock().expect("links").drain(..).collect();
        let last = c.last_event_id().await.expect("last event id");
        let [(d, published)] = handed.as_slice() else {
            panic!(
                "{what}: {} deliveries handed to the link, not 1",
                handed.len()
            );
        };
        assert_eq!(
            (d.item, d.attempt),
            (item, attempt),
            "{what}: another delivery"
        );
        assert_eq!(
            *published,
            last - later,
            "{what}: handed over before its transaction committed and was published"
        );
    }
}

/// Each write that opens a delivery attempt (a message on an issue, to a session, a retry, a
/// broadcast, a comment's mention and its retry) has it handed to the session's link on this
/// replica after the commit, with no call of its own; a delivery the link refuses fails
/// (`not_live`) in the unit of work's after-commit step.
#[tokio::test]
async fn every_delivery_a_write_opens_reaches_the_link_after_its_commit() {
    let links = Arc::new(Links::default());
    links.take.store(true, Ordering::SeqCst);
    let c = console(Some(links.clone())).await;
    links.watch.set(c.events_watch()).expect("watch set once");
    let ada = person();
    let session = SessionId::named("live-links-1").expect("session");
    let bot = agent(&session);
    let now = c.now();
    let live = LiveSession {
        session_id: session.clone(),
        title: "An agent".into(),
        roles: Vec::new(),
        capabilities: Vec::new(),
        modes: vec![Mode::Send],
        owner: None,
        service: None,
        live_since: now,
        last_activity_at: now,
        open_asks: 0,
        replica: "replica-1".into(),
        link: 1,
    };
    c.messages()
        .session_hello(&bot, &live)
        .await
        .expect("hello");
    c.issues()
        .create_project(&ada, "LINK", "Links")
        .await
        .expect("project");
    let new: NewIssue = input(json!({ "project": "LINK", "title": "Delivered" }));
    let (issue, _) = c.issues().create_issue(&ada, new).await.expect("issue");
    let key = issue.key.to_string();
    assert!(links.handed.lock().expect("links").is_empty());
    let to_session = || Target::Session(session.to_string());

    let m = c
        .messages()
        .post_on_issue(&ada, &key, "On the issue", to_session(), None)
        .await
        .expect("message on the issue");
    let item = Deliverable::Message(m.id);
    links
        .handed_one(&c, item, 1, 0, "message on the issue")
        .await;
    c.messages().retry(&ada, m.id).await.expect("retry");
    links.handed_one(&c, item, 2, 0, "message retried").await;

    let human = Human {
        login: Login::parse("ada@example.com").expect("login"),
        csrf_token: "csrf".into(),
        session_key: "key".into(),
    };
    let m = c
        .messages()
        .send_to_session(&human, &session, "To the session", None)
        .await
        .expect("message to the session");
    links
        .handed_one(
            &c,
            Deliverable::Message(m.id),
            1,
            0,
            "message to the session",
        )
        .await;

    let new = NewBroadcast {
        idempotency_key: "links-1".into(),
        sessions: vec![session.to_string()],
        mode: Mode::Send,
        body: "To everyone".into(),
    };
    let (sent, fresh) = c
        .messages()
        .broadcast(&human, new)
        .await
        .expect("broadcast");
    assert!(fresh);
    let copy = sent.broadcast.recipients[0].message.id;
    links
        .handed_one(&c, Deliverable::Message(copy), 1, 0, "broadcast")
        .await;

    let comment = c
        .asks()
        .comment_on_issue(
            &ada,
            &key,
            NewComment {
                body: "Have a look".into(),
                mentions: vec![session.to_string()],
                ..Default::default()
            },
        )
        .await
        .expect("comment with a mention");
    let item = Deliverable::Mention(comment.comment.id);
    links.handed_one(&c, item, 1, 0, "comment's mention").await;
    c.asks()
        .retry_mention(&ada, comment.comment.id, None)
        .await
        .expect("mention retried");
    links.handed_one(&c, item, 2, 0, "mention retried").await;

    // The link refuses: the attempt fails in the unit of work's after-commit step.
    links.take.store(false, Ordering::SeqCst);
    let m = c
        .messages()
        .post_on_issue(&ada, &key, "Refused", to_session(), None)
        .await
        .expect("message the link refuses");
    assert_eq!(m.deliveries[0].state, AttemptState::Pending);
    let item = Deliverable::Message(m.id);
    links.handed_one(&c, item, 1, 1, "refused message").await;
    let stored = c.messages().on_issue(&key, m.id).await.expect("message");
    let attempt = &stored.deliveries[0];
    assert_eq!(
        attempt.state,
        AttemptState::Failed,
        "a refused delivery fails"
    );
    assert_eq!(attempt.error.as_deref(), Some("not_live"));
}
