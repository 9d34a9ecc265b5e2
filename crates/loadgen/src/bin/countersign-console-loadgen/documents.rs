//! The documents mode (issue 12): one document uploaded, then edits one at a time and
//! block reads.

use super::*;

/// A markdown document of about `kib` KiB: sections of a heading, a paragraph holding the
/// unique word `paraNx` (what the edits replace), a task list, and now and then a table or a
/// code block. Answers it and its number of sections.
pub(super) fn document(kib: usize) -> (String, usize) {
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let mut md = String::from("# Load\n");
    let mut n = 0;
    while md.len() < kib * 1024 {
        md.push_str(&format!("\n## Section {n}\n\n"));
        let words: Vec<&str> = (0..40).map(|_| rng.pick(WORDS)).collect();
        md.push_str(&format!("para{n}x {}.\n\n", words.join(" ")));
        for t in 0..3 {
            let done = if rng.next().is_multiple_of(2) {
                "x"
            } else {
                " "
            };
            md.push_str(&format!("- [{done}] task {n}.{t} {}\n", rng.title()));
        }
        if n % 5 == 0 {
            md.push_str("\n| name | value | note |\n|---|---|---|\n");
            for r in 0..3 {
                md.push_str(&format!(
                    "| r{r} | {} | {} |\n",
                    rng.next() % 1000,
                    rng.pick(WORDS)
                ));
            }
        }
        if n % 7 == 0 {
            md.push_str(&format!(
                "\n```\nfn f{n}() -> u64 {{ {} }}\n```\n",
                rng.next() % 1000
            ));
        }
        n += 1;
    }
    (md, n)
}

/// Creates project BENCH through the API; answers the status.
pub(super) async fn create_bench(
    http: &reqwest::Client,
    url: &str,
) -> anyhow::Result<reqwest::StatusCode> {
    let r = http
        .post(format!("{url}/api/v1/projects"))
        .bearer_auth(TOKEN)
        .json(&json!({"key": "BENCH", "name": "Bench", "actor": "loadgen"}))
        .send()
        .await?;
    Ok(r.status())
}

/// Uploads `md` to project BENCH as the markdown file `filename` (multipart); answers the new
/// artifact's JSON.
pub(super) async fn upload(
    http: &reqwest::Client,
    url: &str,
    filename: &str,
    md: &str,
) -> anyhow::Result<serde_json::Value> {
    let boundary = "loadgen-boundary-5f3a";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
         Content-Type: text/markdown\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(md.as_bytes());
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let r = http
        .post(format!("{url}/api/v1/projects/BENCH/artifacts"))
        .bearer_auth(TOKEN)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(r.status() == 201, "upload: {}", r.text().await?);
    Ok(r.json().await?)
}

// Long: a benchmark phase reads best as its script, top to bottom: set up, measure, print.
pub(super) async fn documents(args: Args, url: String) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let status = create_bench(&http, &url).await?;
    anyhow::ensure!(status == 201, "project: {status}");
    let (md, sections) = document(args.document_kib);
    let started = Instant::now();
    let meta = upload(&http, &url, "load.md", &md).await?;
    println!(
        "uploaded a {} byte document ({sections} sections) in {:.1} ms",
        meta["size"],
        started.elapsed().as_secs_f64() * 1e3
    );
    let id = meta["id"].as_str().unwrap_or_default().to_owned();
    let mut token = meta["token"].as_str().unwrap_or_default().to_owned();

    // Replace ops, one at a time, each conditional on the last answer's token.
    let mut lat = Vec::with_capacity(args.edits);
    let started = Instant::now();
    let cpu0 = server_cpu();
    for i in 0..args.edits {
        let n = (i * 7919) % sections;
        let (from, to) = if (i / sections) % 2 == 0 {
            (format!("para{n}x"), format!("para{n}y"))
        } else {
            (format!("para{n}y"), format!("para{n}x"))
        };
        let t = Instant::now();
        let r = http
            .post(format!("{url}/api/v1/artifacts/{id}/edits"))
            .bearer_auth(TOKEN)
            .json(&json!({
                "expected_token": token,
                "ops": [{"op": "replace", "quote": {"exact": from}, "text": to}],
            }))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "edit {i}: {}", r.text().await?);
        let answer: serde_json::Value = r.json().await?;
        lat.push(t.elapsed());
        token = answer["token"].as_str().unwrap_or_default().to_owned();
    }
    report(
        &format!(
            "POST /api/v1/artifacts/{{id}}/edits (one replace, {} KiB)",
            args.document_kib
        ),
        lat,
        started.elapsed(),
        server_cpu() - cpu0,
    );

    // The blocks route.
    let mut lat = Vec::with_capacity(args.reads);
    let mut blocks = 0;
    let started = Instant::now();
    let cpu0 = server_cpu();
    for _ in 0..args.reads {
        let t = Instant::now();
        let r = http
            .get(format!("{url}/api/v1/artifacts/{id}/blocks"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "blocks: {}", r.status());
        let b = r.bytes().await?;
        lat.push(t.elapsed());
        blocks = b.len();
    }
    report(
        &format!(
            "GET /api/v1/artifacts/{{id}}/blocks ({} KiB answer, unchanged document)",
            blocks / 1024
        ),
        lat,
        started.elapsed(),
        server_cpu() - cpu0,
    );

    // The blocks route right after an edit (the answer made afresh), one edit before each.
    let mut lat = Vec::new();
    let started = Instant::now();
    for i in 0..(args.reads / 4).max(1) {
        let r = http
            .post(format!("{url}/api/v1/artifacts/{id}/edits"))
            .bearer_auth(TOKEN)
            .json(&json!({"ops": [{"op": "insert_after", "quote": {"exact": "# Load"}, "text": format!("\n\nfresh {i}")}]}))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "edit: {}", r.text().await?);
        let t = Instant::now();
        let r = http
            .get(format!("{url}/api/v1/artifacts/{id}/blocks"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "blocks: {}", r.status());
        r.bytes().await?;
        lat.push(t.elapsed());
    }
    report(
        "GET /api/v1/artifacts/{id}/blocks (right after an edit)",
        lat,
        started.elapsed(),
        f64::NAN,
    );
    Ok(())
}
