//! The records and storage of asks, comments with suggestions and mentions, reviews and the
//! inbox (issue 13; protocol §6.3, §6.4): one trait, joined into [`crate::work::WorkTx`] with
//! the others.
//!
//! - [`Ask`]: a question to people with options, on an issue or a document (a block ask names
//!   the `:::ask` block it put in the document). Its current answer is in the row; every
//!   answer it had stays in the answers history, every earlier wording in the edit history.
//! - [`Turn`]: whose turn an ask is, kept on the row by every write (the inbox reads it).
//! - [`Comment`]: a comment on an issue, a document (or one of its quotes) or an ask; a thread
//!   is its root and every reply, named by the root's id.

use async_trait::async_trait;
use countersign_common::storage::StorageError;
use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::ids::{ArtifactId, AskId, CommentId, Login, ReviewId, SessionId};
use crate::work::messages::AttemptView;
use crate::work::model::{Actor, Hit, IssueKey, ProjectKey, rfc3339};

/// `question` (the default) or `approval` (a document's approval request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AskKind {
    Question,
    Approval,
}

impl AskKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AskKind::Question => "question",
            AskKind::Approval => "approval",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [AskKind::Question, AskKind::Approval]
            .into_iter()
            .find(|k| k.as_str() == s)
    }
}

/// An ask's state (protocol §6.3): `open`; `answered` (again answerable: a later answer
/// becomes current); `retracted` and `resolved` (closed without an answer, final).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AskState {
    Open,
    Answered,
    Retracted,
    Resolved,
}

impl AskState {
    pub const ALL: [AskState; 4] = [
        AskState::Open,
        AskState::Answered,
        AskState::Retracted,
        AskState::Resolved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AskState::Open => "open",
            AskState::Answered => "answered",
            AskState::Retracted => "retracted",
            AskState::Resolved => "resolved",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// Whose turn an ask is (docs/asks.md, "Whose turn"): a person's (it waits for an
/// answer) or its agent's (it waits for the agent's follow-up). An ask that is nobody's turn
/// is in no inbox.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Turn {
    Human,
    Agent,
}

impl Turn {
    pub fn as_str(self) -> &'static str {
        match self {
            Turn::Human => "human",
            Turn::Agent => "agent",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "human" => Some(Turn::Human),
            "agent" => Some(Turn::Agent),
            _ => None,
        }
    }
}

/// One option of an ask.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AskOption {
    pub id: String,
    pub label: String,
}

/// An answer: the options selected and/or text, by whom, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub options: Vec<String>,
    pub text: Option<String>,
    pub by: Actor,
    #[serde(with = "rfc3339_serde")]
    pub at: Time,
}

/// An earlier wording of an ask (the edit history), with who wrote it and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wording {
    pub question: String,
    pub options: Vec<AskOption>,
    pub by: Actor,
    #[serde(with = "rfc3339_serde")]
    pub at: Time,
}

/// How an ask was closed without an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Closed {
    pub note: Option<String>,
    pub by: Actor,
    #[serde(with = "rfc3339_serde")]
    pub at: Time,
}

/// A document approval: what an approval ask asks for, and the human approval before it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// The version the ask asks approval for (it follows later versions).
    pub version: i64,
    /// An approval of an earlier version (spec: shown on the ask as `approval.approved`).
    pub approved: Option<Approved>,
}

/// A human approval of one version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approved {
    pub version: i64,
    #[serde(with = "rfc3339_serde")]
    pub at: Time,
    pub by: Actor,
}

/// What an ask asks and where, its state and its current answer: what every shape of an ask
/// shows first, in this order (as stored, listed, read, and in an inbox row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AskHead {
    pub id: AskId,
    pub kind: AskKind,
    pub project: ProjectKey,
    /// The issue it is on, or whose document it is on.
    pub issue: Option<IssueKey>,
    pub artifact: Option<ArtifactId>,
    /// A block ask's `:::ask` block.
    pub block: Option<String>,
    pub question: String,
    pub options: Vec<AskOption>,
    pub state: AskState,
    /// The current answer.
    pub answer: Option<Answer>,
}

