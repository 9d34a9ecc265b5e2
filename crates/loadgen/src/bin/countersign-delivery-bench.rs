//! The delivery timeline and measures over 10,000 merged pull requests and 2,000 production
//! deploys (a year of a busy repository) on SQLite: the core's operations as the routes call
//! them (storage read and computation; no HTTP), p50 and p99 over `--rounds` calls each:
//! first right after a write to the synced data (what a sync does: the copy kept in memory is
//! read afresh), then with none between them.
//!
//! `cargo run -p countersign-loadgen --bin countersign-delivery-bench -- --rounds 50`

use std::sync::Arc;
use std::time::Instant;

use chrono::{Duration, TimeZone, Utc};
use clap::Parser;
use countersign_console_core::console::ConsoleConfig;
use countersign_console_core::work::delivery::compute::Filters;
use countersign_console_core::work::delivery::{
    DeliverySettings, Job, Production, Pull, Run, Step,
};
use countersign_console_core::{Console, ManualClock, Parts, Storage, SystemEntropy};

#[derive(Parser)]
struct Args {
    #[arg(long, default_value_t = 10_000)]
    pulls: i64,
    #[arg(long, default_value_t = 2_000)]
    deploys: i64,
    #[arg(long, default_value_t = 50)]
    rounds: usize,
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((p * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1]
}

// Long: a benchmark phase reads best as its script, top to bottom: set up, measure, print.
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let dir = tempfile::tempdir()?;
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    );
    let storage = Arc::new(
        countersign_console_sql::SqlStorage::connect(&url)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?,
    );
    let start = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .ok_or_else(|| anyhow::anyhow!("time"))?;
    let end = start + Duration::days(365);
    let clock = Arc::new(ManualClock::new(end));
    let console = Console::new(
        Parts {
            storage: storage.clone(),
            broker: None,
            idp: None,
            clock,
            entropy: Arc::new(SystemEntropy),
            presence: None,
            service_tokens: None,
        },
        ConsoleConfig::default(),
        None,
    );
    let repo = "acme/shop".to_owned();
    let settings = DeliverySettings {
        deploy_repository: repo.clone(),
        workflow_paths: vec![".github/workflows/deploy.yml".into()],
        production_jobs: vec!["production-deploy".into()],
        production_apply_step: Some("terraform apply".into()),
        population_authors: vec!["agent-bot".into(), "alice".into(), "bob".into()],
        excluded_repositories: vec![],
        staging_e2e_job: Some("staging-e2e".into()),
        staging_deploy_job: Some("staging-deploy".into()),
        pr_checks_rollup_job: None,
    };
    let t0 = Instant::now();
    let mut tx = storage.begin().await?;
    tx.delivery().put_delivery_settings(&settings).await?;
    let span = (end - start).num_seconds();
    let deploy_at = |i: i64| start + Duration::seconds(span * (i + 1) / (a.deploys + 1));
    for i in 0..a.deploys {
        let at = deploy_at(i);
        let ok = i % 20 != 19;
        let step = |name: &str, s: i64, m: i64, c: &str| Step {
            name: name.into(),
            number: s,
            conclusion: Some(c.into()),
            started_at: Some(at - Duration::minutes(m)),
            completed_at: Some(at),
        };
        let jobs = vec![
            Job {
                id: i * 10 + 1,
                name: "staging-deploy".into(),
                conclusion: Some("success".into()),
                started_at: Some(at - Duration::minutes(20)),
                completed_at: Some(at - Duration::minutes(16)),
                steps: vec![step("apply", 1, 20, "success")],
            },
            Job {
                id: i * 10 + 2,
                name: "staging-e2e".into(),
                conclusion: Some("success".into()),
                started_at: Some(at - Duration::minutes(16)),
                completed_at: Some(at - Duration::minutes(10)),
                steps: vec![step("e2e", 1, 16, "success")],
            },
            Job {
                id: i * 10 + 3,
                name: "production-deploy".into(),
                conclusion: Some(if ok { "success" } else { "failure" }.into()),
                started_at: Some(at - Duration::minutes(5)),
                completed_at: Some(at),
                steps: vec![step(
                    "terraform apply",
                    1,
                    5,
                    if ok { "success" } else { "failure" },
                )],
            },
        ];
        tx.delivery()
            .put_run(&Run {
                id: 9_000_000 + i,
                repo: repo.clone(),
                workflow_path: ".github/workflows/deploy.yml".into(),
                name: "deploy".into(),
                event: "push".into(),
                branch: Some("main".into()),
                head_sha: format!("{i:040x}"),
                conclusion: Some(if ok { "success" } else { "failure" }.into()),
                created_at: at - Duration::minutes(25),
                started_at: at - Duration::minutes(25),
                completed_at: at,
                url: None,
                jobs: Some(jobs),
                production: Some(Production {
                    job: "production-deploy".into(),
                    success: ok,
                    finished_at: at,
                    failing_job: (!ok).then(|| "production-deploy".into()),
                    failing_step: (!ok).then(|| "terraform apply".into()),
                }),
            })
            .await?;
    }
    let authors = ["agent-bot", "alice", "bob", "renovate[bot]"];
    for n in 0..a.pulls {
        let merged = start + Duration::seconds(span * n / a.pulls + 60);
        // The first successful deploy after the merge ships it.
        let mut d = ((merged - start).num_seconds() * (a.deploys + 1) / span).max(0);
        while d < a.deploys && (deploy_at(d) < merged || d % 20 == 19) {
            d += 1;
        }
        let deployed = (d < a.deploys).then(|| (9_000_000 + d, deploy_at(d)));
        tx.delivery()
            .put_pull(&Pull {
                repo: repo.clone(),
                number: n + 1,
                title: format!("SHOP-{} Change number {n}", n % 500 + 1),
                author: authors[(n % 4) as usize].into(),
                head_ref: format!("shop-{}", n % 500 + 1),
                url: format!("https://github.com/acme/shop/pull/{}", n + 1),
                labels: if n % 50 == 0 {
                    vec!["hotfix".into()]
                } else {
                    vec![]
                },
                reverts: (n % 97 == 96).then_some(n - 1),
                created_at: merged - Duration::hours(20),
                merged_at: merged,
                merge_sha: Some(format!("m{n:039x}")),
                first_commit_at: Some(merged - Duration::hours(26)),
                sessions: vec![format!("s-{}", n % 40)],
                deploy_run: deployed.map(|x| x.0),
                deployed_at: deployed.map(|x| x.1),
                reverted_by: None,
            })
            .await?;
    }
    tx.delivery().mark_reverts(&repo).await?;
    tx.commit().await?;
    println!(
        "seeded {} pull requests and {} deploys in {:.1} s",
        a.pulls,
        a.deploys,
        t0.elapsed().as_secs_f64()
    );
    // Right after a sync: each read finds the synced data's generation moved.
    {
        let w = console
            .delivery()
            .window(Some(end - Duration::days(365)), Some(end))?;
        let f = Filters::default();
        let (mut tl, mut ms) = (Vec::new(), Vec::new());
        for i in 0..a.rounds * 2 {
            let mut tx = storage.begin().await?;
            let mut p = tx
                .delivery()
                .pull(&repo, 1)
                .await?
                .ok_or_else(|| anyhow::anyhow!("pull"))?;
            p.title = format!("SHOP-1 Change number 0, take {i}");
            tx.delivery().put_pull(&p).await?;
            tx.commit().await?;
            let t = Instant::now();
            if i % 2 == 0 {
                console.delivery().timeline(w, &f).await?;
                tl.push(t.elapsed().as_secs_f64() * 1000.0);
            } else {
                console.delivery().measures(w, &f).await?;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }
        println!(
            "year, no facet, right after a sync: timeline p50 {:.1} ms p99 {:.1} ms; measures p50 {:.1} ms p99 {:.1} ms",
            pct(&mut tl.clone(), 0.5),
            pct(&mut tl, 0.99),
            pct(&mut ms.clone(), 0.5),
            pct(&mut ms, 0.99)
        );
    }
    for (label, days) in [("year", 365), ("7 days", 7)] {
        let w = console
            .delivery()
            .window(Some(end - Duration::days(days)), Some(end))?;
        // The first read keeps the synced data; the rounds then measure reads between syncs.
        console.delivery().timeline(w, &Filters::default()).await?;
        let f = Filters::default();
        let mut faceted = Filters::default();
        faceted.facets.insert("author".into(), vec!["alice".into()]);
        faceted.facets.insert("rework".into(), vec!["false".into()]);
        for (what, filters) in [("no facet", &f), ("two facets", &faceted)] {
            let (mut tl, mut ms) = (Vec::new(), Vec::new());
            let mut merges = 0;
            for _ in 0..a.rounds {
                let t = Instant::now();
                let x = console.delivery().timeline(w, filters).await?;
                tl.push(t.elapsed().as_secs_f64() * 1000.0);
                merges = x.timeline.merges.len();
                let t = Instant::now();
                console.delivery().measures(w, filters).await?;
                ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            println!(
                "{label}, {what} ({merges} merges shown): timeline p50 {:.1} ms p99 {:.1} ms; measures p50 {:.1} ms p99 {:.1} ms",
                pct(&mut tl.clone(), 0.5),
                pct(&mut tl, 0.99),
                pct(&mut ms.clone(), 0.5),
                pct(&mut ms, 0.99)
            );
        }
    }
    Ok(())
}
