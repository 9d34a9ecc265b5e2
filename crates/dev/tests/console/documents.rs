//! The documents area over real HTTP, on SQLite and on PostgreSQL: uploads (JSON and
//! multipart) of documents, files and images with strict sniffing, downloads that are never
//! active content, slugs and filename resolution, versions (named, and settled by the clock),
//! the document event log, agent conversation artifacts, references, subscribers; with the
//! document engine: text, blocks, block positions, edits (stale tokens refused, concurrent
//! writers), rebuild, the block schema, issue progress, search, and the document page.

use std::time::Duration;

use base64::Engine;
use reqwest::Method;
use serde_json::{Value, json};

use crate::common::*;
use crate::on_both_databases;

const PNG: &[u8] =
    b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x01\0\0\0\x01\x08\x06\0\0\0\x1f\x15\xc4\x89";
const JPEG: &[u8] = b"\xff\xd8\xff\xe0\0\x10JFIF\0\x01";
const GIF: &[u8] = b"GIF89a\x01\0\x01\0\x80\0\0";
const WEBP: &[u8] = b"RIFF\x24\0\0\0WEBPVP8 \x18\0\0\0";
const SVG: &[u8] =
    b"<svg xmlns=\"http://www.w3.org/2000/svg\"><script>alert(document.cookie)</script></svg>";
const HTML: &[u8] = b"<!doctype html><script>fetch('/api/v1/me')</script><p>hi</p>";

fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Lowercase hex SHA-256 (through the proto crate's body hash, base64url).
fn sha256(b: &[u8]) -> String {
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(countersign_proto::claims::body_hash(b))
        .unwrap_or_default();
    raw.iter().map(|x| format!("{x:02x}")).collect()
}

/// A project `PAY` with an issue `PAY-1`.
async fn setup(db: Option<String>) -> anyhow::Result<(TestConsole, Who, Who)> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let r = ada
        .post(
            "/api/v1/projects",
            json!({"key": "PAY", "name": "Payments"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = ada
        .post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "Refunds"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    Ok((console, ada, agent))
}

fn file<'a>(filename: &'a str, content_type: &'a str, bytes: &'a [u8]) -> Part<'a> {
    Part {
        name: "file",
        filename: Some(filename),
        content_type: Some(content_type),
        bytes,
    }
}

/// The events of the stream from `since`, until `n` arrived or `secs` passed.
async fn read_events(
    who: &Who,
    since: i64,
    n: usize,
    secs: u64,
) -> anyhow::Result<Vec<(String, Value)>> {
    let mut req = who
        .http
        .get(format!("{}/api/v1/events?since={since}", who.base));
    if let Some(t) = &who.bearer {
        req = req.bearer_auth(t);
    }
    let mut resp = req.send().await?;
    anyhow::ensure!(resp.status() == 200, "events: {}", resp.status());
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while out.len() < n {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => break,
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut kind, mut data) = (None, None);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event: ") {
                    kind = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data: ") {
                    data = serde_json::from_str::<Value>(v).ok();
                }
            }
            if let (Some(k), Some(d)) = (kind, data) {
                out.push((k, d));
            }
        }
    }
    Ok(out)
}

// ----- files and images -----

async fn uploads_are_what_their_bytes_say(db: Option<String>) -> anyhow::Result<()> {
    let (console, ada, agent) = setup(db).await?;

    // JSON, text content: a file under its declared type.
    let r = agent
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "notes.txt", "content_type": "text/plain", "content": "hello", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let notes = r.json.clone();
    let id = notes["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r.location(), Some(format!("/api/v1/artifacts/{id}")));
    assert_eq!(notes["slug"], "notes");
    assert_eq!(notes["filename"], "notes.txt");
    assert_eq!(notes["kind"], "file");
    assert_eq!(notes["content_type"], "text/plain");
    assert_eq!(notes["size"], 5);
    assert_eq!(notes["issue"], "PAY-1");
    assert_eq!(notes["project"], "PAY");
    assert_eq!(notes["token"], sha256(b"hello"));
    assert_eq!(
        notes["version"],
        json!({"number": 1, "name": null, "kind": "settled"})
    );
    assert!(
        notes["created_at"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z'))
    );
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}")).await?.json,
        notes
    );
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{}", id.to_uppercase()))
            .await?
            .json,
        notes,
        "ids are read in any case"
    );

    // The issue's checks, each stored and served as its bytes say, never as active content.
    let cases: [(&str, &str, &[u8], &str, &str); 7] = [
        ("photo.txt", "text/plain", PNG, "image", "image/png"),
        (
            "fake.png",
            "image/png",
            b"not a png at all",
            "file",
            "application/octet-stream",
        ),
        ("page.html", "text/html", HTML, "file", "text/html"),
        ("logo.svg", "image/svg+xml", SVG, "file", "image/svg+xml"),
        (
            "a.jpg",
            "application/octet-stream",
            JPEG,
            "image",
            "image/jpeg",
        ),
        ("b.gif", "text/plain", GIF, "image", "image/gif"),
        ("c.webp", "image/webp", WEBP, "image", "image/webp"),
    ];
    for (name, declared, bytes, kind, stored) in cases {
        let r = ada
            .multipart(
                "/api/v1/issues/PAY-1/artifacts",
                &[file(name, declared, bytes)],
            )
            .await?;
        assert_eq!(r.status, 201, "{name}: {}", r.text);
        assert_eq!(
            (r.json["kind"].as_str(), r.json["content_type"].as_str()),
            (Some(kind), Some(stored)),
            "{name}"
        );
        assert_eq!(r.json["size"], bytes.len());
        let (status, h, body) = agent
            .bytes(&format!(
                "/api/v1/artifacts/{}/versions/1",
                r.json["id"].as_str().unwrap_or_default()
            ))
            .await?;
        assert_eq!(status, 200, "{name}");
        assert_eq!(body, bytes, "{name}");
        let header = |n: &str| {
            h.get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_owned()
        };
        assert_eq!(header("content-type"), stored, "{name}");
        assert_eq!(header("x-content-type-options"), "nosniff");
        assert_eq!(
            header("cache-control"),
            "private, max-age=31536000, immutable"
        );
        assert!(
            header("content-security-policy").starts_with("sandbox"),
            "{name}"
        );
        if kind == "image" {
            assert_eq!(
                header("content-disposition"),
                "",
                "{name}: an image shows inline"
            );
        } else {
            assert!(
                header("content-disposition").starts_with("attachment; filename=\""),
                "{name}"
            );
        }
    }

    // The same filename again: a new version; the old one is still there, byte for byte.
    let r = agent
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "notes.txt", "content_type": "text/plain", "content_base64": b64(b"hello again")}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["id"], id.as_str());
    assert_eq!(r.json["version"]["number"], 2);
    assert_eq!(r.json["size"], 11);
    let (_, _, v1) = ada
        .bytes(&format!("/api/v1/artifacts/{id}/versions/1"))
        .await?;
    let (_, _, v2) = ada
        .bytes("/api/v1/issues/PAY-1/artifacts/notes.txt/versions/2")
        .await?;
    assert_eq!(
        (v1.as_slice(), v2.as_slice()),
        (&b"hello"[..], &b"hello again"[..])
    );

    // Slugs: from the filename, `-2` on a collision, or given.
    let r = ada
        .multipart(
            "/api/v1/issues/PAY-1/artifacts",
            &[file("Notes.csv", "text/csv", b"a,b")],
        )
        .await?;
    assert_eq!(r.json["slug"], "notes-2", "{}", r.text);
    let r = ada
        .multipart(
            "/api/v1/issues/PAY-1/artifacts",
            &[
                file("Q3 report.csv", "text/csv", b"a,b"),
                Part {
                    name: "slug",
                    filename: None,
                    content_type: None,
                    bytes: b"q3",
                },
            ],
        )
        .await?;
    assert_eq!(r.json["slug"], "q3", "{}", r.text);
    refused(
        &ada.post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "other.csv", "slug": "q3", "content_type": "text/csv", "content": "x"}),
        )
        .await?,
        400,
        "ARTIFACT_INPUT",
    );
    refused(
        &ada.post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "other.csv", "slug": "Not A Slug", "content_type": "text/csv", "content": "x"}),
        )
        .await?,
        400,
        "ARTIFACT_INPUT",
    );
    // The same filename with another slug than its artifact's.
    refused(
        &ada.post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "notes.txt", "slug": "elsewhere", "content_type": "text/plain", "content": "x"}),
        )
        .await?,
        400,
        "ARTIFACT_INPUT",
    );

    // `{slug}`: a slug, or a filename exactly one artifact carries.
    for seg in ["notes", "notes.txt", "q3", "Q3%20report.csv"] {
        let r = ada
            .get(&format!("/api/v1/issues/PAY-1/artifacts/{seg}"))
            .await?;
        assert_eq!(r.status, 200, "{seg}: {}", r.text);
    }
    for seg in ["nothing", "Notes.txt", "q3.csv"] {
        refused(
            &ada.get(&format!("/api/v1/issues/PAY-1/artifacts/{seg}"))
                .await?,
            404,
            "NOT_FOUND",
        );
    }
    let list = agent
        .get("/api/v1/issues/PAY-1/artifacts?session=s1")
        .await?;
    assert_eq!(list.status, 200, "{}", list.text);
    let names: Vec<&str> = list
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["filename"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(names.len(), 10);
    assert_eq!(names[0], "notes.txt");

    // A project's artifacts, and the scopes are apart.
    let r = ada
        .multipart(
            "/api/v1/projects/PAY/artifacts",
            &[file("notes.txt", "text/plain", b"project notes")],
        )
        .await?;
    assert_eq!(
        (
            r.status,
            r.json["slug"].as_str(),
            r.json["issue"].is_null(),
            r.json["project"].as_str()
        ),
        (201, Some("notes"), true, Some("PAY")),
        "{}",
        r.text
    );
    let (_, _, b) = ada
        .bytes("/api/v1/projects/PAY/artifacts/notes/versions/1")
        .await?;
    assert_eq!(b, b"project notes");
    assert_eq!(
        ada.get("/api/v1/projects/PAY/artifacts")
            .await?
            .json
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(
        ada.get("/api/v1/projects/PAY/artifacts/notes").await?.json["id"],
        r.json["id"]
    );

    // Refusals of the upload body (protocol §2).
    let bad_bodies = [
        json!({"filename": "x.txt", "content_type": "text/plain", "content": "x", "colour": "red"}),
        json!({"filename": "x.txt", "content_type": "text/plain"}),
        json!({"filename": "x.txt", "content_type": "text/plain", "content": "x", "content_base64": "eA=="}),
        json!({"filename": "x.txt", "content_type": "text/plain", "content_base64": "not base64!"}),
        json!({"filename": "x.txt", "content_type": "not a type", "content": "x"}),
        json!({"filename": "a/b.txt", "content_type": "text/plain", "content": "x"}),
        json!({"filename": "", "content_type": "text/plain", "content": "x"}),
        json!({"content_type": "text/plain", "content": "x"}),
        json!({"filename": 3, "content_type": "text/plain", "content": "x"}),
        json!({"filename": "x.md", "content_type": "text/markdown", "content_base64": b64(b"\xff\xfe")}),
    ];
    for b in bad_bodies {
        refused(
            &ada.post("/api/v1/issues/PAY-1/artifacts", b.clone())
                .await?,
            400,
            "ARTIFACT_INPUT",
        );
    }
    refused(
        &ada.raw(
            Method::POST,
            "/api/v1/issues/PAY-1/artifacts",
            "application/json",
            b"{not json".to_vec(),
        )
        .await?,
        400,
        "ARTIFACT_INPUT",
    );
    refused(
        &ada.raw(
            Method::POST,
            "/api/v1/issues/PAY-1/artifacts",
            "text/plain",
            b"hello".to_vec(),
        )
        .await?,
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    );
    for parts in [
        vec![Part {
            name: "file",
            filename: None,
            content_type: Some("text/plain"),
            bytes: b"x",
        }],
        vec![Part {
            name: "slug",
            filename: None,
            content_type: None,
            bytes: b"x",
        }],
        vec![
            file("a.txt", "text/plain", b"x"),
            Part {
                name: "extra",
                filename: None,
                content_type: None,
                bytes: b"x",
            },
        ],
        vec![
            file("a.txt", "text/plain", b"x"),
            file("b.txt", "text/plain", b"y"),
        ],
    ] {
        refused(
            &ada.multipart("/api/v1/issues/PAY-1/artifacts", &parts)
                .await?,
            400,
            "ARTIFACT_INPUT",
        );
    }
    refused(
        &ada.raw(
            Method::POST,
            "/api/v1/issues/PAY-1/artifacts",
            "multipart/form-data",
            b"--x\r\n".to_vec(),
        )
        .await?,
        400,
        "ARTIFACT_INPUT",
    );
    // Sizes: a JSON body over 1 MiB; a multipart body over 25 MiB.
    let big = "x".repeat(1024 * 1024 + 1);
    refused(
        &ada.post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "big.txt", "content_type": "text/plain", "content": big}),
        )
        .await?,
        413,
        "REQUEST_TOO_LARGE",
    );
    let two = vec![7u8; 2 * 1024 * 1024];
    let r = ada
        .multipart(
            "/api/v1/issues/PAY-1/artifacts",
            &[file("two.bin", "application/octet-stream", &two)],
        )
        .await?;
    assert_eq!(
        (r.status, r.json["size"].as_i64()),
        (201, Some(2 * 1024 * 1024)),
        "a multipart upload takes more than 1 MiB"
    );
    let huge = vec![7u8; 25 * 1024 * 1024 + 1];
    let r = ada
        .multipart(
            "/api/v1/issues/PAY-1/artifacts",
            &[file("huge.bin", "application/octet-stream", &huge)],
        )
        .await;
    if let Ok(r) = r {
        refused(&r, 413, "REQUEST_TOO_LARGE");
    }

    // What the paths name.
    refused(
        &ada.post(
            "/api/v1/issues/PAY-9/artifacts",
            json!({"filename": "x.txt", "content_type": "text/plain", "content": "x"}),
        )
        .await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/projects/NOPE/artifacts").await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/issues/pay-1/artifacts").await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/artifacts/not-a-uuid").await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/artifacts/00000000-0000-0000-0000-000000000000")
            .await?,
        404,
        "NOT_FOUND",
    );
    for n in ["3", "0", "x", "-1"] {
        refused(
            &ada.get(&format!("/api/v1/artifacts/{id}/versions/{n}"))
                .await?,
            404,
            "NOT_FOUND",
        );
    }
    // A file has no text.
    refused(
        &ada.get(&format!("/api/v1/artifacts/{id}/text")).await?,
        404,
        "NOT_FOUND",
    );
    // A bearer names a valid session; a person names none.
    refused(
        &agent
            .get(&format!("/api/v1/artifacts/{id}?session=a%20b"))
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &ada.get(&format!("/api/v1/artifacts/{id}?session=s1"))
            .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &agent
            .get(&format!("/api/v1/artifacts/{id}?colour=red"))
            .await?,
        400,
        "INVALID_QUERY",
    );
    console.stop().await;
    Ok(())
}

