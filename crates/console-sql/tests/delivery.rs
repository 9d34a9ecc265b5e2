//! The synced delivery data's generation on SQLite and on PostgreSQL (when
//! `COUNTERSIGN_TEST_POSTGRES_URL` names a server): it moves at the commit of every transaction
//! that writes synced pull requests or runs, and only then; the console's copy of the synced
//! data kept in memory follows it, so a timeline read after a sync shows what the sync wrote.

mod common;

use std::sync::Arc;

use chrono::{Duration, TimeZone, Utc};
use countersign_console_core::console::ConsoleConfig;
use countersign_console_core::work::delivery::compute::Filters;
use countersign_console_core::work::delivery::{DeliverySettings, Production, Pull, Run};
use countersign_console_core::{Console, ManualClock, Parts, Storage, SystemEntropy};
use countersign_console_sql::SqlStorage;

fn settings() -> DeliverySettings {
    DeliverySettings {
        deploy_repository: "acme/shop".into(),
        workflow_paths: vec![".github/workflows/deploy.yml".into()],
        production_jobs: vec!["production-deploy".into()],
        production_apply_step: None,
        population_authors: vec!["alice".into(), "bob".into()],
        excluded_repositories: vec![],
        staging_e2e_job: None,
        staging_deploy_job: None,
        pr_checks_rollup_job: None,
    }
}

fn pull(n: i64, merged: chrono::DateTime<Utc>) -> Pull {
    Pull {
        repo: "acme/shop".into(),
        number: n,
        title: format!("Change {n}"),
        author: "alice".into(),
        head_ref: format!("change-{n}"),
        url: format!("https://github.com/acme/shop/pull/{n}"),
        labels: vec![],
        reverts: None,
        created_at: merged - Duration::hours(2),
        merged_at: merged,
        merge_sha: Some(format!("{n:040x}")),
        first_commit_at: None,
        sessions: vec![],
        deploy_run: None,
        deployed_at: None,
        reverted_by: None,
    }
}

fn deploy(id: i64, at: chrono::DateTime<Utc>) -> Run {
    Run {
        id,
        repo: "acme/shop".into(),
        workflow_path: ".github/workflows/deploy.yml".into(),
        name: "deploy".into(),
        event: "push".into(),
        branch: Some("main".into()),
        head_sha: format!("d{id:039x}"),
        conclusion: Some("success".into()),
        created_at: at - Duration::minutes(10),
        started_at: at - Duration::minutes(10),
        completed_at: at,
        url: None,
        jobs: Some(vec![]),
        production: Some(Production {
            job: "production-deploy".into(),
            success: true,
            finished_at: at,
            failing_job: None,
            failing_step: None,
        }),
    }
}

fn console_with(s: &Arc<SqlStorage>, now: chrono::DateTime<Utc>, config: ConsoleConfig) -> Console {
    Console::new(
        Parts {
            storage: s.clone(),
            broker: None,
            idp: None,
            clock: Arc::new(ManualClock::new(now)),
            entropy: Arc::new(SystemEntropy),
            presence: None,
            service_tokens: None,
        },
        config,
        None,
    )
}

async fn generation(s: &SqlStorage) -> i64 {
    let mut tx = s.read().await.expect("read");
    tx.delivery()
        .delivery_generation()
        .await
        .expect("generation")
}

