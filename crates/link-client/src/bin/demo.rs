//! `countersign-link-demo`: a small session that holds the console link, acknowledges each
//! delivery, replies to it, and serves the relay (a `turn` frame per delivery and per line
//! read on standard input). Each thing it does is one JSON line on standard output.
//!
//! ```text
//! COUNTERSIGN_AGENT_TOKEN=… countersign-link-demo --console http://127.0.0.1:8081 \
//!     --session s1 --title "demo" --mode send --mode steer --relay --reply "on it: {body}"
//! ```
//! Standard input: `frame <text>` sends a relay frame; `quit` closes the link.

use std::collections::HashSet;

use anyhow::Context;
use clap::Parser;
use countersign_link_client::{Advert, Event, Frame, FrameKind, Link, Mode, Options};
use serde_json::json;
use tokio::io::AsyncBufReadExt;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "A demo session on the Countersign console's session link"
)]
struct Args {
    /// The console's base URL.
    #[arg(long)]
    console: String,
    /// The session id.
    #[arg(long)]
    session: String,
    #[arg(long, default_value = "demo session")]
    title: String,
    /// A role the session advertises (repeatable).
    #[arg(long = "role")]
    roles: Vec<String>,
    /// A delivery mode it advertises (repeatable; default send).
    #[arg(long = "mode")]
    modes: Vec<String>,
    /// Serve the relay (advertise the `relay` capability).
    #[arg(long)]
    relay: bool,
    /// The reply to each delivery (`{body}` is the delivery's body); empty: no reply.
    #[arg(long, default_value = "received: {body}")]
    reply: String,
}

fn say(v: serde_json::Value) {
    println!("{v}");
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

// Long: the demo is a script a reader follows top to bottom, one step per paragraph.
#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let token = std::env::var("COUNTERSIGN_AGENT_TOKEN")
        .context("the agent's bearer token is in COUNTERSIGN_AGENT_TOKEN")?;
    let mut modes = Vec::new();
    for m in &args.modes {
        modes.push(match m.as_str() {
            "send" => Mode::Send,
            "aside" => Mode::Aside,
            "steer" => Mode::Steer,
            other => anyhow::bail!("unknown mode {other}"),
        });
    }
    if modes.is_empty() {
        modes.push(Mode::Send);
    }
    let roles: Vec<&str> = args.roles.iter().map(String::as_str).collect();
    let caps: &[&str] = if args.relay { &["relay"] } else { &[] };
    let advert = Advert::new(&args.title)
        .roles(&roles)
        .capabilities(caps)
        .modes(&modes);
    let mut link =
        Link::connect(Options::new(&args.console, &token, &args.session, advert)).await?;
    let handle = link.handle();
    say(json!({"event": "live", "session_id": link.welcome().session_id}));

    let mut frames: Vec<Frame> = Vec::new();
    let mut viewers: HashSet<String> = HashSet::new();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let mut stdin_open = true;
    let push = |frames: &mut Vec<Frame>, viewers: &HashSet<String>, kind, data| {
        let f = Frame {
            seq: frames.len() as u64 + 1,
            kind,
            at: now(),
            data,
        };
        if !viewers.is_empty() {
            let _ = handle.frame(&f);
        }
        frames.push(f);
    };
    loop {
        tokio::select! {
            e = link.next() => match e {
                Some(Event::Delivery(d)) => {
                    say(json!({
                        "event": "delivery",
                        "kind": d.delivery.kind,
                        "id": d.delivery.id,
                        "attempt": d.delivery.attempt,
                        "mode": d.mode,
                        "body": d.body,
                        "notice": d.notice,
                    }));
                    push(&mut frames, &viewers, FrameKind::Turn,
                        json!({"text": format!("received ({:?}): {}", d.mode, d.body)}));
                    if !args.reply.is_empty() && d.delivery.kind == "message" {
                        let text = args.reply.replace("{body}", &d.body);
                        match link.handle().reply(&d.delivery.id, &text, false).await {
                            Ok(r) => say(json!({"event": "replied", "id": r["id"], "body": text})),
                            Err(e) => say(json!({"event": "error", "error": e.to_string()})),
                        }
                    }
                }
                Some(Event::RelayOpen { viewer }) => {
                    let _ = link.handle().replay(&viewer, &frames);
                    viewers.insert(viewer.clone());
                    say(json!({"event": "relay.open", "viewer": viewer}));
                }
                Some(Event::RelayClose { viewer }) => {
                    viewers.remove(&viewer);
                    say(json!({"event": "relay.close", "viewer": viewer}));
                }
                Some(Event::Closed { code, reason }) => {
                    say(json!({"event": "closed", "code": code, "reason": reason}));
                    // Standard input's reader is a blocking thread the runtime would wait for.
                    std::process::exit(0);
                }
                None => std::process::exit(0),
            },
            line = stdin.next_line(), if stdin_open => match line {
                Ok(Some(l)) => {
                    let l = l.trim();
                    if l == "quit" {
                        link.handle().close();
                    } else if let Some(text) = l.strip_prefix("frame ") {
                        push(&mut frames, &viewers, FrameKind::Turn, json!({"text": text}));
                        say(json!({"event": "frame", "seq": frames.len(), "text": text}));
                    }
                }
                _ => stdin_open = false,
            },
        }
    }
}