on_both_databases!(
    uploads_are_what_their_bytes_say,
    uploads_are_what_their_bytes_say_sqlite,
    uploads_are_what_their_bytes_say_postgres
);

async fn agent_conversation_artifacts(db: Option<String>) -> anyhow::Result<()> {
    let (console, ada, agent) = setup(db).await?;
    let before = read_events(&ada, 0, 100, 2).await?.len();

    let r = agent
        .multipart(
            "/api/v1/agents/sess-7/artifacts?session=sess-7",
            &[file("screen shot.png", "image/png", PNG)],
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.location().as_deref(),
        Some("/api/v1/agents/sess-7/artifacts/screen-shot")
    );
    assert_eq!(r.json["kind"], "image");
    assert_eq!(r.json["session"], "sess-7");
    assert_eq!(r.json["ref_key"], "agent/sess-7/screen-shot");
    assert_eq!(
        r.json["address"],
        "countersign://agent/sess-7/artifact/screen-shot"
    );
    assert!(r.json["issue"].is_null() && r.json["project"].is_null());
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    let r = ada
        .multipart(
            "/api/v1/agents/sess-7/artifacts",
            &[file("screen shot.png", "image/png", GIF)],
        )
        .await?;
    assert_eq!(
        (
            r.json["version"]["number"].as_i64(),
            r.json["content_type"].as_str()
        ),
        (Some(2), Some("image/gif")),
        "{}",
        r.text
    );
    let r = ada
        .multipart(
            "/api/v1/agents/sess-7/artifacts",
            &[file("log.txt", "text/plain", b"line")],
        )
        .await?;
    assert_eq!(r.json["kind"], "file");

    let r = agent
        .get("/api/v1/agents/sess-7/artifacts/screen-shot")
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["id"], id.as_str());
    let versions = r.json["versions"].as_array().cloned().unwrap_or_default();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["content_type"], "image/png");
    assert_eq!(versions[1]["content_type"], "image/gif");
    assert_eq!(
        ada.get("/api/v1/agents/sess-7/artifacts/screen%20shot.png")
            .await?
            .json["id"],
        id.as_str()
    );
    let (status, h, body) = agent
        .bytes("/api/v1/agents/sess-7/artifacts/screen-shot/versions/1")
        .await?;
    assert_eq!((status, body.as_slice()), (200, PNG));
    assert_eq!(
        h.get("cache-control").and_then(|v| v.to_str().ok()),
        Some("private, max-age=31536000, immutable")
    );
    assert_eq!(
        h.get("x-content-type-options")
            .and_then(|v| v.to_str().ok()),
        Some("nosniff")
    );
    let (_, h, _) = agent
        .bytes("/api/v1/agents/sess-7/artifacts/log/versions/1")
        .await?;
    assert!(h.get("content-disposition").is_some());
    // Another session's conversation is another scope.
    refused(
        &ada.get("/api/v1/agents/sess-8/artifacts/screen-shot")
            .await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/agents/sess-7/artifacts/screen-shot/versions/3")
            .await?,
        404,
        "NOT_FOUND",
    );

    // Files and images only, multipart only.
    refused(
        &ada.multipart(
            "/api/v1/agents/sess-7/artifacts",
            &[file("plan.md", "text/markdown", b"# Plan\n")],
        )
        .await?,
        400,
        "ARTIFACT_INPUT",
    );
    refused(
        &ada.post(
            "/api/v1/agents/sess-7/artifacts",
            json!({"filename": "x.txt", "content_type": "text/plain", "content": "x"}),
        )
        .await?,
        400,
        "ARTIFACT_INPUT",
    );
    refused(
        &ada.raw(
            Method::POST,
            "/api/v1/agents/sess-7/artifacts",
            "text/plain",
            b"x".to_vec(),
        )
        .await?,
        415,
        "UNSUPPORTED_MEDIA_TYPE",
    );
    // INVALID_SESSION_ID on every agent route.
    for bad in [
        "a%20b",
        "a%3Fb",
        "a%23b",
        "a%3Cb",
        "a%22b",
        "a%60b",
        "a%7Cb",
        &"x".repeat(129),
    ] {
        refused(
            &ada.multipart(
                &format!("/api/v1/agents/{bad}/artifacts"),
                &[file("a.png", "image/png", PNG)],
            )
            .await?,
            400,
            "INVALID_SESSION_ID",
        );
        refused(
            &ada.get(&format!("/api/v1/agents/{bad}/artifacts/screen-shot"))
                .await?,
            400,
            "INVALID_SESSION_ID",
        );
        refused(
            &ada.get(&format!(
                "/api/v1/agents/{bad}/artifacts/screen-shot/versions/1"
            ))
            .await?,
            400,
            "INVALID_SESSION_ID",
        );
    }

    // No event appended: the next event on the stream is the project created after.
    ada.post("/api/v1/projects", json!({"key": "NEXT", "name": "After"}))
        .await?;
    let events = read_events(&ada, 0, before + 1, 5).await?;
    assert_eq!(events.len(), before + 1);
    assert_eq!(events[before].0, "project.created");
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}/events"))
            .await?
            .json,
        json!([])
    );
    console.stop().await;
    Ok(())
}

