//! The session link (protocol §4.2): one WebSocket per live agent session at
//! `GET /link/v1/sessions/{session_id}` (subprotocol `countersign.link.v1`, an agent's bearer).
//!
//! A session is live from its `hello` until its link closes: the [`Registry`] holds what each
//! live session advertises (title, roles, capabilities, modes) and answers the core's
//! [`Presence`] (claims held by a session that is gone may be taken; `route_status`). One link
//! per session: a newer one closes the older with 4409. A bad `hello` closes with 4400, none in
//! 10 s with 4408; the console pings every 20 s and closes a link silent for 60 s. Each change
//! appends `session.live`, `session.updated` or `session.gone`.
//!
//! The registry is this replica's: with several console replicas a session is live on the one
//! it is linked to (docs/decisions.md).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Extension;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use countersign_console_core::console::Ack;
use countersign_console_core::work::Actor;
use countersign_console_core::work::messages::{Delivery, DeliveryContent, DeliveryKind, Mode};
use countersign_console_core::work::model::rfc3339;
use countersign_console_core::{Caller, Error, ErrorCode, Presence, Time};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::AppState;
use crate::api::{St, acting, ok};
use crate::error::ApiResult;

/// The link's subprotocol.
pub const SUBPROTOCOL: &str = "countersign.link.v1";
/// Seconds between the console's pings.
pub const PING_SECONDS: u64 = 20;
/// A link silent this long is closed.
const SILENT: Duration = Duration::from_secs(60);
/// Time a new link has to say `hello`.
const HELLO_WITHIN: Duration = Duration::from_secs(10);
/// The largest link message.
const MESSAGE_LIMIT: usize = 1024 * 1024;
/// Frames queued to one link before a delivery to it is refused (the link is not reading).
const OUTBOUND: usize = 256;
/// Acknowledgements committed in one transaction at most.
const ACK_BATCH: usize = 512;

/// What a live session advertises, as `GET /api/v1/sessions` lists it.
#[derive(Debug, Clone, Serialize)]
pub struct LiveSession {
    pub session_id: String,
    pub title: String,
    pub roles: Vec<String>,
    pub capabilities: Vec<String>,
    pub modes: Vec<String>,
    pub owner: Option<String>,
    pub service: Option<String>,
    #[serde(with = "rfc3339")]
    pub live_since: Time,
    #[serde(with = "rfc3339")]
    pub last_activity_at: Time,
    /// Open asks the session wrote (counted when listed).
    pub open_asks: u32,
}

struct Entry {
    live: LiveSession,
    link: u64,
    close: Option<oneshot::Sender<()>>,
    /// Text frames to send on the link.
    out: mpsc::Sender<String>,
}

/// The live sessions of this replica, and the acknowledgements their links pass on.
pub struct Registry {
    sessions: Mutex<HashMap<String, Entry>>,
    next_link: AtomicU64,
    acks: mpsc::UnboundedSender<Ack>,
    /// Taken by [`background`], which commits the acknowledgements in batches.
    ack_queue: Mutex<Option<mpsc::UnboundedReceiver<Ack>>>,
}

