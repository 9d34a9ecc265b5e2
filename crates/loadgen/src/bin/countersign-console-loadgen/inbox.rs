//! The inbox phase (issue 13): open asks across projects, then one person's inbox read
//! under load.

use super::*;

/// An agent rewords one of its asks (a write in the inbox: the next read patches it).
pub(super) async fn reword(
    console: &countersign_console_core::Console,
    asked: &[(Actor, countersign_console_core::ids::AskId)],
    turn: usize,
) -> anyhow::Result<()> {
    let (agent, id) = &asked[(turn * 7919) % asked.len()];
    console
        .asks()
        .reword_ask(
            agent,
            *id,
            countersign_console_core::console::asks::AskPatch {
                question: Some(format!("Reworded, take {turn}?")),
                ..Default::default()
            },
        )
        .await?;
    Ok(())
}

/// The person the inbox and pages modes sign in as.
pub(super) const PERSON: &str = "bench@example.com";

pub(super) fn bench_login() -> anyhow::Result<countersign_console_core::Login> {
    countersign_console_core::Login::parse(PERSON).ok_or_else(|| anyhow::anyhow!("login"))
}

// Long: a benchmark phase reads best as its script, top to bottom: set up, measure, print.
/// The inbox phase (see the module's doc).
pub(super) async fn inbox(
    args: Args,
    url: String,
    state: Arc<countersign_console_http::AppState>,
) -> anyhow::Result<()> {
    use countersign_console_core::console::asks::{NewAsk, OptionIn};
    let session = state.console.sign_in_local(PERSON).await?;
    let cookie = format!("countersign_session={}", session.token.as_str());
    let person = Actor::User {
        login: bench_login()?,
    };
    let started = Instant::now();
    let projects = args.inbox_projects.max(1);
    let per_project = args.inbox_asks.div_ceil(projects);
    let issues_per_project = 10usize;
    let mut rng = Rng(0x6a09_e667_f3bc_c909);
    let mut made = 0;
    let mut asked = Vec::new();
    for p in 0..projects {
        let key = format!("P{p:03}");
        state
            .console
            .issues()
            .create_project(&person, &key, &format!("Project {p}"))
            .await?;
        let mut keys = Vec::new();
        for _ in 0..issues_per_project {
            let (issue, _) = state
                .console
                .issues()
                .create_issue(
                    &person,
                    NewIssue {
                        project: Some(key.clone()),
                        title: Some(rng.title()),
                        ..Default::default()
                    },
                )
                .await?;
            keys.push(issue.key.to_string());
        }
        for a in 0..per_project {
            if made == args.inbox_asks {
                break;
            }
            let agent = Actor::Agent {
                owner: None,
                service: None,
                session: SessionId::parse(&format!("agent-{}", a % 7)),
            };
            let new = NewAsk {
                question: format!("{}?", rng.title()),
                options: vec![
                    OptionIn {
                        id: Some("yes".into()),
                        label: "Yes".into(),
                    },
                    OptionIn {
                        id: Some("no".into()),
                        label: "No".into(),
                    },
                ],
                block: None,
                actor: None,
            };
            let opened = state
                .console
                .asks()
                .open_issue_ask(&agent, &keys[a % keys.len()], new)
                .await?;
            asked.push((agent, opened.head.id));
            made += 1;
        }
        if p % 10 == 9 {
            eprintln!("  {made} asks…");
        }
    }
    println!(
        "filled {made} open asks across {projects} projects in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections + 8)
        .build()?;
    let first = Instant::now();
    let check = http
        .get(format!("{url}/api/v1/inbox"))
        .header("cookie", &cookie)
        .send()
        .await?;
    anyhow::ensure!(check.status() == 200, "inbox: {}", check.status());
    let body: serde_json::Value = check.json().await?;
    println!(
        "GET /api/v1/inbox, the first read (nothing kept): {:.1} ms",
        first.elapsed().as_secs_f64() * 1e3
    );
    let rows = body["human_turn"].as_array().map_or(0, Vec::len);
    anyhow::ensure!(rows == made, "the inbox has {rows} rows, not {made}");
    // A write in the inbox before each read (an agent rewords one of its asks): the kept
    // answer is patched from the events since, that ask read again, the JSON made again.
    let mut turn = 0usize;
    let me = countersign_console_core::Human {
        login: bench_login()?,
        csrf_token: String::new(),
        session_key: String::new(),
    };
    let (mut core, mut json, mut cold) = (Vec::new(), Vec::new(), Vec::new());
    // CPU while each read runs (the machine may be shared: latency alone says little): the
    // process's for the core's reads (nothing else runs then), the server's for the requests.
    let (mut core_cpu, mut cold_cpu) = (0.0, 0.0);
    let mut size = 0;
    for _ in 0..args.queries.min(200) {
        turn += 1;
        reword(&state.console, &asked, turn).await?;
        let c = cpu_seconds("/proc/self/stat");
        let t = Instant::now();
        let inbox = state.console.asks().inbox_asks(&me, None, None).await?;
        core.push(t.elapsed());
        let t = Instant::now();
        size = inbox.json().len();
        json.push(t.elapsed());
        core_cpu += cpu_seconds("/proc/self/stat") - c;
        turn += 1;
        reword(&state.console, &asked, turn).await?;
        let c = server_cpu();
        let t = Instant::now();
        let r = http
            .get(format!("{url}/api/v1/inbox"))
            .header("cookie", &cookie)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "inbox: {}", r.status());
        r.bytes().await?;
        cold.push(t.elapsed());
        cold_cpu += server_cpu() - c;
    }
    core.sort();
    json.sort();
    println!(
        "inbox read after a write in it, in the core: p50 {:.2} ms, p99 {:.2} ms; its JSON ({size} bytes): p50 {:.2} ms; CPU {:.1} ms per read with its JSON",
        percentile(&core, 0.5).as_secs_f64() * 1e3,
        percentile(&core, 0.99).as_secs_f64() * 1e3,
        percentile(&json, 0.5).as_secs_f64() * 1e3,
        core_cpu * 1e3 / core.len().max(1) as f64,
    );
    let spent: Duration = cold.iter().sum();
    report(
        &format!("GET /api/v1/inbox after a write in it ({made} open asks)"),
        cold,
        spent,
        cold_cpu,
    );
    // Then reads with no write between them: the answer kept since the last event.
    let name = format!("GET /api/v1/inbox ({made} open asks, {projects} projects)");
    measured(&name, args.queries, args.connections, 200, move |_| {
        http.get(format!("{url}/api/v1/inbox"))
            .header("cookie", &cookie)
    })
    .await
}