on_both_databases!(
    agent_conversation_artifacts,
    agent_conversation_artifacts_sqlite,
    agent_conversation_artifacts_postgres
);

async fn versions_events_and_subscribers(db: Option<String>) -> anyhow::Result<()> {
    let (console, ada, agent) = setup(db).await?;
    let r = agent
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "data.csv", "content_type": "text/csv", "content": "a,b\n", "actor": "s1"}),
        )
        .await?;
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();

    // Naming the current content: a new named version, 201 with its read route.
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{id}/versions"),
            json!({"name": "first cut", "actor": "s2"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        r.location(),
        Some(format!("/api/v1/artifacts/{id}/versions/2"))
    );
    assert_eq!(
        (
            r.json["number"].as_i64(),
            r.json["name"].as_str(),
            r.json["kind"].as_str()
        ),
        (Some(2), Some("first cut"), Some("named"))
    );
    assert_eq!(r.json["by"]["session"], "s2");
    let r = ada
        .post(
            "/api/v1/issues/PAY-1/artifacts/data/versions",
            json!({"name": "ü".repeat(80)}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    refused(
        &ada.post(
            &format!("/api/v1/artifacts/{id}/versions"),
            json!({"name": "ü".repeat(81)}),
        )
        .await?,
        400,
        "CAP_EXCEEDED",
    );
    refused(
        &ada.post(
            &format!("/api/v1/artifacts/{id}/versions"),
            json!({"name": " "}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(
            &format!("/api/v1/artifacts/{id}/versions"),
            json!({"name": "x", "colour": 1}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(&format!("/api/v1/artifacts/{id}/versions"), json!({}))
            .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(
            "/api/v1/artifacts/00000000-0000-0000-0000-000000000000/versions",
            json!({"name": "x"}),
        )
        .await?,
        404,
        "NOT_FOUND",
    );
    let meta = ada.get(&format!("/api/v1/artifacts/{id}")).await?.json;
    assert_eq!(
        meta["version"],
        json!({"number": 3, "name": "ü".repeat(80), "kind": "named"})
    );

    // The document's log: its own sequence from 1; the issue's log keeps apart.
    let log = ada.get(&format!("/api/v1/artifacts/{id}/events")).await?;
    assert_eq!(log.status, 200, "{}", log.text);
    let kinds: Vec<(&str, i64)> = log
        .json
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["kind"].as_str().unwrap_or(""),
                        e["sequence"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        kinds,
        [
            ("document.created", 1),
            ("document.versioned", 2),
            ("document.versioned", 3)
        ]
    );
    let first = &log.json[0];
    assert_eq!(first["artifact"], id.as_str());
    assert_eq!(first["issue"], "PAY-1");
    assert_eq!(first["session"], "s1");
    assert_eq!(first["data"]["id"], id.as_str());
    assert_eq!(log.json[1]["data"]["version"]["name"], "first cut");
    let page = ada
        .get(&format!(
            "/api/v1/artifacts/{id}/events?after=1&order=desc&limit=1"
        ))
        .await?;
    assert_eq!(page.json.as_array().map(|a| a.len()), Some(1));
    assert_eq!(page.json[0]["sequence"], 3);
    refused(
        &ada.get(&format!("/api/v1/artifacts/{id}/events?limit=0"))
            .await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &ada.get(&format!("/api/v1/artifacts/{id}/events?order=up"))
            .await?,
        400,
        "INVALID_QUERY",
    );
    let issue_log = ada.get("/api/v1/issues/PAY-1/events").await?;
    assert!(
        issue_log
            .json
            .as_array()
            .is_some_and(|a| a.iter().all(|e| e["artifact"].is_null())),
        "{}",
        issue_log.text
    );
    assert_eq!(issue_log.json.as_array().map(Vec::len), Some(1));

    // Subscribers: the sessions that acted on the document.
    let subs = ada
        .get(&format!("/api/v1/artifacts/{id}/subscribers"))
        .await?;
    assert_eq!(subs.status, 200, "{}", subs.text);
    let sessions: Vec<&str> = subs
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|s| s["session_id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(sessions, ["s1", "s2"]);
    assert!(subs.json[0]["since"].as_str().is_some());
    refused(
        &agent
            .get(&format!("/api/v1/artifacts/{id}/subscribers"))
            .await?,
        403,
        "HUMAN_ONLY",
    );
    refused(
        &agent
            .delete(&format!("/api/v1/artifacts/{id}/subscribers/s1"))
            .await?,
        403,
        "HUMAN_ONLY",
    );
    refused(
        &ada.delete(&format!("/api/v1/artifacts/{id}/subscribers/a%20b"))
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &ada.delete("/api/v1/artifacts/nope/subscribers/s1").await?,
        404,
        "NOT_FOUND",
    );
    let r = ada
        .delete(&format!("/api/v1/artifacts/{id}/subscribers/s1"))
        .await?;
    assert_eq!(r.status, 204, "{}", r.text);
    let r = ada
        .delete(&format!("/api/v1/artifacts/{id}/subscribers/s1"))
        .await?;
    assert_eq!(r.status, 204, "{}", r.text);
    let subs = ada
        .get(&format!("/api/v1/artifacts/{id}/subscribers"))
        .await?;
    assert_eq!(subs.json.as_array().map(Vec::len), Some(1));
    let events = read_events(&ada, 0, 100, 2).await?;
    let removed: Vec<&Value> = events
        .iter()
        .filter(|(k, _)| k == "subscription.removed")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(removed.len(), 1, "a second unsubscribe appends nothing");
    assert_eq!(removed[0]["artifact"], id.as_str());
    assert_eq!(
        removed[0]["data"],
        json!({"issue": "PAY-1", "artifact": id, "session_id": "s1", "by": {"kind": "user", "login": ADA}})
    );
    // Acting again subscribes again.
    agent
        .post(
            &format!("/api/v1/artifacts/{id}/versions"),
            json!({"name": "again", "actor": "s1"}),
        )
        .await?;
    let subs = ada
        .get(&format!("/api/v1/artifacts/{id}/subscribers"))
        .await?;
    assert_eq!(subs.json.as_array().map(Vec::len), Some(2));
    console.stop().await;
    Ok(())
}

on_both_databases!(
    versions_events_and_subscribers,
    versions_events_and_subscribers_sqlite,
    versions_events_and_subscribers_postgres
);

async fn reference_queries(db: Option<String>) -> anyhow::Result<()> {
    let (console, ada, agent) = setup(db).await?;
    for q in [
        "",
        "?to=countersign://issue/PAY-1&from=countersign://issue/PAY-1",
        "?to=https://example.com/",
        "?to=countersign://",
        "?to=countersign://issue/PAY-1&kind=quote",
        "?to=countersign://issue/PAY-1&kind=link&since=3",
        "?to=countersign://issue/PAY-1&kind=mention&since=x",
        "?to=countersign://issue/PAY-1&to=countersign://issue/PAY-2",
    ] {
        refused(
            &agent.get(&format!("/api/v1/references{q}")).await?,
            400,
            "INVALID_QUERY",
        );
    }
    let r = agent
        .get("/api/v1/references?to=countersign://issue/PAY-1&kind=mention&since=0")
        .await?;
    assert_eq!((r.status, r.json.clone()), (200, json!([])), "{}", r.text);
    // `since` alone pages mentions.
    let r = agent
        .get("/api/v1/references?to=countersign://issue/PAY-1&since=0")
        .await?;
    assert_eq!((r.status, r.json.clone()), (200, json!([])), "{}", r.text);
    let r = ada.get("/api/v1/issues/PAY-1/references").await?;
    assert_eq!(
        r.json,
        json!({"incoming": [], "outgoing": []}),
        "{}",
        r.text
    );
    refused(
        &ada.get("/api/v1/issues/PAY-7/references").await?,
        404,
        "NOT_FOUND",
    );

    // Comments and messages that name a console ref mention it: one `mention` edge each.
    let r = ada
        .post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "Chargebacks"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let c = ada
        .post(
            "/api/v1/issues/PAY-2/comments",
            json!({"body": "Blocked by countersign://issue/PAY-1, see \
                    (Countersign://issue/PAY-1#b-1). Not countersign://issue/pay and \
                    countersign://nothing/here."}),
        )
        .await?;
    assert_eq!(c.status, 201, "{}", c.text);
    let comment = format!(
        "countersign://comment/{}",
        c.json["id"].as_str().unwrap_or("")
    );
    let mentions = agent
        .get("/api/v1/references?to=countersign://issue/PAY-1&kind=mention")
        .await?;
    let edges: Vec<(Value, Value, Value)> = mentions
        .json
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| (e["from"].clone(), e["to"].clone(), e["kind"].clone()))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        edges,
        [
            (
                json!(comment),
                json!("countersign://issue/PAY-1"),
                json!("mention")
            ),
            (
                json!(comment),
                json!("countersign://issue/PAY-1#b-1"),
                json!("mention")
            ),
        ],
        "{}",
        mentions.text
    );
    let first = mentions.json[0]["event_id"].as_i64().unwrap_or(0);
    assert!(first > 0, "{}", mentions.text);
    // The issue the comment is on lists them as its outgoing references; PAY-1 as incoming.
    let r = ada.get("/api/v1/issues/PAY-2/references").await?;
    assert_eq!(
        r.json["outgoing"].as_array().map(Vec::len),
        Some(2),
        "{}",
        r.text
    );
    let r = ada.get("/api/v1/issues/PAY-1/references").await?;
    assert_eq!(
        r.json["incoming"].as_array().map(Vec::len),
        Some(2),
        "{}",
        r.text
    );

    // A message to a session mentions it too, and `since` pages past the comment's.
    let m = ada
        .post(
            "/api/v1/sessions/s9/messages",
            json!({"body": "look at countersign://issue/PAY-1 please"}),
        )
        .await?;
    assert_eq!(m.status, 201, "{}", m.text);
    let since = agent
        .get(&format!(
            "/api/v1/references?to=countersign://issue/PAY-1&since={first}"
        ))
        .await?;
    assert_eq!(
        since.json.as_array().map(Vec::len),
        Some(1),
        "{}",
        since.text
    );
    assert_eq!(
        since.json[0]["from"],
        format!(
            "countersign://message/{}",
            m.json["id"].as_str().unwrap_or("")
        ),
        "{}",
        since.text
    );

    // Editing the comment replaces its mentions: the ref it no longer names is dropped.
    let path = format!("/api/v1/comments/{}", c.json["id"].as_str().unwrap_or(""));
    let e = ada
        .patch(
            &path,
            json!({"body": "now about countersign://issue/PAY-2 only"}),
        )
        .await?;
    assert_eq!(e.status, 200, "{}", e.text);
    let r = agent
        .get(&format!("/api/v1/references?from={comment}&kind=mention"))
        .await?;
    assert_eq!(r.json.as_array().map(Vec::len), Some(1), "{}", r.text);
    assert_eq!(r.json[0]["to"], "countersign://issue/PAY-2", "{}", r.text);
    console.stop().await;
    Ok(())
}

on_both_databases!(
    reference_queries,
    reference_queries_sqlite,
    reference_queries_postgres
);

// ----- documents: text, blocks, edits, references, progress, search -----

const PLAN: &str = "# Plan\n\nShip the refund flow.\n\n- [x] design\n- [ ] build\n  - [ ] nested task\n\n| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\nSee [PAY-1](countersign://issue/PAY-1).\n";

fn blocks_of(v: &Value) -> Vec<Value> {
    v["blocks"].as_array().cloned().unwrap_or_default()
}

/// The innermost block of `kind` whose markdown holds `text`.
fn block_with<'a>(blocks: &'a [Value], markdown: &str, kind: &str, text: &str) -> &'a Value {
    blocks
        .iter()
        .rev()
        .find(|b| {
            b["type"] == kind && {
                let (s, e) = (
                    b["range"]["start"].as_u64().unwrap_or(0) as usize,
                    b["range"]["end"].as_u64().unwrap_or(0) as usize,
                );
                markdown.get(s..e).is_some_and(|m| m.contains(text))
            }
        })
        .unwrap_or_else(|| panic!("no {kind} block holding {text:?}"))
}

async fn documents_text_blocks_and_edits(db: Option<String>) -> anyhow::Result<()> {
    let (console, ada, agent) = setup(db).await?;
    let r = agent
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "plan.md", "content_type": "text/markdown; charset=utf-8", "content": PLAN, "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        (
            r.json["kind"].as_str(),
            r.json["content_type"].as_str(),
            r.json["slug"].as_str()
        ),
        (Some("document"), Some("text/markdown"), Some("plan"))
    );

    // Text: canonical markdown and the whole-document token.
    let text = ada.get(&format!("/api/v1/artifacts/{id}/text")).await?;
    assert_eq!(text.status, 200, "{}", text.text);
    let md = text.json["markdown"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(md, PLAN, "this markdown is canonical already");
    let token = text.json["token"].as_str().unwrap_or_default().to_owned();
    assert_eq!(token, sha256(md.as_bytes()));
    assert_eq!(r.json["token"], token.as_str());
    assert_eq!(
        text.json["version"],
        json!({"number": 1, "name": null, "kind": "settled"})
    );
    assert_eq!(
        agent
            .get("/api/v1/issues/PAY-1/artifacts/plan.md/text")
            .await?
            .json,
        text.json
    );

    // Blocks: flat, in document order, with ranges, tokens, paths and reference counts.
    let blocks = agent
        .get(&format!("/api/v1/artifacts/{id}/blocks?session=s1"))
        .await?;
    assert_eq!(blocks.status, 200, "{}", blocks.text);
    assert_eq!(blocks.json["token"], token.as_str());
    let list = blocks_of(&blocks.json);
    for b in &list {
        let (s, e) = (
            b["range"]["start"].as_u64().unwrap_or(0) as usize,
            b["range"]["end"].as_u64().unwrap_or(0) as usize,
        );
        let _ = (s, e);
        assert!(
            b["id"]
                .as_str()
                .is_some_and(|i| !i.is_empty() && i.len() <= 64),
            "{b}"
        );
        assert!(
            b["refs"]["incoming"].is_i64() && b["refs"]["outgoing"].is_i64(),
            "{b}"
        );
        assert!(b["path"].is_array());
    }
    let types: Vec<&str> = list
        .iter()
        .filter(|b| b["path"].as_array().is_some_and(Vec::is_empty))
        .filter_map(|b| b["type"].as_str())
        .collect();
    assert_eq!(
        types,
        ["heading", "paragraph", "list", "table", "paragraph"]
    );
    let link = block_with(&list, &md, "paragraph", "See [PAY-1]");
    assert_eq!(link["refs"], json!({"incoming": 0, "outgoing": 1}));
    let nested = block_with(&list, &md, "task_item", "nested task");
    assert_eq!(
        nested["path"].as_array().map(Vec::len),
        Some(3),
        "list > task_item > list > task_item: {nested}"
    );
    let table = block_with(&list, &md, "table", "| a | b |");
    assert_eq!(
        table["rows"][2]["cells"][1],
        json!({"index": 1, "text": "4"})
    );
    assert_eq!(
        agent
            .get("/api/v1/issues/PAY-1/artifacts/plan/blocks")
            .await?
            .json,
        blocks.json
    );

    // One block's position: a cell names its table, row, column, header and row.
    let cell = list
        .iter()
        .find(|b| {
            b["type"] == "table_cell"
                && b["path"][1]["index"] == 2
                && b["path"].as_array().map(Vec::len) == Some(2)
        })
        .cloned();
    let cell = cell.unwrap_or_default();
    let one = ada
        .get(&format!(
            "/api/v1/artifacts/{id}/blocks/{}",
            cell["id"].as_str().unwrap_or_default()
        ))
        .await?;
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(one.json["table"]["id"], table["id"]);
    assert_eq!(one.json["table"]["row"], 2);
    assert_eq!(one.json["table"]["column"], 0);
    // The header cell text above the cell (not the whole header row; issue 27).
    assert_eq!(one.json["table"]["header"], json!("a"));
    assert_eq!(one.json["table"]["cells"], json!(["3", "4"]));
    // The row's second cell (cells come in document order).
    let second = list
        .iter()
        .filter(|b| {
            b["type"] == "table_cell"
                && b["path"][1]["index"] == 2
                && b["path"].as_array().map(Vec::len) == Some(2)
        })
        .nth(1)
        .cloned()
        .unwrap_or_default();
    let two = ada
        .get(&format!(
            "/api/v1/artifacts/{id}/blocks/{}",
            second["id"].as_str().unwrap_or_default()
        ))
        .await?;
    assert_eq!(two.json["table"]["column"], 1, "{}", two.text);
    assert_eq!(two.json["table"]["header"], json!("b"));
    // A row has no header cell above it.
    let row = ada
        .get(&format!(
            "/api/v1/artifacts/{id}/blocks/{}",
            second["path"][1]["id"].as_str().unwrap_or_default()
        ))
        .await?;
    assert_eq!(row.json["table"]["row"], 2, "{}", row.text);
    assert_eq!(row.json["table"]["header"], json!(null));
    refused(
        &ada.get(&format!("/api/v1/artifacts/{id}/blocks/nope"))
            .await?,
        404,
        "TARGET_NOT_FOUND",
    );

    // The issue names its primary document and counts its tasks, nested ones included.
    let issue = ada.get("/api/v1/issues/PAY-1").await?;
    assert_eq!(
        issue.json["primary_document"],
        json!({"id": id, "slug": "plan"})
    );
    assert_eq!(
        issue.json["progress"]["tasks"],
        json!({"done": 1, "total": 3})
    );
    let listed = ada.get("/api/v1/issues?project=PAY").await?;
    assert_eq!(
        listed.json[0]["progress"]["tasks"],
        json!({"done": 1, "total": 3})
    );
    assert_eq!(listed.json[0]["primary_document"]["slug"], "plan");

    // An edit: the quote, the precondition, the answer.
    let para = block_with(&list, &md, "paragraph", "refund flow").clone();
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"expected_token": token, "ops": [{"op": "replace", "quote": {"exact": "refund flow"}, "text": "refund and chargeback flow"}], "actor": "s2"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let token2 = r.json["token"].as_str().unwrap_or_default().to_owned();
    assert_ne!(token2, token);
    assert_eq!(
        r.json["changed"],
        json!([{"id": para["id"], "token": r.json["changed"][0]["token"]}])
    );
    assert_eq!(r.json["removed"], json!([]));
    let md2 = ada.get(&format!("/api/v1/artifacts/{id}/text")).await?.json["markdown"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(md2.contains("Ship the refund and chargeback flow."));
    assert_eq!(sha256(md2.as_bytes()), token2);

    // Stale tokens are refused with the current ones, and nothing applies.
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"expected_token": token, "ops": [{"op": "delete", "quote": {"exact": "Plan"}}]}),
        )
        .await?;
    refused(&r, 409, "DOCUMENT_CHANGED");
    assert_eq!(r.json["token"], token2.as_str());
    // The current tokens of the blocks, not `{}` (issue 27): each block the document has now.
    let now = ada.get(&format!("/api/v1/artifacts/{id}/blocks")).await?;
    let want: serde_json::Map<String, serde_json::Value> = now.json["blocks"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|b| {
                    (
                        b["id"].as_str().unwrap_or_default().to_owned(),
                        b["token"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert!(!want.is_empty(), "{}", now.text);
    assert_eq!(r.json["blocks"], serde_json::Value::Object(want));
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"ops": [{"op": "delete", "quote": {"exact": "chargeback "}, "block": para["id"], "block_token": para["token"]}]}),
        )
        .await?;
    refused(&r, 409, "DOCUMENT_CHANGED");
    assert!(
        r.json["blocks"][para["id"].as_str().unwrap_or_default()].is_string(),
        "{}",
        r.text
    );
    // Quotes: none, several; a block the document lacks; all or none.
    let r = ada
        .post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"ops": [{"op": "delete", "quote": {"exact": "nowhere"}}]}),
        )
        .await?;
    refused(&r, 409, "QUOTE_NOT_FOUND");
    assert_eq!(r.json["op"], 0);
    let r = ada
        .post(&format!("/api/v1/artifacts/{id}/edits"), json!({"ops": [{"op": "replace", "quote": {"exact": "Ship"}, "text": "Send"}, {"op": "delete", "quote": {"exact": "| "}}]}))
        .await?;
    refused(&r, 409, "QUOTE_AMBIGUOUS");
    assert_eq!(r.json["op"], 1);
    assert!(
        r.json["matches"].as_u64().is_some_and(|m| m > 1),
        "{}",
        r.text
    );
    let r = ada
        .post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"ops": [{"op": "delete", "quote": {"exact": "Plan"}, "block": "nope"}]}),
        )
        .await?;
    refused(&r, 404, "TARGET_NOT_FOUND");
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}/text")).await?.json["token"],
        token2.as_str(),
        "nothing applied"
    );
    for bad in [
        json!({"expected_tokn": token2, "ops": []}),
        json!({"ops": [{"op": "rewrite", "quote": {"exact": "Plan"}}]}),
        json!({"ops": [{"op": "replace", "quote": {"exact": "Plan"}}]}),
        json!({}),
    ] {
        refused(
            &ada.post(&format!("/api/v1/artifacts/{id}/edits"), bad)
                .await?,
            400,
            "INVALID_BODY",
        );
    }
    // A file has no blocks and takes no edits.
    let f = ada
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "x.txt", "content_type": "text/plain", "content": "x"}),
        )
        .await?;
    let fid = f.json["id"].as_str().unwrap_or_default().to_owned();
    refused(
        &ada.get(&format!("/api/v1/artifacts/{fid}/blocks")).await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.post(
            &format!("/api/v1/artifacts/{fid}/edits"),
            json!({"ops": []}),
        )
        .await?,
        404,
        "NOT_FOUND",
    );

    // Table ops with the table's token; a task checked moves the issue's progress.
    let blocks = ada
        .get(&format!("/api/v1/artifacts/{id}/blocks"))
        .await?
        .json;
    let list = blocks_of(&blocks);
    let table = block_with(&list, &md2, "table", "| a | b |").clone();
    let r = agent
        .post(
            "/api/v1/issues/PAY-1/artifacts/plan/edits",
            json!({"ops": [
                {"op": "delete_row", "block": table["id"], "index": 1, "block_token": table["token"]},
                {"op": "replace", "quote": {"exact": "- [ ] build"}, "text": "- [x] build"}
            ], "actor": "s3"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let md3 = ada
        .get("/api/v1/issues/PAY-1/artifacts/plan/text")
        .await?
        .json["markdown"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        !md3.contains("| 1 | 2 |") && md3.contains("| 3 | 4 |") && md3.contains("- [x] build"),
        "{md3}"
    );
    assert_eq!(
        ada.get("/api/v1/issues/PAY-1").await?.json["progress"]["tasks"],
        json!({"done": 2, "total": 3})
    );
    let stale_table = ada
        .post(&format!("/api/v1/artifacts/{id}/edits"), json!({"ops": [{"op": "delete_column", "block": table["id"], "index": 0, "block_token": table["token"]}]}))
        .await?;
    refused(&stale_table, 409, "DOCUMENT_CHANGED");

    // The document's log: created, then each edit with what it changed.
    let log = ada
        .get(&format!("/api/v1/artifacts/{id}/events"))
        .await?
        .json;
    let kinds: Vec<&str> = log
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        kinds,
        ["document.created", "document.edited", "document.edited"]
    );
    assert_eq!(log[1]["data"]["changed"][0]["id"], para["id"]);
    assert_eq!(log[1]["session"], "s2");
    assert_eq!(log[2]["data"]["token"], sha256(md3.as_bytes()));
    let subs: Vec<String> = ada
        .get(&format!("/api/v1/artifacts/{id}/subscribers"))
        .await?
        .json
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s["session_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(subs, ["s1", "s2", "s3"]);

    // References: the link to PAY-1, from the document and from the issue's side.
    let node = format!("countersign://artifact/{id}");
    let refs = ada
        .get(&format!("/api/v1/artifacts/{id}/references"))
        .await?;
    assert_eq!(refs.json["incoming"], json!([]));
    let out = refs.json["outgoing"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(out.len(), 1, "{}", refs.text);
    assert_eq!(
        out[0]["from"],
        format!("{node}#{}", link["id"].as_str().unwrap_or_default())
    );
    assert_eq!(out[0]["to"], "countersign://issue/PAY-1");
    assert_eq!(out[0]["kind"], "link");
    assert!(out[0]["event_id"].as_i64().is_some_and(|e| e > 0) && out[0]["at"].is_string());
    let issue_refs = ada.get("/api/v1/issues/PAY-1/references").await?.json;
    assert_eq!(issue_refs["incoming"], json!(out));
    assert_eq!(
        issue_refs["outgoing"],
        json!(out),
        "the issue's documents' links are the issue's"
    );
    assert_eq!(
        agent
            .get("/api/v1/references?to=countersign://issue/PAY-1")
            .await?
            .json,
        json!(out)
    );
    assert_eq!(
        agent
            .get(&format!("/api/v1/references?from={node}&kind=link"))
            .await?
            .json,
        json!(out)
    );
    assert_eq!(
        agent
            .get(&format!("/api/v1/references?from={node}&kind=embed"))
            .await?
            .json,
        json!([])
    );
    // An embed of an image, added by an edit; then the link removed.
    let img = ada
        .multipart(
            "/api/v1/issues/PAY-1/artifacts",
            &[file("chart.png", "image/png", PNG)],
        )
        .await?;
    let img_ref = format!(
        "countersign://artifact/{}",
        img.json["id"].as_str().unwrap_or_default()
    );
    let r = ada
        .post(&format!("/api/v1/artifacts/{id}/edits"), json!({"ops": [
            {"op": "insert_after", "quote": {"exact": "See [PAY-1](countersign://issue/PAY-1)."}, "text": format!("\n\n![chart]({img_ref})")},
        ]}))
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let back = agent
        .get(&format!("/api/v1/references?to={img_ref}"))
        .await?
        .json;
    assert_eq!(back.as_array().map(Vec::len), Some(1), "{back}");
    assert_eq!(back[0]["kind"], "embed");
    let img_block = ada
        .get(&format!(
            "/api/v1/artifacts/{}/references",
            img.json["id"].as_str().unwrap_or_default()
        ))
        .await?
        .json;
    assert_eq!(img_block["incoming"], back);
    let r = ada
        .post(&format!("/api/v1/artifacts/{id}/edits"), json!({"ops": [{"op": "delete", "quote": {"exact": "See [PAY-1](countersign://issue/PAY-1)."}}]}))
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        agent
            .get("/api/v1/references?to=countersign://issue/PAY-1")
            .await?
            .json,
        json!([])
    );
    assert_eq!(
        agent
            .get(&format!("/api/v1/references?to={img_ref}"))
            .await?
            .json,
        back,
        "an untouched edge stays as it was"
    );

    // Search: documents by their words (in any blocks between them) and their filename.
    let found = agent.get("/api/v1/search?q=chargeback").await?;
    assert_eq!(found.status, 200, "{}", found.text);
    let row = found.json["rows"]
        .as_array()
        .and_then(|r| r.iter().find(|x| x["kind"] == "document"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(row["id"], id.as_str());
    assert_eq!(row["ref"], node.as_str());
    assert_eq!(row["title"], "plan.md");
    assert_eq!(row["project"], "PAY");
    assert!(
        row["snippet"]
            .as_str()
            .is_some_and(|s| s.contains("chargeback")),
        "{row}"
    );
    let both = agent.get("/api/v1/search?q=chargeback+nested").await?.json;
    assert!(
        both["rows"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x["id"] == id.as_str())),
        "{both}"
    );
    let none = agent.get("/api/v1/search?q=chargeback+zebra").await?.json;
    assert_eq!(none["total"], 0, "every word must match: {none}");
    let by_name = agent.get("/api/v1/search?q=chart").await?.json;
    assert!(
        by_name["rows"]
            .as_array()
            .is_some_and(|r| r.iter().any(|x| x["title"] == "chart.png")),
        "{by_name}"
    );
    let mixed = agent
        .get("/api/v1/search?q=refunds+OR+chargeback")
        .await?
        .json;
    let _ = mixed;
    assert_eq!(
        agent
            .get("/api/v1/search?q=chargeback&project=ZZ")
            .await?
            .json["total"],
        0
    );
    console.stop().await;
    Ok(())
}

on_both_databases!(
    documents_text_blocks_and_edits,
    documents_text_blocks_and_edits_sqlite,
    documents_text_blocks_and_edits_postgres
);

#[tokio::test]
async fn block_schema_is_public() -> anyhow::Result<()> {
    let console = console_on(None).await?;
    let r = reqwest::get(format!("{}/api/v1/block-schema", console.url)).await?;
    assert_eq!(r.status(), 200);
    let schema: Value = r.json().await?;
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let mut defs: Vec<String> = schema["$defs"]
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    defs.sort();
    let mut want = vec![
        "heading",
        "paragraph",
        "list",
        "list_item",
        "task_item",
        "code",
        "quote",
        "table",
        "table_row",
        "table_cell",
        "ask",
        "image",
        "file",
        "thematic_break",
    ];
    want.sort();
    assert_eq!(defs, want);
    console.stop().await;
    Ok(())
}

// ----- versions by the clock, rebuild, concurrent writers -----

/// Writes straight into the console's database (what a broken writer or an engine change
/// would leave behind).
async fn tamper(
    console: &TestConsole,
    db: &Option<String>,
    sql: &[(&str, Vec<String>)],
) -> anyhow::Result<()> {
    sqlx::any::install_default_drivers();
    let url = match db {
        Some(u) => u.clone(),
        None => format!(
            "sqlite://{}",
            console.dir.path().join("console.db").display()
        ),
    };
    let pool = sqlx::AnyPool::connect(&url).await?;
    for (q, args) in sql {
        let mut query = sqlx::query(q);
        for a in args {
            query = query.bind(a.clone());
        }
        query.execute(&pool).await?;
    }
    pool.close().await;
    Ok(())
}

async fn versions_settle_and_rebuild(db: Option<String>) -> anyhow::Result<()> {
    use chrono::TimeZone;
    let t0 = chrono::Utc
        .with_ymd_and_hms(2030, 1, 1, 9, 0, 0)
        .single()
        .unwrap_or_default();
    let clock = std::sync::Arc::new(countersign_console_core::ManualClock::new(t0));
    let console = console_with_clock(db.clone(), clock.clone()).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    ada.post(
        "/api/v1/projects",
        json!({"key": "PAY", "name": "Payments"}),
    )
    .await?;
    let r = agent
        .post(
            "/api/v1/projects/PAY/artifacts",
            json!({"filename": "spec.md", "content_type": "text/markdown", "content": "# Spec\n\nalpha\n", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    let edit = |from: &'static str, to: &'static str| {
        let agent = agent.clone();
        let id = id.clone();
        async move {
            let r = agent
                .post(&format!("/api/v1/artifacts/{id}/edits"), json!({"ops": [{"op": "replace", "quote": {"exact": from}, "text": to}], "actor": "s2"}))
                .await?;
            anyhow::ensure!(r.status == 200, "edit: {}", r.text);
            anyhow::Ok(r)
        }
    };
    let version = |ada: &Who| {
        let ada = ada.clone();
        let id = id.clone();
        async move {
            anyhow::Ok(ada.get(&format!("/api/v1/artifacts/{id}")).await?.json["version"].clone())
        }
    };

    // Loads and quiet: nothing to rebuild. Edited a minute ago: live.
    refused(
        &ada.post(&format!("/api/v1/artifacts/{id}/rebuild"), json!({}))
            .await?,
        409,
        "DOCUMENT_LOADS",
    );
    clock.advance(chrono::Duration::minutes(1));
    edit("alpha", "beta").await?;
    refused(
        &ada.post(&format!("/api/v1/artifacts/{id}/rebuild"), json!({}))
            .await?,
        409,
        "DOCUMENT_LIVE",
    );
    refused(
        &agent
            .post(&format!("/api/v1/artifacts/{id}/rebuild"), json!({}))
            .await?,
        403,
        "HUMAN_ONLY",
    );

    // Four minutes without an edit: not settled yet; five: the next read settles it.
    clock.advance(chrono::Duration::minutes(4));
    assert_eq!(
        version(&ada).await?,
        json!({"number": 1, "name": null, "kind": "settled"})
    );
    clock.advance(chrono::Duration::minutes(1));
    assert_eq!(
        version(&ada).await?,
        json!({"number": 2, "name": null, "kind": "settled"})
    );
    let v2 = ada
        .get(&format!("/api/v1/artifacts/{id}/versions/2"))
        .await?;
    assert_eq!(v2.json["markdown"], "# Spec\n\nbeta\n");
    assert_eq!(v2.json["kind"], "settled");
    assert_eq!(v2.json["by"]["session"], "s2");
    assert_eq!(
        v2.json["created_at"], "2030-01-01T09:06:00.000Z",
        "five minutes after the edit"
    );
    assert_eq!(v2.json["token"], sha256(b"# Spec\n\nbeta\n"));
    let log = ada
        .get(&format!("/api/v1/artifacts/{id}/events?order=desc&limit=1"))
        .await?
        .json;
    assert_eq!(log[0]["kind"], "document.versioned");
    assert_eq!(
        log[0]["actor"],
        json!({"kind": "system", "name": "console"})
    );
    assert_eq!(log[0]["data"]["version"]["number"], 2);
    refused(
        &ada.post(&format!("/api/v1/artifacts/{id}/rebuild"), json!({}))
            .await?,
        409,
        "DOCUMENT_LOADS",
    );

    // An edit long after the last one settles that one first.
    edit("beta", "gamma").await?;
    clock.advance(chrono::Duration::minutes(10));
    edit("gamma", "delta").await?;
    let v3 = ada
        .get(&format!("/api/v1/artifacts/{id}/versions/3"))
        .await?;
    assert_eq!(v3.json["markdown"], "# Spec\n\ngamma\n");
    assert_eq!(version(&ada).await?["number"], 3);
    // A name: a new version of the current content, at once.
    let named = ada
        .post(
            "/api/v1/projects/PAY/artifacts/spec/versions",
            json!({"name": "for review"}),
        )
        .await?;
    assert_eq!(named.status, 201, "{}", named.text);
    assert_eq!(
        (named.json["number"].as_i64(), named.json["kind"].as_str()),
        (Some(4), Some("named"))
    );
    let v4 = ada
        .get("/api/v1/projects/PAY/artifacts/spec/versions/4")
        .await?;
    assert_eq!(v4.json["markdown"], "# Spec\n\ndelta\n");
    assert_eq!(
        named.json, v4.json,
        "naming answers the version as its read route does"
    );
    assert_eq!(v4.json["name"], "for review");
    assert_eq!(v4.json["by"], json!({"kind": "user", "login": ADA}));
    // An upload over unsettled edits keeps them as a version first.
    edit("delta", "epsilon").await?;
    let r = ada
        .post("/api/v1/projects/PAY/artifacts", json!({"filename": "spec.md", "content_type": "text/markdown", "content": "# Spec\n\nzeta\n"}))
        .await?;
    assert_eq!(r.json["version"]["number"], 6, "{}", r.text);
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}/versions/5"))
            .await?
            .json["markdown"],
        "# Spec\n\nepsilon\n"
    );
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}/versions/6"))
            .await?
            .json["markdown"],
        "# Spec\n\nzeta\n"
    );
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}/text")).await?.json["markdown"],
        "# Spec\n\nzeta\n"
    );
    // A markdown document's filename takes markdown only, and the other way round.
    refused(
        &ada.post(
            "/api/v1/projects/PAY/artifacts",
            json!({"filename": "spec.md", "content_type": "text/plain", "content": "x"}),
        )
        .await?,
        400,
        "ARTIFACT_INPUT",
    );

    // Stored block ids that no longer fit the markdown: reads refuse, a person rebuilds.
    let tampered = "# Spec\n\nzeta\n\nA paragraph its ids never heard of.\n";
    tamper(
        &console,
        &db,
        &[
            (
                "UPDATE console_documents SET markdown = $1 WHERE artifact = $2",
                vec![tampered.into(), id.clone()],
            ),
            (
                "UPDATE console_artifacts SET token = $1 WHERE id = $2",
                vec![sha256(tampered.as_bytes()), id.clone()],
            ),
        ],
    )
    .await?;
    clock.advance(chrono::Duration::minutes(30));
    refused(
        &ada.get(&format!("/api/v1/artifacts/{id}/blocks")).await?,
        500,
        "INTERNAL",
    );
    refused(
        &ada.post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"ops": [{"op": "delete", "quote": {"exact": "zeta"}}]}),
        )
        .await?,
        500,
        "INTERNAL",
    );
    refused(
        &ada.post(&format!("/api/v1/artifacts/{id}/rebuild"), json!({"x": 1}))
            .await?,
        400,
        "INVALID_BODY",
    );
    let r = ada
        .post(&format!("/api/v1/artifacts/{id}/rebuild"), json!({}))
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["id"], id.as_str());
    assert_eq!(r.json["token"], sha256(tampered.as_bytes()));
    let blocks = ada.get(&format!("/api/v1/artifacts/{id}/blocks")).await?;
    assert_eq!(blocks.status, 200, "{}", blocks.text);
    assert_eq!(blocks_of(&blocks.json).len(), 3);
    let log = ada
        .get(&format!("/api/v1/artifacts/{id}/events?order=desc&limit=1"))
        .await?
        .json;
    assert_eq!(log[0]["kind"], "document.rebuilt");
    assert_eq!(log[0]["actor"]["login"], ADA);
    edit("never heard of", "knows now").await?;
    refused(
        &ada.post(&format!("/api/v1/artifacts/{id}/rebuild"), json!({}))
            .await?,
        409,
        "DOCUMENT_LIVE",
    );
    let f = ada
        .post(
            "/api/v1/projects/PAY/artifacts",
            json!({"filename": "f.txt", "content_type": "text/plain", "content": "x"}),
        )
        .await?;
    refused(
        &ada.post(
            &format!(
                "/api/v1/artifacts/{}/rebuild",
                f.json["id"].as_str().unwrap_or_default()
            ),
            json!({}),
        )
        .await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.post(
            "/api/v1/artifacts/00000000-0000-0000-0000-000000000000/rebuild",
            json!({}),
        )
        .await?,
        404,
        "NOT_FOUND",
    );
    console.stop().await;
    Ok(())
}

