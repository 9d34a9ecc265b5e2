//! # countersign-link-client
//!
//! The agent side of the Countersign console's session link (console protocol §4.2), so that
//! the CLI, the launcher helper and agents hold a live session without hand-written WebSocket
//! code:
//!
//! - [`Link::connect`] opens `GET /link/v1/sessions/{session_id}` (subprotocol
//!   `countersign.link.v1`, the agent's bearer), says `hello` with what the session
//!   advertises ([`Advert`]) and waits for `welcome`. The session is live from then until the
//!   link closes.
//! - A task owns the socket: it answers the console's pings (RFC 6455 §5.5.2), acknowledges
//!   each delivery (`delivered`) as soon as it holds it (unless [`Options::auto_ack`] is off,
//!   then [`LinkHandle::ack`] does), and passes deliveries and relay requests on as
//!   [`Event`]s, which [`Link::next`] yields.
//! - A [`LinkHandle`] (cloneable) sends what the session says on the link (`update`, relay
//!   `replay` and `frame`s) and calls the console's HTTP routes a session answers with:
//!   [`LinkHandle::reply`] and [`LinkHandle::accept`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), countersign_link_client::LinkError> {
//! use countersign_link_client::{Advert, Event, Link, Mode, Options};
//! let mut link = Link::connect(Options::new(
//!     "http://127.0.0.1:8081", "agent-token", "session-1",
//!     Advert::new("fixing the build").modes(&[Mode::Send, Mode::Steer]),
//! )).await?;
//! while let Some(event) = link.next().await {
//!     if let Event::Delivery(d) = event {
//!         link.handle().reply(&d.delivery.id, &format!("on it: {}", d.body), false).await?;
//!     }
//! }
//! # Ok(()) }
//! ```

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;

/// The link's subprotocol.
pub const SUBPROTOCOL: &str = "countersign.link.v1";
/// How long the console's `welcome` may take.
const WELCOME_WITHIN: Duration = Duration::from_secs(10);

/// What went wrong.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The console could not be reached, or refused the upgrade (a bad token, a bad session
    /// id).
    #[error("could not open the session link: {0}")]
    Connect(String),
    /// The console closed the link (4400 a bad hello, 4408 no hello in time, 4409 a newer
    /// link for the session).
    #[error("the console closed the link ({code}): {reason}")]
    Closed { code: u16, reason: String },
    /// Something on the link was not what the protocol says.
    #[error("link protocol: {0}")]
    Protocol(String),
    /// The link's task has ended.
    #[error("the link is closed")]
    Gone,
    /// An HTTP route answered with a refusal.
    #[error("the console refused ({status} {code}): {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
    #[error("HTTP: {0}")]
    Http(String),
}

/// A delivery mode (console protocol §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A new turn, queued while one runs.
    Send,
    /// Shown to the running turn without redirecting it.
    Aside,
    /// Redirects the running turn.
    Steer,
}

/// What a session advertises in `hello` (and replaces with `update`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Advert {
    /// 1 to 200 characters.
    pub title: String,
    /// Role names (`^[a-z][a-z0-9._-]{0,63}$`), at most 32.
    pub roles: Vec<String>,
    /// Capabilities, at most 32; `relay` says the session serves the relay.
    pub capabilities: Vec<String>,
    pub modes: Vec<Mode>,
}

impl Advert {
    /// A title, no roles or capabilities, mode `send`.
    pub fn new(title: &str) -> Self {
        Self {
            title: title.to_owned(),
            roles: Vec::new(),
            capabilities: Vec::new(),
            modes: vec![Mode::Send],
        }
    }

    pub fn roles(mut self, roles: &[&str]) -> Self {
        self.roles = roles.iter().map(|r| (*r).to_owned()).collect();
        self
    }

    pub fn capabilities(mut self, c: &[&str]) -> Self {
        self.capabilities = c.iter().map(|r| (*r).to_owned()).collect();
        self
    }

    pub fn modes(mut self, modes: &[Mode]) -> Self {
        self.modes = modes.to_vec();
        self
    }
}

/// `delivery {kind, id, attempt}`: which attempt of what.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeliveryRef {
    /// `message` or `mention`.
    pub kind: String,
    /// The message's (or the mentioning comment's) id.
    pub id: String,
    pub attempt: i64,
}

