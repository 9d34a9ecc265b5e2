//! The records and storage of targeted messages, broadcasts, delivery attempts, threads and
//! per-agent conversation state (issue 14): four stores a [`crate::work::WorkTx`] hands out,
//! [`MessageTx`] (`tx.messages()`), [`AttemptTx`] (`tx.attempts()`), [`PresenceTx`]
//! (`tx.presence()`) and [`MessageInboxTx`] (`tx.message_inbox()`).
//!
//! Delivery attempts are generic over what is delivered ([`Deliverable`]: a message, or a
//! comment's mention, by its typed id; its [`DeliveryKind`] on the wire): one table, one state
//! machine (`pending` → `sent` | `failed`), one path over the session link, numbered from 1 per
//! message (per comment for mentions).

use std::fmt;

use async_trait::async_trait;
use countersign_common::storage::StorageError;
use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::ids::{ArtifactId, BroadcastId, CommentId, Login, MessageId, SessionId};
use crate::work::model::{Actor, IssueKey, ProjectKey, rfc3339, rfc3339_opt};

/// What a delivery attempt carries (protocol §4.2 `delivery.kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeliveryKind {
    /// A targeted message (its id).
    Message,
    /// A comment's mention of a session (the comment's id).
    Mention,
}

impl DeliveryKind {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryKind::Message => "message",
            DeliveryKind::Mention => "mention",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "message" => Some(DeliveryKind::Message),
            "mention" => Some(DeliveryKind::Mention),
            _ => None,
        }
    }
}

/// What a delivery attempt carries, by id (the `deliver` frame's `delivery {kind, id}`): a
/// targeted message, or a comment's mention of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Deliverable {
    Message(MessageId),
    Mention(CommentId),
}

impl Deliverable {
    pub fn kind(self) -> DeliveryKind {
        match self {
            Deliverable::Message(_) => DeliveryKind::Message,
            Deliverable::Mention(_) => DeliveryKind::Mention,
        }
    }

    /// What `kind` and `id` name, `id` written as the console writes ids (lowercase,
    /// hyphenated); `None`: no attempt carries it.
    pub fn parse(kind: DeliveryKind, id: &str) -> Option<Self> {
        let item = match kind {
            DeliveryKind::Message => Deliverable::Message(MessageId::parse(id)?),
            DeliveryKind::Mention => Deliverable::Mention(CommentId::parse(id)?),
        };
        (item.to_string() == id).then_some(item)
    }
}

/// Its id.
impl fmt::Display for Deliverable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Deliverable::Message(id) => id.fmt(f),
            Deliverable::Mention(id) => id.fmt(f),
        }
    }
}

/// How a delivery reaches a session (protocol §6.4): `send` a new turn (queued while one
/// runs), `aside` shown to the running turn without redirecting it, `steer` redirecting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Send,
    Aside,
    Steer,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Send => "send",
            Mode::Aside => "aside",
            Mode::Steer => "steer",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "send" => Some(Mode::Send),
            "aside" => Some(Mode::Aside),
            "steer" => Some(Mode::Steer),
            _ => None,
        }
    }
}

/// A delivery attempt's state (spec, "States and transitions").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AttemptState {
    Pending,
    Sent,
    Failed,
}

impl AttemptState {
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptState::Pending => "pending",
            AttemptState::Sent => "sent",
            AttemptState::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pending" => Some(AttemptState::Pending),
            "sent" => Some(AttemptState::Sent),
            "failed" => Some(AttemptState::Failed),
            _ => None,
        }
    }
}

/// Why an attempt failed (its `error`).
pub mod failure {
    /// The session had no live link when the attempt was made, or lost it while pending.
    pub const NOT_LIVE: &str = "not_live";
    /// The session's link does not advertise the attempt's mode.
    pub const MODE_NOT_ADVERTISED: &str = "mode_not_advertised";
    /// No `delivered` came within 30 s.
    pub const NOT_ACKNOWLEDGED: &str = "not_acknowledged";
}

/// Where a delivery's events go: the envelope's project, issue and artifact. An issue's
/// events take the issue's next sequence (they are in its log).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    pub project: Option<ProjectKey>,
    pub issue: Option<IssueKey>,
    pub artifact: Option<ArtifactId>,
}