impl Default for Registry {
    fn default() -> Self {
        let (acks, queue) = mpsc::unbounded_channel();
        Self {
            sessions: Mutex::default(),
            next_link: AtomicU64::default(),
            acks,
            ack_queue: Mutex::new(Some(queue)),
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
    /// Queues a text frame on a live session's link, without waiting (a notice such as
    /// `ask.answered`); false when the session is not linked here or its queue is full.
    pub fn send_frame(&self, session: &str, frame: String) -> bool {
        let Ok(m) = self.sessions.lock() else {
            return false;
        };
        m.get(session)
            .is_some_and(|e| e.out.try_send(frame).is_ok())
    }

    /// Every live session, by id.
    pub fn list(&self) -> Vec<LiveSession> {
        let mut v: Vec<LiveSession> = self
            .sessions
            .lock()
            .map(|m| m.values().map(|e| e.live.clone()).collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.session_id.cmp(&b.session_id));
        v
    }

    /// Registers a link's session; an older link of the same session is told to close.
    fn enter(
        &self,
        live: LiveSession,
        close: oneshot::Sender<()>,
        out: mpsc::Sender<String>,
    ) -> u64 {
        let link = self.next_link.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.sessions.lock() {
            let old = m.insert(
                live.session_id.clone(),
                Entry {
                    live,
                    link,
                    close: Some(close),
                    out,
                },
            );
            if let Some(mut old) = old
                && let Some(c) = old.close.take()
            {
                let _ = c.send(());
            }
        }
        link
    }

    fn update(
        &self,
        session: &str,
        link: u64,
        f: impl FnOnce(&mut LiveSession),
    ) -> Option<LiveSession> {
        let mut m = self.sessions.lock().ok()?;
        let e = m.get_mut(session).filter(|e| e.link == link)?;
        f(&mut e.live);
        Some(e.live.clone())
    }

    /// Removes the session if this link still holds it.
    fn leave(&self, session: &str, link: u64) -> Option<LiveSession> {
        let mut m = self.sessions.lock().ok()?;
        if m.get(session).is_some_and(|e| e.link == link) {
            m.remove(session).map(|e| e.live)
        } else {
            None
        }
    }
}

impl Presence for Registry {
    fn is_live(&self, session: &str) -> bool {
        self.sessions
            .lock()
            .map(|m| m.contains_key(session))
            .unwrap_or(false)
    }

    fn live_roles(&self) -> Vec<String> {
        let mut roles: Vec<String> = self
            .sessions
            .lock()
            .map(|m| m.values().flat_map(|e| e.live.roles.clone()).collect())
            .unwrap_or_default();
        roles.sort();
        roles.dedup();
        roles
    }

    fn modes(&self, session: &str) -> Option<Vec<Mode>> {
        let m = self.sessions.lock().ok()?;
        let e = m.get(session)?;
        Some(e.live.modes.iter().filter_map(|x| Mode::parse(x)).collect())
    }

    fn holders(&self, role: &str) -> Vec<String> {
        let mut v: Vec<String> = self
            .sessions
            .lock()
            .map(|m| {
                m.values()
                    .filter(|e| e.live.roles.iter().any(|r| r == role))
                    .map(|e| e.live.session_id.clone())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    fn deliver(&self, d: &Delivery) -> bool {
        let frame = deliver_frame(d);
        let Ok(m) = self.sessions.lock() else {
            return false;
        };
        m.get(&d.session_id)
            .is_some_and(|e| e.out.try_send(frame).is_ok())
    }
}

/// The `deliver` frame (protocol §4.2).
#[derive(Serialize)]
struct DeliverFrame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    delivery: DeliveryRef<'a>,
    #[serde(flatten)]
    content: &'a DeliveryContent,
}

/// `delivery {kind, id, attempt}` in `deliver`, and the fields of `delivered`.
#[derive(Debug, Serialize, Deserialize)]
struct DeliveryRef<'a> {
    kind: DeliveryKind,
    id: &'a str,
    attempt: i64,
}

fn deliver_frame(d: &Delivery) -> String {
    serde_json::to_string(&DeliverFrame {
        kind: "deliver",
        delivery: DeliveryRef {
            kind: d.kind,
            id: &d.id,
            attempt: d.attempt,
        },
        content: &d.content,
    })
    .unwrap_or_default()
}

/// `delivered`: the session holds a delivery.
#[derive(Debug, Deserialize)]
struct Delivered {
    kind: DeliveryKind,
    id: String,
    attempt: i64,
}

/// `hello` and `update`: what a session advertises.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Advert {
    #[serde(rename = "type")]
    kind: String,
    title: Option<String>,
    roles: Option<Vec<String>>,
    capabilities: Option<Vec<String>>,
    modes: Option<Vec<String>>,
}

/// A link message's type, read before its body.
#[derive(Debug, Deserialize)]
struct Typed {
    #[serde(rename = "type")]
    kind: String,
}

fn names_ok(v: &[String]) -> bool {
    v.len() <= 32
        && v.iter()
            .all(|r| countersign_console_core::console::is_role(r))
}

/// Applies an advert to a session; `false` when it breaks a rule.
fn apply(live: &mut LiveSession, a: Advert) -> bool {
    if let Some(t) = a.title {
        let n = t.chars().count();
        if !(1..=200).contains(&n) || t.chars().any(char::is_control) {
            return false;
        }
        live.title = t;
    }
    for (field, v) in [
        (&mut live.roles, a.roles),
        (&mut live.capabilities, a.capabilities),
    ] {
        if let Some(v) = v {
            if !names_ok(&v) {
                return false;
            }
            *field = v;
        }
    }
    if let Some(m) = a.modes {
        if m.len() > 3
            || m.iter()
                .any(|x| !matches!(x.as_str(), "send" | "aside" | "steer"))
        {
            return false;
        }
        live.modes = m;
    }
    true
}

/// `GET /api/v1/sessions`, with each session's open asks counted in one query.
pub async fn list(State(st): St) -> ApiResult<Response> {
    let mut live = st.sessions.list();
    let ids: Vec<String> = live.iter().map(|l| l.session_id.clone()).collect();
    let counts = st.console.open_ask_counts(&ids).await?;
    for l in &mut live {
        l.open_asks = counts
            .get(&l.session_id)
            .map(|n| u32::try_from(*n).unwrap_or(u32::MAX))
            .unwrap_or(0);
    }
    Ok(ok(live))
}

/// `GET /link/v1/sessions/{session_id}`: the upgrade.
pub async fn link(
    State(st): State<Arc<AppState>>,
    Extension(caller): Extension<Caller>,
    Path(session_id): Path<String>,
    ws: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> ApiResult<Response> {
    let actor = acting(&caller, Some(&session_id), true)?;
    let ws = ws.map_err(|_| {
        Error::with_message(
            ErrorCode::INVALID_BODY,
            "the session link is a WebSocket upgrade (RFC 6455)",
        )
    })?;
    let offered = ws
        .requested_protocols()
        .any(|p| p.to_str().is_ok_and(|p| p == SUBPROTOCOL));
    if !offered {
        return Err(Error::with_message(
            ErrorCode::INVALID_BODY,
            "the session link speaks the countersign.link.v1 subprotocol",
        )
        .into());
    }
    Ok(ws
        .protocols([SUBPROTOCOL])
        .max_message_size(MESSAGE_LIMIT)
        .on_upgrade(move |socket| run(st, actor, session_id, socket))
        .into_response())
}

async fn close(mut socket: WebSocket, code: u16, reason: &'static str) {
    let _ = socket
        .send(Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })))
        .await;
}

