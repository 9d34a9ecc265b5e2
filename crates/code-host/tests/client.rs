//! The GitHub client against the recorded stand-in: every call of protocol §9 on the month of
//! `acme/shop`, paging, the run list over the 1,000-result cap, rate limits, and the errors
//! that separate "no access" from "unavailable". An unrecorded request fails the test.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use countersign_code_host::standin::{Fixtures, Recorded, StandIn, TestPacer, month_dir};
use countersign_code_host::{Error, GitHub, RepoName, RunFilter, catalog};
use serde_json::json;

const TOKEN: &str = "github_pat_test_0123456789";

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .expect("time")
}

fn shop() -> RepoName {
    RepoName::parse("acme/shop").expect("repo")
}

struct Rig {
    standin: StandIn,
    gh: GitHub,
    pacer: Arc<TestPacer>,
    dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let fixtures = Fixtures::load(&month_dir()).expect("fixtures");
    let standin = StandIn::start(fixtures, Some(TOKEN))
        .await
        .expect("stand-in");
    let dir = tempfile::tempdir().expect("dir");
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{TOKEN}\n")).expect("token");
    // 2026-04-01T00:00:00Z: the reset times of the fixtures lie an hour after it.
    let pacer = Arc::new(TestPacer::at(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_775_001_600),
    ));
    let gh = GitHub::new(&standin.url, Some(token))
        .expect("client")
        .with_pacer(pacer.clone());
    Rig {
        standin,
        gh,
        pacer,
        dir,
    }
}

#[tokio::test]
async fn every_call_on_a_month_of_a_repository() {
    let r = rig().await;
    let s = r.gh.session().expect("session");
    let repo = s.repository(&shop()).await.expect("repository");
    assert_eq!(
        (repo.full_name.as_str(), repo.default_branch.as_str()),
        ("acme/shop", "main")
    );
    let b = s.branch(&shop(), "main").await.expect("branch");
    assert_eq!(b.name, "main");
    // A branch name with a slash goes as two path segments, as GitHub takes it.
    assert_eq!(
        s.branch(&shop(), "release/2026-03")
            .await
            .expect("branch")
            .name,
        "release/2026-03"
    );
    let w = s.workflow(&shop(), "deploy.yml").await.expect("workflow");
    assert_eq!(w.path, ".github/workflows/deploy.yml");

    let month = |event: &str, branch: Option<&str>| RunFilter {
        branch: branch.map(str::to_owned),
        event: Some(event.to_owned()),
        from: at("2026-03-02T00:00:00Z"),
        to: at("2026-04-01T00:00:00Z"),
    };
    let deploys = s
        .workflow_runs(&shop(), "deploy.yml", &month("push", Some("main")))
        .await
        .expect("deploy runs");
    assert_eq!(deploys.len(), 10);
    assert_eq!(
        deploys
            .iter()
            .filter(|r| r.conclusion.as_deref() == Some("failure"))
            .count(),
        1
    );
    // 1,130 runs: the month's total is over the cap, so the client asks for each half (six
    // pages each) and never pages the whole range.
    let checks = s
        .workflow_runs(&shop(), "checks.yml", &month("pull_request", None))
        .await
        .expect("check runs");
    assert_eq!(checks.len(), 1130);
    let mut ids: Vec<i64> = checks.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 1130, "no run twice");
    assert!(
        checks
            .windows(2)
            .all(|w| w[0].created_at >= w[1].created_at),
        "newest first"
    );
    let pages = r
        .standin
        .served()
        .iter()
        .filter(|k| k.contains("checks.yml/runs") || k.contains("workflows/162/runs"))
        .count();
    assert_eq!(pages, 1 + 6 + 6);

    let run = s.run(&shop(), 9_000_006).await.expect("run");
    assert_eq!(run.conclusion.as_deref(), Some("failure"));
    let jobs = s.jobs(&shop(), 9_000_006).await.expect("jobs");
    let prod = jobs
        .iter()
        .find(|j| j.name == "production-deploy")
        .expect("prod job");
    assert_eq!(prod.conclusion.as_deref(), Some("failure"));
    let failing = prod
        .steps
        .iter()
        .find(|s| s.conclusion.as_deref() == Some("failure"))
        .expect("failing step");
    assert_eq!(failing.name, "terraform apply");
    r.standin.put(
        "GET /repos/acme/shop/actions/runs/1",
        Recorded::json(404, &json!({"message": "Not Found"})),
    );
    assert!(matches!(s.run(&shop(), 1).await, Err(Error::NotFound)));

    // Two pages by Link; the closed-unmerged #99 and #100 (updated before `since`) left out.
    let pulls = s
        .merged_pulls(&shop(), "main", Some(at("2026-03-02T00:00:00Z")))
        .await
        .expect("pulls");
    let numbers: Vec<i64> = pulls.iter().map(|p| p.number).collect();
    assert_eq!(numbers, (101..=114).rev().collect::<Vec<_>>());
    assert_eq!(
        pulls
            .iter()
            .find(|p| p.number == 106)
            .and_then(|p| p.body.clone())
            .as_deref(),
        Some("Reverts acme/shop#105")
    );
    let commits = s.pull_commits(&shop(), 103).await.expect("commits");
    assert_eq!(commits.len(), 2);
    assert!(
        commits[0]
            .commit
            .message
            .contains("Countersign-Session: s-beta")
    );

    let d1 = deploys
        .iter()
        .find(|r| r.display_title.as_deref() == Some("Deploy D1"))
        .expect("D1");
    let d0 = deploys
        .iter()
        .find(|r| r.display_title.as_deref() == Some("Deploy D0"))
        .expect("D0");
    let cmp = s
        .compare(&shop(), &d0.head_sha, &d1.head_sha)
        .await
        .expect("compare");
    assert_eq!(cmp.total_commits, 2);
    assert_eq!(cmp.commits.len(), 2);

    let issue = s.issue(&shop(), 42).await.expect("issue");
    assert_eq!(
        (
            issue.title.as_str(),
            issue.state.as_str(),
            issue.is_pull_request()
        ),
        ("Checkout times out under load", "open", false)
    );
    let pr = s.issue(&shop(), 105).await.expect("pr as issue");
    assert!(pr.is_pull_request());
    assert_eq!(
        s.issue(&shop(), 999).await.map(|i| i.number),
        Err(Error::NotFound)
    );

    let text = s
        .catalog_file(&shop(), "main")
        .await
        .expect("catalog")
        .expect("present");
    let tree = catalog::parse(&text).expect("parses");
    assert_eq!(
        tree.iter()
            .map(|e| (e.id.as_str(), e.parent.as_deref()))
            .collect::<Vec<_>>(),
        vec![
            ("shop", None),
            ("storefront", Some("shop")),
            ("cart", Some("storefront")),
            ("checkout", Some("shop")),
            ("payments", Some("checkout")),
        ]
    );
    // A missing catalog file is no access problem.
    assert_eq!(s.catalog_file(&shop(), "release/2026-03").await, Ok(None));
    assert!(r.pacer.slept().is_empty());
    r.standin.assert_no_misses();
}