on_both_databases!(
    versions_settle_and_rebuild,
    versions_settle_and_rebuild_sqlite,
    versions_settle_and_rebuild_postgres
);

async fn concurrent_writers(db: Option<String>) -> anyhow::Result<()> {
    let (console, ada, agent) = setup(db).await?;
    let r = ada
        .post("/api/v1/issues/PAY-1/artifacts", json!({"filename": "race.md", "content_type": "text/markdown", "content": "# Race\n\nalpha\n"}))
        .await?;
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    let token = r.json["token"].as_str().unwrap_or_default().to_owned();
    const WRITERS: usize = 16;
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let agent = agent.clone();
        let (id, token) = (id.clone(), token.clone());
        tasks.push(tokio::spawn(async move {
            agent
                .post(
                    &format!("/api/v1/artifacts/{id}/edits"),
                    json!({"expected_token": token, "ops": [{"op": "replace", "quote": {"exact": "alpha"}, "text": format!("writer-{i}")}], "actor": format!("w{i}")}),
                )
                .await
        }));
    }
    let mut applied = 0;
    for t in tasks {
        let r = t.await??;
        match r.status {
            200 => applied += 1,
            _ => refused(&r, 409, "DOCUMENT_CHANGED"),
        }
    }
    assert_eq!(
        applied, 1,
        "exactly one of the writers with the same token applies"
    );
    let md = ada.get(&format!("/api/v1/artifacts/{id}/text")).await?.json["markdown"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(md.matches("writer-").count(), 1, "{md}");
    let log = ada
        .get(&format!("/api/v1/artifacts/{id}/events"))
        .await?
        .json;
    assert_eq!(log.as_array().map(Vec::len), Some(2));

    // Writers with no precondition each apply, one after another.
    let mut tasks = Vec::new();
    for i in 0..WRITERS {
        let agent = agent.clone();
        let id = id.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .post(
                    &format!("/api/v1/artifacts/{id}/edits"),
                    json!({"ops": [{"op": "insert_after", "quote": {"exact": "# Race"}, "text": format!("\n\nline {i:02}")}]}),
                )
                .await
        }));
    }
    for t in tasks {
        let r = t.await??;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let md = ada.get(&format!("/api/v1/artifacts/{id}/text")).await?.json["markdown"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(md.matches("line ").count(), WRITERS, "{md}");
    let log = ada
        .get(&format!("/api/v1/artifacts/{id}/events?limit=200"))
        .await?
        .json;
    let seqs: Vec<i64> = log
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["sequence"].as_i64()).collect())
        .unwrap_or_default();
    assert_eq!(seqs, (1..=(WRITERS as i64 + 2)).collect::<Vec<_>>());

    // Uploads of one new filename at once: one artifact, one version each.
    let mut tasks = Vec::new();
    for i in 0..8 {
        let ada = ada.clone();
        tasks.push(tokio::spawn(async move {
            ada.post("/api/v1/projects/PAY/artifacts", json!({"filename": "same.txt", "content_type": "text/plain", "content": format!("{i}")}))
                .await
        }));
    }
    let mut ids = std::collections::HashSet::new();
    for t in tasks {
        let r = t.await??;
        assert_eq!(r.status, 201, "{}", r.text);
        ids.insert(r.json["id"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(ids.len(), 1);
    let meta = ada.get("/api/v1/projects/PAY/artifacts/same").await?.json;
    assert_eq!(meta["version"]["number"], 8);
    console.stop().await;
    Ok(())
}

on_both_databases!(
    concurrent_writers,
    concurrent_writers_sqlite,
    concurrent_writers_postgres
);

// ----- the document page -----

/// The page over real HTTP: the rendered blocks escape what a document holds, and a person's
/// page is never an agent's.
#[tokio::test]
async fn document_page_renders_sanitized_blocks_and_diffs() -> anyhow::Result<()> {
    let (console, ada, agent) = setup(None).await?;
    let md = "# Design\n\nFirst draft.\n\n<script>alert(1)</script>\n\n[click](javascript:alert(2)) and [issue](countersign://issue/PAY-1)\n";
    let r = agent
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "design.md", "content_type": "text/markdown", "content": md}),
        )
        .await?;
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    agent
        .post(&format!("/api/v1/artifacts/{id}/edits"), json!({"ops": [{"op": "replace", "quote": {"exact": "First draft."}, "text": "Second draft."}]}))
        .await?;
    agent
        .post(
            &format!("/api/v1/artifacts/{id}/versions"),
            json!({"name": "v2"}),
        )
        .await?;

    let page = ada.get(&format!("/artifacts/{id}?from=1&to=2")).await?;
    assert_eq!(page.status, 200, "{}", page.text);
    let csp = page
        .headers
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(
        csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
        "{csp}"
    );
    let rendered = page
        .text
        .split("id=\"rendered\"")
        .nth(1)
        .and_then(|t| t.split("</article>").next())
        .unwrap_or("");
    assert!(rendered.contains("Second draft."), "{rendered}");
    assert!(!rendered.contains("<script"), "raw HTML passed: {rendered}");
    assert!(!rendered.contains("javascript:"), "{rendered}");
    assert!(
        rendered.contains("href=\"/issues/PAY-1\""),
        "console refs point at the pages: {rendered}"
    );
    let diff = page.text.split("id=\"diff\"").nth(1).unwrap_or("");
    assert!(
        diff.contains("<span class=\"del\">- First draft.</span>"),
        "{diff}"
    );
    assert!(
        diff.contains("<span class=\"ins\">+ Second draft.</span>"),
        "{diff}"
    );
    // The issue page links its documents.
    let issue = ada.get("/issues/PAY-1").await?;
    assert!(
        issue
            .text
            .contains(&format!("<a href=\"/artifacts/{id}\">design.md</a>")),
        "{}",
        issue.text
    );
    // A file's page lists its versions; an unknown artifact is a 404 page; a bearer is refused.
    let f = ada
        .multipart(
            "/api/v1/issues/PAY-1/artifacts",
            &[file("chart.png", "image/png", PNG)],
        )
        .await?;
    let fp = ada
        .get(&format!(
            "/artifacts/{}",
            f.json["id"].as_str().unwrap_or_default()
        ))
        .await?;
    assert!(
        fp.status == 200 && fp.text.contains("Version 1"),
        "{}",
        fp.text
    );
    assert_eq!(ada.get("/artifacts/nope").await?.status, 404);
    assert_eq!(agent.get(&format!("/artifacts/{id}")).await?.status, 403);
    let js = reqwest::get(format!("{}/assets/documents.js", console.url)).await?;
    assert_eq!(js.status(), 200);
    console.stop().await;
    Ok(())
}

