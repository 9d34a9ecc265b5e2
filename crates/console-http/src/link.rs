//! The session link (protocol §4.2): one WebSocket per live agent session at
//! `GET /link/v1/sessions/{session_id}` (subprotocol `countersign.link.v1`, an agent's bearer),
//! and the conversation relay it carries (§6.6).
//!
//! - A session is live from its `hello` until its link closes. The [`Registry`] holds this
//!   replica's links (what each advertises, a queue of frames to send, the relay's viewers);
//!   which sessions are live is shared by every replica through the database (the core's
//!   presence: rows written at `hello`, `update` and close, a heartbeat every 20 s), so
//!   `GET /api/v1/sessions`, claims, `route_status` and deliveries see a session linked to any
//!   replica. Each change appends `session.live`, `session.updated` or `session.gone`.
//! - One link per session: a newer one closes the older with 4409 (on another replica, told
//!   through the database's link notices). A bad `hello` closes with 4400, none in 10 s with
//!   4408; the console pings every 20 s and closes a link silent for 60 s.
//! - Deliveries (`deliver`) are queued to the link by [`Presence::deliver`], or, when another
//!   replica opened the attempt, by a link notice naming this replica. The session's
//!   `delivered` goes to a committer that records acknowledgements in batches.
//! - The relay: `GET /api/v1/sessions/{id}/relay` sends `relay.open` on the link, forwards the
//!   session's `replay` for that viewer and then its `frame`s, and ends with `end` when the
//!   link closes; nothing is stored. It is served by the replica holding the link.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Extension;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, State};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use countersign_console_core::console::{Ack, LinkNotice};
use countersign_console_core::ids::SessionId;
use countersign_console_core::work::Actor;
use countersign_console_core::work::messages::{
    Deliverable, Delivery, DeliveryContent, DeliveryKind, LiveSession, Mode,
};
use countersign_console_core::{Caller, Error, ErrorCode, Presence, Time};
use futures_util::stream::{self, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::AppState;
use crate::api::{St, acting_session, ok};
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
/// How often this replica's sessions are marked fresh, and other replicas' stale ones removed.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(20);
/// The largest relay frame `data` (protocol §6.6).
const FRAME_DATA_LIMIT: usize = 64 * 1024;
/// Relay events queued to one viewer before frames to it are dropped.
const VIEWER_QUEUE: usize = 256;
/// How long a new viewer waits for the session's `replay` before an empty one is sent.
const REPLAY_WITHIN: Duration = Duration::from_secs(10);

/// What a relay viewer receives.
#[derive(Debug, Clone)]
enum Relayed {
    Replay(Vec<Value>),
    Frame(Value),
    End,
}

struct Entry {
    live: LiveSession,
    link: i64,
    close: Option<oneshot::Sender<()>>,
    /// Text frames to send on the link.
    out: mpsc::Sender<String>,
    /// `last_activity_at` moved since the last heartbeat.
    active: bool,
    /// Open relay viewers.
    viewers: HashMap<String, mpsc::Sender<Relayed>>,
}

/// This replica's session links, and the acknowledgements they pass on.
pub struct Registry {
    replica: String,
    sessions: Mutex<HashMap<SessionId, Entry>>,
    next_link: AtomicI64,
    acks: mpsc::UnboundedSender<Ack>,
    /// Taken by [`background`], which commits the acknowledgements in batches.
    ack_queue: Mutex<Option<mpsc::UnboundedReceiver<Ack>>>,
    /// The database's link-notice listener (PostgreSQL), ended with [`background`].
    pub(crate) listener: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Default for Registry {
    fn default() -> Self {
        let (acks, queue) = mpsc::unbounded_channel();
        Self {
            replica: countersign_console_core::clock::random_token::<12>(
                &countersign_console_core::SystemEntropy,
            ),
            sessions: Mutex::default(),
            next_link: AtomicI64::new(1),
            acks,
            ack_queue: Mutex::new(Some(queue)),
            listener: Mutex::default(),
        }
    }
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// Queues a text frame on a live session's link held by this replica, without waiting (a
    /// notice such as `ask.answered`); false when its link is not here or its queue is full.
    pub fn send_frame(&self, session: &SessionId, frame: String) -> bool {
        let Ok(m) = self.sessions.lock() else {
            return false;
        };
        m.get(session)
            .is_some_and(|e| e.out.try_send(frame).is_ok())
    }

    /// Registers a link's session; an older link of the same session here is told to close.
    fn enter(&self, live: LiveSession, close: oneshot::Sender<()>, out: mpsc::Sender<String>) {
        if let Ok(mut m) = self.sessions.lock() {
            let old = m.insert(
                live.session_id.clone(),
                Entry {
                    link: live.link,
                    live,
                    close: Some(close),
                    out,
                    active: false,
                    viewers: HashMap::new(),
                },
            );
            if let Some(mut old) = old {
                if let Some(c) = old.close.take() {
                    let _ = c.send(());
                }
                for v in old.viewers.values() {
                    let _ = v.try_send(Relayed::End);
                }
            }
        }
    }

    fn with<T>(
        &self,
        session: &SessionId,
        link: i64,
        f: impl FnOnce(&mut Entry) -> T,
    ) -> Option<T> {
        let mut m = self.sessions.lock().ok()?;
        m.get_mut(session).filter(|e| e.link == link).map(f)
    }

    /// Removes the session if this link still holds it, ending its relay viewers.
    fn leave(&self, session: &SessionId, link: i64) -> bool {
        let Ok(mut m) = self.sessions.lock() else {
            return false;
        };
        if m.get(session).is_some_and(|e| e.link == link) {
            if let Some(e) = m.remove(session) {
                for v in e.viewers.values() {
                    let _ = v.try_send(Relayed::End);
                }
            }
            true
        } else {
            false
        }
    }

    /// Closes this replica's link `link` of a session (a newer link elsewhere holds it).
    fn close_link(&self, session: &SessionId, link: i64) {
        self.with(session, link, |e| {
            if let Some(c) = e.close.take() {
                let _ = c.send(());
            }
        });
    }

    /// The sessions whose activity moved since the last call, with their latest activity.
    fn take_activity(&self) -> Vec<(SessionId, Time)> {
        let Ok(mut m) = self.sessions.lock() else {
            return Vec::new();
        };
        m.values_mut()
            .filter(|e| e.active)
            .map(|e| {
                e.active = false;
                (e.live.session_id.clone(), e.live.last_activity_at)
            })
            .collect()
    }

    /// How many links this replica holds.
    pub fn len(&self) -> usize {
        self.sessions.lock().map(|m| m.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Opens a relay viewer of a session this replica links, if it serves the relay; the
    /// link is sent `relay.open`.
    fn open_viewer(&self, session: &SessionId, viewer: &str) -> Option<mpsc::Receiver<Relayed>> {
        let mut m = self.sessions.lock().ok()?;
        let e = m.get_mut(session)?;
        if !e.live.capabilities.iter().any(|c| c == "relay") {
            return None;
        }
        let (tx, rx) = mpsc::channel(VIEWER_QUEUE);
        let open = text(&ViewerMsg {
            kind: "relay.open",
            viewer,
        });
        e.out.try_send(open).ok()?;
        e.viewers.insert(viewer.to_owned(), tx);
        Some(rx)
    }

    /// A viewer left: the link is sent `relay.close`.
    fn close_viewer(&self, session: &SessionId, viewer: &str) {
        if let Ok(mut m) = self.sessions.lock()
            && let Some(e) = m.get_mut(session)
            && e.viewers.remove(viewer).is_some()
        {
            let _ = e.out.try_send(text(&ViewerMsg {
                kind: "relay.close",
                viewer,
            }));
        }
    }
}

impl Presence for Registry {
    fn replica(&self) -> &str {
        &self.replica
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

fn text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// `relay.open`, `relay.close`.
#[derive(Serialize)]
struct ViewerMsg<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    viewer: &'a str,
}

/// The `deliver` frame (protocol §4.2).
#[derive(Serialize)]
struct DeliverFrame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    delivery: DeliveryRef,
    #[serde(flatten)]
    content: &'a DeliveryContent,
}

/// `delivery {kind, id, attempt}` in `deliver`.
#[derive(Debug, Serialize)]
struct DeliveryRef {
    kind: DeliveryKind,
    id: String,
    attempt: i64,
}

fn deliver_frame(d: &Delivery) -> String {
    text(&DeliverFrame {
        kind: "deliver",
        delivery: DeliveryRef {
            kind: d.item.kind(),
            id: d.item.to_string(),
            attempt: d.attempt,
        },
        content: &d.content,
    })
}

/// `delivered`: the session holds a delivery.
#[derive(Debug, Deserialize)]
struct Delivered {
    kind: DeliveryKind,
    id: String,
    attempt: i64,
}

/// `replay`: what the session can still replay, for one viewer.
#[derive(Debug, Deserialize)]
struct Replay {
    viewer: String,
    frames: Vec<Value>,
}

/// `frame`: one relay frame.
#[derive(Debug, Deserialize)]
struct FrameIn {
    seq: u64,
    kind: String,
    at: String,
    data: Value,
}

/// A relay frame as the relay stream sends it.
#[derive(Debug, Serialize)]
struct FrameOut {
    seq: u64,
    kind: String,
    at: String,
    data: Value,
}

impl FrameIn {
    /// The frame as relayed, if it keeps the rules (a known kind, an object of at most
    /// 64 KiB).
    fn checked(self) -> Option<Value> {
        let ok = matches!(self.kind.as_str(), "turn" | "tool_call" | "update")
            && self.data.is_object()
            && serde_json::to_string(&self.data).map_or(0, |s| s.len()) <= FRAME_DATA_LIMIT;
        ok.then(|| {
            serde_json::to_value(FrameOut {
                seq: self.seq,
                kind: self.kind,
                at: self.at,
                data: self.data,
            })
            .unwrap_or_default()
        })
    }
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
        let modes: Option<Vec<Mode>> = m.iter().map(|x| Mode::parse(x)).collect();
        match modes {
            Some(modes) if modes.len() <= 3 => live.modes = modes,
            _ => return false,
        }
    }
    true
}

/// `GET /api/v1/sessions`: every live session, on whichever replica its link is.
pub async fn list(State(st): St) -> ApiResult<Response> {
    let mut live = st.console.messages().live_sessions().await?;
    // Each session's open asks, counted in one query.
    let ids: Vec<SessionId> = live.iter().map(|l| l.session_id.clone()).collect();
    let counts = st.console.asks().open_ask_counts(&ids).await?;
    for l in &mut live {
        l.open_asks = counts.get(&l.session_id).copied().unwrap_or(0);
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
    let session_id = SessionId::named(&session_id)?;
    let actor = acting_session(&caller, Some(session_id.as_str()))?;
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
        // Idle links hold little: buffers grow with the messages that need them.
        .read_buffer_size(4 * 1024)
        .write_buffer_size(0)
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
    session_id: &'a SessionId,
    ping_seconds: u64,
}

async fn run(st: Arc<AppState>, actor: Actor, session_id: SessionId, mut socket: WebSocket) {
    let hello = match tokio::time::timeout(HELLO_WITHIN, socket.recv()).await {
        Ok(Some(Ok(Message::Text(t)))) => serde_json::from_str::<Advert>(&t).ok(),
        Ok(_) => None,
        Err(_) => return close(socket, 4408, "no hello within 10 s").await,
    };
    let link = st.sessions.next_link.fetch_add(1, Ordering::Relaxed);
    let mut live = live_session(&st, &actor, &session_id, link);
    let valid = match hello {
        Some(h) if h.kind == "hello" && h.title.is_some() => apply(&mut live, h),
        _ => false,
    };
    if !valid {
        return close(socket, 4400, "the first message is a valid hello").await;
    }
    let (close_tx, mut close_rx) = oneshot::channel();
    let (out_tx, mut out_rx) = mpsc::channel::<String>(OUTBOUND);
    st.sessions.enter(live.clone(), close_tx, out_tx);
    if let Err(e) = st.console.messages().session_hello(&actor, &live).await {
        tracing::warn!(code = e.code_str(), "session.live not recorded");
        st.sessions.leave(&session_id, link);
        return close(socket, 1011, "the console could not record the session").await;
    }
    let welcome = Welcome {
        kind: "welcome",
        session_id: &session_id,
        ping_seconds: PING_SECONDS,
    };
    let mut reason = "gone";
    if socket
        .send(Message::Text(text(&welcome).into()))
        .await
        .is_ok()
    {
        tracing::info!(session = %session_id, "session link open");
        reason = serve(
            &st,
            &actor,
            &session_id,
            link,
            &mut socket,
            &mut close_rx,
            &mut out_rx,
        )
        .await;
    }
    if st.sessions.leave(&session_id, link)
        && let Err(e) = st
            .console
            .messages()
            .session_bye(&actor, &session_id, link)
            .await
    {
        tracing::warn!(code = e.code_str(), "session.gone not recorded");
    }
    match reason {
        "replaced" => close(socket, 4409, "a newer link for this session").await,
        "silent" => close(socket, 1001, "silent for 60 s").await,
        "bad message" => close(socket, 4400, "a malformed message").await,
        _ => {}
    }
    tracing::info!(session = %session_id, reason, "session link closed");
}

/// A new link's session before its `hello` is applied: this replica's, live from now.
fn live_session(st: &AppState, actor: &Actor, session_id: &SessionId, link: i64) -> LiveSession {
    let now = st.console.now();
    let (owner, service) = match actor {
        Actor::Agent { owner, service, .. } => (owner.clone(), service.clone()),
        _ => (None, None),
    };
    LiveSession {
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
        replica: st.sessions.replica.clone(),
        link,
    }
}

/// The link's life after `welcome`: answers why it ended.
async fn serve(
    st: &Arc<AppState>,
    actor: &Actor,
    session_id: &SessionId,
    link: i64,
    socket: &mut WebSocket,
    close_rx: &mut oneshot::Receiver<()>,
    out_rx: &mut mpsc::Receiver<String>,
) -> &'static str {
    let mut ping = tokio::time::interval(Duration::from_secs(PING_SECONDS));
    ping.tick().await;
    let mut heard = tokio::time::Instant::now();
    let by = actor_of(actor, session_id);
    loop {
        tokio::select! {
            _ = &mut *close_rx => return "replaced",
            Some(frame) = out_rx.recv() => {
                if socket.send(Message::Text(frame.into())).await.is_err() {
                    return "gone";
                }
            }
            _ = ping.tick() => {
                if heard.elapsed() >= SILENT {
                    return "silent";
                }
                if socket.send(Message::Ping(Default::default())).await.is_err() {
                    return "gone";
                }
            }
            m = socket.recv() => {
                let Some(Ok(m)) = m else { return "gone" };
                heard = tokio::time::Instant::now();
                let now = st.console.now();
                st.sessions.with(session_id, link, |e| {
                    e.live.last_activity_at = now;
                    e.active = true;
                });
                match m {
                    Message::Text(t) if !on_text(st, actor, &by, session_id, link, &t).await => {
                        return "bad message";
                    }
                    Message::Close(_) => return "closed",
                    _ => {}
                }
            }
        }
    }
}

/// One text message from the session; `false` when it breaks the protocol (the link closes
/// with 4400).
async fn on_text(
    st: &Arc<AppState>,
    actor: &Actor,
    by: &Actor,
    session_id: &SessionId,
    link: i64,
    t: &str,
) -> bool {
    let kind = serde_json::from_str::<Typed>(t)
        .map(|t| t.kind)
        .unwrap_or_default();
    match kind.as_str() {
        "update" => on_update(st, actor, session_id, link, t).await,
        "delivered" => match serde_json::from_str::<Delivered>(t) {
            Ok(d) => {
                // An id no attempt has names nothing to acknowledge.
                if let Some(item) = Deliverable::parse(d.kind, &d.id) {
                    let _ = st.sessions.acks.send(Ack {
                        by: by.clone(),
                        item,
                        attempt: d.attempt,
                    });
                }
                true
            }
            Err(_) => false,
        },
        "replay" => on_replay(st, session_id, link, t),
        "frame" => on_frame(st, session_id, link, t),
        // Later link messages are ignored (protocol §2, "Growth").
        _ => true,
    }
}

/// `update`: the session's advertised title, roles, capabilities and modes, changed.
async fn on_update(
    st: &Arc<AppState>,
    actor: &Actor,
    session_id: &SessionId,
    link: i64,
    t: &str,
) -> bool {
    let Ok(a) = serde_json::from_str::<Advert>(t) else {
        return false;
    };
    let mut ok = true;
    let updated = st.sessions.with(session_id, link, |e| {
        let mut next = e.live.clone();
        ok = apply(&mut next, a);
        if ok {
            e.live = next.clone();
        }
        next
    });
    if !ok {
        return false;
    }
    if let Some(l) = updated
        && let Err(e) = st.console.messages().session_update(actor, &l).await
    {
        tracing::warn!(code = e.code_str(), "session.updated not recorded");
    }
    true
}

/// `replay`: the frames a session sends one viewer that has just joined its relay.
fn on_replay(st: &Arc<AppState>, session_id: &SessionId, link: i64, t: &str) -> bool {
    let Ok(r) = serde_json::from_str::<Replay>(t) else {
        return false;
    };
    let frames: Vec<Value> = r
        .frames
        .into_iter()
        .filter_map(|f| serde_json::from_value::<FrameIn>(f).ok()?.checked())
        .collect();
    st.sessions.with(session_id, link, |e| {
        if let Some(v) = e.viewers.get(&r.viewer) {
            let _ = v.try_send(Relayed::Replay(frames));
        }
    });
    true
}

/// `frame`: one relay frame to every viewer (dropped when over its limits).
fn on_frame(st: &Arc<AppState>, session_id: &SessionId, link: i64, t: &str) -> bool {
    let Ok(f) = serde_json::from_str::<FrameIn>(t) else {
        return false;
    };
    match f.checked() {
        Some(v) => {
            st.sessions.with(session_id, link, |e| {
                for s in e.viewers.values() {
                    let _ = s.try_send(Relayed::Frame(v.clone()));
                }
            });
        }
        None => {
            tracing::debug!(session = %session_id, "a relay frame over its limits dropped")
        }
    }
    true
}

/// The link's caller acting for its session.
fn actor_of(actor: &Actor, session: &SessionId) -> Actor {
    match actor {
        Actor::Agent { owner, service, .. } => Actor::Agent {
            owner: owner.clone(),
            service: service.clone(),
            session: Some(session.clone()),
        },
        other => other.clone(),
    }
}

/// A link notice from the database, for this replica or another.
pub fn on_notice(st: Arc<AppState>, payload: String) {
    let Some(n) = LinkNotice::parse(&payload) else {
        tracing::warn!("a link notice that does not parse");
        return;
    };
    if n.replica() != st.sessions.replica {
        return;
    }
    tokio::spawn(async move {
        match n {
            LinkNotice::Deliver { item, attempt, .. } => {
                let handed = match st.console.messages().pending_delivery(item, attempt).await {
                    Ok(Some(d)) => st.sessions.deliver(&d),
                    // No longer pending (acknowledged, failed): nothing to send.
                    Ok(None) => return,
                    Err(e) => {
                        tracing::warn!(
                            code = e.code_str(),
                            "a delivery from another replica not read"
                        );
                        return;
                    }
                };
                if !handed && let Err(e) = st.console.messages().fail_delivery(item, attempt).await
                {
                    tracing::warn!(code = e.code_str(), "an undeliverable attempt not failed");
                }
            }
            LinkNotice::Close { link, session, .. } => st.sessions.close_link(&session, link),
        }
    });
}

/// The link's background work, until the server stops: acknowledgements committed in batches
/// (one transaction for all that arrived together); every second the attempts no `delivered`
/// came for within 30 s failed and the sessions of replicas silent for 60 s removed; every
/// 20 s this replica's heartbeat.
pub fn background(st: Arc<AppState>) -> tokio::task::JoinHandle<()> {
    let queue = st.sessions.ack_queue.lock().ok().and_then(|mut q| q.take());
    let listener = st.sessions.listener.lock().ok().and_then(|mut l| l.take());
    tokio::spawn(async move {
        struct Abort(Option<tokio::task::JoinHandle<()>>);
        impl Drop for Abort {
            fn drop(&mut self) {
                if let Some(h) = &self.0 {
                    h.abort();
                }
            }
        }
        let _listener = Abort(listener);
        let acks = {
            let st = st.clone();
            async move {
                let Some(mut queue) = queue else { return };
                let mut batch = Vec::with_capacity(ACK_BATCH);
                while queue.recv_many(&mut batch, ACK_BATCH).await > 0 {
                    if let Err(e) = st.console.messages().delivered(&batch).await {
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
        let sweep = {
            let st = st.clone();
            let mut ticks = st.loops.link_sweep.ticks();
            async move {
                loop {
                    let _pass = ticks.next().await;
                    match st.console.messages().expire_deliveries().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(n, "deliveries not acknowledged in time failed"),
                        Err(e) => tracing::warn!(code = e.code_str(), "delivery sweep failed"),
                    }
                    match st.console.messages().expire_sessions().await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(n, "sessions of a silent replica gone"),
                        Err(e) => tracing::warn!(code = e.code_str(), "presence sweep failed"),
                    }
                }
            }
        };
        let mut ticks = st.loops.heartbeat.ticks();
        let heartbeat = async move {
            loop {
                let _pass = ticks.next().await;
                let activity = st.sessions.take_activity();
                if let Err(e) = st.console.messages().presence_heartbeat(&activity).await {
                    tracing::warn!(code = e.code_str(), "presence heartbeat failed");
                }
            }
        };
        tokio::join!(acks, sweep, heartbeat);
    })
}

/// `GET /api/v1/sessions/{session_id}/relay` (protocol §6.6): `replay`, then the session's
/// `frame`s above it, and `end` when the link closes. A session not live here, or without the
/// `relay` capability: 404.
pub async fn relay(State(st): St, Path(session_id): Path<String>) -> ApiResult<Response> {
    let session_id = SessionId::named(&session_id)?;
    let viewer = countersign_console_core::clock::random_token::<12>(
        &countersign_console_core::SystemEntropy,
    );
    let rx = st
        .sessions
        .open_viewer(&session_id, &viewer)
        .ok_or_else(|| {
            Error::with_message(
                ErrorCode::NOT_FOUND,
                "no live session with the relay capability has this id",
            )
        })?;
    /// Tells the link the viewer left when the stream is dropped.
    struct Leave(Arc<AppState>, SessionId, String);
    impl Drop for Leave {
        fn drop(&mut self) {
            self.0.sessions.close_viewer(&self.1, &self.2);
        }
    }
    let guard = Leave(st.clone(), session_id, viewer);
    // (receiver, guard, last seq sent; None until the replay, done after `end`)
    let events = stream::unfold(
        (rx, guard, None::<u64>, false),
        |(mut rx, guard, mut last, done)| async move {
            if done {
                return None;
            }
            loop {
                let next = if last.is_none() {
                    match tokio::time::timeout(REPLAY_WITHIN, rx.recv()).await {
                        Ok(r) => r,
                        // The session said nothing: an empty replay, then its frames.
                        Err(_) => Some(Relayed::Replay(Vec::new())),
                    }
                } else {
                    rx.recv().await
                };
                match next {
                    Some(Relayed::Replay(frames)) if last.is_none() => {
                        let top = frames.iter().filter_map(|f| f["seq"].as_u64()).max();
                        last = Some(top.unwrap_or(0));
                        let e = SseEvent::default()
                            .event("replay")
                            .data(serde_json::json!({ "frames": frames }).to_string());
                        return Some((Ok::<_, Infallible>(e), (rx, guard, last, false)));
                    }
                    Some(Relayed::Frame(f)) => {
                        let seq = f["seq"].as_u64().unwrap_or(0);
                        // Before this viewer's replay, or already in it: skipped.
                        if let Some(l) = last
                            && seq > l
                        {
                            last = Some(seq);
                            let e = SseEvent::default().event("frame").data(f.to_string());
                            return Some((Ok(e), (rx, guard, last, false)));
                        }
                    }
                    Some(Relayed::Replay(_)) => {}
                    Some(Relayed::End) | None => {
                        let e = SseEvent::default()
                            .event("end")
                            .data(r#"{"reason":"session_gone"}"#);
                        return Some((Ok(e), (rx, guard, last, true)));
                    }
                }
            }
        },
    );
    Ok(Sse::new(events.boxed())
        .keep_alive(
            KeepAlive::new()
                .interval(Duration::from_secs(15))
                .text("keep-alive"),
        )
        .into_response())
}
