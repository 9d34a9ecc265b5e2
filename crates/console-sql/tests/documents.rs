//! The artifacts storage's contract ([`DocumentTx`]) on SQLite and on PostgreSQL when
//! `COUNTERSIGN_TEST_POSTGRES_URL` names a server (`COUNTERSIGN_REQUIRE_POSTGRES=1` makes it
//! mandatory): artifacts by slug and filename, document content, versions with bytes (every
//! byte value), the reference graph, the per-part index and its search, primary documents, the
//! document log apart from the issue's.

mod common;

use chrono::{Duration, Utc};
use countersign_console_core::Storage;
use countersign_console_core::ids::{ArtifactId, Login, SessionId};
use countersign_console_core::work::documents::{
    Artifact, ArtifactKind, Content, Edge, EdgeKind, EdgeQuery, LogEntry, Scope, Snapshot,
    StoredDocument, Version, VersionKind, VersionRef,
};
use countersign_console_core::work::{
    Actor, Components, EventFacts, EventPage, Issue, IssueKey, NewEvent, Project, ProjectKey,
    Status,
};
use countersign_console_sql::SqlStorage;
use serde_json::json;

fn fresh_key() -> ProjectKey {
    let mut x = uuid::Uuid::new_v4().as_u128();
    let mut k = String::from("D");
    for _ in 0..9 {
        k.push((b'A' + (x % 26) as u8) as char);
        x /= 26;
    }
    ProjectKey::parse(&k).unwrap_or_else(|| panic!("key {k}"))
}

fn now_ms() -> chrono::DateTime<Utc> {
    chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap_or_default()
}

fn artifact(scope: Scope, slug: &str, filename: &str, kind: ArtifactKind) -> Artifact {
    let t = now_ms();
    let ada = Actor::User {
        login: Login::parse("ada@example.com").unwrap_or_else(|| panic!("login")),
    };
    Artifact {
        id: ArtifactId(uuid::Uuid::new_v4()),
        scope,
        slug: slug.into(),
        filename: filename.into(),
        kind,
        content_type: "text/markdown".into(),
        size: 3,
        token: "t".repeat(64),
        sequence: 1,
        version: Some(VersionRef {
            number: 1,
            name: None,
            kind: VersionKind::Settled,
        }),
        settled: true,
        changed_at: t,
        changed_by: ada.clone(),
        created_by: ada,
        created_at: t,
        updated_at: t,
        tasks: (0, 0),
        log_entry: 0,
        log_len: 0,
    }
}