/// A markdown document of 1,500 sections, a heading and a sentence each (about 100 KiB, over
/// 200 KiB of HTML: more than a page's first part).
fn long_design() -> String {
    let mut md = String::from("# A long design\n");
    for i in 0..1500 {
        md.push_str(&format!(
            "\n## Section {i}\n\nWhat section {i} says, in a few more words than a title.\n"
        ));
    }
    md
}

/// A console signing people in through `idp`, with the shared agent token, and the project
/// WEB an agent made: what the browser tests of this file start from.
async fn web_console(idp: &crate::common::idp::TestIdp) -> anyhow::Result<(TestConsole, Who)> {
    let console = TestConsole::start(ConsoleOptions {
        idp: Some(idp),
        shared_token: true,
        ..Default::default()
    })
    .await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    agent
        .post(
            "/api/v1/projects",
            json!({"key": "WEB", "name": "Web", "actor": "s1"}),
        )
        .await?;
    Ok((console, agent))
}

/// A long document's page shows its first blocks (the first load stays small) and the rest in
/// parts, each fetched with the token of the text the page showed: all the parts together are
/// the whole document, in order; a part of a text since edited is 409, past the end 404, a part
/// without its query 400, and a bearer is refused as on every page.
#[tokio::test]
async fn a_long_document_page_comes_in_parts() -> anyhow::Result<()> {
    let (console, ada, agent) = setup(None).await?;
    let md = long_design();
    let r = agent
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "long.md", "content_type": "text/markdown", "content": md}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();

    let page = ada.get(&format!("/artifacts/{id}")).await?;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.len() < 200 * 1024, "{} bytes", page.text.len());
    let part_href = |html: &str| {
        html.split("data-doc-part=\"")
            .nth(1)
            .and_then(|t| t.split('"').next())
            .map(|h| h.replace("&amp;", "&"))
    };
    let mut next = part_href(&page.text);
    let first = page.text.split("id=\"rendered\"").nth(1).unwrap_or("");
    let mut sections = first.matches("<h2 data-block=").count();
    assert!(first.contains(">Section 0</h2>") && !first.contains(">Section 1499</h2>"));
    assert!(next.is_some(), "no placeholder for the rest");
    let mut parts = 0;
    let mut last = String::new();
    while let Some(href) = next.take() {
        let p = ada.get(&href).await?;
        assert_eq!(p.status, 200, "{href}: {}", p.text);
        assert!(
            p.text.contains(&format!(">Section {sections}</h2>")),
            "part {parts} does not go on from section {sections}"
        );
        sections += p.text.matches("<h2 data-block=").count();
        next = part_href(&p.text);
        parts += 1;
        last = href;
    }
    assert_eq!(sections, 1500, "the parts together are the whole document");
    assert!(parts >= 1, "{parts}");

    // A part of a text since edited: 409, and nothing of the new text.
    agent
        .post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"ops": [{"op": "replace", "quote": {"exact": "What section 3 says"}, "text": "Section 3 now says"}]}),
        )
        .await?;
    let stale = ada.get(&last).await?;
    assert_eq!(stale.status, 409, "{}", stale.text);
    assert!(
        stale.text.contains("data-code=\"DOCUMENT_CHANGED\""),
        "{}",
        stale.text
    );
    // A fresh page's parts: past the last block 404; no query 400; a bearer refused.
    let fresh = ada.get(&format!("/artifacts/{id}")).await?;
    let href = part_href(&fresh.text).unwrap_or_default();
    let token = href.rsplit("token=").next().unwrap_or_default();
    assert_eq!(
        ada.get(&format!("/artifacts/{id}/part?from=100000&token={token}"))
            .await?
            .status,
        404
    );
    let no_query = ada.get(&format!("/artifacts/{id}/part")).await?;
    assert_eq!(no_query.status, 400);
    assert!(
        no_query.text.contains("data-code=\"INVALID_QUERY\""),
        "{}",
        no_query.text
    );
    assert_eq!(ada.get(&href).await?.status, 200);
    assert_eq!(agent.get(&href).await?.status, 403);
    // A short document is one part: no placeholder.
    let short = agent
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "short.md", "content_type": "text/markdown", "content": "# Short\n\nAll of it.\n"}),
        )
        .await?;
    let sp = ada
        .get(&format!(
            "/artifacts/{}",
            short.json["id"].as_str().unwrap_or_default()
        ))
        .await?;
    assert!(sp.text.contains("All of it.") && part_href(&sp.text).is_none());
    console.stop().await;
    Ok(())
}

