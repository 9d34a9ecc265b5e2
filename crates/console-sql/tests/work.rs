//! The work storage's contract (projects, issues, pins, events, transactions) on SQLite and
//! on PostgreSQL when `COUNTERSIGN_TEST_POSTGRES_URL` names a server
//! (`COUNTERSIGN_REQUIRE_POSTGRES=1` makes it mandatory).

mod common;

use std::collections::HashSet;

use chrono::{Duration, TimeZone, Utc};
use countersign_console_core::Storage;
use countersign_console_core::ids::Login;
use countersign_console_core::work::{
    Actor, Components, EventFacts, EventPage, Issue, IssueFilter, IssueKey, NewEvent, Project,
    ProjectKey, RouteFilter, Status,
};
use countersign_console_sql::SqlStorage;
use serde_json::json;

/// A project key no other run uses.
fn fresh_key() -> ProjectKey {
    let n = uuid::Uuid::new_v4().as_u128();
    let mut k = String::from("T");
    let mut x = n;
    for _ in 0..9 {
        k.push((b'A' + (x % 26) as u8) as char);
        x /= 26;
    }
    ProjectKey::parse(&k).unwrap_or_else(|| panic!("key {k}"))
}

fn issue(project: &ProjectKey, n: i64, rank: &str) -> Issue {
    let t0 = Utc
        .with_ymd_and_hms(2031, 3, 4, 5, 6, 7)
        .single()
        .unwrap_or_default();
    Issue {
        key: IssueKey::new(project, n),
        project: project.clone(),
        title: format!("issue {n}"),
        status: Status::Todo,
        priority: None,
        labels: vec![],
        route: None,
        parent: None,
        rank: rank.into(),
        assignee: Login::parse("ada@example.com"),
        components: Components::default(),
        claim: None,
        repo: None,
        sequence: 1,
        created_at: t0,
        updated_at: t0 + Duration::minutes(n),
        closed_at: None,
    }
}