/// One delivery (`deliver`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Delivery {
    pub delivery: DeliveryRef,
    pub thread_id: String,
    pub issue: Option<String>,
    pub mode: Mode,
    /// `{kind: user, login}`, `{kind: agent, …}` or `{kind: system, name}`.
    pub author: Value,
    pub body: String,
    pub notice: Option<Value>,
}

/// A relay frame's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    Turn,
    ToolCall,
    Update,
}

/// One relay frame: `seq` increasing, `at` RFC 3339, `data` a JSON object (at most 64 KiB).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    pub seq: u64,
    pub kind: FrameKind,
    pub at: String,
    pub data: Value,
}

/// What the console says on the link.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// A delivery (already acknowledged when [`Options::auto_ack`] is on).
    Delivery(Delivery),
    /// A person opened the relay: answer [`LinkHandle::replay`] for `viewer`, then send
    /// frames while a viewer is open.
    RelayOpen { viewer: String },
    /// A person left the relay.
    RelayClose { viewer: String },
    /// The link closed (the last event).
    Closed { code: Option<u16>, reason: String },
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct Options {
    /// The console's base URL (`http://…` or `https://…`).
    pub console_url: String,
    /// The agent's bearer token.
    pub token: String,
    pub session_id: String,
    pub advert: Advert,
    /// Acknowledge each delivery as soon as it arrives (default true).
    pub auto_ack: bool,
}

impl Options {
    pub fn new(console_url: &str, token: &str, session_id: &str, advert: Advert) -> Self {
        Self {
            console_url: console_url.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            session_id: session_id.to_owned(),
            advert,
            auto_ack: true,
        }
    }
}

/// A frame the session sends.
#[derive(Debug)]
enum Out {
    Text(String),
    Close,
}

/// The console's `welcome`.
#[derive(Debug, Clone, Deserialize)]
pub struct Welcome {
    pub session_id: String,
    pub ping_seconds: u64,
}

/// An open link: the events the console sends, and a handle to speak on it.
#[derive(Debug)]
pub struct Link {
    events: mpsc::UnboundedReceiver<Event>,
    handle: LinkHandle,
    welcome: Welcome,
}

/// Speaks on a link and calls the console's routes as its session. Cloneable.
#[derive(Debug, Clone)]
pub struct LinkHandle {
    out: mpsc::UnboundedSender<Out>,
    http: reqwest::Client,
    base: String,
    token: String,
    session_id: String,
}

/// Percent-encodes a path segment (RFC 3986 unreserved characters stay).
fn segment(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes())
        .collect::<String>()
        .replace('+', "%20")
}

fn text_of<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

#[derive(Serialize)]
struct Hello<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    advert: &'a Advert,
}

#[derive(Serialize)]
struct Delivered<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    delivery: &'a DeliveryRef,
}