#[derive(Serialize)]
struct Welcome<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    session_id: &'a str,
    ping_seconds: u64,
}

async fn run(st: Arc<AppState>, actor: Actor, session_id: String, mut socket: WebSocket) {
    let hello = match tokio::time::timeout(HELLO_WITHIN, socket.recv()).await {
        Ok(Some(Ok(Message::Text(t)))) => serde_json::from_str::<Advert>(&t).ok(),
        Ok(_) => None,
        Err(_) => return close(socket, 4408, "no hello within 10 s").await,
    };
    let now = st.console.now();
    let (owner, service) = match &actor {
        Actor::Agent { owner, service, .. } => {
            (owner.as_ref().map(|o| o.to_string()), service.clone())
        }
        _ => (None, None),
    };
    let mut live = LiveSession {
        session_id: session_id.clone(),
        title: String::new(),
        roles: vec![],
        capabilities: vec![],
        modes: vec![],
        owner,
        service,
        live_since: now,
        last_activity_at: now,
        open_asks: 0,
    };
    let valid = match hello {
        Some(h) if h.kind == "hello" && h.title.is_some() => apply(&mut live, h),
        _ => false,
    };
    if !valid {
        return close(socket, 4400, "the first message is a valid hello").await;
    }
    let welcome = Welcome {
        kind: "welcome",
        session_id: &session_id,
        ping_seconds: PING_SECONDS,
    };
    if socket
        .send(Message::Text(
            serde_json::to_string(&welcome).unwrap_or_default().into(),
        ))
        .await
        .is_err()
    {
        return;
    }
    let (close_tx, mut close_rx) = oneshot::channel();
    let (out_tx, mut out_rx) = mpsc::channel::<String>(OUTBOUND);
    let link = st.sessions.enter(live.clone(), close_tx, out_tx);
    record(&st, "session.live", &actor, &live).await;
    tracing::info!(session = %session_id, "session link open");

    let mut ping = tokio::time::interval(Duration::from_secs(PING_SECONDS));
    ping.tick().await;
    let mut heard = tokio::time::Instant::now();
    let reason = loop {
        tokio::select! {
            _ = &mut close_rx => {
                close(socket, 4409, "a newer link for this session").await;
                break "replaced";
            }
            Some(frame) = out_rx.recv() => {
                if socket.send(Message::Text(frame.into())).await.is_err() {
                    break "gone";
                }
            }
            _ = ping.tick() => {
                if heard.elapsed() >= SILENT {
                    close(socket, 1001, "silent for 60 s").await;
                    break "silent";
                }
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    break "gone";
                }
            }
            m = socket.recv() => {
                let Some(Ok(m)) = m else { break "gone" };
                heard = tokio::time::Instant::now();
                let now = st.console.now();
                st.sessions.update(&session_id, link, |l| l.last_activity_at = now);
                match m {
                    Message::Text(t) => {
                        let kind = serde_json::from_str::<Typed>(&t).map(|t| t.kind).unwrap_or_default();
                        if kind == "update" {
                            let Ok(a) = serde_json::from_str::<Advert>(&t) else {
                                close(socket, 4400, "a malformed update").await;
                                break "bad update";
                            };
                            let mut ok = true;
                            let updated = st.sessions.update(&session_id, link, |l| {
                                let mut next = l.clone();
                                ok = apply(&mut next, a);
                                if ok {
                                    *l = next;
                                }
                            });
                            if !ok {
                                close(socket, 4400, "a malformed update").await;
                                break "bad update";
                            }
                            if let Some(l) = updated {
                                record(&st, "session.updated", &actor, &l).await;
                            }
                        }
                        else if kind == "delivered" {
                            match serde_json::from_str::<Delivered>(&t) {
                                Ok(d) => {
                                    let _ = st.sessions.acks.send(Ack {
                                        by: actor_of(&actor, &session_id),
                                        kind: d.kind,
                                        id: d.id,
                                        attempt: d.attempt,
                                    });
                                }
                                Err(_) => {
                                    close(socket, 4400, "a malformed delivered").await;
                                    break "bad delivered";
                                }
                            }
                        }
                        // `replay` and `frame` arrive with the relay.
                    }
                    Message::Close(_) => break "closed",
                    _ => {}
                }
            }
        }
    };
    if let Some(l) = st.sessions.leave(&session_id, link) {
        record(&st, "session.gone", &actor, &l).await;
        // Nothing will acknowledge what was handed to this link.
        if let Err(e) = st.console.session_left(&session_id).await {
            tracing::warn!(
                code = e.code_str(),
                "pending deliveries of a gone session not failed"
            );
        }
    }
    tracing::info!(session = %session_id, reason, "session link closed");
}