/// Chromium: an agent's edit through the API shows on an open document page without a
/// reload; a diff between two versions is shown.
#[tokio::test]
async fn document_page_follows_edits() -> anyhow::Result<()> {
    use crate::common::webdriver::{Driver, browser_or_skip};
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let idp = crate::common::idp::TestIdp::start().await?;
    let (console, agent) = web_console(&idp).await?;
    agent
        .post(
            "/api/v1/issues",
            json!({"project": "WEB", "title": "Design the page"}),
        )
        .await?;
    let md = "# Design\n\nThe first draft.\n\n<script>document.title = 'owned'</script>\n\n- [ ] build it\n";
    let r = agent
        .post("/api/v1/issues/WEB-1/artifacts", json!({"filename": "design.md", "content_type": "text/markdown", "content": md, "actor": "s1"}))
        .await?;
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let ada = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    let url = |p: &str| format!("{}{p}", console.url);
    idp.set_next_login(ADA);
    ada.goto(&url("/issues/WEB-1")).await?;
    ada.click("#oidc").await?;
    ada.wait_text("#documents", "design.md", 10).await?;
    ada.click("#documents a").await?;
    ada.wait_text("#rendered", "The first draft.", 10).await?;
    assert_eq!(
        ada.execute("return document.querySelectorAll('#rendered script').length")
            .await?,
        json!(0)
    );
    assert_ne!(ada.execute("return document.title").await?, json!("owned"));
    ada.execute("document.body.setAttribute('data-not-reloaded', '1'); return 1")
        .await?;

    let r = agent
        .post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"ops": [{"op": "replace", "quote": {"exact": "The first draft."}, "text": "The second draft, by an agent."}], "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    ada.wait_text("#rendered", "The second draft, by an agent.", 10)
        .await?;
    agent
        .post(
            &format!("/api/v1/artifacts/{id}/versions"),
            json!({"name": "agent's draft", "actor": "s1"}),
        )
        .await?;
    ada.wait_text("#versions", "agent's draft", 10).await?;
    assert_eq!(
        ada.execute("return document.body.getAttribute('data-not-reloaded')")
            .await?,
        json!("1"),
        "the page was reloaded"
    );
    ada.screenshot(&crate::browser::shots().join("document-live.png"))
        .await?;

    // The diff between the two versions, from the page's form.
    ada.click("#diff-form button").await?;
    ada.wait_text("#diff", "The second draft, by an agent.", 10)
        .await?;
    assert_eq!(
        ada.execute("return document.querySelector('#diff .del').textContent")
            .await?,
        json!("- The first draft.")
    );
    assert_eq!(
        ada.execute("return document.querySelector('#diff .ins').textContent")
            .await?,
        json!("+ The second draft, by an agent.")
    );
    ada.screenshot(&crate::browser::shots().join("document-diff.png"))
        .await?;
    ada.quit().await;
    console.stop().await;
    Ok(())
}

