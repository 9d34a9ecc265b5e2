//! The inbox's conversation parts (spec, "Inbox and read state"): threads with replies the
//! person has not read, read marks on threads, and the person's state per agent session.
//!
//! Threads are of three kinds, each from its storage query (filtering, ordering and paging
//! in SQL: each kind answers its first `offset + limit` rows, newest reply first and then by
//! thread id, and its total), merged here in the same order:
//!
//! - issue message threads (`MessageInboxTx::unread_message_threads`): the roots the person wrote
//!   (people write no replies), where a message by someone else is newer than their read mark;
//! - comment threads not on an ask (`AskTx::unread_comment_threads`): a root and its replies,
//!   where the person wrote the root or a reply and someone else commented later than both the
//!   person's read mark and the person's own last comment there;
//! - asks (`AskTx::unread_ask_threads`): the person asked, replied to (a comment on the ask)
//!   or answered it, and someone else replied or answered later than both their read mark and
//!   their own last reply or answer; less the open asks the person's inbox lists (the inbox
//!   with no filter: someone's turn, on an issue assigned to them or to nobody, or on a
//!   document with no issue), which the inbox shows already.
//!
//! "Someone else" is anyone but the person: an agent acting for them too. Writing in a thread
//! counts as reading it up to there. `?issue=` narrows every kind to the issue (a comment's or
//! ask's issue is its document's for those on a document, so an issue's documents are in it);
//! `?artifact=` narrows to comments and asks on that document (messages are on none).
//! A read mark (`console_thread_reads`) names a message or comment thread by its root's id and
//! an ask by its id.

use super::*;
use crate::clock::Time;
use crate::console::console_ref;
use crate::ids::Login;
use crate::work::SearchKind;
use crate::work::asks::{Answer, Ask, AskWrite};
use crate::work::asks::{Comment, UnreadThreads};
use crate::work::messages::{
    AgentState, NewestReply, ThreadKind, ThreadPage, ThreadRef, ThreadRow,
};

/// How far ahead of the server a read mark may be (spec: a minute).
const AHEAD: chrono::Duration = chrono::Duration::minutes(1);

/// The first line of a text, at most 120 characters.
pub(crate) fn first_line(text: &str) -> String {
    let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let line = line.trim();
    if line.chars().count() > 120 {
        let mut s: String = line.chars().take(119).collect();
        s.push('…');
        s
    } else {
        line.to_owned()
    }
}

/// An answer's first line: its text's, else its options' labels.
fn answer_line(ask: &Ask, a: &Answer) -> String {
    if let Some(t) = a.text.as_deref().filter(|t| !t.trim().is_empty()) {
        return first_line(t);
    }
    let labels: Vec<&str> = a
        .options
        .iter()
        .map(|id| {
            ask.head
                .options
                .iter()
                .find(|o| &o.id == id)
                .map_or(id.as_str(), |o| o.label.as_str())
        })
        .collect();
    first_line(&labels.join(", "))
}

/// A read mark: at most a minute ahead of the server (else INVALID_STATE), stored no later
/// than now.
fn mark(at: Time, now: Time) -> Result<Time, Error> {
    if at > now + AHEAD {
        return Err(Error::with_message(
            ErrorCode::INVALID_STATE,
            "a read mark is at most a minute ahead of the server",
        ));
    }
    Ok(at.min(now))
}

fn later(a: Option<Time>, b: Option<Time>) -> Option<Time> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// A per-agent state change (PATCH): absent fields stay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentPatch {
    pub cleared_before: Option<Time>,
    pub read_through: Option<Time>,
    pub read_replies: Vec<String>,
}

/// What narrows the inbox's threads: an issue (by key), or a document (by id), or nothing;
/// both, or either malformed: INVALID_QUERY.
fn narrowing(
    issue: Option<&str>,
    artifact: Option<&str>,
) -> Result<(Option<IssueKey>, Option<String>), Error> {
    if issue.is_some() && artifact.is_some() {
        return Err(Error::with_message(
            ErrorCode::INVALID_QUERY,
            "narrow by `issue` or by `artifact`, not both",
        ));
    }
    let issue = issue
        .map(|k| {
            IssueKey::parse(k).ok_or_else(|| {
                Error::with_message(ErrorCode::INVALID_QUERY, "`issue` is an issue key")
            })
        })
        .transpose()?;
    let artifact = artifact
        .map(|a| {
            crate::ids::uuid_id(a).ok_or_else(|| {
                Error::with_message(ErrorCode::INVALID_QUERY, "`artifact` is a document id")
            })
        })
        .transpose()?;
    Ok((issue, artifact))
}

/// A thread's row: its kind and root (or ask) id, who wrote the root, its subject's first
/// line, its console ref, and its newest reply.
fn thread_row(
    kind: ThreadKind,
    id: &str,
    owner: &Actor,
    subject: &str,
    newest_reply: NewestReply,
) -> ThreadRow {
    let link = match kind {
        ThreadKind::Message => console_ref(SearchKind::Message, id),
        ThreadKind::Comment => console_ref(SearchKind::Comment, id),
        ThreadKind::Ask => console_ref(SearchKind::Ask, id),
    };
    ThreadRow {
        thread: ThreadRef {
            kind,
            id: id.to_owned(),
        },
        owner: owner.clone(),
        subject: first_line(subject),
        link,
        newest_reply,
    }
}

