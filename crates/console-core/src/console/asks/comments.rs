//! Comments on issues, documents (their quotes, with suggestions) and asks; replies, mentions
//! and their delivery, threads' state.

use super::documents::{engine_quote, no_document};
use super::*;

impl Asks<'_> {
    /// Comments on an issue, a quote of one of its documents, or one of its asks; `parent`
    /// makes it a reply in that comment's thread (it takes the thread's place: `artifact`,
    /// `ask`, `quote`, `block` and `suggestion` go with the root). A reply on an ask moves
    /// the ask's turn: a person's to its agent, an agent's to a person (or, once answered, to
    /// nobody: the agent followed up).
    pub async fn comment_on_issue(
        &self,
        actor: &Actor,
        key: &str,
        new: NewComment,
    ) -> Result<CommentView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        self.add_comment(actor, On::Issue(key), new).await
    }

    /// Comments on a document or one of its quotes (with a suggested replacement), or one of
    /// its asks; as [`Asks::comment_on_issue`].
    pub async fn comment_on_document(
        &self,
        actor: &Actor,
        artifact: &str,
        new: NewComment,
    ) -> Result<CommentView, Error> {
        let artifact = uuid_id(artifact, "artifact")?;
        if new.artifact.is_some() {
            return Err(invalid(
                "the path names the document: no `artifact` in the body",
            ));
        }
        self.add_comment(actor, On::Document(artifact), new).await
    }

    async fn add_comment(
        &self,
        actor: &Actor,
        on: On,
        new: NewComment,
    ) -> Result<CommentView, Error> {
        let checked = self.check_comment(&new)?;
        let ask_id = new
            .ask
            .as_deref()
            .map(|a| uuid_id(a, "ask"))
            .transpose()
            .map_err(|_| invalid("`ask` names no ask here"))?;
        let parent = new
            .parent
            .as_deref()
            .map(|p| uuid_id(p, "comment"))
            .transpose()
            .map_err(|_| invalid("`parent` names no comment here"))?;
        let named_artifact = match (&on, &new.artifact) {
            (On::Document(d), _) => Some(d.clone()),
            (On::Issue(_), Some(x)) => Some(
                uuid_id(x, "artifact")
                    .map_err(|_| invalid("`artifact` names no document of this issue"))?,
            ),
            (On::Issue(_), None) => None,
        };
        if (new.quote.is_some() || new.block.is_some()) && named_artifact.is_none() {
            return Err(invalid(
                "a `quote` or `block` is in a document: name the `artifact`",
            ));
        }
        let here = |issue: Option<&IssueKey>, artifact: Option<&String>| match &on {
            On::Issue(k) => issue == Some(k),
            On::Document(d) => artifact == Some(d),
        };
        let now = self.console.now();
        let id = self.new_id();
        let (view, events, opened) = transact!(self.console, |tx| {
            // The thread and the ask first (locks go comment and ask, then document or issue).
            let root = match &parent {
                Some(p) => {
                    let c = tx
                        .comment(p)
                        .await?
                        .filter(|c| here(c.issue.as_ref(), c.artifact.as_ref()))
                        .ok_or_else(|| invalid("`parent` names no comment here"))?;
                    let root = if c.thread_id == c.id {
                        c
                    } else {
                        tx.comment(&c.thread_id)
                            .await?
                            .ok_or_else(|| not_found("thread"))?
                    };
                    Some(root)
                }
                None => None,
            };
            let on_ask = match (&ask_id, &root) {
                (Some(a), _) => Some(a.clone()),
                (None, Some(r)) => r.ask.clone(),
                (None, None) => None,
            };
            let mut ask = match &on_ask {
                Some(a) => Some(
                    tx.ask(a)
                        .await?
                        .filter(|x| here(x.issue.as_ref(), x.artifact.as_ref()))
                        .ok_or_else(|| invalid("`ask` names no ask here"))?,
                ),
                None => None,
            };
            // Its document: named, the thread's, or the ask's; they agree.
            let mut artifact = named_artifact.clone();
            for other in [
                root.as_ref().and_then(|r| r.artifact.clone()),
                ask.as_ref().and_then(|a| a.artifact.clone()),
            ]
            .into_iter()
            .flatten()
            {
                match &artifact {
                    Some(x) if *x != other => {
                        return Err(invalid(
                            "the `artifact`, the thread and the ask are on different documents",
                        ));
                    }
                    _ => artifact = Some(other),
                }
            }
            let (project, issue) = match &artifact {
                Some(d) => {
                    let a = self.document_in(tx, d).await?;
                    if let On::Issue(k) = &on
                        && a.scope.issue() != Some(k)
                    {
                        return Err(invalid("`artifact` names no document of this issue"));
                    }
                    if let Some(q) = &new.quote {
                        // The quote must match once in its scope (the engine's rules).
                        let d = self.console.loaded(tx, &a).await?;
                        let probe = doc::EditOp::Replace {
                            quote: engine_quote(q),
                            text: q.exact.clone(),
                            block: new.block.clone(),
                            block_token: None,
                        };
                        d.apply(None, &[probe], &mut || self.console.new_block_id())?;
                    } else if let Some(b) = &new.block {
                        let d = self.console.loaded(tx, &a).await?;
                        if d.position(b).is_none() {
                            return Err(Error::with_message(
                                ErrorCode::TARGET_NOT_FOUND,
                                "the document has no block with this id",
                            ));
                        }
                    }
                    (
                        a.scope.project().ok_or_else(no_document)?,
                        a.scope.issue().cloned(),
                    )
                }
                None => {
                    let On::Issue(k) = &on else {
                        return Err(no_document());
                    };
                    let issue = tx.issue(k).await?.ok_or_else(|| not_found("issue"))?;
                    (issue.project, Some(k.clone()))
                }
            };
            let comment = Comment {
                id: id.clone(),
                thread_id: root
                    .as_ref()
                    .map(|r| r.id.clone())
                    .unwrap_or_else(|| id.clone()),
                parent: parent.clone(),
                project,
                issue,
                artifact,
                ask: on_ask.clone(),
                quote: new.quote.clone(),
                block: new.block.clone(),
                body: checked.body.clone(),
                author: actor.clone(),
                suggestion: new.suggestion.as_ref().map(|s| CommentSuggestion {
                    replacement: s.replacement.clone(),
                    state: SuggestionState::Pending,
                }),
                mentions: checked.mentions.clone(),
                thread_state: root.is_none().then_some(ThreadState::Open),
                created_at: now,
                edited_at: None,
            };
            tx.insert_comment(&comment).await?;
            if let Some(a) = ask.as_mut() {
                Self::replied(a, actor, now);
                tx.update_ask(a).await?;
            }
            let mut opened = Vec::new();
            for m in &comment.mentions {
                opened.push(self.mention(tx, &comment, m, actor).await?);
            }
            let view = self.comment_view(tx, comment).await?;
            let place = Place {
                project: &view.project,
                issue: view.issue.as_ref(),
                artifact: view.artifact.as_deref(),
            };
            let data = serde_json::to_value(&view).unwrap_or_default();
            let e = self
                .append_at(tx, "comment.created", actor, place, data)
                .await?;
            let from = format!("countersign://comment/{}", view.id);
            self.console
                .keep_mentions(tx, &from, view.issue.as_ref(), (&view.body, false), &e)
                .await?;
            Ok((view, vec![e], opened))
        })?;
        self.console.document_committed(&events, None);
        self.console.dispatch(&opened).await;
        Ok(view)
    }

    /// A reply on an ask moves its turn (docs/asks.md, "Whose turn").
    fn replied(ask: &mut Ask, actor: &Actor, now: Time) {
        let next = match (ask.state, actor.is_human()) {
            (AskState::Open, true) => Some(Turn::Agent),
            (AskState::Open, false) => Some(Turn::Human),
            // An answered ask is in no inbox, whoever replies (issue 27).
            (AskState::Answered, _) => None,
            (AskState::Retracted | AskState::Resolved, _) => ask.turn,
        };
        if next != ask.turn {
            ask.turn = next;
            ask.turn_since = now;
        }
        ask.updated_at = now;
    }

    /// A comment body's rules: the body (at most 65,536 characters), a suggestion only with a
    /// quote, mentions as session ids.
    fn check_comment(&self, new: &NewComment) -> Result<CheckedComment, Error> {
        let body = check_text(&new.body, "a comment", TEXT_MAX)?;
        if new.suggestion.is_some() && new.quote.is_none() {
            return Err(invalid("a suggestion replaces a `quote`: name one"));
        }
        if new.parent.is_some()
            && (new.artifact.is_some()
                || new.ask.is_some()
                || new.quote.is_some()
                || new.block.is_some()
                || new.suggestion.is_some())
        {
            return Err(invalid(
                "a reply (`parent`) takes its thread's place: no `artifact`, `ask`, `quote`, `block` or `suggestion`",
            ));
        }
        let mut mentions: Vec<String> = Vec::new();
        for m in &new.mentions {
            if !is_session_id(m) {
                return Err(Error::with_message(
                    ErrorCode::INVALID_SESSION_ID,
                    "a mention is a session id",
                ));
            }
            if !mentions.contains(m) {
                mentions.push(m.clone());
            }
        }
        if let Some(s) = &new.suggestion
            && rules::chars(&s.replacement) > TEXT_MAX
        {
            return Err(cap("a replacement is at most 65536 characters"));
        }
        Ok(CheckedComment { body, mentions })
    }

    /// An issue's comments (those on its documents and asks included), oldest first;
    /// `artifact` scopes them to one document.
    pub async fn issue_comments(
        &self,
        key: &str,
        artifact: Option<&str>,
    ) -> Result<Vec<CommentView>, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let artifact = artifact
            .map(|a| {
                uuid_id(a, "artifact").map_err(|_| {
                    Error::with_message(ErrorCode::INVALID_QUERY, "`artifact` is a document id")
                })
            })
            .transpose()?;
        let mut tx = self.console.parts.storage.read().await?;
        if tx.issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        let cs = tx
            .comments(&CommentFilter {
                issue: Some(key),
                artifact,
                ..Default::default()
            })
            .await?;
        self.comment_views(&mut *tx, cs).await
    }

    /// One comment with its whole thread, oldest first.
    pub async fn comment(&self, id: &str) -> Result<CommentThread, Error> {
        let id = uuid_id(id, "comment")?;
        let mut tx = self.console.parts.storage.read().await?;
        let c = tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?;
        let thread = tx
            .comments(&CommentFilter {
                thread: Some(c.thread_id.clone()),
                ..Default::default()
            })
            .await?;
        let comment = self.comment_view(&mut *tx, c).await?;
        let thread = self.comment_views(&mut *tx, thread).await?;
        Ok(CommentThread { comment, thread })
    }

    /// Runs `change` on a comment (locked) and appends `kind` when it says it changed
    /// something; answers the comment as it is after.
    async fn change_comment(
        &self,
        actor: &Actor,
        id: &str,
        kind: &'static str,
        change: impl Fn(&mut Comment, Time) -> Result<bool, Error> + Send + Sync,
    ) -> Result<CommentView, Error> {
        let id = uuid_id(id, "comment")?;
        let now = self.console.now();
        let (view, event) = transact!(self.console, |tx| {
            let mut c = tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?;
            if let (Some(k), None) = (&c.issue, &c.artifact) {
                // Locks go comment, then issue.
                tx.issue(k).await?;
            }
            if !change(&mut c, now)? {
                let view = self.comment_view(tx, c).await?;
                return Ok((view, None));
            }
            tx.update_comment(&c).await?;
            let view = self.comment_view(tx, c).await?;
            let place = Place {
                project: &view.project,
                issue: view.issue.as_ref(),
                artifact: view.artifact.as_deref(),
            };
            let data = serde_json::to_value(&view).unwrap_or_default();
            let e = self.append_at(tx, kind, actor, place, data).await?;
            if kind == "comment.edited" {
                let from = format!("countersign://comment/{}", view.id);
                self.console
                    .keep_mentions(tx, &from, view.issue.as_ref(), (&view.body, true), &e)
                    .await?;
            }
            Ok((view, Some(e)))
        })?;
        if let Some(e) = event {
            self.console.event_committed(e.id);
        }
        Ok(view)
    }

    /// Edits a comment's body (a person). The same body changes nothing.
    pub async fn edit_comment(
        &self,
        actor: &Actor,
        id: &str,
        body: &str,
    ) -> Result<CommentView, Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let body = check_text(body, "a comment", TEXT_MAX)?;
        self.change_comment(actor, id, "comment.edited", |c, now| {
            if c.body == body {
                return Ok(false);
            }
            c.body = body.clone();
            c.edited_at = Some(now);
            Ok(true)
        })
        .await
    }

    /// Resolves (or reopens) the thread a comment is in; answers the thread's root. Resolving
    /// a resolved thread or reopening an open one changes nothing (200, no event).
    pub async fn resolve_thread(
        &self,
        actor: &Actor,
        id: &str,
        resolve: bool,
    ) -> Result<CommentView, Error> {
        if !resolve && !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let id = uuid_id(id, "comment")?;
        let root = {
            let mut tx = self.console.parts.storage.read().await?;
            tx.comment(&id)
                .await?
                .ok_or_else(|| not_found("comment"))?
                .thread_id
        };
        let (want, kind) = if resolve {
            (ThreadState::Resolved, "comment.resolved")
        } else {
            (ThreadState::Open, "comment.reopened")
        };
        self.change_comment(actor, &root, kind, |c, _| {
            if c.thread_state == Some(want) {
                return Ok(false);
            }
            c.thread_state = Some(want);
            Ok(true)
        })
        .await
    }

    /// Rejects a comment's pending suggestion (a person); a decided or absent one is
    /// SUGGESTION_STATE.
    pub async fn reject_suggestion(&self, actor: &Actor, id: &str) -> Result<CommentView, Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        self.change_comment(actor, id, "suggestion.rejected", |c, _| {
            match &mut c.suggestion {
                Some(CommentSuggestion {
                    state: state @ SuggestionState::Pending,
                    ..
                }) => {
                    *state = SuggestionState::Rejected;
                    Ok(true)
                }
                other => Err(suggestion_state(other.as_ref())),
            }
        })
        .await
    }

    /// The mentioned session's reply to a comment (an agent naming itself in `actor`): a
    /// reply in the comment's thread. A session the comment does not mention:
    /// SESSION_FORBIDDEN.
    pub async fn comment_reply(
        &self,
        actor: &Actor,
        id: &str,
        body: &str,
    ) -> Result<CommentView, Error> {
        let id = uuid_id(id, "comment")?;
        let session = actor.session().ok_or(ErrorCode::INVALID_SESSION_ID)?;
        let c = {
            let mut tx = self.console.parts.storage.read().await?;
            tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?
        };
        if !c.mentions.iter().any(|m| m == session) {
            return Err(Error::with_message(
                ErrorCode::SESSION_FORBIDDEN,
                "only a session the comment mentions replies to it",
            ));
        }
        let new = NewComment {
            body: body.to_owned(),
            parent: Some(id.clone()),
            ..Default::default()
        };
        match (&c.artifact, &c.issue) {
            (Some(d), _) => self.add_comment(actor, On::Document(d.clone()), new).await,
            (None, Some(k)) => self.add_comment(actor, On::Issue(k.clone()), new).await,
            (None, None) => Err(not_found("comment")),
        }
    }

    /// Retries a comment's mention delivery: a new attempt to `target`, which must be one of
    /// its mentions (required when it mentions several). Answers the new attempt.
    pub async fn retry_mention(
        &self,
        actor: &Actor,
        id: &str,
        target: Option<&str>,
    ) -> Result<AttemptView, Error> {
        let id = uuid_id(id, "comment")?;
        if target.is_some_and(|t| !is_session_id(t)) {
            return Err(ErrorCode::INVALID_SESSION_ID.into());
        }
        let opened = transact!(self.console, |tx| {
            let c = tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?;
            let session = match (target, c.mentions.as_slice()) {
                (_, []) => return Err(invalid("the comment mentions no session")),
                (None, [only]) => only.clone(),
                (None, _) => {
                    return Err(invalid(
                        "the comment mentions several sessions: `target` names one",
                    ));
                }
                (Some(t), all) if all.iter().any(|m| m == t) => t.to_owned(),
                (Some(_), _) => {
                    return Err(invalid("`target` is not one of the comment's mentions"));
                }
            };
            self.mention(tx, &c, &session, actor).await
        })?;
        self.console.dispatch(std::slice::from_ref(&opened)).await;
        Ok(AttemptView::from(&opened.attempt))
    }

    /// Accepts a comment's pending suggestion (a person): its quote is replaced by the
    /// replacement as a quote-anchored `replace` edit of the document, in the same transaction
    /// (the edit's refusals, QUOTE_NOT_FOUND, QUOTE_AMBIGUOUS, TARGET_NOT_FOUND, leave both
    /// unchanged); a decided or absent suggestion is SUGGESTION_STATE.
    pub async fn accept_suggestion(&self, actor: &Actor, id: &str) -> Result<CommentView, Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let id = uuid_id(id, "comment")?;
        let (view, events, kept) = transact!(self.console, |tx| {
            let mut c = tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?;
            let replacement = match &c.suggestion {
                Some(CommentSuggestion {
                    replacement,
                    state: SuggestionState::Pending,
                }) => replacement.clone(),
                other => return Err(suggestion_state(other.as_ref())),
            };
            let (Some(artifact), Some(quote)) = (c.artifact.clone(), c.quote.clone()) else {
                return Err(suggestion_state(None));
            };
            let op = doc::EditOp::Replace {
                quote: engine_quote(&quote),
                text: replacement,
                block: c.block.clone(),
                block_token: None,
            };
            let (_, mut events, kept) = self
                .console
                .change_document(tx, actor, &artifact, None, std::slice::from_ref(&op))
                .await?;
            if let Some(s) = c.suggestion.as_mut() {
                s.state = SuggestionState::Accepted;
            }
            tx.update_comment(&c).await?;
            let view = self.comment_view(tx, c).await?;
            let place = Place {
                project: &view.project,
                issue: view.issue.as_ref(),
                artifact: view.artifact.as_deref(),
            };
            let data = serde_json::to_value(&view).unwrap_or_default();
            events.push(
                self.append_at(tx, "suggestion.accepted", actor, place, data)
                    .await?,
            );
            Ok((view, events, kept))
        })?;
        self.console.document_committed(&events, kept);
        Ok(view)
    }

    /// A document's comments, oldest first.
    pub async fn document_comments(&self, artifact: &str) -> Result<Vec<CommentView>, Error> {
        let artifact = uuid_id(artifact, "artifact")?;
        let mut tx = self.console.parts.storage.read().await?;
        self.document_in(&mut *tx, &artifact).await?;
        let cs = tx
            .comments(&CommentFilter {
                artifact: Some(artifact),
                ..Default::default()
            })
            .await?;
        self.comment_views(&mut *tx, cs).await
    }
}

fn suggestion_state(s: Option<&CommentSuggestion>) -> Error {
    let state = match s.map(|s| s.state) {
        None => "none",
        Some(SuggestionState::Pending) => "pending",
        Some(SuggestionState::Accepted) => "accepted",
        Some(SuggestionState::Rejected) => "rejected",
    };
    Error::with_message(
        ErrorCode::SUGGESTION_STATE,
        "the comment has no pending suggestion",
    )
    .with_detail("state", state)
}

/// What a new comment is on, as its route names it.
enum On {
    Issue(IssueKey),
    Document(String),
}

/// A comment body once checked.
struct CheckedComment {
    body: String,
    mentions: Vec<String>,
}