async fn contract(s: &SqlStorage) {
    let key = fresh_key();
    let t0 = Utc::now();
    let p = Project {
        key: key.clone(),
        name: "Payments".into(),
        created_at: chrono::DateTime::from_timestamp_millis(t0.timestamp_millis())
            .unwrap_or_default(),
    };

    // A transaction that is not committed leaves nothing.
    {
        let mut tx = s.begin().await.expect("begin");
        assert!(tx.projects().insert_project(&p).await.expect("insert"));
    }
    let mut tx = s.begin().await.expect("begin");
    assert_eq!(tx.projects().project(&key).await.expect("read"), None);
    assert!(tx.projects().insert_project(&p).await.expect("insert"));
    assert!(
        !tx.projects()
            .insert_project(&p)
            .await
            .expect("insert twice")
    );
    for n in 1..=3 {
        assert_eq!(
            tx.projects().take_issue_number(&key).await.expect("n"),
            Some((n, None))
        );
    }
    assert_eq!(
        tx.projects()
            .take_issue_number(&ProjectKey::parse("NOPE").expect("key"))
            .await
            .expect("n"),
        None
    );
    let mut one = issue(&key, 1, "m");
    one.labels = vec!["bug".into(), "ui".into()];
    one.priority = Some(0);
    let mut two = issue(&key, 2, "t");
    two.parent = Some(one.key.clone());
    two.route = Some("reviewer".into());
    let mut three = issue(&key, 3, "g");
    three.status = Status::Done;
    three.labels = vec!["ui".into()];
    for i in [&one, &two, &three] {
        tx.issues().insert_issue(i).await.expect("insert issue");
    }
    tx.issues()
        .put_read_state(
            &Login::parse("bo@example.com").expect("login"),
            &two.key,
            0,
            true,
        )
        .await
        .expect("pin");
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    assert!(tx.projects().projects().await.expect("list").contains(&p));
    assert_eq!(
        tx.issues().issue(&one.key).await.expect("read"),
        Some(one.clone())
    );
    assert_eq!(
        tx.issues().last_rank(&key).await.expect("rank").as_deref(),
        Some("t")
    );
    assert_eq!(
        tx.issues()
            .rank_after(&three.key)
            .await
            .expect("after")
            .as_deref(),
        Some("m")
    );
    assert_eq!(
        tx.issues().rank_before(&three.key).await.expect("before"),
        None
    );
    assert_eq!(
        tx.issues().children(&one.key).await.expect("children"),
        vec![(two.key.clone(), Status::Todo)]
    );
    let keys = |v: (Vec<Issue>, i64)| {
        (
            v.0.into_iter()
                .map(|i| i.key.to_string())
                .collect::<Vec<_>>(),
            v.1,
        )
    };
    let base = IssueFilter {
        project: Some(key.clone()),
        ..Default::default()
    };
    let k = |i: &Issue| i.key.to_string();
    // By rank; paged with the total of every match.
    assert_eq!(
        keys(tx.issues().issues(&base).await.expect("all")),
        (vec![k(&three), k(&one), k(&two)], 3)
    );
    let page = IssueFilter {
        limit: Some(1),
        offset: 1,
        ..base.clone()
    };
    assert_eq!(
        keys(tx.issues().issues(&page).await.expect("page")),
        (vec![k(&one)], 3)
    );
    let f = |g: IssueFilter| g;
    for (filter, want) in [
        (
            f(IssueFilter {
                labels: vec!["ui".into()],
                ..base.clone()
            }),
            vec![k(&three), k(&one)],
        ),
        (
            f(IssueFilter {
                labels: vec!["bug".into(), "nope".into()],
                ..base.clone()
            }),
            vec![k(&one)],
        ),
        (
            f(IssueFilter {
                status: vec![Status::Done],
                ..base.clone()
            }),
            vec![k(&three)],
        ),
        (
            f(IssueFilter {
                open: Some(true),
                ..base.clone()
            }),
            vec![k(&one), k(&two)],
        ),
        (
            f(IssueFilter {
                priority: vec![None],
                ..base.clone()
            }),
            vec![k(&three), k(&two)],
        ),
        (
            f(IssueFilter {
                priority: vec![Some(0), Some(3)],
                ..base.clone()
            }),
            vec![k(&one)],
        ),
        (
            f(IssueFilter {
                parent: Some(one.key.clone()),
                ..base.clone()
            }),
            vec![k(&two)],
        ),
        (
            f(IssueFilter {
                pinned_by: Login::parse("bo@example.com"),
                ..base.clone()
            }),
            vec![k(&two)],
        ),
        (
            f(IssueFilter {
                updated_since: Some(one.updated_at + Duration::seconds(30)),
                ..base.clone()
            }),
            vec![k(&three), k(&two)],
        ),
        (
            f(IssueFilter {
                route: Some(RouteFilter::In(vec!["reviewer".into()])),
                ..base.clone()
            }),
            vec![k(&two)],
        ),
        (
            f(IssueFilter {
                route: Some(RouteFilter::NotIn(vec!["reviewer".into()])),
                ..base.clone()
            }),
            vec![],
        ),
        (
            f(IssueFilter {
                route: Some(RouteFilter::NoRoute),
                ..base.clone()
            }),
            vec![k(&one)],
        ),
    ] {
        let n = want.len() as i64;
        assert_eq!(
            keys(tx.issues().issues(&filter).await.expect("filter")),
            (want, n),
            "{filter:?}"
        );
    }
    drop(tx);

    // Updates rewrite the label index; events are numbered in commit order.
    let mut tx = s.begin().await.expect("begin");
    let mut changed = tx
        .issues()
        .issue(&one.key)
        .await
        .expect("read")
        .expect("one");
    changed.labels = vec!["perf".into()];
    changed.sequence = 2;
    tx.issues().update_issue(&changed).await.expect("update");
    let actor = Actor::User {
        login: Login::parse("ada@example.com").expect("login"),
    };
    let mut ids = Vec::new();
    for seq in 1..=3 {
        let e = tx
            .events()
            .append_event(
                &NewEvent {
                    kind: "issue.updated",
                    facts: EventFacts {
                        at: t0,
                        actor: actor.clone(),
                        project: Some(key.clone()),
                        issue: Some(one.key.clone()),
                        artifact: None,
                        session: None,
                        data: json!({ "n": seq }),
                    },
                },
                Some(seq),
            )
            .await
            .expect("append");
        ids.push(e.id);
    }
    tx.commit().await.expect("commit");
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "{ids:?}");
    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.issues().issue(&one.key).await.expect("read"),
        Some(changed)
    );
    let perf = IssueFilter {
        labels: vec!["perf".into()],
        ..base.clone()
    };
    assert_eq!(
        keys(tx.issues().issues(&perf).await.expect("perf")),
        (vec![k(&one)], 1)
    );
    assert!(tx.events().last_event_id().await.expect("last") >= ids[2]);
    let after = tx.events().events_after(ids[0], 2).await.expect("after");
    assert_eq!(
        after.iter().map(|e| e.id).collect::<Vec<_>>(),
        ids[1..].to_vec()
    );
    let page = |after, before, ids: Vec<i64>, descending, limit| EventPage {
        after,
        before,
        ids,
        descending,
        limit,
    };
    let seqs = |v: Vec<countersign_console_core::work::Event>| {
        v.into_iter().filter_map(|e| e.sequence).collect::<Vec<_>>()
    };
    assert_eq!(
        seqs(
            tx.events()
                .issue_events(&one.key, &page(None, None, vec![], false, 50))
                .await
                .expect("log")
        ),
        vec![1, 2, 3]
    );
    assert_eq!(
        seqs(
            tx.events()
                .issue_events(&one.key, &page(None, None, vec![], true, 2))
                .await
                .expect("log")
        ),
        vec![3, 2]
    );
    assert_eq!(
        seqs(
            tx.events()
                .issue_events(&one.key, &page(Some(1), Some(3), vec![], false, 50))
                .await
                .expect("log")
        ),
        vec![2]
    );
    assert_eq!(
        seqs(
            tx.events()
                .issue_events(&one.key, &page(None, None, vec![ids[2]], false, 50))
                .await
                .expect("log")
        ),
        vec![3]
    );
    // A read transaction cannot append.
    assert!(
        tx.events()
            .append_event(
                &NewEvent {
                    kind: "x",
                    facts: EventFacts {
                        at: t0,
                        actor,
                        project: None,
                        issue: None,
                        artifact: None,
                        session: None,
                        data: json!({}),
                    },
                },
                None
            )
            .await
            .is_err()
    );
}