impl Scope {
    /// The scope of an issue (and its project).
    pub fn issue(key: &IssueKey) -> Self {
        Self {
            project: Some(key.project()),
            issue: Some(key.clone()),
            artifact: None,
        }
    }
}

/// What the session receives with a delivery (the `deliver` frame's fields after `delivery`,
/// protocol §4.2), kept with a pending attempt so that any replica can send it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryContent {
    /// The thread the delivered item belongs to (a thread's id is its root's). Text: a message
    /// thread's, or a comment thread's for a mention.
    pub thread_id: String,
    /// The issue key, if any.
    pub issue: Option<String>,
    pub mode: Mode,
    pub author: Actor,
    pub body: String,
    /// Structured facts beside the body (the broker's expiry notice), or null.
    pub notice: Option<serde_json::Value>,
}

/// One delivery attempt, as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// The message or comment.
    pub item: Deliverable,
    /// From 1 per message (per comment for mentions).
    pub attempt: i64,
    pub session_id: SessionId,
    pub mode: Mode,
    pub state: AttemptState,
    pub requested_by: Actor,
    pub created_at: Time,
    pub sent_at: Option<Time>,
    pub accepted_at: Option<Time>,
    pub accepted_as: Option<Mode>,
    pub error: Option<String>,
    pub scope: Scope,
}

/// An attempt on the wire (protocol §6.4).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttemptView {
    pub attempt: i64,
    pub session_id: SessionId,
    pub state: AttemptState,
    pub requested_by: Actor,
    #[serde(with = "rfc3339")]
    pub created_at: Time,
    #[serde(with = "rfc3339_opt")]
    pub sent_at: Option<Time>,
    #[serde(with = "rfc3339_opt")]
    pub accepted_at: Option<Time>,
    pub accepted_as: Option<Mode>,
    pub error: Option<String>,
}

impl From<&Attempt> for AttemptView {
    fn from(a: &Attempt) -> Self {
        Self {
            attempt: a.attempt,
            session_id: a.session_id.clone(),
            state: a.state,
            requested_by: a.requested_by.clone(),
            created_at: a.created_at,
            sent_at: a.sent_at,
            accepted_at: a.accepted_at,
            accepted_as: a.accepted_as,
            error: a.error.clone(),
        }
    }
}

/// A pending attempt handed to a session's link: the `deliver` frame's content.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub item: Deliverable,
    pub attempt: i64,
    pub session_id: SessionId,
    pub content: DeliveryContent,
}

/// Whom a targeted message is for: `{session}` or `{role}` (every live session advertising
/// it, one attempt each).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum Target {
    /// Text: a body's target, which the services refuse as their own (INVALID_SESSION_ID).
    Session(String),
    Role(String),
}

/// A message as stored: a targeted message (a thread's root, with `target` and `delivery`), or
/// a session's reply (with `parent`).
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub id: MessageId,
    /// The root's id.
    pub thread_id: MessageId,
    pub parent: Option<MessageId>,
    pub issue: Option<IssueKey>,
    pub broadcast: Option<BroadcastId>,
    pub target: Option<Target>,
    pub delivery: Option<Mode>,
    pub body: String,
    pub notice: Option<serde_json::Value>,
    pub author: Actor,
    pub created_at: Time,
}

impl Message {
    /// The session of an agent author.
    pub fn author_session(&self) -> Option<&SessionId> {
        self.author.session()
    }

    /// The person who wrote it, if a person did.
    pub fn author_login(&self) -> Option<&Login> {
        match &self.author {
            Actor::User { login } => Some(login),
            _ => None,
        }
    }

    /// Where its events go.
    pub fn scope(&self) -> Scope {
        self.issue.as_ref().map(Scope::issue).unwrap_or_default()
    }
}