/// An ask as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ask {
    pub head: AskHead,
    pub closed: Option<Closed>,
    pub approval: Option<Approval>,
    /// Sessions that follow it, in the order they did.
    pub followers: Vec<SessionId>,
    pub author: Actor,
    /// Who wrote the current wording, and when (the author at first; a reword's actor).
    pub worded_by: Actor,
    pub worded_at: Time,
    pub turn: Option<Turn>,
    pub turn_since: Time,
    pub created_at: Time,
    pub updated_at: Time,
}

/// Where an ask is: its project, and the issue and document it is on.
pub type AskPlace = (ProjectKey, Option<IssueKey>, Option<ArtifactId>);

impl Ask {
    /// A new open ask of `kind` by `author` at `now`, worded by its author, a person's turn:
    /// what every way of opening one shares (an approval then sets `approval`).
    pub fn opened(
        id: AskId,
        kind: AskKind,
        (project, issue, artifact): AskPlace,
        question: String,
        options: Vec<AskOption>,
        author: &Actor,
        now: Time,
    ) -> Ask {
        Ask {
            head: AskHead {
                id,
                kind,
                project,
                issue,
                artifact,
                block: None,
                question,
                options,
                state: AskState::Open,
                answer: None,
            },
            closed: None,
            approval: None,
            followers: Vec::new(),
            author: author.clone(),
            worded_by: author.clone(),
            worded_at: now,
            turn: Some(Turn::Human),
            turn_since: now,
            created_at: now,
            updated_at: now,
        }
    }

    /// The session that wrote it, if an agent acting for one did.
    pub fn author_session(&self) -> Option<&SessionId> {
        self.author.session()
    }
}

/// An answer in the answers history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PastAnswer {
    pub options: Vec<String>,
    pub text: Option<String>,
    pub by: Actor,
    #[serde(with = "rfc3339")]
    pub at: Time,
    pub current: bool,
}

/// Which asks a list selects (filters in the storage's query).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AskFilter {
    pub project: Option<ProjectKey>,
    pub issue: Option<IssueKey>,
    pub artifact: Option<ArtifactId>,
    pub author_session: Option<SessionId>,
    /// Any of these states (none: every state).
    pub states: Vec<AskState>,
}

/// The inbox's filters: the person, `?project=`, and whose issues (`?assignee=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxFilter {
    pub login: Login,
    pub project: Option<ProjectKey>,
    pub assignee: AssigneeFilter,
}

/// `?assignee=`: asks on issues assigned to someone, on unassigned issues and documents with
/// no issue, or (no filter) both the caller's and the unassigned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssigneeFilter {
    /// The caller's and the unassigned (no `assignee` given).
    MineAndUnassigned(Login),
    Person(Login),
    Unassigned,
}

/// An ask as an inbox row shows it (what the inbox reads of the row: a person's inbox may
/// hold thousands): what it asks, its options, where, who asked, its current answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InboxAsk {
    #[serde(flatten)]
    pub head: AskHead,
    pub author: Actor,
    #[serde(skip)]
    pub turn: Option<Turn>,
    #[serde(skip)]
    pub turn_since: Time,
    #[serde(with = "rfc3339")]
    pub created_at: Time,
}

impl InboxAsk {
    /// The inbox's view of a whole ask.
    pub fn of(a: &Ask) -> Self {
        Self {
            head: a.head.clone(),
            author: a.author.clone(),
            turn: a.turn,
            turn_since: a.turn_since,
            created_at: a.created_at,
        }
    }
}

/// One ask in an inbox, with the caller's snooze.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxEntry {
    pub ask: InboxAsk,
    pub snoozed_until: Option<Time>,
    /// The order asks were made in (ties of `turn_since` go by it).
    pub seq: i64,
}

/// Asks by id, by issue or by document: the part of an inbox that events since it was read
/// may have changed. Text: the ids as the events since name them (their fields and data).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InboxScope {
    pub asks: Vec<String>,
    pub issues: Vec<String>,
    pub artifacts: Vec<String>,
}

/// One of a person's answers or replies on asks, newest first (`GET /inbox/answers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerEntry {
    Answer {
        ask: Ask,
        answer: PastAnswer,
    },
    Reply {
        ask: Ask,
        comment_id: CommentId,
        body: String,
        at: Time,
    },
}

/// The newest write in an ask's thread by someone other than the reader (the inbox's
/// threads): a reply (a comment on the ask) or an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskWrite {
    Reply(Box<Comment>),
    Answer(Answer),
}

/// A W3C TextQuoteSelector (Web Annotation Data Model §4.2.4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quote {
    pub exact: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
}

