//! The pages mode (issue 27): the pages a signed-in person reads, one request at a time.

use super::*;

// Long: a benchmark phase reads best as its script, top to bottom: set up, measure, print.
/// The pages mode (see the module's doc).
pub(super) async fn pages(
    args: Args,
    url: String,
    state: Arc<countersign_console_http::AppState>,
) -> anyhow::Result<()> {
    use countersign_console_core::console::asks::{NewAsk, NewComment};
    let person = Actor::User {
        login: bench_login()?,
    };
    let created = state
        .console
        .issues()
        .create_project(&person, "BENCH", "Bench")
        .await;
    anyhow::ensure!(created.is_ok() || args.existing, "project: {created:?}");
    if !args.existing {
        fill(&state, args.issues, args.connections).await?;
    }
    let session = state.console.sign_in_local(PERSON).await?;
    let cookie = format!("countersign_session={}", session.token.as_str());
    let http = reqwest::Client::new();

    // One request at a time: each latency is the server's time and loopback. As a browser
    // does, each asks for gzip: what is reported is the bytes transferred (the body as sent),
    // beside the page's HTML (one more request without compression, not timed).
    let reads = args.reads;
    let read = |path: String| {
        let (http, url, cookie) = (http.clone(), url.clone(), cookie.clone());
        async move {
            let plain = http
                .get(format!("{url}{path}"))
                .header("cookie", &cookie)
                .send()
                .await?;
            anyhow::ensure!(plain.status() == 200, "{path}: {}", plain.status());
            let html = plain.text().await?;
            let mut lat = Vec::with_capacity(reads);
            let mut sent = 0;
            let started = Instant::now();
            let cpu0 = server_cpu();
            for _ in 0..reads {
                let t = Instant::now();
                let r = http
                    .get(format!("{url}{path}"))
                    .header("cookie", &cookie)
                    .header("accept-encoding", "gzip")
                    .send()
                    .await?;
                anyhow::ensure!(r.status() == 200, "{path}: {}", r.status());
                sent = r.bytes().await?.len();
                lat.push(t.elapsed());
            }
            report(
                &format!(
                    "GET {path} ({} KiB of HTML, {} KiB transferred)",
                    html.len() / 1024,
                    sent / 1024
                ),
                lat,
                started.elapsed(),
                server_cpu() - cpu0,
            );
            Ok::<_, anyhow::Error>(html)
        }
    };
    read("/projects/BENCH/issues".into()).await?;
    read("/projects/BENCH/issues?status=done".into()).await?;

    // The query the list pages make (`Console::issue_rows`: a page of 50 with its children's
    // progress and open asks, the total), called in this process: the server's share of a
    // list page before its markup, for each order, a filter, and the 100th page by cursor.
    {
        use countersign_console_core::work::{
            IssueCursor, IssueListQuery, IssueSort, ProjectKey, Status,
        };
        let project = ProjectKey::parse("BENCH");
        let mut cases: Vec<(String, IssueListQuery)> = Vec::new();
        for sort in IssueSort::ALL {
            cases.push((
                format!("sort={}", sort.as_str()),
                IssueListQuery {
                    project: project.clone(),
                    sort,
                    ..Default::default()
                },
            ));
        }
        cases.push((
            "status=done".into(),
            IssueListQuery {
                project: project.clone(),
                status: vec![Status::Done],
                ..Default::default()
            },
        ));
        // The 100th page: follow 99 cursors first.
        let mut deep = IssueListQuery {
            project: project.clone(),
            ..Default::default()
        };
        for _ in 0..99 {
            let page = state.console.issues().issue_rows(&deep).await?;
            deep.after = page.next.as_deref().and_then(IssueCursor::parse);
        }
        cases.push(("the 100th page".into(), deep));
        for (name, q) in cases {
            let mut lat = Vec::with_capacity(reads);
            let started = Instant::now();
            let mut rows = 0;
            for _ in 0..reads {
                let t = Instant::now();
                let page = state.console.issues().issue_rows(&q).await?;
                lat.push(t.elapsed());
                rows = page.rows.len();
            }
            report(
                &format!("Console::issue_rows ({name}, {rows} rows)"),
                lat,
                started.elapsed(),
                f64::NAN,
            );
        }
    }

    // An issue with `--timeline` entries: comments, and an ask each fourth.
    let (issue, _) = state
        .console
        .issues()
        .create_issue(
            &person,
            NewIssue {
                project: Some("BENCH".into()),
                title: Some("An issue with a long conversation".into()),
                ..Default::default()
            },
        )
        .await?;
    let key = issue.key.to_string();
    let agent = Actor::Agent {
        owner: None,
        service: None,
        session: SessionId::parse("loadgen-agent"),
    };
    let mut rng = Rng(0x3c6e_f372_fe94_f82b);
    for i in 0..args.timeline {
        if i % 4 == 3 {
            state
                .console
                .asks()
                .open_issue_ask(
                    &agent,
                    &key,
                    NewAsk {
                        question: format!("{}?", rng.title()),
                        options: Vec::new(),
                        block: None,
                        actor: None,
                    },
                )
                .await?;
        } else {
            let who = if i % 2 == 0 { &person } else { &agent };
            state
                .console
                .asks()
                .comment_on_issue(
                    who,
                    &key,
                    NewComment {
                        body: format!("{} {} {}", rng.title(), rng.title(), rng.title()),
                        ..Default::default()
                    },
                )
                .await?;
        }
    }
    read(format!("/issues/{key}")).await?;

    // A `--document-kib` document's page.
    let (md, _) = document(args.document_kib);
    let meta = upload(&http, &url, "pages.md", &md).await?;
    let id = meta["id"].as_str().unwrap_or_default().to_owned();
    let page = read(format!("/artifacts/{id}")).await?;
    // The part the page fetches next as the person reads on.
    if let Some(next) = page
        .split("data-doc-part=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
    {
        read(next.replace("&amp;", "&")).await?;
    }
    Ok(())
}