/// A message on the wire (protocol §6.4): its attempts and its replies (each with its own:
/// a reply's replies are its follow-ups), oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MessageView {
    pub id: MessageId,
    pub thread_id: MessageId,
    pub parent: Option<MessageId>,
    pub issue: Option<IssueKey>,
    pub broadcast: Option<BroadcastId>,
    pub target: Option<Target>,
    pub delivery: Option<Mode>,
    pub body: String,
    pub notice: Option<serde_json::Value>,
    pub author: Actor,
    pub deliveries: Vec<AttemptView>,
    pub replies: Vec<MessageView>,
    #[serde(with = "rfc3339")]
    pub created_at: Time,
    /// A reply that posted nothing: the stored one it repeats.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duplicate: Option<bool>,
}

/// A whole conversation: the root with its deliveries, and every other message of the
/// thread, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Thread {
    pub root: MessageView,
    pub replies: Vec<MessageView>,
}

/// An accepted attempt: the attempt with `accepted_at`, `accepted_as`, and the message's body.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Accepted {
    #[serde(flatten)]
    pub attempt: AttemptView,
    pub body: String,
}

/// Why a broadcast left a selected session out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExcludeReason {
    NotLive,
    ModeNotAdvertised,
}

/// A session a broadcast left out, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Excluded {
    pub session_id: SessionId,
    pub reason: ExcludeReason,
}

/// A broadcast as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Broadcast {
    pub id: BroadcastId,
    /// The person who sent it (keys are per person).
    pub login: Login,
    pub idempotency_key: String,
    /// SHA-256 (hex) of the request (`sessions` in order, `mode`, `body`): a repeat of the key
    /// with another fingerprint is another request.
    pub fingerprint: String,
    pub mode: Mode,
    pub body: String,
    pub by: Actor,
    pub excluded: Vec<Excluded>,
    pub created_at: Time,
}

/// A broadcast in the recent list, with its counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BroadcastRow {
    pub id: BroadcastId,
    pub idempotency_key: String,
    pub mode: Mode,
    pub body: String,
    pub by: Actor,
    #[serde(with = "rfc3339")]
    pub created_at: Time,
    pub recipient_count: i64,
    pub reply_count: i64,
}

/// One recipient of a broadcast: its copy of the message, with attempts and replies.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recipient {
    /// Text: its copy's target (a [`Target`], text as a body names it).
    pub session_id: String,
    pub message: MessageView,
}

/// A broadcast on the wire (protocol §6.4): recipients in send order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BroadcastView {
    pub id: BroadcastId,
    pub idempotency_key: String,
    pub mode: Mode,
    pub body: String,
    pub by: Actor,
    #[serde(with = "rfc3339")]
    pub created_at: Time,
    pub recipients: Vec<Recipient>,
    pub recipient_count: i64,
    pub reply_count: i64,
}

impl BroadcastView {
    /// The broadcast as a list shows it, without its recipients.
    pub fn row(&self) -> BroadcastRow {
        BroadcastRow {
            id: self.id,
            idempotency_key: self.idempotency_key.clone(),
            mode: self.mode,
            body: self.body.clone(),
            by: self.by.clone(),
            created_at: self.created_at,
            recipient_count: self.recipient_count,
            reply_count: self.reply_count,
        }
    }
}

/// The broadcast send's answer: the broadcast and the sessions left out.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BroadcastSent {
    pub broadcast: BroadcastView,
    pub excluded: Vec<Excluded>,
}

/// A live session (protocol §6.4): what its link advertises, as `GET /api/v1/sessions` lists
/// it, and (not on the wire) the replica and link holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LiveSession {
    pub session_id: SessionId,
    pub title: String,
    pub roles: Vec<String>,
    pub capabilities: Vec<String>,
    pub modes: Vec<Mode>,
    pub owner: Option<Login>,
    pub service: Option<String>,
    #[serde(with = "rfc3339")]
    pub live_since: Time,
    #[serde(with = "rfc3339")]
    pub last_activity_at: Time,
    /// Open asks the session wrote (asks arrive with issue 13: 0 until they join here).
    pub open_asks: i64,
    /// The console replica whose link holds it.
    #[serde(skip)]
    pub replica: String,
    /// That link's number on its replica.
    #[serde(skip)]
    pub link: i64,
}

/// What kind of thread an inbox row is (protocol §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadKind {
    Ask,
    Comment,
    Message,
}