/// A suggestion's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SuggestionState {
    Pending,
    Accepted,
    Rejected,
}

/// A suggested replacement of a comment's quote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentSuggestion {
    pub replacement: String,
    pub state: SuggestionState,
}

/// A thread's state, on its root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadState {
    Open,
    Resolved,
}

/// A comment as stored; as the routes answer it, it is a [`CommentView`] (its mentions with
/// their deliveries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Comment {
    pub id: CommentId,
    /// The root's id (a root's own).
    pub thread_id: CommentId,
    pub parent: Option<CommentId>,
    pub project: ProjectKey,
    pub issue: Option<IssueKey>,
    pub artifact: Option<ArtifactId>,
    pub ask: Option<AskId>,
    pub quote: Option<Quote>,
    pub block: Option<String>,
    pub body: String,
    pub author: Actor,
    pub suggestion: Option<CommentSuggestion>,
    /// Sessions mentioned, in the order given (a view answers them with their deliveries).
    #[serde(skip)]
    pub mentions: Vec<SessionId>,
    /// On a root: its thread's state (`open` or `resolved`); null on a reply.
    pub thread_state: Option<ThreadState>,
    #[serde(with = "rfc3339")]
    pub created_at: Time,
    #[serde(with = "crate::work::model::rfc3339_opt")]
    pub edited_at: Option<Time>,
}

/// Which comments a list selects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommentFilter {
    pub issue: Option<IssueKey>,
    pub artifact: Option<ArtifactId>,
    pub ask: Option<AskId>,
    pub thread: Option<CommentId>,
}

/// A review of a document version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Review {
    pub id: ReviewId,
    #[serde(skip)]
    pub artifact: ArtifactId,
    pub version: i64,
    pub outcome: ReviewOutcome,
    pub body: Option<String>,
    pub by: Actor,
    #[serde(with = "rfc3339")]
    pub at: Time,
    /// The approval ask it answered, if one was open.
    pub ask: Option<AskId>,
}

/// A review's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReviewOutcome {
    Approve,
    RequestChanges,
}

impl ReviewOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            ReviewOutcome::Approve => "approve",
            ReviewOutcome::RequestChanges => "request_changes",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "approve" => Some(ReviewOutcome::Approve),
            "request_changes" => Some(ReviewOutcome::RequestChanges),
            _ => None,
        }
    }
}

/// Times in stored JSON and on the wire: RFC 3339 with milliseconds (read back with any
/// offset).
pub mod rfc3339_serde {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::clock::Time;

    pub fn serialize<S: Serializer>(t: &Time, s: S) -> Result<S::Ok, S::Error> {
        crate::work::model::rfc3339::serialize(t, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        let s = String::deserialize(d)?;
        chrono::DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(serde::de::Error::custom)
    }
}

/// Whose unread threads of one kind the inbox reads, and where: the person, within `issue` (on
/// it or its documents) or `artifact` (text: the read marks' thread ids it is asked with name
/// any of three kinds), a page of `limit` at `offset`.
#[derive(Debug, Clone, Copy)]
pub struct UnreadThreads<'a> {
    pub login: &'a Login,
    pub issue: Option<&'a IssueKey>,
    pub artifact: Option<&'a str>,
    pub limit: u32,
    pub offset: u32,
}

/// Storage of asks, comments with suggestions and mentions, reviews and the inbox (issue 13).
/// In a write transaction an ask or comment read is locked until commit (PostgreSQL's
/// `FOR UPDATE`); a write locks an ask before its issue.
#[async_trait]
pub trait AskTx: Send {
    async fn insert_ask(&mut self, a: &Ask) -> Result<(), StorageError>;
    async fn ask(&mut self, id: AskId) -> Result<Option<Ask>, StorageError>;
    /// Rewrites the ask's row (and its search entry when the question changed).
    async fn update_ask(&mut self, a: &Ask) -> Result<(), StorageError>;
    /// The asks a filter selects, oldest first.
    async fn asks(&mut self, f: &AskFilter) -> Result<Vec<Ask>, StorageError>;
    /// Several asks by id, in no order.
    async fn asks_by_id(&mut self, ids: &[AskId]) -> Result<Vec<Ask>, StorageError>;
    /// Open asks on any of these issues, oldest first (an issue list reads its page's at once).
    async fn open_asks_of(&mut self, issues: &[IssueKey]) -> Result<Vec<Ask>, StorageError>;
    /// How many open asks each of these sessions wrote.
    async fn open_ask_counts(
        &mut self,
        sessions: &[SessionId],
    ) -> Result<Vec<(SessionId, i64)>, StorageError>;

