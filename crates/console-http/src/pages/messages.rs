//! The conversation pages (issue 14): the live sessions, a conversation with one session (its
//! messages and replies, unread marks, a send box with the mode), the live relay view, and
//! broadcasts (the form with its per-recipient results, the recent list, one broadcast).
//! Their behaviour is `assets/messages.js`: sends go to the JSON API; the conversation follows
//! the event stream and the relay view the relay stream, without a reload.

use askama::Template;
use countersign_console_core::ids::{BroadcastId, MessageId, SessionId};
use countersign_console_core::work::messages::{
    BroadcastRow, BroadcastView, LiveSession, MessageView, Mode, Target,
};

use super::*;
use crate::html::{Chrome, When, actor_text, when};

const MESSAGES_JS: &str = include_str!("../../assets/messages.js");
const MESSAGES_CSS: &str = include_str!("../../assets/messages.css");

/// An attempt as a page shows it.
#[derive(Debug)]
pub struct AttemptRow {
    pub attempt: i64,
    pub session_id: String,
    pub state: &'static str,
    pub error: String,
    pub accepted: String,
}

/// A message (or reply) as a page shows it, with its replies.
#[derive(Debug)]
pub struct MessageRow {
    pub id: String,
    pub author: String,
    pub from_session: bool,
    pub at: When,
    pub mode: String,
    pub issue: String,
    pub body: String,
    pub unread: bool,
    pub attempts: Vec<AttemptRow>,
    pub replies: Vec<MessageRow>,
}

fn attempt_rows(m: &MessageView) -> Vec<AttemptRow> {
    m.deliveries
        .iter()
        .map(|a| AttemptRow {
            attempt: a.attempt,
            session_id: a.session_id.to_string(),
            state: a.state.as_str(),
            error: a.error.clone().unwrap_or_default(),
            accepted: a
                .accepted_as
                .map(|m| format!("accepted as {}", m.as_str()))
                .unwrap_or_default(),
        })
        .collect()
}

impl MessageRow {
    fn of(m: &MessageView, unread: &[MessageId]) -> Self {
        Self {
            id: m.id.to_string(),
            author: actor_text(&m.author),
            from_session: m.author.session().is_some(),
            at: when(&m.created_at),
            mode: m
                .delivery
                .map(|d| d.as_str().to_owned())
                .unwrap_or_default(),
            issue: m
                .issue
                .as_ref()
                .map(|k| k.as_str().to_owned())
                .unwrap_or_default(),
            body: m.body.clone(),
            unread: unread.contains(&m.id),
            attempts: attempt_rows(m),
            replies: m.replies.iter().map(|r| Self::of(r, unread)).collect(),
        }
    }
}

/// Replies, then their follow-ups, flattened in order (the page shows one column).
fn flat(rows: Vec<MessageRow>) -> Vec<MessageRow> {
    let mut out = Vec::new();
    for mut r in rows {
        let inner = std::mem::take(&mut r.replies);
        out.push(r);
        out.extend(flat(inner));
    }
    out
}

/// A live session as the pages list it.
#[derive(Debug)]
pub struct SessionRow {
    pub id: String,
    pub title: String,
    pub roles: String,
    pub modes: String,
    pub relay: bool,
    pub since: When,
    pub activity: When,
}

impl SessionRow {
    fn of(l: &LiveSession) -> Self {
        Self {
            id: l.session_id.to_string(),
            title: l.title.clone(),
            roles: l.roles.join(", "),
            modes: l
                .modes
                .iter()
                .map(|m| m.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            relay: l.capabilities.iter().any(|c| c == "relay"),
            since: when(&l.live_since),
            activity: when(&l.last_activity_at),
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "messages_sessions.html")]
pub struct SessionsPage<'a> {
    pub chrome: Chrome<'a>,
    pub sessions: Vec<SessionRow>,
    pub groups: Vec<countersign_console_core::work::delivery::SessionGroup>,
}

#[derive(Debug, Template)]
#[template(path = "messages_conversation.html")]
pub struct ConversationPage<'a> {
    pub chrome: Chrome<'a>,
    pub session_id: String,
    /// What the live session advertises; none when it is not live.
    pub live: Option<SessionRow>,
    pub modes: Vec<(&'static str, bool)>,
    /// Each targeted message with its replies flattened below it.
    pub messages: Vec<(MessageRow, Vec<MessageRow>)>,
    pub unread: usize,
    pub cleared: bool,
}

#[derive(Debug, Template)]
#[template(path = "messages_relay.html")]
pub struct RelayPage<'a> {
    pub chrome: Chrome<'a>,
    pub session_id: String,
    pub live: Option<SessionRow>,
}

#[derive(Debug)]
pub struct BroadcastListRow {
    pub id: String,
    pub key: String,
    pub mode: &'static str,
    pub body: String,
    pub by: String,
    pub at: When,
    pub recipients: i64,
    pub replies: i64,
}

impl BroadcastListRow {
    fn of(b: &BroadcastRow) -> Self {
        Self {
            id: b.id.to_string(),
            key: b.idempotency_key.clone(),
            mode: b.mode.as_str(),
            body: b.body.clone(),
            by: actor_text(&b.by),
            at: when(&b.created_at),
            recipients: b.recipient_count,
            replies: b.reply_count,
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "messages_broadcasts.html")]
pub struct BroadcastsPage<'a> {
    pub chrome: Chrome<'a>,
    pub key: String,
    pub sessions: Vec<SessionRow>,
    pub recent: Vec<BroadcastListRow>,
    pub error: Option<String>,
}

#[derive(Debug, Template)]
#[template(path = "messages_broadcast.html")]
pub struct BroadcastPage<'a> {
    pub chrome: Chrome<'a>,
    pub b: BroadcastListRow,
    pub recipients: Vec<(String, MessageRow, Vec<MessageRow>)>,
}

