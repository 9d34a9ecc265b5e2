//! Following an issue: its event log, a person's read states, and the sessions subscribed.

use super::*;
use crate::caller::Human;
use crate::ids::SessionId;
use crate::work::{EventPage, ReadState, Subscriber};

impl Issues<'_> {
    /// A page of an issue's event log.
    pub async fn issue_events(&self, key: &str, page: &EventPage) -> Result<Vec<Event>, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.console.parts.storage.read().await?;
        if tx.issues().issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        Ok(tx.events().issue_events(&key, page).await?)
    }

    /// A person's read state of every issue they read or pinned.
    pub async fn read_states(&self, human: &Human) -> Result<Vec<ReadState>, Error> {
        let mut tx = self.console.parts.storage.read().await?;
        Ok(tx.issues().read_states(&human.login).await?)
    }

    /// Updates a person's read state of an issue: `read_sequence` only moves forward (an
    /// earlier one leaves it) and is at most the issue's last sequence; `pinned` is what
    /// `GET /issues?pinned=true` reads.
    pub async fn update_read_state(
        &self,
        human: &Human,
        key: &str,
        read_sequence: Option<i64>,
        pinned: Option<bool>,
    ) -> Result<ReadState, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        if read_sequence.is_some_and(|r| r < 0) {
            return Err(invalid("read_sequence is 0 or more"));
        }
        transact!(self.console, |tx| {
            let issue = tx
                .issues()
                .issue(&key)
                .await?
                .ok_or_else(|| not_found("issue"))?;
            let (was_read, was_pinned) = tx
                .issues()
                .read_state(&human.login, &key)
                .await?
                .unwrap_or((0, false));
            let read = read_sequence
                .map(|r| r.min(issue.sequence).max(was_read))
                .unwrap_or(was_read);
            let pinned = pinned.unwrap_or(was_pinned);
            tx.issues()
                .put_read_state(&human.login, &key, read, pinned)
                .await?;
            Ok(ReadState {
                key: key.clone(),
                read_sequence: read,
                last_sequence: issue.sequence,
                unread: read < issue.sequence,
                pinned,
            })
        })
    }

    /// Sessions subscribed to an issue's topics (protocol §6.2: those that created, claimed,
    /// edited, asked, commented or were messaged there), first subscribed first.
    pub async fn subscribers(&self, key: &str) -> Result<Vec<Subscriber>, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.console.parts.storage.read().await?;
        if tx.issues().issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        Ok(tx
            .issues()
            .subscribers(&key)
            .await?
            .into_iter()
            .map(|(session_id, since)| Subscriber { session_id, since })
            .collect())
    }

    /// Unsubscribes a session from an issue (a later action there subscribes it again);
    /// appends `subscription.removed`. A session not subscribed: done already.
    pub async fn unsubscribe(
        &self,
        actor: &Actor,
        key: &str,
        session: &SessionId,
    ) -> Result<(), Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        transact!(self.console, |tx| {
            let issue = tx
                .issues()
                .issue(&key)
                .await?
                .ok_or_else(|| not_found("issue"))?;
            if !tx
                .issues()
                .subscribers(&key)
                .await?
                .iter()
                .any(|(s, _)| s == session)
            {
                return Ok(());
            }
            tx.issues().unsubscribe(&key, session).await?;
            let data =
                json!({ "issue": key, "artifact": null, "session_id": session, "by": actor });
            self.console
                .append(
                    tx,
                    "subscription.removed",
                    actor,
                    Some(&issue.project),
                    None,
                    data,
                )
                .await?;
            Ok(())
        })
    }
}