    /// Adds an earlier wording to the edit history.
    async fn add_wording(&mut self, ask: AskId, w: &Wording) -> Result<(), StorageError>;
    /// The edit history, oldest first.
    async fn wordings(&mut self, ask: AskId) -> Result<Vec<Wording>, StorageError>;
    /// Adds an answer, which becomes the current one.
    async fn add_answer(&mut self, ask: AskId, a: &Answer) -> Result<(), StorageError>;
    /// The answers history, oldest first.
    async fn answers(&mut self, ask: AskId) -> Result<Vec<PastAnswer>, StorageError>;

    /// A person's inbox: asks that are someone's turn, oldest turn first, with the person's
    /// snooze; with `within`, only its asks that are in that scope.
    async fn inbox(
        &mut self,
        f: &InboxFilter,
        within: Option<&InboxScope>,
    ) -> Result<Vec<InboxEntry>, StorageError>;
    async fn snooze(&mut self, login: &Login, ask: AskId, until: Time) -> Result<(), StorageError>;
    async fn unsnooze(&mut self, login: &Login, ask: AskId) -> Result<(), StorageError>;
    async fn snoozed_until(
        &mut self,
        login: &Login,
        ask: AskId,
    ) -> Result<Option<Time>, StorageError>;
    /// A page of a person's answers and replies on asks, newest first, and how many in all.
    async fn answers_by(
        &mut self,
        login: &Login,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<AnswerEntry>, i64), StorageError>;

    /// Asks whose question holds every one of `words` (with `any`, one at least), within
    /// `project`, with `answered` only those answered, best first, at most `limit`, and how
    /// many match in all.
    async fn search_asks(
        &mut self,
        words: &[String],
        any: bool,
        project: Option<&ProjectKey>,
        answered: bool,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError>;

    async fn insert_comment(&mut self, c: &Comment) -> Result<(), StorageError>;
    async fn comment(&mut self, id: CommentId) -> Result<Option<Comment>, StorageError>;
    async fn update_comment(&mut self, c: &Comment) -> Result<(), StorageError>;
    /// The comments a filter selects, oldest first.
    async fn comments(&mut self, f: &CommentFilter) -> Result<Vec<Comment>, StorageError>;
    /// Comments whose body holds the words, as [`AskTx::search_asks`].
    async fn search_comments(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError>;

    // ----- the inbox's threads (docs/asks.md, "Inbox threads") -----

    /// The comment threads (not on an ask) `login` wrote in where someone else wrote after
    /// both the person's read mark and their own last comment in it, within `issue` (on it or
    /// its documents) or `artifact`: each thread's root and newest comment by another, newest
    /// first (then by root id); a page, and how many in all.
    async fn unread_comment_threads(
        &mut self,
        within: &UnreadThreads<'_>,
    ) -> Result<(Vec<(Comment, Comment)>, i64), StorageError>;
    /// The asks `login` wrote in (asked, replied to or answered) where someone else replied or
    /// answered after both the person's read mark and their own last reply or answer, less
    /// the open asks `login`'s inbox lists (someone's turn, on an issue assigned to them or to
    /// nobody, or on a document with no issue), within `issue` (on it or its documents) or
    /// `artifact`: each ask and its newest write by another, newest first (then by ask id);
    /// a page, and how many in all.
    async fn unread_ask_threads(
        &mut self,
        within: &UnreadThreads<'_>,
    ) -> Result<(Vec<(Ask, AskWrite)>, i64), StorageError>;
    /// Whether `login` wrote in the comment thread `thread_id` (one not on an ask). The id is
    /// text: a read mark's thread id names a message thread, a comment thread or an ask.
    async fn wrote_in_comment_thread(
        &mut self,
        login: &Login,
        thread_id: &str,
    ) -> Result<bool, StorageError>;
    /// Whether `login` asked, replied to or answered the ask `ask` (text, as
    /// [`AskTx::wrote_in_comment_thread`]'s).
    async fn wrote_in_ask(&mut self, login: &Login, ask: &str) -> Result<bool, StorageError>;

    async fn insert_review(&mut self, r: &Review) -> Result<(), StorageError>;
    /// A document's reviews, oldest first.
    async fn reviews(&mut self, artifact: ArtifactId) -> Result<Vec<Review>, StorageError>;

    /// Takes the issue's next event sequence (the issue is locked by the caller) and marks it
    /// updated at `at`.
    async fn next_issue_sequence(&mut self, key: &IssueKey, at: Time) -> Result<i64, StorageError>;
}

// ----- the answers' shapes (protocol §6.3, §6.4) -----

/// An ask as the routes answer it. Lists leave out `replies`, `history` and `answers` (the
/// read route, the write routes and the events carry them).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AskView {
    #[serde(flatten)]
    pub head: AskHead,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replies: Option<Vec<CommentView>>,
    /// Earlier wordings, oldest first (empty until reworded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<Wording>>,
    /// Every answer, oldest first, the current one marked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answers: Option<Vec<PastAnswer>>,
    pub followers: Vec<SessionId>,
    pub author: Actor,
    /// How it was retracted or resolved.
    pub closed: Option<Closed>,
    /// On an approval ask: the version asked for and an earlier approval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
    /// Whose turn it is (`human`, `agent`, or null: nobody's).
    pub turn: Option<Turn>,
    #[serde(with = "rfc3339")]
    pub created_at: Time,
    #[serde(with = "rfc3339")]
    pub updated_at: Time,
}

impl AskView {
    /// The list shape of a stored ask.
    pub fn listed(a: Ask) -> Self {
        Self {
            head: a.head,
            replies: None,
            history: None,
            answers: None,
            followers: a.followers,
            author: a.author,
            closed: a.closed,
            approval: a.approval,
            turn: a.turn,
            created_at: a.created_at,
            updated_at: a.updated_at,
        }
    }
}

/// A mentioned session with its delivery attempts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MentionView {
    pub session_id: SessionId,
    pub deliveries: Vec<AttemptView>,
}