/// A thread's root or newest reply where both are written records of one kind: a message, or
/// a comment not on an ask.
trait Written {
    fn id_text(&self) -> String;
    fn author(&self) -> &Actor;
    fn body(&self) -> &str;
    fn at(&self) -> Time;
}

macro_rules! written {
    ($($t:ty),+) => {$(
        impl Written for $t {
            fn id_text(&self) -> String {
                self.id.to_string()
            }
            fn author(&self) -> &Actor {
                &self.author
            }
            fn body(&self) -> &str {
                &self.body
            }
            fn at(&self) -> Time {
                self.created_at
            }
        }
    )+};
}

written!(Message, Comment);

/// The rows of one kind's threads, each a root and its newest reply by another.
fn written_rows<T: Written>(kind: ThreadKind, threads: Vec<(T, T)>) -> Vec<ThreadRow> {
    threads
        .into_iter()
        .map(|(root, reply)| {
            let newest = NewestReply {
                author: reply.author().clone(),
                first_line: first_line(reply.body()),
                at: reply.at(),
            };
            thread_row(kind, &root.id_text(), root.author(), root.body(), newest)
        })
        .collect()
}

/// An ask's newest reply or answer, as its thread row shows it.
fn ask_reply(ask: &Ask, write: &AskWrite) -> NewestReply {
    match write {
        AskWrite::Reply(c) => NewestReply {
            author: c.author.clone(),
            first_line: first_line(&c.body),
            at: c.created_at,
        },
        AskWrite::Answer(a) => NewestReply {
            author: a.by.clone(),
            first_line: answer_line(ask, a),
            at: a.at,
        },
    }
}

/// The page `limit` at `offset` of every kind's rows merged: newest reply first, then by
/// thread id.
fn page_of(mut rows: Vec<ThreadRow>, total: i64, limit: u32, offset: u32) -> ThreadPage {
    rows.sort_by(|a, b| {
        b.newest_reply
            .at
            .cmp(&a.newest_reply.at)
            .then_with(|| a.thread.id.cmp(&b.thread.id))
    });
    ThreadPage {
        rows: rows
            .into_iter()
            .skip(offset as usize)
            .take(limit as usize)
            .collect(),
        total,
        limit,
        offset,
    }
}

/// Where the inbox's threads are read: the person, the narrowing, and how many rows of each
/// kind the page needs (`offset + limit`).
struct ThreadQuery<'a> {
    login: &'a Login,
    issue: Option<&'a IssueKey>,
    artifact: Option<&'a str>,
    want: u32,
}

impl ThreadQuery<'_> {
    /// What the storage reads for a kind: its first `want` rows.
    fn unread(&self) -> UnreadThreads<'_> {
        UnreadThreads {
            login: self.login,
            issue: self.issue,
            artifact: self.artifact,
            limit: self.want,
            offset: 0,
        }
    }
}

/// The issue message threads of the inbox's threads (never on a document), and their total.
async fn message_rows(
    tx: &mut dyn WorkTx,
    q: &ThreadQuery<'_>,
) -> Result<(Vec<ThreadRow>, i64), Error> {
    if q.artifact.is_some() {
        return Ok((Vec::new(), 0));
    }
    let (threads, n) = tx
        .message_inbox()
        .unread_message_threads(q.login, q.issue, q.want, 0)
        .await?;
    Ok((written_rows(ThreadKind::Message, threads), n))
}

/// The comment threads not on an ask of the inbox's threads, and their total.
async fn comment_rows(
    tx: &mut dyn WorkTx,
    q: &ThreadQuery<'_>,
) -> Result<(Vec<ThreadRow>, i64), Error> {
    let (threads, n) = tx.asks().unread_comment_threads(&q.unread()).await?;
    Ok((written_rows(ThreadKind::Comment, threads), n))
}

/// The asks of the inbox's threads, less the open ones the inbox lists (the storage leaves
/// them out), and their total.
async fn ask_rows(
    tx: &mut dyn WorkTx,
    q: &ThreadQuery<'_>,
) -> Result<(Vec<ThreadRow>, i64), Error> {
    let (asks, n) = tx.asks().unread_ask_threads(&q.unread()).await?;
    let rows = asks.into_iter().map(|(ask, write)| {
        let newest = ask_reply(&ask, &write);
        thread_row(
            ThreadKind::Ask,
            &ask.head.id.to_string(),
            &ask.author,
            &ask.head.question,
            newest,
        )
    });
    Ok((rows.collect(), n))
}

