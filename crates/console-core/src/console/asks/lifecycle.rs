//! An ask's life: opening one on an issue, reading, rewording, answering, closing,
//! following; the sessions its answer reaches.

use super::*;

impl Asks<'_> {
    // ----- asks -----

    /// Opens a question ask on an issue. `advice` is read afterwards ([`Asks::ask_advice`]).
    pub async fn open_issue_ask(
        &self,
        actor: &Actor,
        key: &str,
        new: NewAsk,
    ) -> Result<AskView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        if new.block.is_some() {
            return Err(invalid(
                "`block` places an ask in a document: an issue has none",
            ));
        }
        let question = check_text(&new.question, "a question", QUESTION_MAX)?;
        let options = check_options(&new.options)?;
        let now = self.console.now();
        let id = self.console.new_id(AskId::from_random);
        let view = transact!(self.console, |tx| {
            let issue = tx
                .issues()
                .issue(&key)
                .await?
                .ok_or_else(|| not_found("issue"))?;
            let ask = Ask::opened(
                id,
                AskKind::Question,
                (issue.project.clone(), Some(issue.key.clone()), None),
                question.clone(),
                options.clone(),
                actor,
                now,
            );
            tx.asks().insert_ask(&ask).await?;
            self.console.notify_ask(tx, &ask).await?;
            let view = self.ask_full(tx, ask).await?;
            self.append_ask(tx, "ask.opened", actor, &view).await?;
            Ok(view)
        })?;
        tracing::info!(ask = %view.head.id, "ask opened");
        Ok(view)
    }

    /// Answered asks of the same project that may settle a new one: the three best matches
    /// for any word of its question, read after its write committed (it never slows or
    /// blocks the write); none when the search fails.
    pub async fn ask_advice(&self, ask: &AskView) -> Vec<AskSuggestion> {
        let words = search::words(&ask.head.question);
        if words.is_empty() {
            return Vec::new();
        }
        let found = async {
            let mut tx: Box<dyn WorkTx> = self.console.parts.storage.read().await?;
            let (hits, _) = tx
                .asks()
                .search_asks(&words, true, Some(&ask.head.project), true, 4)
                .await?;
            let ids: Vec<AskId> = hits
                .iter()
                .filter_map(|h| AskId::parse(&h.id))
                .filter(|h| *h != ask.head.id)
                .take(3)
                .collect();
            let mut asks = tx.asks().asks_by_id(&ids).await?;
            asks.sort_by_key(|a| ids.iter().position(|i| *i == a.head.id));
            Ok::<_, crate::storage::StorageError>(asks)
        };
        match found.await {
            Ok(asks) => asks
                .into_iter()
                .filter_map(|a| {
                    let ans = a.head.answer?;
                    let options = ans
                        .options
                        .iter()
                        .filter_map(|o| a.head.options.iter().find(|x| &x.id == o).cloned())
                        .collect();
                    Some(AskSuggestion {
                        ask: a.head.id,
                        question: a.head.question,
                        answer: SuggestedAnswer {
                            options,
                            text: ans.text,
                        },
                        by: ans.by,
                        at: ans.at,
                    })
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "ask advice not found");
                Vec::new()
            }
        }
    }

    /// One ask with replies, edit history and answers.
    pub async fn ask(&self, id: AskId) -> Result<AskView, Error> {
        let mut tx = self.read().await?;
        let a = tx.asks().ask(id).await?.ok_or_else(|| not_found("ask"))?;
        self.ask_full(&mut *tx, a).await
    }

    /// An issue's asks (those on its documents included), oldest first, in `states` (any
    /// when empty).
    pub async fn issue_asks(
        &self,
        key: &str,
        states: Vec<AskState>,
    ) -> Result<Vec<AskView>, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.read().await?;
        if tx.issues().issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        let f = AskFilter {
            issue: Some(key),
            states,
            ..Default::default()
        };
        Self::listed(&mut *tx, f).await
    }

    /// Open asks in one scope: one session's own, or every one on a project's issues and
    /// documents; with counts of asks, and of the issues and documents they are on.
    pub async fn scope_asks(
        &self,
        author_session: Option<&str>,
        project: Option<&str>,
    ) -> Result<ScopeList, Error> {
        let mut f = AskFilter {
            states: vec![AskState::Open],
            ..Default::default()
        };
        let mut tx = self.read().await?;
        match (author_session, project) {
            (Some(s), None) => {
                f.author_session = Some(SessionId::named(s)?);
            }
            (None, Some(p)) => {
                let p = ProjectKey::parse(p).ok_or_else(|| {
                    Error::with_message(ErrorCode::INVALID_QUERY, "`project` is a project key")
                })?;
                if tx.projects().project(&p).await?.is_none() {
                    return Err(not_found("project"));
                }
                f.project = Some(p);
            }
            _ => {
                return Err(Error::with_message(
                    ErrorCode::INVALID_QUERY,
                    "name exactly one scope: `author_session` or `project`",
                ));
            }
        }
        let asks = tx.asks().asks(&f).await?;
        let issues: HashSet<&IssueKey> =
            asks.iter().filter_map(|a| a.head.issue.as_ref()).collect();
        let artifacts: HashSet<ArtifactId> = asks.iter().filter_map(|a| a.head.artifact).collect();
        let counts = AskCounts {
            asks: asks.len(),
            issues: issues.len(),
            artifacts: artifacts.len(),
        };
        Ok(ScopeList {
            asks: asks.into_iter().map(AskView::listed).collect(),
            counts,
        })
    }

    /// Whether `actor` may act on an ask as its author: a person always; a bearer only for
    /// the session that wrote it (SESSION_FORBIDDEN).
    fn as_author(actor: &Actor, ask: &Ask) -> Result<(), Error> {
        if actor.is_human() {
            return Ok(());
        }
        match (actor.session(), ask.author_session()) {
            (Some(a), Some(b)) if a == b => Ok(()),
            _ => Err(Error::with_message(
                ErrorCode::SESSION_FORBIDDEN,
                "a bearer rewords only an ask its own session wrote",
            )),
        }
    }

    /// Rewords an open ask (its author's session, or a person): the earlier wording goes to
    /// the edit history. A patch that changes nothing appends no event.
    pub async fn reword_ask(
        &self,
        actor: &Actor,
        id: AskId,
        patch: AskPatch,
    ) -> Result<AskView, Error> {
        let question = patch
            .question
            .as_deref()
            .map(|q| check_text(q, "a question", QUESTION_MAX))
            .transpose()?;
        let options = patch.options.as_deref().map(check_options).transpose()?;
        let now = self.console.now();
        // The whole `WorkTx`: the block of a block ask is rewritten through the documents' edit.
        transact!(self.console, |tx, after| {
            let mut ask = self.locked_ask(tx, id).await?;
            Self::as_author(actor, &ask)?;
            if ask.head.state != AskState::Open {
                return Err(ask_state(ask.head.state, "only an open ask is reworded"));
            }
            let q = question
                .clone()
                .unwrap_or_else(|| ask.head.question.clone());
            let o = options.clone().unwrap_or_else(|| ask.head.options.clone());
            if q == ask.head.question && o == ask.head.options {
                return self.ask_full(tx, ask).await;
            }
            // The wording being replaced, with who wrote it and when.
            tx.asks()
                .add_wording(
                    id,
                    &Wording {
                        question: ask.head.question.clone(),
                        options: ask.head.options.clone(),
                        by: ask.worded_by.clone(),
                        at: ask.worded_at,
                    },
                )
                .await?;
            ask.head.question = q;
            ask.head.options = o;
            ask.updated_at = now;
            ask.worded_by = actor.clone();
            ask.worded_at = now;
            if !actor.is_human() {
                ask.turn = Some(Turn::Human);
                ask.turn_since = now;
            }
            // A block ask's `:::ask` block says the new wording.
            let kept = self.rewrite_block(tx, actor, &mut ask).await?;
            after.keep_document(kept);
            tx.asks().update_ask(&ask).await?;
            let view = self.ask_full(tx, ask).await?;
            self.append_ask(tx, "ask.reworded", actor, &view).await?;
            Ok(view)
        })
    }

    /// Answers an ask (a person): selected options and/or text. An answered ask takes a later
    /// answer, which becomes current; the earlier stays in the answers history. Then it is
    /// its agent's turn.
    pub async fn answer_ask(
        &self,
        actor: &Actor,
        id: AskId,
        a: AnswerIn,
    ) -> Result<AskView, Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let (selected, text) = checked_answer(a)?;
        // An approval ask is answered by a review of the version it asks about.
        let approval = {
            let mut tx = self.read().await?;
            tx.asks()
                .ask(id)
                .await?
                .filter(|a| a.head.kind == AskKind::Approval)
        };
        if let Some(ask) = approval {
            return self.answer_approval(actor, ask, &selected, text).await;
        }
        let now = self.console.now();
        let view = transact!(self.console, |tx| {
            let mut ask = self.locked_ask(tx, id).await?;
            if !matches!(ask.head.state, AskState::Open | AskState::Answered) {
                return Err(ask_state(
                    ask.head.state,
                    "a retracted or resolved ask takes no answer",
                ));
            }
            if let Some(o) = selected
                .iter()
                .find(|o| !ask.head.options.iter().any(|x| &x.id == *o))
            {
                return Err(invalid(format!("the ask has no option `{o}`")));
            }
            let answer = Answer {
                options: selected.clone(),
                text: text.clone(),
                by: actor.clone(),
                at: now,
            };
            tx.asks().add_answer(id, &answer).await?;
            ask.head.answer = Some(answer);
            ask.head.state = AskState::Answered;
            // An answered ask is not open: it leaves the inbox (issue 27; docs/decisions.md).
            ask.turn = None;
            ask.turn_since = now;
            ask.updated_at = now;
            tx.asks().update_ask(&ask).await?;
            let view = self.ask_full(tx, ask).await?;
            self.append_ask(tx, "ask.answered", actor, &view).await?;
            Ok(view)
        })?;
        tracing::info!(ask = %view.head.id, "ask answered");
        Ok(view)
    }

    /// Answers an approval ask by a review of the version it asks about: one option,
    /// `approve` or `request_changes`.
    async fn answer_approval(
        &self,
        actor: &Actor,
        ask: Ask,
        selected: &[String],
        text: Option<String>,
    ) -> Result<AskView, Error> {
        if !matches!(ask.head.state, AskState::Open | AskState::Answered) {
            return Err(ask_state(
                ask.head.state,
                "a retracted or resolved ask takes no answer",
            ));
        }
        let outcome = match selected {
            [o] => ReviewOutcome::parse(o),
            _ => None,
        }
        .ok_or_else(|| {
            invalid("an approval ask is answered with one option: approve or request_changes")
        })?;
        let (Some(artifact), Some(version)) =
            (ask.head.artifact, ask.approval.as_ref().map(|x| x.version))
        else {
            return Err(not_found("document"));
        };
        let r = ReviewIn {
            outcome,
            version,
            body: text,
        };
        self.review_answering(actor, artifact, r, Some(ask.head.id))
            .await?
            .1
            .ok_or_else(|| not_found("ask"))
    }

    /// Retracts or resolves an open ask without an answer.
    pub async fn close_ask(&self, actor: &Actor, id: AskId, c: CloseIn) -> Result<AskView, Error> {
        let note = c
            .note
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                if rules::chars(n) > TEXT_MAX {
                    Err(cap("a note is at most 65536 characters"))
                } else {
                    Ok(n.to_owned())
                }
            })
            .transpose()?;
        let now = self.console.now();
        // The whole `WorkTx`: the block of a block ask is rewritten through the documents' edit.
        transact!(self.console, |tx, after| {
            let mut ask = self.locked_ask(tx, id).await?;
            if ask.head.state != AskState::Open {
                return Err(ask_state(
                    ask.head.state,
                    "only an open ask is retracted or resolved",
                ));
            }
            ask.head.state = match c.state {
                CloseAs::Retracted => AskState::Retracted,
                CloseAs::Resolved => AskState::Resolved,
            };
            ask.closed = Some(Closed {
                note: note.clone(),
                by: actor.clone(),
                at: now,
            });
            ask.turn = None;
            ask.turn_since = now;
            ask.updated_at = now;
            // A block ask's block records how it closed.
            let kept = self.rewrite_block(tx, actor, &mut ask).await?;
            after.keep_document(kept);
            tx.asks().update_ask(&ask).await?;
            let view = self.ask_full(tx, ask).await?;
            let kind = match c.state {
                CloseAs::Retracted => "ask.retracted",
                CloseAs::Resolved => "ask.resolved",
            };
            self.append_ask(tx, kind, actor, &view).await?;
            Ok(view)
        })
    }

    /// The sessions an ask's answer and replies reach: its author's session, its followers,
    /// and the sessions subscribed to its issue; each once, by the first of those.
    pub async fn recipients(&self, id: AskId) -> Result<Vec<Recipient>, Error> {
        let mut tx = self.read().await?;
        let ask = tx.asks().ask(id).await?.ok_or_else(|| not_found("ask"))?;
        self.recipients_of(&mut *tx, &ask).await
    }

    async fn recipients_of(&self, tx: &mut dyn WorkTx, ask: &Ask) -> Result<Vec<Recipient>, Error> {
        let mut out: Vec<Recipient> = Vec::new();
        let mut add = |s: &SessionId, via: Via| {
            if !out.iter().any(|r| r.session_id == *s) {
                out.push(Recipient {
                    session_id: s.clone(),
                    via,
                });
            }
        };
        if let Some(s) = ask.author_session() {
            add(s, Via::Author);
        }
        for f in &ask.followers {
            add(f, Via::Follower);
        }
        if let Some(d) = &ask.head.artifact {
            for (s, _) in tx.documents().document_subscribers(*d).await? {
                add(&s, Via::Subscriber);
            }
        }
        if let Some(k) = &ask.head.issue {
            for (s, _) in tx.issues().subscribers(k).await? {
                add(&s, Via::Subscriber);
            }
        }
        Ok(out)
    }

    /// Follows (or unfollows) an ask for a session: a person for any session, a bearer only
    /// for its own (SESSION_FORBIDDEN). Following twice, or unfollowing a session that does
    /// not follow, changes nothing and appends no event.
    pub async fn follow_ask(
        &self,
        actor: &Actor,
        id: AskId,
        session: &SessionId,
        follow: bool,
    ) -> Result<(), Error> {
        if !actor.is_human() && actor.session() != Some(session) {
            return Err(Error::with_message(
                ErrorCode::SESSION_FORBIDDEN,
                "a bearer follows and unfollows for its own session only",
            ));
        }
        let now = self.console.now();
        transact!(self.console, |tx| {
            let mut ask = self.locked_ask(tx, id).await?;
            let has = ask.followers.iter().any(|f| f == session);
            if has == follow {
                return Ok(());
            }
            if follow {
                ask.followers.push(session.clone());
            } else {
                ask.followers.retain(|f| f != session);
            }
            ask.updated_at = now;
            tx.asks().update_ask(&ask).await?;
            let data = serde_json::to_value(FollowData {
                ask: ask.head.id,
                session_id: session,
            })
            .unwrap_or_default();
            let place = Place {
                project: &ask.head.project,
                issue: ask.head.issue.as_ref(),
                artifact: ask.head.artifact,
            };
            let kind = if follow {
                "ask.followed"
            } else {
                "ask.unfollowed"
            };
            self.append_at(tx, kind, actor, place, data).await?;
            Ok(())
        })
    }

    /// How many open asks each session wrote (`GET /sessions`' `open_asks`).
    pub async fn open_ask_counts(
        &self,
        sessions: &[SessionId],
    ) -> Result<HashMap<SessionId, i64>, Error> {
        if sessions.is_empty() {
            return Ok(HashMap::new());
        }
        let mut tx = self.read().await?;
        Ok(tx
            .asks()
            .open_ask_counts(sessions)
            .await?
            .into_iter()
            .collect())
    }
}

/// An answer's options (each once, in the order given) and text (trimmed; none when empty):
/// options, text, or both.
fn checked_answer(a: AnswerIn) -> Result<(Vec<String>, Option<String>), Error> {
    let text = match a.text.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(t) if rules::chars(t) > TEXT_MAX => {
            return Err(cap("an answer's text is at most 65536 characters"));
        }
        Some(t) => Some(t.to_owned()),
    };
    let mut selected: Vec<String> = Vec::new();
    for o in &a.options {
        if !selected.contains(o) {
            selected.push(o.clone());
        }
    }
    if selected.is_empty() && text.is_none() {
        return Err(invalid("an answer selects options or has text, or both"));
    }
    Ok((selected, text))
}

/// `ask.followed`, `ask.unfollowed`.
#[derive(Serialize)]
struct FollowData<'a> {
    ask: AskId,
    session_id: &'a SessionId,
}