/// A comment as the routes answer it: the stored comment, with its mentions' delivery
/// attempts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommentView {
    #[serde(flatten)]
    pub comment: Comment,
    pub mentions: Vec<MentionView>,
}

impl CommentView {
    /// A stored comment with its mentions' attempts.
    pub fn of(c: Comment, mut attempts: Vec<AttemptView>) -> Self {
        let mentions = c
            .mentions
            .iter()
            .map(|s| MentionView {
                session_id: s.clone(),
                deliveries: {
                    let (mine, rest): (Vec<_>, Vec<_>) =
                        attempts.drain(..).partition(|a| a.session_id == *s);
                    attempts = rest;
                    mine
                },
            })
            .collect();
        Self {
            comment: c,
            mentions,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ask's shapes on the wire, to the byte: its head first, in its order, then each
    /// shape's own fields.
    #[test]
    fn asks_on_the_wire() {
        let at = chrono::DateTime::from_timestamp_millis(0).unwrap_or_default();
        let author = Actor::System {
            name: "console".into(),
        };
        let project = ProjectKey::parse("PAY").expect("key");
        let mut ask = Ask::opened(
            AskId::from_random([1; 16]),
            AskKind::Question,
            (project, IssueKey::parse("PAY-1"), None),
            "Refund?".into(),
            vec![AskOption {
                id: "yes".into(),
                label: "Yes".into(),
            }],
            &author,
            at,
        );
        ask.followers = SessionId::parse("s1").into_iter().collect();
        let id = ask.head.id;
        let head = format!(
            r#"{{"id":"{id}","kind":"question","project":"PAY","issue":"PAY-1","artifact":null,"block":null,"question":"Refund?","options":[{{"id":"yes","label":"Yes"}}],"state":"open","answer":null"#
        );
        let (actor, t) = (
            r#"{"kind":"system","name":"console"}"#,
            "1970-01-01T00:00:00.000Z",
        );
        assert_eq!(
            serde_json::to_string(&InboxAsk::of(&ask)).ok(),
            Some(format!(r#"{head},"author":{actor},"created_at":"{t}"}}"#))
        );
        assert_eq!(
            serde_json::to_string(&AskView::listed(ask)).ok(),
            Some(format!(
                r#"{head},"followers":["s1"],"author":{actor},"closed":null,"turn":"human","created_at":"{t}","updated_at":"{t}"}}"#
            ))
        );
    }
}