impl Messages<'_> {
    /// Threads the person wrote in (issue message threads, comment threads, asks) where
    /// someone else has written since they last read, newest reply first, less the open asks
    /// their inbox lists; `issue` or `artifact` narrows (both, or either malformed:
    /// INVALID_QUERY). See the module's comment.
    pub async fn inbox_threads(
        &self,
        human: &Human,
        issue: Option<&str>,
        artifact: Option<&str>,
        limit: u32,
        offset: u32,
    ) -> Result<ThreadPage, Error> {
        let (issue, artifact) = narrowing(issue, artifact)?;
        let q = ThreadQuery {
            login: &human.login,
            issue: issue.as_ref(),
            artifact: artifact.as_deref(),
            want: offset.saturating_add(limit),
        };
        let mut tx = self.read().await?;
        let (mut rows, mut total) = message_rows(&mut *tx, &q).await?;
        let (comments, n) = comment_rows(&mut *tx, &q).await?;
        rows.extend(comments);
        total += n;
        let (asks, n) = ask_rows(&mut *tx, &q).await?;
        rows.extend(asks);
        total += n;
        Ok(page_of(rows, total, limit, offset))
    }

    /// Moves the person's read mark on a thread (an issue message thread or comment thread
    /// by its root's id, an ask by its id) forward; a thread they never wrote in: nothing is
    /// written. THREAD_ID_INPUT for a non-UUID id.
    pub async fn mark_thread_read(
        &self,
        human: &Human,
        thread_id: &str,
        read_through: Time,
    ) -> Result<(), Error> {
        // A thread of any kind, by the UUID rule: the message kind's, and as text for the rest.
        let message =
            MessageId::parse(thread_id).ok_or_else(|| Error::new(ErrorCode::THREAD_ID_INPUT))?;
        let id = message.to_string();
        let now = self.console.now();
        let at = mark(read_through, now)?;
        transact!(self.console, |tx| {
            let wrote = tx
                .message_inbox()
                .wrote_in_message_thread(&human.login, message)
                .await?
                || tx.asks().wrote_in_comment_thread(&human.login, &id).await?
                || tx.asks().wrote_in_ask(&human.login, &id).await?;
            if !wrote {
                return Ok(());
            }
            let was = tx.message_inbox().thread_read(&human.login, &id).await?;
            if was.is_none_or(|w| at > w) {
                tx.message_inbox()
                    .put_thread_read(&human.login, &id, at)
                    .await?;
            }
            Ok(())
        })
    }

    /// The person's state with every session they have direct messages with (or state for),
    /// by session id.
    pub async fn agent_states(&self, human: &Human) -> Result<Vec<AgentState>, Error> {
        let mut tx = self.read().await?;
        let states = tx.message_inbox().agent_states(&human.login).await?;
        let unread = tx
            .message_inbox()
            .unread_replies(&human.login, None)
            .await?;
        Ok(states
            .into_iter()
            .map(|(session_id, cleared_before, read_through)| AgentState {
                unread_replies: unread
                    .iter()
                    .filter(|(s, _)| *s == session_id)
                    .map(|(_, id)| *id)
                    .collect(),
                session_id,
                cleared_before,
                read_through,
            })
            .collect())
    }

    /// Clears a session's conversation for the person (`cleared_before`), marks it read
    /// (`read_through`), and/or marks its replies read by id; both marks only move forward
    /// and are at most a minute ahead (INVALID_STATE). Answers the state.
    pub async fn update_agent_state(
        &self,
        human: &Human,
        session: &SessionId,
        patch: AgentPatch,
    ) -> Result<AgentState, Error> {
        let now = self.console.now();
        let cleared = patch.cleared_before.map(|t| mark(t, now)).transpose()?;
        let read = patch.read_through.map(|t| mark(t, now)).transpose()?;
        let mut ids = Vec::with_capacity(patch.read_replies.len());
        for id in &patch.read_replies {
            ids.push(MessageId::parse(id).ok_or_else(|| {
                Error::with_message(ErrorCode::INVALID_BODY, "`read_replies` holds message ids")
            })?);
        }
        ids.sort();
        ids.dedup();
        transact!(self.console, |tx| {
            if !ids.is_empty() {
                let own = tx.messages().messages_by_session(session, &ids).await?;
                if own.len() != ids.len() {
                    return Err(Error::with_message(
                        ErrorCode::INVALID_BODY,
                        "`read_replies` names the session's own messages",
                    ));
                }
                tx.message_inbox().read_replies(&human.login, &ids).await?;
            }
            let (was_cleared, was_read) = tx
                .message_inbox()
                .agent_state(&human.login, session)
                .await?
                .unwrap_or((None, None));
            let cleared_before = later(was_cleared, cleared);
            let read_through = later(was_read, read);
            if (cleared_before, read_through) != (was_cleared, was_read) {
                tx.message_inbox()
                    .put_agent_state(&human.login, session, cleared_before, read_through)
                    .await?;
            }
            let unread = tx
                .message_inbox()
                .unread_replies(&human.login, Some(session))
                .await?;
            Ok(AgentState {
                session_id: session.clone(),
                cleared_before,
                read_through,
                unread_replies: unread.into_iter().map(|(_, id)| id).collect(),
            })
        })
    }
}