#[derive(Deserialize)]
struct Typed {
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct Viewer {
    viewer: String,
}

/// Waits for the console's `welcome` (within [`WELCOME_WITHIN`]), skipping frames that are
/// not text; anything else first is refused.
async fn welcome_on(ws: &mut Ws) -> Result<Welcome, LinkError> {
    loop {
        let m = tokio::time::timeout(WELCOME_WITHIN, ws.next())
            .await
            .map_err(|_| LinkError::Protocol("no welcome within 10 s".into()))?;
        match m {
            Some(Ok(Message::Text(t))) => {
                let typed: Typed =
                    serde_json::from_str(&t).map_err(|e| LinkError::Protocol(e.to_string()))?;
                if typed.kind != "welcome" {
                    return Err(LinkError::Protocol(format!(
                        "expected welcome, got {}",
                        typed.kind
                    )));
                }
                return serde_json::from_str::<Welcome>(&t)
                    .map_err(|e| LinkError::Protocol(e.to_string()));
            }
            Some(Ok(Message::Close(f))) => {
                let (code, reason) = close_of(f);
                return Err(LinkError::Closed {
                    code: code.unwrap_or(1005),
                    reason,
                });
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(LinkError::Connect(e.to_string())),
            None => return Err(LinkError::Gone),
        }
    }
}

impl Link {
    /// Opens the link, says `hello`, and waits for `welcome`.
    pub async fn connect(o: Options) -> Result<Link, LinkError> {
        let ws_base = if let Some(rest) = o.console_url.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = o.console_url.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            return Err(LinkError::Connect(
                "the console URL is http:// or https://".into(),
            ));
        };
        let url = format!("{ws_base}/link/v1/sessions/{}", segment(&o.session_id));
        let mut req = url
            .into_client_request()
            .map_err(|e| LinkError::Connect(e.to_string()))?;
        let h = req.headers_mut();
        h.insert(
            "authorization",
            format!("Bearer {}", o.token)
                .parse()
                .map_err(|_| LinkError::Connect("the token is not a header value".into()))?,
        );
        h.insert(
            "sec-websocket-protocol",
            SUBPROTOCOL
                .parse()
                .map_err(|_| LinkError::Connect("subprotocol".into()))?,
        );
        let (mut ws, _) = tokio_tungstenite::connect_async(req)
            .await
            .map_err(|e| LinkError::Connect(e.to_string()))?;
        ws.send(Message::Text(
            text_of(&Hello {
                kind: "hello",
                advert: &o.advert,
            })
            .into(),
        ))
        .await
        .map_err(|e| LinkError::Connect(e.to_string()))?;
        let welcome = welcome_on(&mut ws).await?;
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = mpsc::unbounded_channel();
        tokio::spawn(run(ws, out_rx, out_tx.clone(), ev_tx, o.auto_ack));
        Ok(Link {
            events: ev_rx,
            handle: LinkHandle {
                out: out_tx,
                http: reqwest::Client::new(),
                base: o.console_url.clone(),
                token: o.token.clone(),
                session_id: o.session_id.clone(),
            },
            welcome,
        })
    }

    /// The next event; `None` after [`Event::Closed`].
    pub async fn next(&mut self) -> Option<Event> {
        self.events.recv().await
    }

    pub fn handle(&self) -> LinkHandle {
        self.handle.clone()
    }

    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }
}

fn close_of(f: Option<CloseFrame>) -> (Option<u16>, String) {
    match f {
        Some(f) => (Some(u16::from(f.code)), f.reason.to_string()),
        None => (None, String::new()),
    }
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Owns the socket until it closes.
async fn run(
    mut ws: Ws,
    mut out: mpsc::UnboundedReceiver<Out>,
    to_self: mpsc::UnboundedSender<Out>,
    events: mpsc::UnboundedSender<Event>,
    auto_ack: bool,
) {
    let closed = loop {
        tokio::select! {
            o = out.recv() => match o {
                Some(Out::Text(t)) => {
                    if let Err(e) = ws.send(Message::Text(t.into())).await {
                        break Event::Closed { code: None, reason: e.to_string() };
                    }
                }
                Some(Out::Close) | None => {
                    let _ = ws.close(None).await;
                    // Read until the console's close answers ours.
                    while let Some(Ok(m)) = ws.next().await {
                        if let Message::Close(f) = m {
                            let (code, reason) = close_of(f);
                            let _ = events.send(Event::Closed { code, reason });
                            return;
                        }
                    }
                    break Event::Closed { code: None, reason: "closed".into() };
                }
            },
            m = ws.next() => match m {
                Some(Ok(Message::Text(t))) => {
                    let Ok(typed) = serde_json::from_str::<Typed>(&t) else {
                        tracing::warn!("a link message that is not JSON");
                        continue;
                    };
                    match typed.kind.as_str() {
                        "deliver" => match serde_json::from_str::<Delivery>(&t) {
                            Ok(d) => {
                                if auto_ack {
                                    let ack = text_of(&Delivered { kind: "delivered", delivery: &d.delivery });
                                    let _ = to_self.send(Out::Text(ack));
                                }
                                let _ = events.send(Event::Delivery(d));
                            }
                            Err(e) => tracing::warn!(error = %e, "a malformed deliver"),
                        },
                        "relay.open" | "relay.close" => {
                            if let Ok(v) = serde_json::from_str::<Viewer>(&t) {
                                let e = if typed.kind == "relay.open" {
                                    Event::RelayOpen { viewer: v.viewer }
                                } else {
                                    Event::RelayClose { viewer: v.viewer }
                                };
                                let _ = events.send(e);
                            }
                        }
                        // Later link messages: ignored (protocol §2, "Growth").
                        _ => {}
                    }
                }
                Some(Ok(Message::Close(f))) => {
                    let (code, reason) = close_of(f);
                    break Event::Closed { code, reason };
                }
                // Pings are answered by the socket itself.
                Some(Ok(_)) => {}
                Some(Err(e)) => break Event::Closed { code: None, reason: e.to_string() },
                None => break Event::Closed { code: None, reason: "the connection ended".into() },
            },
        }
    };
    let _ = events.send(closed);
}

#[derive(Serialize)]
struct Replay<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    viewer: &'a str,
    frames: &'a [Frame],
}

