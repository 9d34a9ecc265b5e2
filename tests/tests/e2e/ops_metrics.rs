//! Operating the broker (issue 30): `/readyz` answers for the database, the store and the
//! audit follower; `/metrics` lists every broker metric `docs/metrics.md` documents once a
//! request of each kind has been made (the doc's table is parsed here, so the two cannot drift).

use std::time::{Duration, Instant};

use countersign_e2e::http::*;

/// A throwaway PostgreSQL cluster (broker-sql's failover tests' helper).
#[path = "../../../crates/broker-sql/tests/support/cluster.rs"]
mod cluster;

type R = anyhow::Result<()>;

/// The documented metrics of `component`: (name, type) from the table in docs/metrics.md.
pub fn documented(component: &str) -> Vec<(String, String)> {
    let doc = include_str!("../../../docs/metrics.md");
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with("| name | component | type |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // ["", name, component, type, labels, meaning, ""]
        if cells.len() >= 6 && cells[2] == component {
            rows.push((cells[1].trim_matches('`').to_owned(), cells[3].to_owned()));
        }
    }
    rows
}

/// Whether the Prometheus text lists `name` as a metric of `kind` (histograms are rendered as
/// summaries), with at least one sample.
pub fn listed(text: &str, name: &str, kind: &str) -> bool {
    let types: &[&str] = match kind {
        "histogram" => &["summary", "histogram"],
        other => &[other][..],
    };
    let typed = types
        .iter()
        .any(|t| text.lines().any(|l| l == format!("# TYPE {name} {t}")));
    let sampled = text.lines().any(|l| {
        l.strip_prefix(name).is_some_and(|rest| {
            rest.starts_with(' ')
                || rest.starts_with('{')
                || rest.starts_with("_sum")
                || rest.starts_with("_count")
                || rest.starts_with("_bucket")
        })
    });
    typed && sampled
}