/// Chromium: a long document's page reads on in parts as the person scrolls, until all of it
/// is shown; an agent's edit swaps the page's document live, and the parts the person had read
/// come back with the new text.
#[tokio::test]
async fn a_long_document_reads_on_in_parts_in_the_browser() -> anyhow::Result<()> {
    use crate::common::webdriver::{Driver, browser_or_skip};
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let idp = crate::common::idp::TestIdp::start().await?;
    let (console, agent) = web_console(&idp).await?;
    let md = long_design();
    let r = agent
        .post("/api/v1/projects/WEB/artifacts", json!({"filename": "long.md", "content_type": "text/markdown", "content": md, "actor": "s1"}))
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let ada = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    idp.set_next_login(ADA);
    ada.goto(&format!("{}/artifacts/{id}", console.url)).await?;
    ada.click("#oidc").await?;
    ada.wait_text("#rendered", "Section 0", 10).await?;
    let shown = "return document.querySelectorAll('#rendered h2').length";
    let first = ada.execute(shown).await?.as_u64().unwrap_or(0);
    assert!(first > 0 && first < 1500, "{first} sections at first");
    ada.wait_for("[data-doc-part]", 10).await?;
    ada.execute("document.body.setAttribute('data-not-reloaded', '1'); return 1")
        .await?;
    // Scrolling to the end brings the next part, until the last section is there.
    let mut n = first;
    for _ in 0..100 {
        ada.execute("window.scrollTo(0, document.body.scrollHeight); return 1")
            .await?;
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        n = ada.execute(shown).await?.as_u64().unwrap_or(0);
        if n == 1500 {
            break;
        }
    }
    assert_eq!(n, 1500, "scrolling did not show the whole document");
    ada.wait_text("#rendered", "Section 1499", 5).await?;
    ada.screenshot(&crate::browser::shots().join("document-parts.png"))
        .await?;

    // An agent's edit: the page shows it without a reload, with all it had shown.
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{id}/edits"),
            json!({"ops": [{"op": "replace", "quote": {"exact": "What section 3 says"}, "text": "Section 3 now says"}], "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    ada.wait_text("#rendered", "Section 3 now says", 10).await?;
    let mut again = 0;
    for _ in 0..50 {
        again = ada.execute(shown).await?.as_u64().unwrap_or(0);
        if again == 1500 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        again, 1500,
        "the parts read before the edit did not come back"
    );
    assert_eq!(
        ada.execute("return document.body.getAttribute('data-not-reloaded')")
            .await?,
        json!("1"),
        "the page was reloaded"
    );
    ada.quit().await;
    console.stop().await;
    Ok(())
}

/// A document's edits are kept as a log after its snapshot: loaded afresh (a restart, another
/// replica), the log replays to the same blocks, ids and tokens; every 256 edits it folds into
/// a new snapshot.
async fn edit_log_replays_after_a_restart(db: Option<String>) -> anyhow::Result<()> {
    let (console, ada, agent) = setup(db).await?;
    let r = ada
        .post(
            "/api/v1/issues/PAY-1/artifacts",
            json!({"filename": "log.md", "content_type": "text/markdown", "content": PLAN}),
        )
        .await?;
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    let edit = |ops: Value| {
        let agent = agent.clone();
        let id = id.clone();
        async move {
            let r = agent
                .post(
                    &format!("/api/v1/artifacts/{id}/edits"),
                    json!({ "ops": ops }),
                )
                .await?;
            anyhow::ensure!(r.status == 200, "edit: {}", r.text);
            anyhow::Ok(r.json)
        }
    };
    edit(json!([{"op": "insert_after", "quote": {"exact": "Ship the refund flow."}, "text": "\n\nA new paragraph.\n\n- [ ] a new task"}])).await?;
    edit(json!([{"op": "replace", "quote": {"exact": "- [ ] build"}, "text": "- [x] build"}]))
        .await?;
    let blocks = ada
        .get(&format!("/api/v1/artifacts/{id}/blocks"))
        .await?
        .json;
    let table = blocks_of(&blocks)
        .into_iter()
        .find(|b| b["type"] == "table")
        .unwrap_or_default();
    edit(json!([{"op": "delete_row", "block": table["id"], "index": 1, "block_token": table["token"]}])).await?;
    edit(json!([{"op": "delete", "quote": {"exact": "A new paragraph.\n\n"}}])).await?;
    let before = ada
        .get(&format!("/api/v1/artifacts/{id}/blocks"))
        .await?
        .json;
    let text = ada.get(&format!("/api/v1/artifacts/{id}/text")).await?.json;

    console.forget_loaded_documents();
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}/text")).await?.json,
        text,
        "the markdown from the snapshot and splices"
    );
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}/blocks"))
            .await?
            .json,
        before,
        "the same ids and tokens after a replay"
    );
    // An edit scoped to a block made by a logged edit still finds it.
    let task = block_with(
        &blocks_of(&before),
        text["markdown"].as_str().unwrap_or_default(),
        "task_item",
        "a new task",
    )
    .clone();
    edit(json!([{"op": "replace", "quote": {"exact": "a new task"}, "text": "a renamed task", "block": task["id"], "block_token": task["token"]}])).await?;
    assert_eq!(
        ada.get("/api/v1/issues/PAY-1").await?.json["progress"]["tasks"],
        json!({"done": 2, "total": 4})
    );

    // Past 256 edits the log folds into a snapshot; the document still replays.
    for i in 0..260 {
        edit(json!([{"op": "replace", "quote": {"exact": format!("Plan{}", if i == 0 { String::new() } else { format!(" {}", i - 1) })}, "text": format!("Plan {i}")}])).await?;
    }
    let before = ada
        .get(&format!("/api/v1/artifacts/{id}/blocks"))
        .await?
        .json;
    console.forget_loaded_documents();
    assert_eq!(
        ada.get(&format!("/api/v1/artifacts/{id}/blocks"))
            .await?
            .json,
        before
    );
    assert!(
        ada.get(&format!("/api/v1/artifacts/{id}/text")).await?.json["markdown"]
            .as_str()
            .is_some_and(|m| m.starts_with("# Plan 259\n"))
    );
    let log = ada
        .get(&format!("/api/v1/artifacts/{id}/events?order=desc&limit=1"))
        .await?
        .json;
    assert_eq!(log[0]["sequence"], 1 + 5 + 260);
    console.stop().await;
    Ok(())
}

on_both_databases!(
    edit_log_replays_after_a_restart,
    edit_log_replays_after_a_restart_sqlite,
    edit_log_replays_after_a_restart_postgres
);