/// `thread {kind, id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadRef {
    pub kind: ThreadKind,
    /// Text: an ask's, a comment thread's or a message thread's id, as `kind` says.
    pub id: String,
}

/// The newest reply of a thread someone else wrote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewestReply {
    pub author: Actor,
    pub first_line: String,
    #[serde(with = "rfc3339")]
    pub at: Time,
}

/// A thread with replies the caller has not read (protocol §6.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadRow {
    pub thread: ThreadRef,
    /// Whose thread it is: its root's author.
    pub owner: Actor,
    /// The root's first line.
    pub subject: String,
    /// The root's console ref.
    pub link: String,
    pub newest_reply: NewestReply,
}

/// A page of inbox threads.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ThreadPage {
    pub rows: Vec<ThreadRow>,
    pub total: i64,
    pub limit: u32,
    pub offset: u32,
}

/// A person's conversation state with one agent session (spec, "Conversation state per
/// agent"): `unread_replies` names the session's replies to the person's direct messages
/// newer than both marks and not read by id, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentState {
    pub session_id: SessionId,
    #[serde(with = "rfc3339_opt")]
    pub cleared_before: Option<Time>,
    #[serde(with = "rfc3339_opt")]
    pub read_through: Option<Time>,
    pub unread_replies: Vec<MessageId>,
}

/// The broker's expiry notice (protocol §8), less its `type`: the message's `notice`. The
/// session is one by §4.1's rule (a notice naming none is dropped); the other ids are the
/// broker's, kept as text as it sent them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpiryNotice {
    pub session_id: SessionId,
    pub request_id: String,
    pub record_id: String,
    pub identifiers: Vec<String>,
    pub expired_at: String,
}

/// How [`AttemptTx::finish_attempt`] moves a pending attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finish<'a> {
    /// `Sent` or `Failed`.
    pub to: AttemptState,
    pub at: Time,
    pub error: Option<&'a str>,
    /// Only if the attempt is this session's.
    pub session: Option<&'a SessionId>,
    /// Only if the attempt was made after this time.
    pub created_after: Option<Time>,
}

/// Storage of targeted messages and broadcasts (issue 14), the broker's webhook ids and the
/// messages' search: the store a [`crate::work::WorkTx`] hands out as `tx.messages()`. Delivery
/// attempts ([`AttemptTx`]), live sessions ([`PresenceTx`]) and the inbox's read state
/// ([`MessageInboxTx`]) are stores of their own.
#[async_trait]
pub trait MessageTx: Send {
    /// Takes the issue's next event sequence (message events are in the issue's log);
    /// `None` when there is no such issue.
    async fn bump_issue_sequence(&mut self, key: &IssueKey) -> Result<Option<i64>, StorageError>;

    // ----- messages -----

