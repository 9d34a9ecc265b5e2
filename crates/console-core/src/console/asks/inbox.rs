//! The inbox (protocol §6.4): a person's asks by whose turn it is, snoozes, and the answers
//! and decisions a person made.

use super::cache::{Lookup, inbox_scope};
use super::*;

/// Where an open ask waits: whose turn it is, and the inbox that holds it. An inbox holds the
/// asks on issues assigned to its person and those on unassigned issues and on documents with
/// no issue ([`AssigneeFilter::MineAndUnassigned`], what `GET /inbox` reads with no
/// `assignee`): so an ask waits in its issue's assignee's inbox, or in every person's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// A person's turn (to answer), or the asking agent's (to follow up on the answer).
    pub turn: Turn,
    /// The person whose inbox holds it; none: every person's (no assignee).
    pub inbox: Option<Login>,
}

/// Where an ask whose turn is `turn` waits, on an issue assigned to `assignee` (none: an
/// unassigned issue, or a document with no issue); none when it is nobody's turn.
pub fn waiting(turn: Option<Turn>, assignee: Option<&Login>) -> Option<Waiting> {
    turn.map(|turn| Waiting {
        turn,
        inbox: assignee.cloned(),
    })
}

impl Asks<'_> {
    // ----- the inbox -----

    /// The caller's inbox (protocol §6.4): asks that are a person's or an agent's turn, on
    /// issues assigned to `assignee` (`me`, `unassigned`, an e-mail someone signed in with;
    /// none: the caller's and the unassigned; asks on documents with no issue are unassigned),
    /// within `project`; a row the caller snoozed is under `snoozed` until then. Oldest turn
    /// first.
    ///
    /// A person's inbox may hold thousands of asks: each answer is kept (with its JSON) until
    /// the next event commits or a snooze in it ends ([`InboxCache`]). Every write that
    /// changes an inbox appends an event (a snooze too), so no answer outlives its data; with
    /// several replicas, another replica's event reaches the watermark through the storage's
    /// listener.
    pub async fn inbox_asks(
        &self,
        human: &Human,
        project: Option<&str>,
        assignee: Option<&str>,
    ) -> Result<Arc<CachedInbox>, Error> {
        let project = project
            .map(|p| {
                ProjectKey::parse(p).ok_or_else(|| {
                    Error::with_message(ErrorCode::INVALID_QUERY, "`project` is a project key")
                })
            })
            .transpose()?;
        let assignee = match assignee {
            None => AssigneeFilter::MineAndUnassigned(human.login.clone()),
            Some("me") => AssigneeFilter::Person(human.login.clone()),
            Some("unassigned") => AssigneeFilter::Unassigned,
            Some(e) => AssigneeFilter::Person(self.console.assignee(e).await?),
        };
        let filter = InboxFilter {
            login: human.login.clone(),
            project,
            assignee,
        };
        // The watermark is read before the storage: an event committed after it makes the
        // answer read now stale at once, never the other way round.
        let watermark = *self.console.committed.borrow();
        let now = self.console.now();
        let (kept, since) = match self.console.inboxes.get(&filter, watermark, now) {
            Lookup::Hit(hit) => return Ok(hit),
            Lookup::Stale(kept, since) => (Some(kept), since),
            Lookup::Miss => (None, 0),
        };
        let mut tx = self.read().await?;
        // Events since the kept answer was read name what they may have changed: only that
        // part is read again (event ids have no gaps: `watermark - since` events).
        if let Some(kept) = kept
            && let Ok(n) = u32::try_from(watermark - since)
            && n <= InboxCache::PATCH_EVENTS
        {
            let events = tx.events().events_after(since, n).await?;
            if events.len() == n as usize
                && let Some(scope) = inbox_scope(&events)
            {
                let fresh = tx.asks().inbox(&filter, Some(&scope)).await?;
                let cached = Arc::new(kept.patched(&scope, fresh, now, Self::inbox_row));
                self.console.inboxes.put(filter, watermark, cached.clone());
                return Ok(cached);
            }
        }
        let entries = tx.asks().inbox(&filter, None).await?;
        drop(tx);
        let cached = Arc::new(CachedInbox::of(
            entries,
            now,
            Self::inbox_row,
            self.console.inboxes.spares.clone(),
        ));
        self.console.inboxes.put(filter, watermark, cached.clone());
        Ok(cached)
    }

    fn inbox_row(a: InboxAsk, snoozed_until: Option<Time>) -> InboxRow {
        InboxRow {
            id: a.head.id,
            issue: a.head.issue.clone(),
            artifact: a.head.artifact,
            turn: a.turn,
            turn_since: a.turn_since,
            snoozed_until,
            ask: a,
        }
    }

    /// Snoozes an inbox row for the caller until `until` (in the future, at most 365 days
    /// ahead: else INVALID_STATE). An ask that is nobody's turn is in no inbox: ASK_STATE.
    /// Appends `inbox.snoozed` (`{ask, login, snoozed_until}`; no issue's or document's log).
    pub async fn snooze(&self, human: &Human, id: AskId, until: Time) -> Result<InboxRow, Error> {
        let now = self.console.now();
        if until <= now || until > now + Duration::days(SNOOZE_DAYS_MAX) {
            return Err(Error::with_message(
                ErrorCode::INVALID_STATE,
                "snoozed_until is in the future, at most 365 days ahead",
            ));
        }
        let actor = Actor::User {
            login: human.login.clone(),
        };
        transact!(self.console, |tx| {
            let ask = self.locked_ask(tx, id).await?;
            if ask.turn.is_none() {
                return Err(ask_state(
                    ask.head.state,
                    "the ask waits on nobody: it is in no inbox",
                ));
            }
            tx.asks().snooze(&human.login, id, until).await?;
            let data = serde_json::to_value(SnoozeData {
                ask: &id.to_string(),
                login: &human.login,
                snoozed_until: Some(until),
            })
            .unwrap_or_default();
            self.append_personal(tx, "inbox.snoozed", &actor, &ask.head.project, data)
                .await?;
            Ok(Self::inbox_row(InboxAsk::of(&ask), Some(until)))
        })
    }

    /// Un-snoozes an inbox row for the caller (one not snoozed: done already, no event);
    /// appends `inbox.unsnoozed`.
    pub async fn unsnooze(&self, human: &Human, id: AskId) -> Result<(), Error> {
        let actor = Actor::User {
            login: human.login.clone(),
        };
        transact!(self.console, |tx| {
            let ask = self.locked_ask(tx, id).await?;
            if tx.asks().snoozed_until(&human.login, id).await?.is_none() {
                return Ok(());
            }
            tx.asks().unsnooze(&human.login, id).await?;
            let data = serde_json::to_value(SnoozeData {
                ask: &id.to_string(),
                login: &human.login,
                snoozed_until: None,
            })
            .unwrap_or_default();
            self.append_personal(tx, "inbox.unsnoozed", &actor, &ask.head.project, data)
                .await?;
            Ok(())
        })
    }

    /// Appends an event about a person's own inbox: in no issue's or document's log.
    async fn append_personal(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        project: &ProjectKey,
        data: serde_json::Value,
    ) -> Result<Event, Error> {
        let e = NewEvent {
            kind,
            facts: EventFacts {
                at: self.console.now(),
                actor: actor.clone(),
                project: Some(project.clone()),
                issue: None,
                artifact: None,
                session: None,
                data,
            },
        };
        Ok(tx.events().append_event(&e, None).await?)
    }

    /// The caller's own answers and replies on asks, newest first.
    pub async fn my_answers(
        &self,
        human: &Human,
        limit: u32,
        offset: u32,
    ) -> Result<AnswersPage, Error> {
        let mut tx = self.read().await?;
        let (entries, total) = tx.asks().answers_by(&human.login, limit, offset).await?;
        let asked = |a: &Ask| AnsweredAsk {
            id: a.head.id,
            question: a.head.question.clone(),
            state: a.head.state,
            owner: a.author.clone(),
            link: console_ref(SearchKind::Ask, &a.head.id.to_string()),
        };
        let rows = entries
            .into_iter()
            .map(|e| match e {
                AnswerEntry::Answer { ask, answer } => AnswerRow {
                    kind: AnswerKind::Answer,
                    at: answer.at,
                    ask: asked(&ask),
                    answer: Some(RowAnswer {
                        options: answer.options,
                        text: answer.text,
                        current: answer.current,
                    }),
                    reply: None,
                },
                AnswerEntry::Reply {
                    ask,
                    comment_id,
                    body,
                    at,
                } => AnswerRow {
                    kind: AnswerKind::Reply,
                    at,
                    ask: asked(&ask),
                    answer: None,
                    reply: Some(RowReply {
                        id: comment_id,
                        body,
                    }),
                },
            })
            .collect();
        Ok(AnswersPage {
            rows,
            total,
            limit,
            offset,
        })
    }

    /// The most rows [`Asks::answers_and_decisions`] reaches (`offset + limit`).
    pub const DECIDED_REACH: u32 = 2_000;

    /// A person's answers and replies on asks and their credential decisions, in one list,
    /// newest first: `limit` rows from `offset` (each source is read up to `offset + limit`
    /// and merged; together at most [`Asks::DECIDED_REACH`]).
    pub async fn answers_and_decisions(
        &self,
        human: &Human,
        limit: u32,
        offset: u32,
    ) -> Result<DecidedPage, Error> {
        let reach = offset.saturating_add(limit).min(Self::DECIDED_REACH);
        // One more than the reach from each: whether a later page has rows.
        let answers = self.my_answers(human, reach + 1, 0).await?;
        let decisions = self
            .console
            .parts
            .storage
            .decisions_of(&human.login, reach + 1)
            .await?;
        let mut all: Vec<Decided> = answers
            .rows
            .into_iter()
            .map(Decided::Ask)
            .chain(decisions.into_iter().map(Decided::Credential))
            .collect();
        all.sort_by_key(|d| std::cmp::Reverse(d.at()));
        let more = all.len() > reach as usize;
        let rows = all
            .into_iter()
            .take(reach as usize)
            .skip(offset as usize)
            .collect();
        Ok(DecidedPage { rows, more })
    }
}

/// `inbox.snoozed`, `inbox.unsnoozed`.
#[derive(Serialize)]
struct SnoozeData<'a> {
    ask: &'a str,
    login: &'a Login,
    #[serde(with = "crate::work::model::rfc3339_opt")]
    snoozed_until: Option<Time>,
}
