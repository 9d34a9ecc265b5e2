//! The default mode (issue 11): issues created, filtered lists, search, and the event
//! stream's fan-out.

use super::*;

// Long: a benchmark phase reads best as its script, top to bottom: set up, measure, print.
pub(super) async fn run(
    args: Args,
    url: String,
    state: Arc<countersign_console_http::AppState>,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.streams + args.connections + 8)
        .build()?;
    let status = create_bench(&http, &url).await?;
    anyhow::ensure!(
        status == 201 || (args.existing && status == 409),
        "project: {status}"
    );

    let create = args.create.min(args.issues);
    // 1. All but `--create` issues through the core.
    let rest = if args.existing {
        0
    } else {
        args.issues - create
    };
    fill(&state, rest, args.connections).await?;

    // 2. Creation through the API, on a table that holds the rest already.
    let (h, u) = (http.clone(), url.clone());
    measured(
        "POST /api/v1/issues (with advice)",
        create,
        args.connections,
        201,
        move |i| {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1));
            h.post(format!("{u}/api/v1/issues"))
                .bearer_auth(TOKEN)
                .json(&json!({
                    "project": "BENCH",
                    "title": rng.title(),
                    "labels": [format!("l{}", rng.next() % 20)],
                    "priority": rng.next() % 4,
                }))
        },
    )
    .await?;

    // 3. Filtered lists.
    let (h, u) = (http.clone(), url.clone());
    measured(
        "GET /api/v1/issues (project, status, label, limit=50)",
        args.queries,
        args.connections,
        200,
        move |i| {
            let status = ["todo", "in_progress", "done"][i % 3];
            h.get(format!(
                "{u}/api/v1/issues?project=BENCH&status={status}&label=l{}&limit=50",
                i % 20
            ))
            .bearer_auth(TOKEN)
        },
    )
    .await?;

    // 4. Search.
    let (h, u) = (http.clone(), url.clone());
    measured(
        "GET /api/v1/search (one or two words)",
        args.queries,
        args.connections,
        200,
        move |i| {
            let q = if i % 2 == 0 {
                WORDS[i % WORDS.len()].to_owned()
            } else {
                format!(
                    "{} {}",
                    WORDS[i % WORDS.len()],
                    WORDS[(i * 7) % WORDS.len()]
                )
            };
            h.get(format!("{u}/api/v1/search"))
                .query(&[("q", q.as_str())])
                .bearer_auth(TOKEN)
        },
    )
    .await?;

    // 5. Fan-out to open streams.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let ready = Arc::new(tokio::sync::Barrier::new(args.streams + 1));
    for s in 0..args.streams {
        let (http, url, tx, ready) = (http.clone(), url.clone(), tx.clone(), ready.clone());
        tokio::spawn(async move {
            let mut resp = match http
                .get(format!("{url}/api/v1/events"))
                .bearer_auth(TOKEN)
                .send()
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("stream {s}: {e}");
                    ready.wait().await;
                    return;
                }
            };
            ready.wait().await;
            let mut buf = String::new();
            while let Ok(Some(chunk)) = resp.chunk().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(nl) = buf.find('\n') {
                    let line: String = buf.drain(..=nl).collect();
                    // Each event carries one `id:` line.
                    if line.starts_with("id:") {
                        let _ = tx.send(Instant::now());
                    }
                }
            }
        });
    }
    drop(tx);
    ready.wait().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut delays = Vec::new();
    for e in 0..args.events {
        let r = http
            .post(format!("{url}/api/v1/issues"))
            .bearer_auth(TOKEN)
            .json(&json!({"project": "BENCH", "title": format!("fan-out {e}")}))
            .send()
            .await?;
        let answered = Instant::now();
        anyhow::ensure!(r.status() == 201, "fan-out create: {}", r.status());
        let mut got = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while got < args.streams {
            let Ok(Some(at)) = tokio::time::timeout_at(deadline, rx.recv()).await else {
                break;
            };
            got += 1;
            delays.push(at.saturating_duration_since(answered));
        }
        anyhow::ensure!(
            got == args.streams,
            "event {e} reached {got} of {} streams",
            args.streams
        );
    }
    delays.sort();
    println!(
        "fan-out: {} events to {} streams: delay after the POST's answer p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        args.events,
        args.streams,
        percentile(&delays, 0.5).as_secs_f64() * 1e3,
        percentile(&delays, 0.99).as_secs_f64() * 1e3,
        delays.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    Ok(())
}

/// `rest` issues in project BENCH through the core (no HTTP), `connections` at once, with
/// statuses, priorities and labels spread as the list phases filter them.
pub(super) async fn fill(
    state: &Arc<countersign_console_http::AppState>,
    rest: usize,
    connections: usize,
) -> anyhow::Result<()> {
    let started = Instant::now();
    // No HTTP here: the whole process's CPU is the write path's.
    let cpu0 = cpu_seconds("/proc/self/stat");
    let statuses = ["todo", "in_progress", "in_review", "blocked", "done"];
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut fillers = Vec::new();
    // As many at once as the API phase: the writes group-commit as they would under load.
    for _ in 0..connections {
        let (state, next) = (state.clone(), next.clone());
        fillers.push(tokio::spawn(async move {
            let actor = Actor::System {
                name: "loadgen".into(),
            };
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= rest {
                    return Ok::<_, anyhow::Error>(());
                }
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (i as u64 + 1));
                let new = NewIssue {
                    project: Some("BENCH".into()),
                    title: Some(rng.title()),
                    status: serde_json::from_value(json!(rng.pick(&statuses))).ok(),
                    priority: Some((rng.next() % 4) as u8),
                    labels: vec![format!("l{}", rng.next() % 20)],
                    ..Default::default()
                };
                state.console.issues().create_issue(&actor, new).await?;
                if i % 10_000 == 9_999 {
                    eprintln!("  {} issues…", i + 1);
                }
            }
        }));
    }
    for f in fillers {
        f.await??;
    }
    let cpu = cpu_seconds("/proc/self/stat") - cpu0;
    println!(
        "issue creation through the core (no HTTP, no advice), {} at once: {rest} in {:.1} s \
         ({:.0}/s); {:.0} µs of CPU each",
        connections,
        started.elapsed().as_secs_f64(),
        rest as f64 / started.elapsed().as_secs_f64().max(1e-9),
        cpu * 1e6 / rest.max(1) as f64,
    );
    Ok(())
}
