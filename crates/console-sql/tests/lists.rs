//! The console's issue lists through the core (issue 27), on SQLite and on PostgreSQL (when
//! `COUNTERSIGN_TEST_POSTGRES_URL` names a server): pages of rows followed by their `next`
//! cursor, each row's children's progress and open asks, the total, a board's counts.

mod common;

use std::collections::HashSet;
use std::sync::Arc;

use chrono::Utc;
use countersign_console_core::console::asks::{NewAsk, OptionIn};
use countersign_console_core::console::{ConsoleConfig, NewIssue};
use countersign_console_core::work::{
    Actor, IssueCursor, IssueListQuery, IssueSort, ProjectKey, Status,
};
use countersign_console_core::{Console, Login, ManualClock, Parts, SystemEntropy};
use countersign_console_sql::SqlStorage;

fn console(s: &Arc<SqlStorage>) -> Console {
    Console::new(
        Parts {
            storage: s.clone(),
            broker: None,
            idp: None,
            clock: Arc::new(ManualClock::new(Utc::now())),
            entropy: Arc::new(SystemEntropy),
            presence: None,
            service_tokens: None,
        },
        ConsoleConfig::default(),
        None,
    )
}

async fn rows(s: Arc<SqlStorage>) {
    let c = console(&s);
    let ada = Actor::User {
        login: Login::parse("ada@example.com").expect("login"),
    };
    let agent = Actor::Agent {
        owner: None,
        service: None,
        session: countersign_console_core::ids::SessionId::parse("s-1"),
    };
    c.issues()
        .create_project(&ada, "LIST", "Lists")
        .await
        .expect("project");
    let statuses = [Status::Todo, Status::InProgress, Status::Done];
    for n in 1..=120 {
        let parent = (n > 100).then(|| "LIST-1".to_owned());
        c.issues()
            .create_issue(
                &ada,
                NewIssue {
                    project: Some("LIST".into()),
                    title: Some(format!("Issue {n}")),
                    status: Some(statuses[n % 3]),
                    priority: Some((n % 4) as u8),
                    parent,
                    ..Default::default()
                },
            )
            .await
            .expect("issue");
    }
    for q in ["One?", "Two?"] {
        c.asks()
            .open_issue_ask(
                &agent,
                "LIST-2",
                NewAsk {
                    question: q.into(),
                    options: vec![OptionIn {
                        id: Some("yes".into()),
                        label: "Yes".into(),
                    }],
                    block: None,
                    actor: None,
                },
            )
            .await
            .expect("ask");
    }

    // Three pages of the default order (rank: creation order), 50, 50 and 20.
    let mut q = IssueListQuery {
        project: ProjectKey::parse("LIST"),
        ..Default::default()
    };
    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    loop {
        let page = c.issues().issue_rows(&q).await.expect("page");
        assert_eq!(page.total, 120);
        sizes.push(page.rows.len());
        seen.extend(page.rows.iter().map(|r| r.issue.key.number()));
        if seen.len() == 50 {
            let first = c
                .issues()
                .issue_rows(&IssueListQuery {
                    after: None,
                    ..q.clone()
                })
                .await
                .expect("first");
            let one = &first.rows[0];
            assert_eq!(one.issue.key.as_str(), "LIST-1");
            let kids = one.children.expect("LIST-1 has children");
            assert_eq!(kids.total, 20);
            // Issues 101..120: a third are done.
            let done = (101..=120).filter(|n| n % 3 == 2).count() as i64;
            assert_eq!(kids.done, done);
            assert_eq!(first.rows[1].open_asks, 2);
            assert_eq!(first.rows[1].children, None);
        }
        match page.next {
            Some(next) => q.after = Some(IssueCursor::parse(&next).expect("cursor")),
            None => break,
        }
    }
    assert_eq!(sizes, [50, 50, 20]);
    assert_eq!(seen, (1..=120).collect::<Vec<i64>>());

    // Filters and another order; a cursor of one order is refused in another.
    let done = c
        .issues()
        .issue_rows(&IssueListQuery {
            project: ProjectKey::parse("LIST"),
            status: vec![Status::Done],
            sort: IssueSort::Priority,
            limit: 250,
            ..Default::default()
        })
        .await
        .expect("done");
    assert_eq!(done.total, 40);
    assert_eq!(done.rows.len(), 40);
    assert!(done.next.is_none());
    assert!(done.rows.iter().all(|r| r.issue.status == Status::Done));
    let priorities: Vec<u8> = done.rows.iter().filter_map(|r| r.issue.priority).collect();
    assert!(
        priorities.windows(2).all(|w| w[0] <= w[1]),
        "{priorities:?}"
    );
    let keys: HashSet<_> = done.rows.iter().map(|r| r.issue.key.clone()).collect();
    assert_eq!(keys.len(), 40);
    let err = c
        .issues()
        .issue_rows(&IssueListQuery {
            project: ProjectKey::parse("LIST"),
            sort: IssueSort::Updated,
            after: q.after.clone(),
            ..Default::default()
        })
        .await
        .expect_err("another order's cursor");
    assert_eq!(err.code_str(), "INVALID_QUERY");

    // A board's counts: every status, zeros included, whatever the status filter.
    let counts = c
        .issues()
        .status_counts(&IssueListQuery {
            project: ProjectKey::parse("LIST"),
            status: vec![Status::Done],
            ..Default::default()
        })
        .await
        .expect("counts");
    assert_eq!(counts.len(), Status::ALL.len());
    let of = |s: Status| counts.iter().find(|(c, _)| *c == s).map(|(_, n)| *n);
    assert_eq!(of(Status::Todo), Some(40));
    assert_eq!(of(Status::InProgress), Some(40));
    assert_eq!(of(Status::Done), Some(40));
    assert_eq!(of(Status::Blocked), Some(0));
}

#[tokio::test]
async fn issue_rows_through_the_console_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display());
    rows(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
}

#[tokio::test]
async fn issue_rows_through_the_console_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    rows(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
    common::drop_postgres(&url).await;
}
