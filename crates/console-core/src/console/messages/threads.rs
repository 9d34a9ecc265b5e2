//! Reading messages: one message on an issue, a conversation (thread) by any of its messages,
//! and a session's targeted messages.

use super::*;
use crate::work::messages::Thread;

impl Messages<'_> {
    /// One message on an issue, with its attempts and replies.
    pub async fn on_issue(&self, key: &str, id: MessageId) -> Result<MessageView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.read().await?;
        let m = tx
            .messages()
            .message(id)
            .await?
            .filter(|m| m.issue.as_ref() == Some(&key))
            .ok_or_else(no_message)?;
        self.view(&mut *tx, &m).await
    }

    /// The conversation a message belongs to, by any of its messages' ids: the root with its
    /// deliveries, and every other message, oldest first. On a direct thread (no issue) a
    /// bearer names its session, which must be the root's target or have replied in it
    /// (THREAD_FORBIDDEN): a guard against mistakes, not an authorization boundary.
    pub async fn thread(&self, caller: &Actor, id: MessageId) -> Result<Thread, Error> {
        let mut tx = self.read().await?;
        let m = tx.messages().message(id).await?.ok_or_else(no_message)?;
        let all = tx
            .messages()
            .thread_messages(std::slice::from_ref(&m.thread_id))
            .await?;
        let root = all
            .iter()
            .find(|x| x.id == m.thread_id)
            .cloned()
            .ok_or_else(no_message)?;
        if root.issue.is_none()
            && let Actor::Agent { session, .. } = caller
        {
            check_direct_reader(&root, &all, session.as_ref())?;
        }
        let items: Vec<Deliverable> = all.iter().map(|x| Deliverable::Message(x.id)).collect();
        let attempts = tx.attempts().attempts(&items).await?;
        Ok(Thread {
            root: view_of(&root, &all, &attempts),
            replies: all
                .iter()
                .filter(|x| x.id != root.id)
                .map(|x| view_of(x, &all, &attempts))
                .collect(),
        })
    }

    /// A session's targeted messages (to it, or to a role it received), newest first.
    pub async fn of_session(
        &self,
        session: &SessionId,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<MessageView>, Error> {
        let mut tx = self.read().await?;
        let ms = tx
            .messages()
            .session_messages(session, limit, offset)
            .await?;
        self.views(&mut *tx, &ms).await
    }
}

/// A bearer reading a direct thread (root `root`, messages `all`) names its session
/// (INVALID_SESSION_ID), which the root targets or which replied in it (THREAD_FORBIDDEN).
fn check_direct_reader(
    root: &Message,
    all: &[Message],
    session: Option<&SessionId>,
) -> Result<(), Error> {
    let session = session.ok_or_else(|| {
        Error::with_message(
            ErrorCode::INVALID_SESSION_ID,
            "on a direct thread, name your session in `?session=`",
        )
    })?;
    let targets = root.target == Some(Target::Session(session.to_string()));
    let replied = all.iter().any(|x| x.author_session() == Some(session));
    if !targets && !replied {
        return Err(ErrorCode::THREAD_FORBIDDEN.into());
    }
    Ok(())
}