fn fail(e: &Error) -> Response {
    PageError::new(status_of(e), e.code_str(), e.message.clone()).into_response()
}

/// `GET /sessions`: the live sessions.
pub async fn sessions_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let groups = st.console.delivery().session_groups().await?;
    Ok(match st.console.messages().live_sessions().await {
        Ok(live) => page(
            StatusCode::OK,
            &SessionsPage {
                chrome: chrome("Sessions", h, "/sessions"),
                sessions: live.iter().map(SessionRow::of).collect(),
                groups,
            },
        ),
        Err(e) => fail(&e),
    })
}

async fn live_row(st: &AppState, session: &str) -> Option<SessionRow> {
    st.console
        .messages()
        .live_sessions()
        .await
        .ok()?
        .iter()
        .find(|l| l.session_id == session)
        .map(SessionRow::of)
}

/// `GET /sessions/{session_id}`: the person's conversation with a session, oldest first.
pub async fn conversation_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(session): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    let messages = st
        .console
        .messages()
        .of_session(&SessionId::named(&session)?, 200, 0)
        .await?;
    let state = st
        .console
        .messages()
        .agent_states(h)
        .await
        .ok()
        .and_then(|s| s.into_iter().find(|a| a.session_id.as_str() == session));
    let unread: Vec<MessageId> = state
        .as_ref()
        .map(|s| s.unread_replies.clone())
        .unwrap_or_default();
    let cleared_before = state.as_ref().and_then(|s| s.cleared_before);
    let shown: Vec<(MessageRow, Vec<MessageRow>)> = messages
        .iter()
        .rev()
        .filter(|m| cleared_before.is_none_or(|c| m.created_at > c))
        .map(|m| {
            let mut row = MessageRow::of(m, &unread);
            let replies = flat(std::mem::take(&mut row.replies));
            (row, replies)
        })
        .collect();
    let live = live_row(&st, &session).await;
    let advertised: Vec<String> = live
        .as_ref()
        .map(|l| l.modes.split(", ").map(str::to_owned).collect())
        .unwrap_or_default();
    Ok(page(
        StatusCode::OK,
        &ConversationPage {
            chrome: chrome("Conversation", h, "/sessions"),
            modes: [Mode::Send, Mode::Aside, Mode::Steer]
                .iter()
                .map(|m| (m.as_str(), advertised.iter().any(|a| a == m.as_str())))
                .collect(),
            session_id: session,
            live,
            unread: unread.len(),
            cleared: cleared_before.is_some(),
            messages: shown,
        },
    ))
}

/// `GET /sessions/{session_id}/relay`: the live relay view (the script follows the relay
/// stream).
pub async fn relay_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(session): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    if let Err(e) = SessionId::named(&session) {
        return Ok(fail(&e));
    }
    let live = live_row(&st, &session).await;
    Ok(page(
        StatusCode::OK,
        &RelayPage {
            chrome: chrome("Relay", h, "/sessions"),
            session_id: session,
            live,
        },
    ))
}

/// `GET /broadcasts`: the form (its idempotency key made with the page, so a second submit of
/// the same form sends nothing twice), and the recent broadcasts.
pub async fn broadcasts_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let live = st.console.messages().live_sessions().await;
    let recent = st.console.messages().recent_broadcasts(50, 0).await;
    let error = match (&live, &recent) {
        (Err(e), _) | (_, Err(e)) => Some(error_text(e)),
        _ => None,
    };
    Ok(page(
        StatusCode::OK,
        &BroadcastsPage {
            chrome: chrome("Broadcasts", h, "/broadcasts"),
            key: format!("page-{}", st.console.random_token()),
            sessions: live
                .map(|l| l.iter().map(SessionRow::of).collect())
                .unwrap_or_default(),
            recent: recent
                .map(|r| r.iter().map(BroadcastListRow::of).collect())
                .unwrap_or_default(),
            error,
        },
    ))
}

/// `GET /broadcasts/{id}`: one broadcast, every recipient's attempts and replies.
pub async fn broadcast_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    let b: BroadcastView = st
        .console
        .messages()
        .broadcast_by_id(BroadcastId::named(&id)?)
        .await?;
    let row = BroadcastListRow::of(&b.row());
    Ok(page(
        StatusCode::OK,
        &BroadcastPage {
            chrome: chrome("Broadcast", h, "/broadcasts"),
            recipients: b
                .recipients
                .iter()
                .map(|r| {
                    let mut m = MessageRow::of(&r.message, &[]);
                    let replies = flat(std::mem::take(&mut m.replies));
                    (r.session_id.clone(), m, replies)
                })
                .collect(),
            b: row,
        },
    ))
}

/// `GET /messages/{id}`: where a message is read: its session's conversation, or its issue.
pub async fn message_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    let actor = countersign_console_core::work::Actor::User {
        login: h.login.clone(),
    };
    let thread = match MessageId::named(&id) {
        Ok(id) => st.console.messages().thread(&actor, id).await,
        Err(e) => Err(e),
    };
    Ok(match thread {
        Ok(t) => match (&t.root.issue, &t.root.target) {
            (Some(k), _) => redirect(&format!("/issues/{k}")),
            (None, Some(Target::Session(s))) => redirect(&format!(
                "/sessions/{}#m-{}",
                url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>(),
                t.root.id
            )),
            _ => redirect("/sessions"),
        },
        Err(e) => fail(&e),
    })
}

/// `GET /assets/messages.js`.
pub async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        MESSAGES_JS,
    )
        .into_response()
}

/// `GET /assets/messages.css`.
pub async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        MESSAGES_CSS,
    )
        .into_response()
}