#[derive(Serialize)]
struct FrameMsg<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    frame: &'a Frame,
}

#[derive(Serialize)]
struct Update<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(flatten)]
    advert: &'a Advert,
}

impl LinkHandle {
    fn send(&self, text: String) -> Result<(), LinkError> {
        self.out.send(Out::Text(text)).map_err(|_| LinkError::Gone)
    }

    /// `delivered` for a delivery (when [`Options::auto_ack`] is off).
    pub fn ack(&self, d: &DeliveryRef) -> Result<(), LinkError> {
        self.send(text_of(&Delivered {
            kind: "delivered",
            delivery: d,
        }))
    }

    /// Replaces what the session advertises.
    pub fn update(&self, advert: &Advert) -> Result<(), LinkError> {
        self.send(text_of(&Update {
            kind: "update",
            advert,
        }))
    }

    /// What the session can still replay, for a viewer that just opened the relay.
    pub fn replay(&self, viewer: &str, frames: &[Frame]) -> Result<(), LinkError> {
        self.send(text_of(&Replay {
            kind: "replay",
            viewer,
            frames,
        }))
    }

    /// One relay frame, while a viewer is open.
    pub fn frame(&self, frame: &Frame) -> Result<(), LinkError> {
        self.send(text_of(&FrameMsg {
            kind: "frame",
            frame,
        }))
    }

    /// Closes the link (the session is no longer live).
    pub fn close(&self) {
        let _ = self.out.send(Out::Close);
    }

    async fn post(&self, path: &str, body: Value) -> Result<Value, LinkError> {
        let r = self
            .http
            .post(format!("{}{path}", self.base))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .map_err(|e| LinkError::Http(e.without_url().to_string()))?;
        let status = r.status().as_u16();
        let v: Value = r
            .json()
            .await
            .map_err(|e| LinkError::Http(e.without_url().to_string()))?;
        if (200..300).contains(&status) {
            Ok(v)
        } else {
            Err(LinkError::Refused {
                status,
                code: v["code"].as_str().unwrap_or("").to_owned(),
                message: v["error"].as_str().unwrap_or("").to_owned(),
            })
        }
    }

    /// The session's reply to a message delivered to it (`follow_up`: other text after the
    /// first reply posts as a follow-up); answers the stored reply (`duplicate` when nothing
    /// was posted).
    pub async fn reply(
        &self,
        message_id: &str,
        body: &str,
        follow_up: bool,
    ) -> Result<Value, LinkError> {
        let q = if follow_up { "?follow_up=true" } else { "" };
        self.post(
            &format!("/api/v1/messages/{}/replies{q}", segment(message_id)),
            serde_json::json!({"actor": self.session_id, "body": body}),
        )
        .await
    }

    /// Accepts a delivery attempt (as `aside` or `steer`; default the attempt's mode).
    pub async fn accept(
        &self,
        message_id: &str,
        attempt: i64,
        accepted_as: Option<Mode>,
    ) -> Result<Value, LinkError> {
        let mut body = serde_json::json!({"actor": self.session_id});
        if let Some(m) = accepted_as {
            body["as"] = serde_json::json!(m);
        }
        self.post(
            &format!(
                "/api/v1/messages/{}/deliveries/{attempt}/accept",
                segment(message_id)
            ),
            body,
        )
        .await
    }
}