#[tokio::test]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display());
    let s = SqlStorage::connect(&url).await.expect("connect");
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

/// The list's paths agree: a page of one label within a project and statuses (answered from
/// the label rows alone) holds exactly what the general query answers, in the same order,
/// with the same total, after inserts and after updates that move labels, statuses and ranks
/// (SQLite's triggers, PostgreSQL's statements).
async fn label_pages(s: &SqlStorage) {
    let key = fresh_key();
    let other = fresh_key();
    let mut tx = s.begin().await.expect("begin");
    for k in [&key, &other] {
        tx.projects()
            .insert_project(&Project {
                key: k.clone(),
                name: "Labels".into(),
                created_at: Utc::now(),
            })
            .await
            .expect("project");
    }
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let labels = ["a", "b", "c"];
    let mut all = Vec::new();
    for n in 1..=60 {
        let project = if n % 7 == 0 { &other } else { &key };
        let mut i = issue(project, n, &format!("r{:03}", next() % 500));
        i.status = Status::ALL[(next() % 6) as usize];
        i.labels = labels
            .iter()
            .filter(|_| next() % 2 == 0)
            .map(|l| l.to_string())
            .collect();
        tx.issues().insert_issue(&i).await.expect("insert");
        all.push(i);
    }
    tx.commit().await.expect("commit");
    let check = |stage: &'static str| {
        let (key, other) = (key.clone(), other.clone());
        async move {
            let mut tx = s.read().await.expect("read");
            for project in [Some(key.clone()), Some(other.clone()), None] {
                for label in labels {
                    for status in [
                        vec![],
                        vec![Status::Todo],
                        vec![Status::Done, Status::Blocked],
                    ] {
                        for open in [None, Some(true), Some(false)] {
                            let general = IssueFilter {
                                project: project.clone(),
                                status: status.clone(),
                                labels: vec![label.into()],
                                open,
                                ..Default::default()
                            };
                            let (want, want_total) =
                                tx.issues().issues(&general).await.expect("general");
                            for (limit, offset) in [(1000, 0), (3, 0), (3, 2)] {
                                let paged = IssueFilter {
                                    limit: Some(limit),
                                    offset,
                                    ..general.clone()
                                };
                                let (got, total) = tx.issues().issues(&paged).await.expect("paged");
                                assert_eq!(total, want_total, "{stage}: {paged:?}");
                                let want_page: Vec<&IssueKey> = want
                                    .iter()
                                    .skip(offset as usize)
                                    .take(limit as usize)
                                    .map(|i| &i.key)
                                    .collect();
                                let got_page: Vec<&IssueKey> = got.iter().map(|i| &i.key).collect();
                                assert_eq!(got_page, want_page, "{stage}: {paged:?}");
                            }
                        }
                    }
                }
            }
        }
    };
    check("inserted").await;
    // Move labels, statuses and ranks on a third of them.
    let mut tx = s.begin().await.expect("begin");
    for (n, i) in all.iter_mut().enumerate() {
        match n % 3 {
            0 => i.labels = vec![labels[n % 3].into(), "c".into()],
            1 => i.status = Status::ALL[(n / 3) % 6],
            _ => i.rank = format!("q{:03}", n * 7 % 500),
        }
        tx.issues().update_issue(i).await.expect("update");
    }
    tx.commit().await.expect("commit");
    check("updated").await;
}

