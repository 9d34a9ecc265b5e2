//! A session accepting a delivery attempt ([`Messages::accept`]) under the spec's "Message
//! accept rules": nine conditions, every one of which must hold, checked together on rows read
//! under lock in the accept's transaction (one compare-and-set: the check and the write cannot
//! be separated by another write to the message's attempts). The first that fails, in the
//! spec's order, is the answer ([`refusal`]).

use chrono::Duration;
use serde_json::json;

use super::*;
use crate::clock::Time;
use crate::work::messages::{Accepted, AttemptState};

/// How recent an attempt must be to be accepted.
pub const ACCEPT_WITHIN: Duration = Duration::minutes(1);

/// Why `session` may not accept attempt `a` of message `m` (thread root `root`, every attempt
/// of `m` in `all`) at `now`; `None` when it may. The caller has checked that `a` is
/// `session`'s (else 403 ACCEPT_FORBIDDEN).
pub fn refusal(
    m: &Message,
    root: &Message,
    all: &[Attempt],
    a: &Attempt,
    session: &str,
    now: Time,
) -> Option<ErrorCode> {
    let to_session = Some(Target::Session(session.to_owned()));
    // A direct message to that session on no issue, not a broadcast copy or a reply in a
    // broadcast's thread, whose thread root targets it.
    let direct = m.issue.is_none()
        && m.broadcast.is_none()
        && root.broadcast.is_none()
        && m.target == to_session
        && root.target == to_session;
    let latest = all.iter().map(|x| x.attempt).max() == Some(a.attempt);
    let person = |x: &Actor| matches!(x, Actor::User { .. });
    let checks = [
        (direct, ErrorCode::ACCEPT_NOT_DIRECT),
        (person(&m.author), ErrorCode::ACCEPT_NOT_WRITTEN_BY_PERSON),
        (
            matches!(a.mode, Mode::Aside | Mode::Steer),
            ErrorCode::ACCEPT_NOT_ASIDE_OR_STEER,
        ),
        (latest, ErrorCode::ACCEPT_SUPERSEDED),
        (
            all.iter().all(|x| x.accepted_at.is_none()),
            ErrorCode::ACCEPT_ALREADY_ACCEPTED,
        ),
        (
            person(&a.requested_by),
            ErrorCode::ACCEPT_NOT_REQUESTED_BY_PERSON,
        ),
        // Only asked of a person's request (the condition before): the one who asked wrote it.
        (
            !person(&a.requested_by) || a.requested_by == m.author,
            ErrorCode::ACCEPT_NOT_REQUESTED_BY_AUTHOR,
        ),
        (a.state != AttemptState::Failed, ErrorCode::ACCEPT_FAILED),
        (a.created_at > now - ACCEPT_WITHIN, ErrorCode::ACCEPT_STALE),
    ];
    checks.into_iter().find(|(ok, _)| !ok).map(|(_, code)| code)
}

/// An attempt number from a path: 1 or more, else the attempt names nothing.
fn attempt_number(attempt: &str) -> Result<i64, Error> {
    attempt
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(no_attempt)
}

fn no_attempt() -> Error {
    Error::with_message(ErrorCode::NOT_FOUND, "no such attempt")
}