async fn contract(s: &SqlStorage) {
    let key = fresh_key();
    let t0 = now_ms();
    let mut tx = s.begin().await.expect("begin");
    tx.projects()
        .insert_project(&Project {
            key: key.clone(),
            name: "Docs".into(),
            created_at: t0,
        })
        .await
        .expect("project");
    let issue_key = IssueKey::new(&key, 1);
    tx.issues()
        .insert_issue(&Issue {
            key: issue_key.clone(),
            project: key.clone(),
            title: "with documents".into(),
            status: Status::Todo,
            priority: None,
            labels: vec![],
            route: None,
            parent: None,
            rank: "m".into(),
            assignee: None,
            components: Components::default(),
            claim: None,
            repo: None,
            sequence: 1,
            created_at: t0,
            updated_at: t0,
            closed_at: None,
        })
        .await
        .expect("issue");
    let scope = Scope::Issue(issue_key.clone());
    let mut plan = artifact(scope.clone(), "plan", "plan.md", ArtifactKind::Document);
    plan.created_at = t0 - Duration::seconds(1);
    plan.tasks = (1, 2);
    let notes = artifact(scope.clone(), "notes", "notes.md", ArtifactKind::Document);
    let mut blob = artifact(scope.clone(), "blob", "blob.bin", ArtifactKind::File);
    blob.content_type = "application/octet-stream".into();
    for a in [&plan, &notes, &blob] {
        tx.documents()
            .insert_artifact(a)
            .await
            .expect("insert artifact");
    }
    let state = Snapshot {
        markdown: "# Plan\n\n- [x] one\n- [ ] two\n".into(),
        block_ids: vec!["h1".into(), "l1".into(), "i1".into(), "i2".into()],
    };
    tx.documents()
        .put_snapshot(plan.id, &state)
        .await
        .expect("snapshot");
    tx.documents()
        .put_snapshot(
            notes.id,
            &Snapshot {
                markdown: String::new(),
                block_ids: vec![],
            },
        )
        .await
        .expect("snapshot");
    let entry = |n: i64, text: &str| LogEntry {
        entry: n,
        start: 2,
        end: 6,
        text: text.into(),
        ops: "[]".into(),
        ids: vec!["x1".into(), "x2".into()],
        token: "t".repeat(64),
    };
    tx.documents()
        .append_log(plan.id, &entry(1, "Spec"))
        .await
        .expect("log");
    tx.documents()
        .append_log(plan.id, &entry(2, "Note"))
        .await
        .expect("log");
    let every_byte: Vec<u8> = (0..=255u8).cycle().take(4096).collect();
    let v = |n: i64| Version {
        number: n,
        name: None,
        kind: VersionKind::Settled,
        token: "t".repeat(64),
        content_type: "application/octet-stream".into(),
        size: 4096,
        by: plan.created_by.clone(),
        created_at: t0,
    };
    tx.documents()
        .insert_version(blob.id, &v(1), &Content::Bytes(every_byte.clone()))
        .await
        .expect("version");
    tx.documents()
        .insert_version(plan.id, &v(1), &Content::Markdown(state.markdown.clone()))
        .await
        .expect("version");
    tx.documents()
        .name_version(plan.id, 1, "first")
        .await
        .expect("name");
    tx.documents()
        .index_text(
            plan.id,
            &[
                ("".into(), "plan.md".into()),
                ("h1".into(), "# Plan zebra".into()),
                ("l1".into(), "- giraffe".into()),
            ],
            &[],
        )
        .await
        .expect("index");
    tx.documents()
        .index_text(
            notes.id,
            &[
                ("".into(), "notes.md".into()),
                ("b".into(), "zebra only".into()),
            ],
            &[],
        )
        .await
        .expect("index");
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.documents().artifact(plan.id).await.expect("read"),
        Some(plan.clone())
    );
    assert_eq!(
        tx.documents()
            .artifact_by_slug(&scope, "notes")
            .await
            .expect("slug"),
        Some(notes.clone())
    );
    assert_eq!(
        tx.documents()
            .artifact_by_slug(&Scope::Project(key.clone()), "notes")
            .await
            .expect("slug"),
        None
    );
    assert_eq!(
        tx.documents()
            .artifacts_by_filename(&scope, "blob.bin")
            .await
            .expect("filename"),
        vec![blob.clone()]
    );
    let ids: Vec<ArtifactId> = tx
        .documents()
        .artifacts(&scope)
        .await
        .expect("list")
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(ids[0], plan.id, "oldest first");
    assert_eq!(ids.len(), 3);
    assert_eq!(
        tx.documents().document(plan.id).await.expect("doc"),
        Some(StoredDocument {
            snapshot: state.clone(),
            log: vec![entry(1, "Spec"), entry(2, "Note")],
        })
    );
    let stored = tx
        .documents()
        .document(plan.id)
        .await
        .expect("doc")
        .unwrap_or_else(|| panic!("doc"));
    assert_eq!(stored.markdown(), "# Note\n\n- [x] one\n- [ ] two\n");
    let (bv, bytes) = tx
        .documents()
        .version(blob.id, 1)
        .await
        .expect("version")
        .unwrap_or_else(|| panic!("v1"));
    assert_eq!(bytes, Content::Bytes(every_byte));
    assert_eq!(bv, v(1));
    let (pv, _) = tx
        .documents()
        .version(plan.id, 1)
        .await
        .expect("version")
        .unwrap_or_else(|| panic!("v1"));
    assert_eq!(
        (pv.name.as_deref(), pv.kind),
        (Some("first"), VersionKind::Named)
    );
    assert_eq!(
        tx.documents().version(plan.id, 2).await.expect("version"),
        None
    );
    let primary = tx
        .documents()
        .primary_documents(std::slice::from_ref(&issue_key))
        .await
        .expect("primary");
    assert_eq!(primary.len(), 1);
    assert_eq!((primary[0].1.id, primary[0].1.tasks), (plan.id, (1, 2)));

    // Search: every word between a document's parts; the best part's snippet.
    let words = |w: &[&str]| w.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let (hits, total) = tx
        .documents()
        .search_documents(&words(&["zebra", "giraffe"]), false, Some(&key), 10)
        .await
        .expect("search");
    assert_eq!((hits.len(), total), (1, 1));
    assert_eq!(hits[0].id, plan.id);
    assert_eq!(hits[0].title, "plan.md");
    let (hits, total) = tx
        .documents()
        .search_documents(&words(&["zebra"]), false, Some(&key), 10)
        .await
        .expect("search");
    assert_eq!(total, 2);
    assert!(
        hits.iter()
            .any(|h| h.id == notes.id && h.snippet.contains("zebra"))
    );
    let (_, total) = tx
        .documents()
        .search_documents(&words(&["zebra", "giraffe"]), true, Some(&key), 10)
        .await
        .expect("search");
    assert_eq!(total, 2, "any word");
    let (_, total) = tx
        .documents()
        .search_documents(&words(&["plan"]), false, Some(&key), 10)
        .await
        .expect("search");
    assert_eq!(total, 1, "the filename is indexed");
    drop(tx);

    // Re-indexing a part replaces it; removing one takes it out.
    let mut tx = s.begin().await.expect("begin");
    tx.documents()
        .index_text(
            plan.id,
            &[("h1".into(), "# Plan okapi".into())],
            &["l1".into()],
        )
        .await
        .expect("index");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    for (w, n) in [("zebra", 1), ("giraffe", 0), ("okapi", 1)] {
        let (_, total) = tx
            .documents()
            .search_documents(&words(&[w]), false, Some(&key), 10)
            .await
            .expect("search");
        assert_eq!(total, n, "{w}");
    }
    drop(tx);

    // Edges: per block, kept, deleted, queried; counted per block; an issue's both ways.
    let from = format!("countersign://artifact/{}", plan.id);
    let to_issue = format!("countersign://issue/{issue_key}");
    let edge = |block: &str, to: &str, kind: EdgeKind, event_id: i64| Edge {
        from: from.clone(),
        from_block: block.into(),
        from_issue: Some(issue_key.clone()),
        to: to.into(),
        to_block: String::new(),
        kind,
        at: t0,
        event_id,
    };
    let mut tx = s.begin().await.expect("begin");
    let e1 = edge("h1", &to_issue, EdgeKind::Link, 10);
    let e2 = edge(
        "l1",
        &format!("countersign://artifact/{}", blob.id),
        EdgeKind::Embed,
        11,
    );
    let e3 = edge("l1", &to_issue, EdgeKind::Mention, 12);
    for e in [&e1, &e2, &e3] {
        tx.documents().insert_edge(e).await.expect("edge");
    }
    tx.documents()
        .insert_edge(&e1)
        .await
        .expect("an edge twice is one");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.documents()
            .edges_from(&from, None)
            .await
            .expect("from")
            .len(),
        3
    );
    assert_eq!(
        tx.documents()
            .edges_from(&from, Some(&["h1".to_owned()]))
            .await
            .expect("from"),
        vec![e1.clone()]
    );
    let q = |to: Option<&str>, kind: Option<EdgeKind>, since: Option<i64>| EdgeQuery {
        to: to.map(str::to_owned),
        from: None,
        kind,
        since,
    };
    assert_eq!(
        tx.documents()
            .edges(&q(Some(&to_issue), None, None))
            .await
            .expect("to")
            .len(),
        2
    );
    assert_eq!(
        tx.documents()
            .edges(&q(Some(&to_issue), Some(EdgeKind::Mention), Some(11)))
            .await
            .expect("since"),
        vec![e3.clone()]
    );
    assert_eq!(
        tx.documents()
            .edges(&q(Some(&to_issue), Some(EdgeKind::Mention), Some(12)))
            .await
            .expect("since"),
        vec![]
    );
    let (incoming, outgoing) = tx.documents().issue_edges(&issue_key).await.expect("issue");
    assert_eq!((incoming.len(), outgoing.len()), (2, 3));
    let mut counts = tx
        .documents()
        .block_ref_counts(&from)
        .await
        .expect("counts");
    counts.sort();
    assert_eq!(counts, vec![("h1".into(), 0, 1), ("l1".into(), 0, 2)]);
    drop(tx);
    let mut tx = s.begin().await.expect("begin");
    tx.documents().delete_edge(&e2).await.expect("delete");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.documents()
            .edges_from(&from, None)
            .await
            .expect("from")
            .len(),
        2
    );
    drop(tx);

    // The document's log holds its sequenced events; the issue's log does not.
    let mut tx = s.begin().await.expect("begin");
    let ev = |artifact: Option<ArtifactId>, session: &str| NewEvent {
        kind: "document.edited",
        facts: EventFacts {
            at: t0,
            actor: Actor::Agent {
                owner: None,
                service: None,
                session: SessionId::parse(session),
            },
            project: Some(key.clone()),
            issue: Some(issue_key.clone()),
            artifact,
            session: SessionId::parse(session),
            data: json!({}),
        },
    };
    tx.events()
        .append_event(&ev(None, "s0"), Some(2))
        .await
        .expect("issue event");
    tx.events()
        .append_event(&ev(Some(plan.id), "s1"), Some(2))
        .await
        .expect("document event");
    tx.events()
        .append_event(&ev(Some(plan.id), "s2"), Some(3))
        .await
        .expect("document event");
    tx.events()
        .append_event(&ev(Some(plan.id), "s1"), None)
        .await
        .expect("unsequenced");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    let page = EventPage {
        after: None,
        before: None,
        ids: vec![],
        descending: false,
        limit: 50,
    };
    let doc_log = tx
        .documents()
        .document_events(plan.id, &page)
        .await
        .expect("log");
    assert_eq!(
        doc_log.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        vec![Some(2), Some(3)]
    );
    let issue_log = tx
        .events()
        .issue_events(&issue_key, &page)
        .await
        .expect("issue log");
    assert!(issue_log.iter().all(|e| e.facts.artifact.is_none()));
    assert_eq!(issue_log.len(), 1);
    let subs: Vec<SessionId> = tx
        .documents()
        .document_subscribers(plan.id)
        .await
        .expect("subs")
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(subs, ["s1", "s2"]);
    drop(tx);
    let mut tx = s.begin().await.expect("begin");
    tx.documents()
        .document_unsubscribe(plan.id, &SessionId::parse("s1").expect("a session id"))
        .await
        .expect("unsubscribe");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    let subs: Vec<SessionId> = tx
        .documents()
        .document_subscribers(plan.id)
        .await
        .expect("subs")
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert_eq!(subs, ["s2"]);
    drop(tx);

    // A new snapshot drops the log before it.
    let mut tx = s.begin().await.expect("begin");
    tx.documents()
        .put_snapshot(plan.id, &state)
        .await
        .expect("snapshot");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    let stored = tx.documents().document(plan.id).await.expect("doc");
    assert_eq!(stored.map(|d| d.log.len()), Some(0));
}

#[tokio::test]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("d.db").display());
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