#[tokio::test]
async fn label_pages_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("l.db").display());
    label_pages(&SqlStorage::connect(&url).await.expect("connect")).await;
}

#[tokio::test]
async fn label_pages_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    label_pages(&SqlStorage::connect(&url).await.expect("connect")).await;
    common::drop_postgres(&url).await;
}

/// Many writers at once, some of which give up (a refused operation) or fail a statement: every
/// committed write is there, none of the others, on SQLite's group-committing writer (each
/// writer in a savepoint of the shared transaction) as on PostgreSQL's own transactions.
async fn writers_that_fail_cost_only_themselves(s: &SqlStorage) {
    let s = std::sync::Arc::new(s.clone());
    let mut tasks = Vec::new();
    for i in 0..60usize {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let key = fresh_key();
            let p = Project {
                key: key.clone(),
                name: format!("writer {i}"),
                created_at: Utc::now(),
            };
            let mut tx = s.begin().await.expect("begin");
            assert!(tx.projects().insert_project(&p).await.expect("insert"));
            match i % 3 {
                // Commits.
                0 => {
                    tx.commit().await.expect("commit");
                    (key, true)
                }
                // Gives up after writing: dropped without committing.
                1 => {
                    drop(tx);
                    (key, false)
                }
                // A statement fails (an issue whose project does not exist), then gives up.
                _ => {
                    let orphan = issue(&fresh_key(), 1, "x");
                    let failed = tx.issues().insert_issue(&orphan).await;
                    assert!(failed.is_err(), "a foreign key holds");
                    drop(tx);
                    (key, false)
                }
            }
        }));
    }
    let mut outcomes = Vec::new();
    for t in tasks {
        outcomes.push(t.await.expect("task"));
    }
    let mut tx = s.read().await.expect("read");
    for (key, committed) in outcomes {
        assert_eq!(
            tx.projects()
                .project(&key)
                .await
                .expect("project")
                .is_some(),
            committed,
            "{key}"
        );
    }
}

#[tokio::test]
async fn writers_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("g.db").display());
    writers_that_fail_cost_only_themselves(&SqlStorage::connect(&url).await.expect("connect"))
        .await;
}

#[tokio::test]
async fn writers_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    writers_that_fail_cost_only_themselves(&SqlStorage::connect(&url).await.expect("connect"))
        .await;
    common::drop_postgres(&url).await;
}