impl Messages<'_> {
    /// The targeted session accepts a delivery attempt (spec, "Message accept rules"): see
    /// [`refusal`].
    pub async fn accept(
        &self,
        actor: &Actor,
        id: MessageId,
        attempt: &str,
        accepted_as: Option<Mode>,
    ) -> Result<Accepted, Error> {
        let session = session_of(actor)?;
        if accepted_as == Some(Mode::Send) {
            return Err(message_input("`as` is aside or steer"));
        }
        let number = attempt_number(attempt)?;
        let now = self.console.now();
        let (accepted, _) = transact!(self.console, |tx| {
            let m = tx.messages().message(id).await?.ok_or_else(no_message)?;
            let root = if m.thread_id == m.id {
                m.clone()
            } else {
                tx.messages()
                    .message(m.thread_id)
                    .await?
                    .ok_or_else(no_message)?
            };
            let attempts = tx
                .attempts()
                .attempts(&[Deliverable::Message(m.id)])
                .await?;
            let a = attempts
                .iter()
                .find(|a| a.attempt == number)
                .cloned()
                .ok_or_else(no_attempt)?;
            if a.session_id != session {
                return Err(ErrorCode::ACCEPT_FORBIDDEN.into());
            }
            if let Some(code) = refusal(&m, &root, &attempts, &a, session.as_str(), now) {
                return Err(code.into());
            }
            let mode = accepted_as.unwrap_or(a.mode);
            self.write_accept(tx, actor, &m, a, mode, now).await
        })?;
        Ok(accepted)
    }

    /// Writes attempt `a`'s acceptance as `mode` at `now` and appends `message.accepted`.
    async fn write_accept(
        &self,
        tx: &mut dyn WorkTx,
        actor: &Actor,
        m: &Message,
        mut a: Attempt,
        mode: Mode,
        now: Time,
    ) -> Result<(Accepted, Event), Error> {
        tx.attempts()
            .accept_attempt(a.item, a.attempt, now, mode)
            .await?;
        a.accepted_at = Some(now);
        a.accepted_as = Some(mode);
        let data = json!({
            "message": m.id,
            "attempt": a.attempt,
            "session_id": a.session_id,
            "accepted_at": crate::work::model::rfc3339::format(&now),
            "accepted_as": mode,
        });
        let e = self.append(tx, "message.accepted", actor, m, data).await?;
        let accepted = Accepted {
            attempt: AttemptView::from(&a),
            body: m.body.clone(),
        };
        Ok((accepted, e))
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::ids::Login;
    use crate::work::IssueKey;
    use crate::work::messages::Scope;

    fn ada() -> Actor {
        Actor::User {
            login: Login::parse("ada@example.com").unwrap_or_else(|| panic!("login")),
        }
    }

    fn t0() -> Time {
        chrono::Utc
            .with_ymd_and_hms(2031, 1, 2, 3, 4, 5)
            .single()
            .unwrap_or_default()
    }

    fn message() -> Message {
        Message {
            id: MessageId::from_random([1; 16]),
            thread_id: MessageId::from_random([1; 16]),
            parent: None,
            issue: None,
            broadcast: None,
            target: Some(Target::Session("s1".into())),
            delivery: Some(Mode::Steer),
            body: "turn left".into(),
            notice: None,
            author: ada(),
            created_at: t0(),
        }
    }

    fn attempt(n: i64) -> Attempt {
        Attempt {
            item: Deliverable::Message(MessageId::from_random([1; 16])),
            attempt: n,
            session_id: SessionId::parse("s1").unwrap_or_else(|| panic!("session")),
            mode: Mode::Steer,
            state: AttemptState::Sent,
            requested_by: ada(),
            created_at: t0(),
            sent_at: Some(t0()),
            accepted_at: None,
            accepted_as: None,
            error: None,
            scope: Scope::default(),
        }
    }

    /// Each condition, broken alone (or first, where the spec's conditions imply each
    /// other), gives its own code; all holding gives none. Long because it lists the nine
    /// conditions in the spec's order, a few lines each, so the list reads as the spec's.
    #[test]
    fn each_condition_its_code() {
        let now = t0() + Duration::seconds(10);
        let m = message();
        let a = attempt(1);
        assert_eq!(
            refusal(&m, &m, std::slice::from_ref(&a), &a, "s1", now),
            None
        );

        let mut on_issue = message();
        on_issue.issue = IssueKey::parse("PAY-1");
        assert_eq!(
            refusal(
                &on_issue,
                &on_issue,
                std::slice::from_ref(&a),
                &a,
                "s1",
                now
            ),
            Some(ErrorCode::ACCEPT_NOT_DIRECT)
        );
        let mut copy = message();
        copy.broadcast = Some(BroadcastId::from_random([2; 16]));
        assert_eq!(
            refusal(&copy, &copy, std::slice::from_ref(&a), &a, "s1", now),
            Some(ErrorCode::ACCEPT_NOT_DIRECT)
        );

        let mut by_agent = message();
        by_agent.author = Actor::System {
            name: "broker".into(),
        };
        assert_eq!(
            refusal(
                &by_agent,
                &by_agent,
                std::slice::from_ref(&a),
                &a,
                "s1",
                now
            ),
            Some(ErrorCode::ACCEPT_NOT_WRITTEN_BY_PERSON)
        );

        let mut sent = attempt(1);
        sent.mode = Mode::Send;
        assert_eq!(
            refusal(&m, &m, &[sent.clone()], &sent, "s1", now),
            Some(ErrorCode::ACCEPT_NOT_ASIDE_OR_STEER)
        );

        let (one, two) = (attempt(1), attempt(2));
        assert_eq!(
            refusal(&m, &m, &[one.clone(), two.clone()], &one, "s1", now),
            Some(ErrorCode::ACCEPT_SUPERSEDED)
        );

        let mut accepted = attempt(1);
        accepted.accepted_at = Some(t0());
        assert_eq!(
            refusal(&m, &m, &[accepted.clone()], &accepted, "s1", now),
            Some(ErrorCode::ACCEPT_ALREADY_ACCEPTED)
        );

        let mut by_agent = attempt(1);
        by_agent.requested_by = Actor::Agent {
            owner: None,
            service: None,
            session: SessionId::parse("s9"),
        };
        assert_eq!(
            refusal(&m, &m, &[by_agent.clone()], &by_agent, "s1", now),
            Some(ErrorCode::ACCEPT_NOT_REQUESTED_BY_PERSON)
        );

        let mut by_bob = attempt(1);
        by_bob.requested_by = Actor::User {
            login: Login::parse("bob@example.com").unwrap_or_else(|| panic!("login")),
        };
        assert_eq!(
            refusal(&m, &m, &[by_bob.clone()], &by_bob, "s1", now),
            Some(ErrorCode::ACCEPT_NOT_REQUESTED_BY_AUTHOR)
        );

        let mut failed = attempt(1);
        failed.state = AttemptState::Failed;
        assert_eq!(
            refusal(&m, &m, &[failed.clone()], &failed, "s1", now),
            Some(ErrorCode::ACCEPT_FAILED)
        );
        let mut pending = attempt(1);
        pending.state = AttemptState::Pending;
        assert_eq!(
            refusal(&m, &m, &[pending.clone()], &pending, "s1", now),
            None
        );

        assert_eq!(
            refusal(
                &m,
                &m,
                std::slice::from_ref(&a),
                &a,
                "s1",
                t0() + Duration::seconds(61)
            ),
            Some(ErrorCode::ACCEPT_STALE)
        );
    }
}
