//! Search through the core (issue 48), on SQLite and on PostgreSQL (when
//! `COUNTERSIGN_TEST_POSTGRES_URL` names a server): a word's beginning finds it, every word
//! must match, the matched words of each row are marked exactly (and only those: markup in a
//! title is text), a broadcast's copies are one row linked to the broadcast, ranking puts the
//! issue that says the words most and most briefly first, and a kind with more matches than its
//! window says so; and each way PostgreSQL's statement reads the issues' window gives the same
//! answers as SQLite's ([`paths`]).

mod common;

use std::sync::Arc;

use chrono::Utc;
use countersign_console_core::console::{ConsoleConfig, IssuePatch, NewIssue};
use countersign_console_core::ids::{BroadcastId, MessageId};
use countersign_console_core::work::messages::{Broadcast, Message, Mode, Target};
use countersign_console_core::work::{Actor, SearchKind, SearchPage, SearchRow};
use countersign_console_core::{Console, Login, ManualClock, Parts, Storage, SystemEntropy};
use countersign_console_sql::SqlStorage;

fn console(s: &Arc<SqlStorage>) -> Console {
    console_at(s, Arc::new(ManualClock::new(Utc::now())))
}

fn console_at(s: &Arc<SqlStorage>, clock: Arc<ManualClock>) -> Console {
    Console::new(
        Parts {
            storage: s.clone(),
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

fn ada() -> Actor {
    Actor::User {
        login: Login::parse("ada@example.com").expect("login"),
    }
}

fn row<'a>(page: &'a SearchPage, id: &str) -> &'a SearchRow {
    page.rows
        .iter()
        .find(|r| r.id == id)
        .unwrap_or_else(|| panic!("{id} in {:?}", page.rows))
}

fn issue_ids(page: &SearchPage) -> Vec<&str> {
    page.rows
        .iter()
        .filter(|r| r.kind == SearchKind::Issue)
        .map(|r| r.id.as_str())
        .collect()
}

async fn search(s: Arc<SqlStorage>) {
    let c = console(&s);
    c.issues()
        .create_project(&ada(), "SRCH", "Search")
        .await
        .expect("project");
    for title in [
        "Deploy the payment service",           // SRCH-1
        "Deployment checklist for payments",    // SRCH-2
        "Rotate keys",                          // SRCH-3
        "Deploy, deploy, deploy: the rollback", // SRCH-4
        "<b>Deploy</b> & <i>pay</i> now",       // SRCH-5
        "A long and winding description that mentions a deploy only once among many words",
    ] {
        c.issues()
            .create_issue(
                &ada(),
                NewIssue {
                    project: Some("SRCH".into()),
                    title: Some(title.into()),
                    ..Default::default()
                },
            )
            .await
            .expect("issue");
    }

    // A word's beginning finds it ("deplo" finds "Deploy" and "Deployment"); every word must
    // match.
    let found = c.search("deplo", None, 50, 0).await.expect("search");
    let mut ids = issue_ids(&found);
    ids.sort();
    assert_eq!(
        ids,
        ["SRCH-1", "SRCH-2", "SRCH-4", "SRCH-5", "SRCH-6"],
        "{found:?}"
    );
    assert_eq!((found.total, found.more), (5, false));
    // A word that begins no indexed word: nothing, whatever the others find.
    let none = c.search("deplo zzqx", None, 50, 0).await.expect("search");
    assert_eq!((none.rows.len(), none.total), (0, 0), "{none:?}");
    let found = c.search("deplo pay", None, 50, 0).await.expect("search");
    let mut ids = issue_ids(&found);
    ids.sort();
    assert_eq!(ids, ["SRCH-1", "SRCH-2", "SRCH-5"], "{found:?}");

    // The matched words are marked, exactly: whole words that begin with a query word, in
    // characters; never a neighbour, never the markup around a word.
    let r = row(&found, "SRCH-2");
    assert_eq!(r.title, "Deployment checklist for payments");
    assert_eq!(r.title_marks, [[0, 10], [25, 33]]);
    assert_eq!(r.snippet, r.title);
    assert_eq!(r.snippet_marks, r.title_marks);
    let r = row(&found, "SRCH-5");
    assert_eq!(r.title, "<b>Deploy</b> & <i>pay</i> now");
    assert_eq!(r.title_marks, [[3, 9], [19, 22]]);
    let marked: Vec<String> = r
        .title_marks
        .iter()
        .map(|[a, b]| r.title.chars().skip(*a).take(b - a).collect())
        .collect();
    assert_eq!(marked, ["Deploy", "pay"]);

    // Ranking: the title that says "deploy" most comes first, the long one that says it once
    // among many words last.
    let found = c.search("deploy", None, 50, 0).await.expect("search");
    let ids = issue_ids(&found);
    assert_eq!(ids.first(), Some(&"SRCH-4"), "{found:?}");
    assert_eq!(ids.last(), Some(&"SRCH-6"), "{found:?}");

    // A broadcast's copies (one to each session) are one row, linked to the broadcast; a
    // message of its own is its own row.
    let t0 = Utc::now();
    let b = Broadcast {
        id: BroadcastId(uuid::Uuid::new_v4()),
        login: Login::parse("ada@example.com").expect("login"),
        idempotency_key: uuid::Uuid::new_v4().to_string(),
        fingerprint: "f".into(),
        mode: Mode::Send,
        body: "Zebra crossing closes at noon".into(),
        by: ada(),
        excluded: vec![],
        created_at: t0,
    };
    let mut tx = s.begin().await.expect("begin");
    assert!(tx.messages().insert_broadcast(&b).await.expect("broadcast"));
    let mut copies = Vec::new();
    for n in 0..3 {
        let id = MessageId(uuid::Uuid::new_v4());
        copies.push(id.to_string());
        tx.messages()
            .insert_message(&Message {
                id,
                thread_id: id,
                parent: None,
                issue: None,
                broadcast: Some(b.id),
                target: Some(Target::Session(format!("s-{n}"))),
                delivery: Some(Mode::Send),
                body: b.body.clone(),
                notice: None,
                author: ada(),
                created_at: t0,
            })
            .await
            .expect("copy");
    }
    let alone = MessageId(uuid::Uuid::new_v4());
    tx.messages()
        .insert_message(&Message {
            id: alone,
            thread_id: alone,
            parent: None,
            issue: None,
            broadcast: None,
            target: Some(Target::Session("s-9".into())),
            delivery: Some(Mode::Send),
            body: "A zebra of its own".into(),
            notice: None,
            author: ada(),
            created_at: t0,
        })
        .await
        .expect("message");
    tx.commit().await.expect("commit");
    let found = c.search("zebr", None, 50, 0).await.expect("search");
    let messages: Vec<&SearchRow> = found
        .rows
        .iter()
        .filter(|r| r.kind == SearchKind::Message)
        .collect();
    assert_eq!(messages.len(), 2, "{found:?}");
    assert_eq!(found.total, 2);
    let copy = messages
        .iter()
        .find(|r| r.broadcast.is_some())
        .expect("the broadcast's row");
    assert_eq!(copy.broadcast.as_deref(), Some(b.id.to_string().as_str()));
    assert_eq!(copy.page, format!("/broadcasts/{}", b.id));
    assert!(copies.contains(&copy.id), "{copy:?}");
    assert_eq!(copy.snippet_marks.len(), 1, "{copy:?}");
    let own = messages
        .iter()
        .find(|r| r.broadcast.is_none())
        .expect("the message's row");
    assert_eq!(own.id, alone.to_string());
    assert_eq!(own.page, format!("/messages/{alone}"));

    // More matches than a kind's window: counted up to one past it, and said.
    for n in 0..105 {
        c.issues()
            .create_issue(
                &ada(),
                NewIssue {
                    project: Some("SRCH".into()),
                    title: Some(format!("Quokka census {n}")),
                    ..Default::default()
                },
            )
            .await
            .expect("issue");
    }
    let found = c.search("quokka", None, 20, 0).await.expect("search");
    assert_eq!(
        (found.rows.len(), found.reachable, found.total, found.more),
        (20, 100, 101, true)
    );
    // The window is the newest: the first issues are out of it.
    let all = c.search("quokka", None, 50, 50).await.expect("search");
    assert!(
        found
            .rows
            .iter()
            .chain(&all.rows)
            .all(|r| r.title != "Quokka census 0"),
        "{all:?}"
    );
}

/// Each way a statement may read the issues' window (on PostgreSQL: one word's postings, two
/// words' merged, the GIN index for words that begin several words, the creation index for a
/// word that begins more than 64), within a project or not, after a title changes.
async fn paths(s: Arc<SqlStorage>) {
    let clock = Arc::new(ManualClock::new(Utc::now()));
    let c = console_at(&s, clock.clone());
    // Each issue a millisecond after the one before: "newest" is the order they were made in.
    let new = |project: &'static str, title: String| {
        clock.advance(chrono::Duration::milliseconds(1));
        NewIssue {
            project: Some(project.into()),
            title: Some(title),
            ..Default::default()
        }
    };
    for (key, name) in [("PATH", "Paths"), ("PAT", "Pat")] {
        c.issues()
            .create_project(&ada(), key, name)
            .await
            .expect("project");
    }
    for n in 0..105 {
        let i = new("PATH", format!("Quokka census {n}"));
        c.issues().create_issue(&ada(), i).await.expect("issue");
    }
    // 65 words that begin with "xq".
    for n in 0..65 {
        let i = new("PATH", format!("Xq{n}z survey"));
        c.issues().create_issue(&ada(), i).await.expect("issue");
    }
    // The newest: another project, whose key begins the first's.
    for t in ["Quokka census elsewhere", "Rotate keys"] {
        let i = new("PAT", t.into());
        c.issues().create_issue(&ada(), i).await.expect("issue");
    }
    let counted = |p: &SearchPage| (p.rows.len(), p.total, p.more);

    // Two words, each one word: the newest 101 of their common issues, in any project.
    let found = c
        .search("quokka census", None, 20, 0)
        .await
        .expect("search");
    assert_eq!(counted(&found), (20, 101, true), "{found:?}");
    assert!(found.rows.iter().any(|r| r.id == "PAT-1"), "{found:?}");
    assert!(found.rows.iter().all(|r| r.title != "Quokka census 0"));
    // Within a project: its issues alone ("PAT" is not "PATH").
    let found = c.search("quokka census", Some("PATH"), 50, 0).await;
    let found = found.expect("search");
    assert_eq!((found.total, found.more), (101, true));
    assert!(
        found.rows.iter().all(|r| r.id.starts_with("PATH-")),
        "{found:?}"
    );
    for q in ["quokka census", "quokka", "quok"] {
        let found = c.search(q, Some("PAT"), 50, 0).await.expect("search");
        assert_eq!(issue_ids(&found), ["PAT-1"], "{q}: {found:?}");
        assert_eq!(found.total, 1);
    }

    // A word that begins more than 64 words, alone and with another; one that begins eleven.
    for (q, n) in [
        ("xq", 65),
        ("xq survey", 65),
        ("xq1", 11),
        ("xq1 survey", 11),
    ] {
        let found = c.search(q, None, 100, 0).await.expect("search");
        assert_eq!(counted(&found), (n, n as i64, false), "{q}: {found:?}");
        assert!(
            found.rows.iter().all(|r| r.title.starts_with("Xq")),
            "{found:?}"
        );
    }
    let found = c.search("xq10z", None, 100, 0).await.expect("search");
    assert_eq!(issue_ids(&found), ["PATH-116"], "{found:?}");

    // A title changed: its old words find it no more, its new ones do.
    let patch = IssuePatch {
        title: Some("Rotate zebras".into()),
        ..Default::default()
    };
    c.issues()
        .update_issue(&ada(), "PAT-2", patch)
        .await
        .expect("update");
    for (q, ids) in [
        ("keys", vec![]),
        ("rotate keys", vec![]),
        ("zebra", vec!["PAT-2"]),
        ("rotate zebra", vec!["PAT-2"]),
    ] {
        let found = c.search(q, None, 50, 0).await.expect("search");
        assert_eq!(issue_ids(&found), ids, "{q}: {found:?}");
    }
}

#[tokio::test]
async fn search_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
    search(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
}

#[tokio::test]
async fn search_paths_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("s.db").display());
    paths(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
}

#[tokio::test]
async fn search_paths_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    paths(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
    common::drop_postgres(&url).await;
}

#[tokio::test]
async fn search_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    search(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
    common::drop_postgres(&url).await;
}