/// What `advice.suggestions` reads: each word's count and the number of issues, and the newest
/// issues holding one of the words (newest first, with the text their index holds), in a
/// transaction and with none (`read_loose`); an issue renamed is found by its new words only
/// (SQLite's index is keyed by the negated rowid and kept by triggers, migration 13).
async fn advice_reads(s: &SqlStorage) {
    let key = fresh_key();
    let mut tx = s.begin().await.expect("begin");
    let p = Project {
        key: key.clone(),
        name: "Payments".into(),
        created_at: Utc::now(),
    };
    assert!(tx.projects().insert_project(&p).await.expect("project"));
    let titles = [
        "Refund a partial payment",
        "Refund fees twice",
        "Rotate the refund service keys",
        "Upgrade PostgreSQL",
    ];
    let mut issues = Vec::new();
    for (n, title) in titles.iter().enumerate() {
        let mut i = issue(&key, n as i64 + 1, &format!("r{n}"));
        i.title = (*title).into();
        if n == 1 {
            i.labels = vec!["billing".into()];
        }
        tx.issues().insert_issue(&i).await.expect("insert");
        issues.push(i);
    }
    tx.commit().await.expect("commit");

    let words = |w: &[&str]| w.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let keys = |c: Vec<countersign_console_core::work::Candidate>| {
        c.into_iter().map(|c| c.key).collect::<Vec<_>>()
    };
    let k = |n: usize| issues[n - 1].key.to_string();
    for loose in [false, true] {
        let mut tx = if loose {
            s.read_loose().await.expect("read")
        } else {
            s.read().await.expect("read")
        };
        assert_eq!(
            tx.issues()
                .word_counts(&words(&["refund", "upgrade", "billing", "nothing"]))
                .await
                .expect("counts"),
            [3, 1, 1, 0]
        );
        assert!(
            tx.issues()
                .word_counts(&[])
                .await
                .expect("no words")
                .is_empty()
        );
        assert_eq!(tx.issues().issue_count().await.expect("issues"), 4);
        let found = tx
            .issues()
            .similar_candidates(&words(&["refund"]), 2)
            .await
            .expect("candidates");
        assert_eq!(
            found.iter().map(|c| c.text.as_str()).collect::<Vec<_>>(),
            [
                "Rotate the refund service keys []",
                "Refund fees twice [\"billing\"]"
            ]
        );
        assert_eq!(keys(found), [k(3), k(2)]);
        assert_eq!(
            keys(
                tx.issues()
                    .similar_candidates(&words(&["refund", "postgresql"]), 10)
                    .await
                    .expect("candidates")
            ),
            [k(4), k(3), k(2), k(1)]
        );
        assert!(
            tx.issues()
                .similar_candidates(&words(&["nothing"]), 10)
                .await
                .expect("none")
                .is_empty()
        );
    }

    // Renamed: found by its new words, no longer by its old ones.
    let mut tx = s.begin().await.expect("begin");
    let mut renamed = issues[0].clone();
    renamed.title = "Upgrade the ledger".into();
    renamed.sequence += 1;
    tx.issues().update_issue(&renamed).await.expect("update");
    tx.commit().await.expect("commit");
    let mut tx = s.read_loose().await.expect("read");
    assert_eq!(
        keys(
            tx.issues()
                .similar_candidates(&words(&["upgrade"]), 10)
                .await
                .expect("candidates")
        ),
        [k(4), k(1)]
    );
    assert_eq!(
        keys(
            tx.issues()
                .similar_candidates(&words(&["refund"]), 10)
                .await
                .expect("candidates")
        ),
        [k(3), k(2)]
    );
    assert_eq!(
        tx.issues()
            .word_counts(&words(&["refund", "upgrade"]))
            .await
            .expect("counts"),
        [2, 2]
    );
}

#[tokio::test]
async fn advice_reads_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("a.db").display());
    advice_reads(&SqlStorage::connect(&url).await.expect("connect")).await;
}

#[tokio::test]
async fn advice_reads_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    advice_reads(&SqlStorage::connect(&url).await.expect("connect")).await;
    common::drop_postgres(&url).await;
}