#[tokio::test]
async fn no_access_is_told_from_unavailable() {
    let r = rig().await;
    let s = r.gh.session().expect("session");
    // A 404 for the repository or branch: no access.
    let e = s
        .repository(&RepoName::parse("acme/secret").expect("repo"))
        .await
        .expect_err("404");
    assert!(e.is_no_access(), "{e}");
    let e = s.branch(&shop(), "nope").await.expect_err("404");
    assert!(e.is_no_access(), "{e}");
    // A 403 that is no rate limit.
    r.standin.put(
        "GET /repos/acme/locked",
        Recorded::json(
            403,
            &json!({"message": "Resource not accessible by personal access token"}),
        ),
    );
    let e = s
        .repository(&RepoName::parse("acme/locked").expect("repo"))
        .await
        .expect_err("403");
    assert!(e.is_no_access(), "{e}");
    // 5xx: unavailable.
    r.standin.put(
        "GET /repos/acme/down",
        Recorded::json(502, &json!({"message": "Server Error"})),
    );
    let e = s
        .repository(&RepoName::parse("acme/down").expect("repo"))
        .await
        .expect_err("502");
    assert!(e.is_unavailable(), "{e}");
    // A token GitHub refuses (401), and the token file read again at each session.
    r.standin.accept_token(Some("github_pat_rotated_987654321"));
    let e = s.repository(&shop()).await.expect_err("401");
    assert!(e.is_no_access(), "{e}");
    std::fs::write(r.dir.path().join("token"), "github_pat_rotated_987654321").expect("rotate");
    let s2 = r.gh.session().expect("session");
    assert!(s2.repository(&shop()).await.is_ok());
    // No token file at all.
    std::fs::remove_file(r.dir.path().join("token")).expect("rm");
    assert!(r.gh.session().expect_err("no file").is_no_access());
    let none = GitHub::new(&r.standin.url, None).expect("client");
    assert!(none.session().expect_err("none").is_no_access());
    // Unreachable: unavailable.
    let gone = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        format!("http://{}", l.local_addr().expect("addr"))
    };
    std::fs::write(r.dir.path().join("token"), TOKEN).expect("token");
    let g = GitHub::new(&gone, Some(r.dir.path().join("token"))).expect("client");
    let e = g
        .session()
        .expect("session")
        .repository(&shop())
        .await
        .expect_err("down");
    assert!(e.is_unavailable(), "{e}");
    r.standin.assert_no_misses();
}

