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
use countersign_console_core::work::Actor;
use countersign_console_core::work::model::rfc3339;
use countersign_console_core::{Caller, Error, ErrorCode, Presence, Time};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

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
}

/// The live sessions of this replica.
#[derive(Default)]
pub struct Registry {
    sessions: Mutex<HashMap<String, Entry>>,
    next_link: AtomicU64,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Registry {
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
    fn enter(&self, live: LiveSession, close: oneshot::Sender<()>) -> u64 {
        let link = self.next_link.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut m) = self.sessions.lock() {
            let old = m.insert(
                live.session_id.clone(),
                Entry {
                    live,
                    link,
                    close: Some(close),
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
    let link = st.sessions.enter(live.clone(), close_tx);
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
                        // `delivered`, `replay` and `frame` arrive with messages and the relay.
                    }
                    Message::Close(_) => break "closed",
                    _ => {}
                }
            }
        }
    };
    if let Some(l) = st.sessions.leave(&session_id, link) {
        record(&st, "session.gone", &actor, &l).await;
    }
    tracing::info!(session = %session_id, reason, "session link closed");
}

async fn record(st: &AppState, kind: &'static str, actor: &Actor, live: &LiveSession) {
    let data = serde_json::to_value(live).unwrap_or_default();
    if let Err(e) = st.console.session_event(kind, actor, data).await {
        tracing::warn!(code = e.code_str(), kind, "session event not recorded");
    }
}