async fn record(st: &AppState, kind: &'static str, actor: &Actor, live: &LiveSession) {
    let data = serde_json::to_value(live).unwrap_or_default();
    if let Err(e) = st.console.session_event(kind, actor, data).await {
        tracing::warn!(code = e.code_str(), kind, "session event not recorded");
    }
}

/// The link's caller acting for its session.
fn actor_of(actor: &Actor, session: &str) -> Actor {
    match actor {
        Actor::Agent { owner, service, .. } => Actor::Agent {
            owner: owner.clone(),
            service: service.clone(),
            session: Some(session.to_owned()),
        },
        other => other.clone(),
    }
}

/// The link's background work, until the server stops: acknowledgements committed in batches
/// (one transaction for all that arrived together), and every second the attempts no
/// `delivered` came for within 30 s failed.
pub fn background(st: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    let queue = st.sessions.ack_queue.lock().ok().and_then(|mut q| q.take());
    tokio::spawn(async move {
        let acks = {
            let st = st.clone();
            async move {
                let Some(mut queue) = queue else { return };
                let mut batch = Vec::with_capacity(ACK_BATCH);
                while queue.recv_many(&mut batch, ACK_BATCH).await > 0 {
                    if let Err(e) = st.console.delivered(&batch).await {
                        tracing::warn!(
                            code = e.code_str(),
                            n = batch.len(),
                            "acknowledgements not recorded"
                        );
                    }
                    batch.clear();
                }
            }
        };
        let sweep = async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                match st.console.expire_deliveries().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(n, "deliveries not acknowledged in time failed"),
                    Err(e) => tracing::warn!(code = e.code_str(), "delivery sweep failed"),
                }
            }
        };
        tokio::join!(acks, sweep);
    })
}