#[tokio::test]
async fn rate_limits_are_waited_out() {
    let r = rig().await;
    let s = r.gh.session().expect("session");
    // A secondary rate limit: 403 with retry-after, then the answer.
    r.standin.once(
        "GET /repos/acme/shop",
        Recorded::json(
            403,
            &json!({"message": "You have exceeded a secondary rate limit"}),
        )
        .header("retry-after", "7"),
    );
    assert!(s.repository(&shop()).await.is_ok());
    assert_eq!(r.pacer.slept(), vec![Duration::from_secs(7)]);
    // The primary limit spent: 429 with remaining 0 waits until the reset (an hour at most
    // here: the reset is 60 s after the pacer's clock).
    let reset = 1_775_001_600 + 7 + 60;
    r.standin.once(
        "GET /repos/acme/shop/branches/main",
        Recorded::json(429, &json!({"message": "API rate limit exceeded"}))
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", &reset.to_string()),
    );
    assert!(s.branch(&shop(), "main").await.is_ok());
    assert_eq!(r.pacer.slept()[1], Duration::from_secs(60));
    // A success that spends the last request holds the next one until the reset.
    let reset = 1_775_001_600 + 67 + 30;
    r.standin.once(
        "GET /repos/acme/shop/issues/42",
        Recorded::json(200, &json!({"number": 42, "title": "t", "state": "open", "html_url": "h", "created_at": "2026-02-20T10:00:00Z"}))
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", &reset.to_string()),
    );
    assert!(s.issue(&shop(), 42).await.is_ok());
    assert_eq!(r.pacer.slept().len(), 2);
    assert!(s.issue(&shop(), 42).await.is_ok());
    assert_eq!(r.pacer.slept()[2], Duration::from_secs(30));
    // A wait beyond the longest the client takes: RateLimited, an unavailable error.
    r.standin.once(
        "GET /repos/acme/shop/issues/42",
        Recorded::json(403, &json!({"message": "API rate limit exceeded"}))
            .header("x-ratelimit-remaining", "0")
            .header("x-ratelimit-reset", "1775090000"),
    );
    let e = s.issue(&shop(), 42).await.expect_err("limited");
    assert!(
        matches!(e, Error::RateLimited(_)) && e.is_unavailable(),
        "{e}"
    );
    r.standin.assert_no_misses();
}

#[tokio::test]
async fn links_elsewhere_are_not_followed_and_misses_are_caught() {
    let r = rig().await;
    let s = r.gh.session().expect("session");
    r.standin.put(
        "GET /repos/acme/shop/pulls/7/commits?per_page=100",
        Recorded::json(200, &json!([])).header(
            "link",
            "<https://attacker.example/steal?page=2>; rel=\"next\"",
        ),
    );
    let e = s.pull_commits(&shop(), 7).await.expect_err("foreign link");
    assert!(matches!(e, Error::Malformed(_)), "{e}");
    // An unrecorded request is answered 599 and remembered.
    let e = s.pull_commits(&shop(), 8).await.expect_err("unrecorded");
    assert!(
        e.is_unavailable() || matches!(e, Error::Malformed(_)),
        "{e}"
    );
    assert_eq!(
        r.standin.misses(),
        vec!["GET /repos/acme/shop/pulls/8/commits?per_page=100".to_owned()]
    );
    // This test expects its miss: forget it before the stand-in's drop checks.
    std::mem::forget(r.standin);
}