/// The console's issue lists (issue 27): every filter and order, walked page by page with the
/// cursor each page answers, holds exactly the matches in the order computed here, with the
/// total and the board's counts; the children's progress of a page; and a list of keys longer
/// than any database's parameter limit is bound as one argument.
async fn issue_rows(s: &SqlStorage) {
    use countersign_console_core::work::{IssueAssignee, IssueCursor, IssueListQuery, IssueSort};
    let key = fresh_key();
    let other = fresh_key();
    let mut tx = s.begin().await.expect("begin");
    for k in [&key, &other] {
        tx.projects()
            .insert_project(&Project {
                key: k.clone(),
                name: "Rows".into(),
                created_at: Utc::now(),
            })
            .await
            .expect("project");
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let ada = Login::parse("ada@example.com");
    let bob = Login::parse("bob@example.com");
    let mut all = Vec::new();
    for n in 1..=80 {
        let project = if n % 5 == 0 { &other } else { &key };
        let mut i = issue(project, n, &format!("r{:03}", next() % 500));
        i.status = Status::ALL[(next() % 6) as usize];
        i.priority = match next() % 5 {
            4 => None,
            p => Some(p as u8),
        };
        i.labels = ["a", "b"]
            .iter()
            .filter(|_| next() % 2 == 0)
            .map(|l| l.to_string())
            .collect();
        i.assignee = match next() % 3 {
            0 => ada.clone(),
            1 => bob.clone(),
            _ => None,
        };
        // Ties in both times: the project and number break them.
        i.created_at += Duration::minutes((next() % 9) as i64);
        i.updated_at = i.created_at + Duration::minutes((next() % 4) as i64);
        if n > 10 && n % 3 == 0 {
            i.parent = Some(IssueKey::new(project, n % 10 + 1));
        }
        tx.issues().insert_issue(&i).await.expect("insert");
        all.push(i);
    }
    tx.commit().await.expect("commit");
    let mine = |i: &Issue| i.project == key || i.project == other;

    let mut queries: Vec<IssueListQuery> = Vec::new();
    for sort in IssueSort::ALL {
        for (status, assignee, priority, labels, open) in [
            (vec![], None, vec![], vec![], None),
            (vec![Status::Done], None, vec![], vec![], None),
            (
                vec![],
                Some(IssueAssignee::Person(ada.clone().expect("login"))),
                vec![],
                vec![],
                None,
            ),
            (
                vec![],
                Some(IssueAssignee::Nobody),
                vec![Some(0), None],
                vec![],
                Some(true),
            ),
            (
                vec![Status::Todo, Status::Blocked],
                None,
                vec![Some(1)],
                vec!["a".to_owned()],
                None,
            ),
            (
                vec![],
                None,
                vec![],
                vec!["a".to_owned(), "b".to_owned()],
                Some(false),
            ),
        ] {
            for project in [Some(key.clone()), None] {
                queries.push(IssueListQuery {
                    project,
                    status: status.clone(),
                    assignee: assignee.clone(),
                    priority: priority.clone(),
                    labels: labels.clone(),
                    open,
                    sort,
                    after: None,
                    limit: 7,
                });
            }
        }
    }
    let mut tx = s.read().await.expect("read");
    for q in &queries {
        let mut want: Vec<&Issue> = all
            .iter()
            .filter(|i| q.project.as_ref().is_none_or(|p| i.project == *p))
            .filter(|i| q.status.is_empty() || q.status.contains(&i.status))
            .filter(|i| match &q.assignee {
                None => true,
                Some(IssueAssignee::Person(l)) => i.assignee.as_ref() == Some(l),
                Some(IssueAssignee::Nobody) => i.assignee.is_none(),
            })
            .filter(|i| q.priority.is_empty() || q.priority.contains(&i.priority))
            .filter(|i| q.labels.is_empty() || i.labels.iter().any(|l| q.labels.contains(l)))
            .filter(|i| q.open.is_none_or(|o| i.status.is_open() == o))
            .collect();
        let tie = |i: &Issue| (i.project.as_str().to_owned(), i.key.number());
        match q.sort {
            IssueSort::Rank => want.sort_by_key(|i| {
                (
                    i.project.as_str().to_owned(),
                    i.rank.clone(),
                    i.key.number(),
                )
            }),
            IssueSort::Updated => want.sort_by_key(|i| std::cmp::Reverse((i.updated_at, tie(i)))),
            IssueSort::Created => want.sort_by_key(|i| std::cmp::Reverse((i.created_at, tie(i)))),
            IssueSort::Priority => want.sort_by_key(|i| (i.priority.map_or(4, i64::from), tie(i))),
        }
        // Other runs' projects on a shared database: only this run's count.
        let mut got: Vec<IssueKey> = Vec::new();
        let mut page = q.clone();
        loop {
            let rows = tx.issues().issue_page(&page, 7).await.expect("page");
            got.extend(rows.iter().filter(|i| mine(i)).map(|i| i.key.clone()));
            match rows.last() {
                Some(last) if rows.len() == 7 => {
                    // The cursor goes through its text form, as a page's link carries it.
                    let c = IssueCursor::after(q.sort, last).encode();
                    page.after = Some(IssueCursor::parse(&c).expect("cursor parses"));
                }
                _ => break,
            }
        }
        let want_keys: Vec<IssueKey> = want.iter().map(|i| i.key.clone()).collect();
        assert_eq!(got, want_keys, "{q:?}");
        if q.project.is_some() {
            let total = tx.issues().issue_page_total(q).await.expect("total");
            assert_eq!(total, want.len() as i64, "{q:?}");
            let counts = tx.issues().status_counts(q).await.expect("counts");
            for s in Status::ALL {
                let n = all
                    .iter()
                    .filter(|i| q.project.as_ref().is_none_or(|p| i.project == *p))
                    .filter(|i| match &q.assignee {
                        None => true,
                        Some(IssueAssignee::Person(l)) => i.assignee.as_ref() == Some(l),
                        Some(IssueAssignee::Nobody) => i.assignee.is_none(),
                    })
                    .filter(|i| q.priority.is_empty() || q.priority.contains(&i.priority))
                    .filter(|i| {
                        q.labels.is_empty() || i.labels.iter().any(|l| q.labels.contains(l))
                    })
                    .filter(|i| q.open.is_none_or(|o| i.status.is_open() == o))
                    .filter(|i| i.status == s)
                    .count() as i64;
                let got = counts.iter().find(|(c, _)| *c == s).map_or(0, |(_, n)| *n);
                assert_eq!(got, n, "{s:?} {q:?}");
            }
        }
    }

    // The children's progress of every issue at once.
    let keys: Vec<IssueKey> = all.iter().map(|i| i.key.clone()).collect();
    let mut progress = tx.issues().child_progress(&keys).await.expect("progress");
    progress.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    let mut want: Vec<(IssueKey, i64, i64)> = Vec::new();
    for p in &all {
        let kids: Vec<&Issue> = all
            .iter()
            .filter(|c| c.parent.as_ref() == Some(&p.key))
            .collect();
        if !kids.is_empty() {
            let done = kids.iter().filter(|c| !c.status.is_open()).count() as i64;
            want.push((p.key.clone(), done, kids.len() as i64));
        }
    }
    want.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
    assert!(!want.is_empty());
    assert_eq!(progress, want);

    // 70,000 keys: above SQLite's 32,766 parameters and PostgreSQL's 65,535, one argument.
    let many: Vec<IssueKey> = (1..=70_000).map(|n| IssueKey::new(&key, n)).collect();
    let children = tx
        .issues()
        .children_of(&many)
        .await
        .expect("children of many");
    assert_eq!(
        children.len(),
        all.iter()
            .filter(|i| i.parent.is_some() && i.project == key)
            .count()
    );
    assert_eq!(
        tx.issues()
            .child_progress(&many)
            .await
            .expect("progress of many")
            .len(),
        // Every parent key of this project's range the children name (some name numbers the
        // other project holds: no issue, and still children).
        all.iter()
            .filter_map(|i| i.parent.clone())
            .filter(|p| p.project() == key)
            .collect::<HashSet<_>>()
            .len()
    );
    let none = tx.asks().open_asks_of(&many).await.expect("asks of many");
    assert!(none.is_empty());
    let docs = tx
        .documents()
        .primary_documents(&many)
        .await
        .expect("documents of many");
    assert!(docs.is_empty());
}

#[tokio::test]
async fn issue_rows_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("r.db").display());
    issue_rows(&SqlStorage::connect(&url).await.expect("connect")).await;
}

#[tokio::test]
async fn issue_rows_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    issue_rows(&SqlStorage::connect(&url).await.expect("connect")).await;
    common::drop_postgres(&url).await;
}