async fn ready_within(tb: &TestBroker, limit: Duration) -> anyhow::Result<Resp> {
    let deadline = Instant::now() + limit;
    loop {
        let r = tb.open("GET", "/readyz", None).await?;
        if r.status == 200 || Instant::now() > deadline {
            return Ok(r);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn readyz_answers_for_the_database_the_store_and_the_audit_follower() -> R {
    let tb = TestBroker::start().await?;
    let r = ready_within(&tb, Duration::from_secs(20))
        .await?
        .expect(200);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    assert_eq!(
        r.body,
        serde_json::json!({ "status": "ready", "database": "ok", "store": "ok", "audit": "ok" })
    );

    // The database stops answering: not ready, and it says which part.
    tb.faults.ping(Some(Fault::Unavailable));
    let r = tb.open("GET", "/readyz", None).await?.expect(503);
    assert_eq!(r.s("status"), "not ready");
    assert_eq!(r.s("database"), "unavailable");
    assert_eq!(r.s("store"), "ok");
    tb.faults.ping(None);
    ready_within(&tb, Duration::from_secs(5)).await?.expect(200);
    Ok(())
}

#[tokio::test]
async fn a_broken_audit_chain_takes_the_broker_out_of_readiness_not_out_of_life() -> R {
    use sqlx::{Connection, Executor};
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let g = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    s.values(&g).await?.expect(200);
    ready_within(&tb, Duration::from_secs(20))
        .await?
        .expect(200);

    // A database writer edits an entry; the follower's next full walk finds it.
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&tb.database_url).await?;
    let edited = c
        .execute("UPDATE audit_log SET body = '{\"names\":[]}' WHERE position = 2")
        .await?
        .rows_affected();
    c.close().await?;
    assert_eq!(edited, 1);
    let st = tb.state.broker.follow_audit(true).await?;
    assert!(st.broken.is_some(), "{st:?}");
    let r = tb.open("GET", "/readyz", None).await?.expect(503);
    assert_eq!(
        (r.s("status"), r.s("audit"), r.s("database")),
        ("not ready".into(), "broken".into(), "ok".into())
    );
    tb.open("GET", "/healthz", None).await?.expect(200);
    Ok(())
}

#[tokio::test]
async fn the_metrics_page_lists_every_documented_broker_metric() -> R {
    let tb = TestBroker::builder()
        .server(|s| s.metrics = Some(countersign_broker_http::server::metrics_handle()))
        .start()
        .await?;
    let rows = documented("broker");
    assert!(rows.len() >= 10, "the table was not found: {rows:?}");

    // A request of each kind: a machine login approved, automatic and policy-denied requests,
    // one approved and released, one denied, one left pending.
    let (_m, s) = tb.session_of(ADA).await?;
    let auto = s.request(&[AUTO]).await?.expect(200);
    s.values(&auto.s("grant_id")).await?.expect(200);
    let locked = s.request(&[LOCKED]).await?.expect(200);
    assert_eq!(locked.s("state"), "denied");
    let asked = s.request(&[ADA_SECRET]).await?.expect(200);
    tb.approve(&asked.s("record_id"), ADA, None)
        .await?
        .expect(200);
    let granted = s.get_request(&asked.s("request_id")).await?.expect(200);
    s.values(&granted.s("grant_id")).await?.expect(200);
    let denied = s.request(&[ADA_SECRET_2]).await?.expect(200);
    tb.deny(&denied.s("record_id"), ADA, None)
        .await?
        .expect(200);
    let (_m2, s2) = tb.session_of(BOB).await?;
    s2.request(&[BOB_SECRET]).await?.expect(200);
    // The audit follower has run (its gauges), then the page.
    ready_within(&tb, Duration::from_secs(20))
        .await?
        .expect(200);
    let text = tb.open("GET", "/metrics", None).await?.expect(200).text;

    let missing: Vec<_> = rows
        .iter()
        .filter(|(name, kind)| !listed(&text, name, kind))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not on /metrics: {missing:?}\n{text}"
    );
    // And the other way: every countersign_ metric the page lists is documented (the
    // console's are documented under the console).
    let all: Vec<String> = documented("broker")
        .into_iter()
        .chain(documented("console"))
        .map(|(n, _)| n)
        .collect();
    for line in text
        .lines()
        .filter(|l| l.starts_with("# TYPE countersign_"))
    {
        let name = line.split_whitespace().nth(2).unwrap_or_default();
        assert!(all.iter().any(|n| n == name), "{name} is not documented");
    }
    // The labels the doc names, from this test's own requests.
    for sample in [
        "countersign_requests_total{outcome=\"granted\"}",
        "countersign_requests_total{outcome=\"denied\"}",
        "countersign_requests_total{outcome=\"pending\"}",
        "countersign_decisions_total{kind=\"agent_secret\",decision=\"approved\"}",
        "countersign_decisions_total{kind=\"agent_secret\",decision=\"denied\"}",
        "countersign_decisions_total{kind=\"launcher_credential\",decision=\"approved\"}",
        "countersign_releases_total{granted=\"automatic\"}",
        "countersign_releases_total{granted=\"approval\"}",
        "countersign_requests_pending{kind=\"agent_secret\"}",
    ] {
        assert!(text.contains(sample), "{sample} not on /metrics");
    }
    // The pending request is counted (other tests of this process may add theirs).
    let pending: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("countersign_requests_pending{kind=\"agent_secret\"} "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(pending >= 1.0, "pending: {pending}");
    Ok(())
}

/// The text of a ConfigMap's `key: |` block in a manifest (its lines, de-indented).
fn config_block(manifest: &str, key: &str) -> String {
    let mut out = Vec::new();
    let mut indent = None;
    let mut inside = false;
    for line in manifest.lines() {
        if !inside {
            inside = line.trim() == format!("{key}: |");
            continue;
        }
        if line.trim().is_empty() {
            out.push("");
            continue;
        }
        let n = line.len() - line.trim_start().len();
        let i = *indent.get_or_insert(n);
        if n < i {
            break;
        }
        out.push(&line[i..]);
    }
    out.join("\n")
}

#[test]
fn the_manifests_configurations_load_with_the_servers_own_parsers() {
    let broker = config_block(
        include_str!("../../../deploy/kubernetes/10-broker.yaml"),
        "broker.toml",
    );
    let c: countersign_broker_http::Config =
        toml::from_str(&broker).unwrap_or_else(|e| panic!("broker.toml: {e}\n{broker}"));
    assert_eq!(c.listen.port(), 8080);
    assert!(c.token_issuer.is_some() && c.service_logins.len() == 2);
    let console = config_block(
        include_str!("../../../deploy/kubernetes/20-console.yaml"),
        "console.toml",
    );
    let c: countersign_console_http::Config =
        toml::from_str(&console).unwrap_or_else(|e| panic!("console.toml: {e}\n{console}"));
    assert_eq!(c.listen.port(), 8081);
    assert!(c.broker.is_some() && c.oidc.is_some());
}

/// The broker on PostgreSQL through a URL with `target_session_attrs=read-write`: while its
/// only host is read-only (a demoted primary, switched at runtime on a throwaway cluster),
/// `/readyz` says the database is not ready and a write answers 503; once the host takes
/// writes again, both recover.
#[tokio::test]
async fn readyz_is_not_ready_while_no_primary_takes_writes() -> R {
    use sqlx::{Connection, Executor};
    let Some(server) = cluster::test_server() else {
        return Ok(());
    };
    let creds = cluster::credentials(&server);
    let password = creds
        .trim_end_matches('@')
        .split_once(':')
        .map_or("postgres", |(_, p)| p)
        .to_owned();
    let Some(pg) = cluster::Cluster::create("cs_e2e_failover", 5453, &password) else {
        return Ok(());
    };
    let host = format!("127.0.0.1:{}", pg.port);
    sqlx::any::install_default_drivers();
    let mut admin =
        sqlx::AnyConnection::connect(&format!("postgres://{creds}{host}/postgres")).await?;
    admin.execute("CREATE DATABASE broker").await?;
    admin.close().await?;
    let url = format!("postgres://{creds}{host}/broker?target_session_attrs=read-write");
    let tb = TestBroker::builder().database_url(&url).start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    s.request(&[AUTO]).await?.expect(200);
    ready_within(&tb, Duration::from_secs(20))
        .await?
        .expect(200);

    pg.set_read_only(true);
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        let r = tb.open("GET", "/readyz", None).await?;
        if r.status == 503 || Instant::now() > deadline {
            break r.expect(503);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(
        (r.s("status"), r.s("database")),
        ("not ready".into(), "unavailable".into())
    );
    let w = s.request(&[AUTO]).await?.expect(503);
    assert_eq!(w.code(), "DATABASE_UNAVAILABLE");
    // `/healthz` answers 503 too here: with `read-write` the pool keeps no connection to a
    // read-only server, as libpq opens none, so the database cannot be used at all.

    pg.set_read_only(false);
    ready_within(&tb, Duration::from_secs(10))
        .await?
        .expect(200);
    s.request(&[AUTO]).await?.expect(200);
    drop(tb);
    drop(pg);
    Ok(())
}