    async fn insert_message(&mut self, m: &Message) -> Result<(), StorageError>;
    /// One message; in a write transaction its row is locked until commit.
    async fn message(&mut self, id: MessageId) -> Result<Option<Message>, StorageError>;
    /// Every message of the given threads, oldest first (by time, then as written).
    async fn thread_messages(
        &mut self,
        thread_ids: &[MessageId],
    ) -> Result<Vec<Message>, StorageError>;
    /// A page of the messages targeting a session, or with an attempt to it, newest first.
    async fn session_messages(
        &mut self,
        session: &SessionId,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<Message>, StorageError>;

    // ----- broadcasts -----

    /// Adds a broadcast; false (and nothing written) when its person already used its key.
    async fn insert_broadcast(&mut self, b: &Broadcast) -> Result<bool, StorageError>;
    async fn broadcast(&mut self, id: BroadcastId) -> Result<Option<Broadcast>, StorageError>;
    async fn broadcast_by_key(
        &mut self,
        login: &Login,
        key: &str,
    ) -> Result<Option<Broadcast>, StorageError>;
    /// A page of broadcasts, newest first, with their recipient and reply counts.
    async fn broadcasts(
        &mut self,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<BroadcastRow>, StorageError>;
    /// A broadcast's copies, in send order.
    async fn broadcast_messages(&mut self, id: BroadcastId) -> Result<Vec<Message>, StorageError>;

    /// Which of `ids` are messages `session` wrote.
    async fn messages_by_session(
        &mut self,
        session: &SessionId,
        ids: &[MessageId],
    ) -> Result<Vec<MessageId>, StorageError>;

    // ----- the broker's webhook -----

    /// Keeps a webhook id with the message it made; false when it was kept already. The
    /// webhook id is text: the broker's, as its request header sent it.
    async fn insert_webhook(
        &mut self,
        webhook_id: &str,
        message_id: MessageId,
        at: Time,
    ) -> Result<bool, StorageError>;

    // ----- search -----

    /// The messages whose body holds every one of `words` (with `any`, one at least), on
    /// `project`'s issues when given, best first, at most `limit`, and how many match.
    async fn search_messages(
        &mut self,
        words: &[String],
        any: bool,
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<crate::work::model::Hit>, i64), StorageError>;
}

/// Delivery attempts of messages and comments' mentions (any [`Deliverable`]): one table,
/// one state machine; the store a [`crate::work::WorkTx`] hands out as `tx.attempts()`.
#[async_trait]
pub trait AttemptTx: Send {
    /// The next attempt number of a message or comment (1 for the first).
    async fn next_attempt(&mut self, item: Deliverable) -> Result<i64, StorageError>;
    /// Adds an attempt, with the content a pending one is sent with. Two attempts of one
    /// number (concurrent retries): [`StorageError::Conflict`], and the transaction reruns.
    async fn insert_attempt(
        &mut self,
        a: &Attempt,
        content: Option<&DeliveryContent>,
    ) -> Result<(), StorageError>;
    /// One attempt; in a write transaction its row is locked until commit.
    async fn attempt(
        &mut self,
        item: Deliverable,
        attempt: i64,
    ) -> Result<Option<Attempt>, StorageError>;
    /// Every attempt of the given messages or comments, by kind, id, then number; in a write
    /// transaction their rows are locked until commit.
    async fn attempts(&mut self, items: &[Deliverable]) -> Result<Vec<Attempt>, StorageError>;
    /// Moves a pending attempt to `sent` or `failed` as `f` says, dropping its content;
    /// `None` when it is not pending (anymore), or not `f.session`'s, or made at or before
    /// `f.created_after`.
    async fn finish_attempt(
        &mut self,
        item: Deliverable,
        attempt: i64,
        f: &Finish<'_>,
    ) -> Result<Option<Attempt>, StorageError>;
    /// Pending attempts made at or before `before` (those past their acknowledgement time),
    /// or (with `session`) every pending attempt of that session; oldest first, at most
    /// `limit`.
    async fn pending_attempts(
        &mut self,
        before: Option<Time>,
        session: Option<&SessionId>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StorageError>;
    /// The session and content a pending attempt is sent with; `None` when it is not pending.
    async fn pending_content(
        &mut self,
        item: Deliverable,
        attempt: i64,
    ) -> Result<Option<(SessionId, DeliveryContent)>, StorageError>;
    /// Sets an attempt's acceptance.
    async fn accept_attempt(
        &mut self,
        item: Deliverable,
        attempt: i64,
        at: Time,
        accepted_as: Mode,
    ) -> Result<(), StorageError>;
}

/// Live sessions, shared by every replica (presence); the store a
/// [`crate::work::WorkTx`] hands out as `tx.presence()`.
#[async_trait]
pub trait PresenceTx: Send {
    /// Records a session live on `s.replica`'s link `s.link`, replacing any earlier holder;
    /// answers the earlier one's `(replica, link)` when there was one.
    async fn put_live(&mut self, s: &LiveSession) -> Result<Option<(String, i64)>, StorageError>;
    /// Replaces what a live session advertises, if that link still holds it.
    async fn update_live(&mut self, s: &LiveSession) -> Result<bool, StorageError>;
    /// Removes a live session if `replica`'s link `link` still holds it; answers it.
    async fn remove_live(
        &mut self,
        session: &SessionId,
        replica: &str,
        link: i64,
    ) -> Result<Option<LiveSession>, StorageError>;
    /// Live sessions: held by `replica`, or heard of after `fresh_after` (their replica's
    /// heartbeat); by id.
    async fn live_sessions(
        &mut self,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Vec<LiveSession>, StorageError>;
    /// One live session, as [`PresenceTx::live_sessions`] reads them.
    async fn live_session(
        &mut self,
        session: &SessionId,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Option<LiveSession>, StorageError>;
    /// The roles live sessions advertise, sorted.
    async fn live_roles(
        &mut self,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Vec<String>, StorageError>;
    /// The live sessions advertising `role`, by id.
    async fn role_holders(
        &mut self,
        role: &str,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Vec<SessionId>, StorageError>;
    /// A replica's heartbeat: its sessions are fresh at `at`; `activity` moves their
    /// `last_activity_at`.
    async fn heartbeat(
        &mut self,
        replica: &str,
        at: Time,
        activity: &[(SessionId, Time)],
    ) -> Result<(), StorageError>;
    /// Whether another replica's session was not heard of since `before` (a cheap read before
    /// [`PresenceTx::remove_stale`]'s write).
    async fn any_stale(&mut self, replica: &str, before: Time) -> Result<bool, StorageError>;
    /// Removes the sessions of other replicas not heard of since `before` (a replica that
    /// died), at most `limit`; answers them.
    async fn remove_stale(
        &mut self,
        replica: &str,
        before: Time,
        limit: u32,
    ) -> Result<Vec<LiveSession>, StorageError>;
    /// Tells every replica something about a link (PostgreSQL `NOTIFY` on the links channel,
    /// sent when the transaction commits; one SQLite database is one process: nothing).
    async fn notify_links(&mut self, payload: &str) -> Result<(), StorageError>;
}

/// The inbox's threads, read marks and per-agent conversation state; the store a
/// [`crate::work::WorkTx`] hands out as `tx.message_inbox()`.
#[async_trait]
pub trait MessageInboxTx: Send {
    /// The issue message threads `login` wrote in where someone else wrote after the
    /// person's read mark (within `issue`): each thread's root and newest reply by another,
    /// newest reply first (then by root id, as the inbox merges the kinds); a page, and how
    /// many in all.
    async fn unread_message_threads(
        &mut self,
        login: &Login,
        issue: Option<&IssueKey>,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<(Message, Message)>, i64), StorageError>;
    /// Whether `login` wrote in the message thread `thread_id`.
    async fn wrote_in_message_thread(
        &mut self,
        login: &Login,
        thread_id: MessageId,
    ) -> Result<bool, StorageError>;
    /// A read mark; `thread_id` is text: a mark is kept for any thread kind (an ask, a comment
    /// thread, a message thread).
    async fn thread_read(
        &mut self,
        login: &Login,
        thread_id: &str,
    ) -> Result<Option<Time>, StorageError>;
    async fn put_thread_read(
        &mut self,
        login: &Login,
        thread_id: &str,
        read_through: Time,
    ) -> Result<(), StorageError>;
    /// The sessions `login` has direct messages with or state for, with the state's
    /// `(cleared_before, read_through)`; by session id.
    async fn agent_states(
        &mut self,
        login: &Login,
    ) -> Result<Vec<(SessionId, Option<Time>, Option<Time>)>, StorageError>;
    async fn agent_state(
        &mut self,
        login: &Login,
        session: &SessionId,
    ) -> Result<Option<(Option<Time>, Option<Time>)>, StorageError>;
    async fn put_agent_state(
        &mut self,
        login: &Login,
        session: &SessionId,
        cleared_before: Option<Time>,
        read_through: Option<Time>,
    ) -> Result<(), StorageError>;
    /// The unread replies of sessions to `login`'s direct messages (of `session` only, when
    /// given): `(session, message id)`, newest first.
    async fn unread_replies(
        &mut self,
        login: &Login,
        session: Option<&SessionId>,
    ) -> Result<Vec<(SessionId, MessageId)>, StorageError>;
    /// Marks replies read by id for `login`.
    async fn read_replies(&mut self, login: &Login, ids: &[MessageId]) -> Result<(), StorageError>;
}