async fn contract(s: Arc<SqlStorage>) {
    let start = Utc
        .with_ymd_and_hms(2026, 3, 1, 0, 0, 0)
        .single()
        .expect("time");
    assert_eq!(generation(&s).await, 0, "nothing synced yet");
    let mut tx = s.begin().await.expect("begin");
    tx.delivery()
        .put_delivery_settings(&settings())
        .await
        .expect("settings");
    tx.commit().await.expect("commit");
    assert_eq!(generation(&s).await, 0, "settings are not synced data");

    let mut tx = s.begin().await.expect("begin");
    tx.delivery()
        .put_pull(&pull(1, start + Duration::days(1)))
        .await
        .expect("pull");
    tx.delivery()
        .put_pull(&pull(2, start + Duration::days(2)))
        .await
        .expect("pull");
    tx.delivery()
        .put_run(&deploy(10, start + Duration::days(3)))
        .await
        .expect("run");
    tx.commit().await.expect("commit");
    let g1 = generation(&s).await;
    assert_eq!(g1, 1, "one transaction, one move, however many rows");

    // A transaction given up moves nothing.
    let mut tx = s.begin().await.expect("begin");
    tx.delivery()
        .put_pull(&pull(3, start + Duration::days(4)))
        .await
        .expect("pull");
    drop(tx);
    assert_eq!(generation(&s).await, g1);

    // Each writer of synced data moves it.
    let mut tx = s.begin().await.expect("begin");
    tx.delivery()
        .link_deploy(
            "acme/shop",
            &[format!("{:040x}", 1)],
            10,
            start + Duration::days(3),
        )
        .await
        .expect("link");
    tx.commit().await.expect("commit");
    assert_eq!(generation(&s).await, g1 + 1);
    let mut tx = s.begin().await.expect("begin");
    tx.delivery()
        .mark_reverts("acme/shop")
        .await
        .expect("reverts");
    tx.commit().await.expect("commit");
    assert_eq!(generation(&s).await, g1 + 2);
    {
        let mut tx = s.read().await.expect("read");
        assert_eq!(tx.delivery().synced_rows().await.expect("rows"), 3);
        let pulls = tx.delivery().all_pulls().await.expect("pulls");
        assert_eq!(
            pulls.iter().map(|p| p.number).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(pulls[0].deploy_run, Some(10), "the link is read back");
        assert_eq!(tx.delivery().all_runs().await.expect("runs").len(), 1);
    }

    // The console's kept copy follows the generation: a read keeps it, a sync's write
    // (here straight through the storage, as a sync on another replica writes) shows at once.
    let end = start + Duration::days(30);
    let kept = console_with(&s, end, ConsoleConfig::default());
    let console = &kept;
    let w = console
        .delivery()
        .window(Some(start), Some(end))
        .expect("window");
    let merges = |n: usize, why: &str| {
        let why = why.to_owned();
        let console = &console;
        async move {
            let t = console
                .delivery()
                .timeline(w, &Filters::default())
                .await
                .expect("timeline");
            assert_eq!(t.timeline.merges.len(), n, "{why}");
            let m = console
                .delivery()
                .measures(w, &Filters::default())
                .await
                .expect("measures");
            assert_eq!(m.measures.deploys_per_day > 0.0, n > 0, "{why}: the deploy");
        }
    };
    merges(2, "two synced").await;
    merges(2, "read again from the kept copy").await;
    let mut tx = s.begin().await.expect("begin");
    tx.delivery()
        .put_pull(&pull(4, start + Duration::days(5)))
        .await
        .expect("pull");
    tx.commit().await.expect("commit");
    merges(3, "a pull request synced since").await;

    // Two months of a busy repository: deploys every ~9 hours, one in five failing (its fix
    // the next), pull requests merged every ~2 hours, some never deployed, some reverted.
    let mut tx = s.begin().await.expect("begin");
    for d in 0..160i64 {
        let at = start + Duration::hours(9 * d + 7);
        let mut r = deploy(100 + d, at);
        if d % 5 == 4 {
            r.conclusion = Some("failure".into());
            if let Some(p) = r.production.as_mut() {
                p.success = false;
                p.failing_job = Some("production-deploy".into());
                p.failing_step = Some("apply".into());
            }
        }
        tx.delivery().put_run(&r).await.expect("run");
    }
    for n in 10..700i64 {
        let merged = start + Duration::hours(2 * n) + Duration::minutes(n % 60);
        let mut p = pull(n, merged);
        p.author = ["alice", "bob", "alice"][(n % 3) as usize].into();
        p.reverts = (n % 41 == 40).then_some(n - 3);
        let d = (2 * n - 7 + 8).div_euclid(9).max(0);
        let d = if d % 5 == 4 { d + 1 } else { d };
        if d < 160 && n % 17 != 0 {
            p.deploy_run = Some(100 + d);
            p.deployed_at = Some(start + Duration::hours(9 * d + 7));
        }
        tx.delivery().put_pull(&p).await.expect("pull");
    }
    tx.delivery()
        .mark_reverts("acme/shop")
        .await
        .expect("reverts");
    tx.commit().await.expect("commit");

    // A console that keeps nothing reads each window from SQL: the same answers.
    let by_sql = console_with(
        &s,
        end,
        ConsoleConfig {
            delivery_kept_rows: 0,
            ..ConsoleConfig::default()
        },
    );
    for (from, to) in [
        (start, end),
        (start + Duration::days(2), start + Duration::days(4)),
        (start + Duration::days(4), end),
        (start + Duration::days(20), start + Duration::days(27)),
        (start - Duration::days(30), start),
        (start, start + Duration::days(70)),
    ] {
        let w = console
            .delivery()
            .window(Some(from), Some(to))
            .expect("window");
        let mut f = Filters::default();
        for facets in [false, true] {
            if facets {
                f.facets.insert("author".into(), vec!["alice".into()]);
                f.facets.insert("rework".into(), vec!["false".into()]);
            }
            let kept = console.delivery().timeline(w, &f).await.expect("timeline");
            let read = by_sql.delivery().timeline(w, &f).await.expect("timeline");
            if from == start && to == end {
                assert!(kept.timeline.merges.len() > 100, "the month's merges");
            }
            assert_eq!(
                serde_json::to_value(&kept).expect("json"),
                serde_json::to_value(&read).expect("json"),
                "timeline {from}..{to}"
            );
            let kept = console.delivery().measures(w, &f).await.expect("measures");
            let read = by_sql.delivery().measures(w, &f).await.expect("measures");
            assert_eq!(
                serde_json::to_value(&kept).expect("json"),
                serde_json::to_value(&read).expect("json"),
                "measures {from}..{to}"
            );
        }
    }
    let mut tx = s.begin().await.expect("begin");
    tx.delivery().clear_synced().await.expect("clear");
    tx.commit().await.expect("commit");
    merges(0, "the synced data forgotten").await;
}

#[tokio::test]
async fn generation_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("d.db").display());
    contract(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
}

#[tokio::test]
async fn generation_postgres() {
    let Some(url) = common::fresh_postgres().await else {
        return;
    };
    contract(Arc::new(SqlStorage::connect(&url).await.expect("connect"))).await;
    common::drop_postgres(&url).await;
}
