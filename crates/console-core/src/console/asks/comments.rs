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
        artifact: ArtifactId,
        new: NewComment,
    ) -> Result<CommentView, Error> {
        if new.artifact.is_some() {
            return Err(invalid(
                "the path names the document: no `artifact` in the body",
            ));
        }
        self.add_comment(actor, On::Document(artifact), new).await
    }

    /// Adds a comment: its request checked first, then in one transaction its thread and ask
    /// (locked first: locks go comment and ask, then document or issue), its place, the
    /// comment, the ask's turn, its mentions' deliveries and its event.
    async fn add_comment(
        &self,
        actor: &Actor,
        on: On,
        new: NewComment,
    ) -> Result<CommentView, Error> {
        let req = CommentRequest::of(self.check_comment(&new)?, on, new)?;
        let now = self.console.now();
        let id = self.console.new_id(CommentId::from_random);
        // The whole `WorkTx`: a mention's delivery attempt opens through the messages' code.
        transact!(self.console, |tx, after| {
            self.write_comment(tx, after, &req, id, actor, now).await
        })
    }

    /// A new comment's writes, in its transaction ([`Asks::add_comment`]).
    async fn write_comment(
        &self,
        tx: &mut dyn WorkTx,
        after: &mut AfterCommit,
        req: &CommentRequest,
        id: CommentId,
        actor: &Actor,
        now: Time,
    ) -> Result<CommentView, Error> {
        let root = self.thread_root(tx, req).await?;
        let on_ask = req.ask.or_else(|| root.as_ref().and_then(|r| r.ask));
        let mut ask = match on_ask {
            Some(a) => Some(
                tx.asks()
                    .ask(a)
                    .await?
                    .filter(|x| req.here(x.head.issue.as_ref(), x.head.artifact))
                    .ok_or_else(|| invalid("`ask` names no ask here"))?,
            ),
            None => None,
        };
        let artifact = req.document_of(root.as_ref(), ask.as_ref())?;
        let (project, issue) = self.comment_place(tx, req, artifact).await?;
        let place = (project, issue, artifact);
        let comment = req.comment(id, root.as_ref(), on_ask, place, actor, now);
        tx.asks().insert_comment(&comment).await?;
        if let Some(a) = ask.as_mut() {
            Self::replied(a, actor, now);
            tx.asks().update_ask(a).await?;
        }
        for m in &comment.mentions {
            self.mention(tx, after, &comment, m, actor).await?;
        }
        let view = self.comment_view(tx, comment).await?;
        let e = self
            .append_comment(tx, "comment.created", actor, &view)
            .await?;
        let c = &view.comment;
        let from = format!("countersign://comment/{}", c.id);
        self.console
            .documents()
            .keep_mentions(tx, &from, c.issue.as_ref(), (&c.body, false), &e)
            .await?;
        Ok(view)
    }

    /// The thread a reply goes in: its parent's root (none for a new thread).
    async fn thread_root(
        &self,
        tx: &mut dyn WorkTx,
        req: &CommentRequest,
    ) -> Result<Option<Comment>, Error> {
        let Some(p) = &req.parent else {
            return Ok(None);
        };
        let c = tx
            .asks()
            .comment(*p)
            .await?
            .filter(|c| req.here(c.issue.as_ref(), c.artifact))
            .ok_or_else(|| invalid("`parent` names no comment here"))?;
        if c.thread_id == c.id {
            return Ok(Some(c));
        }
        let root = tx
            .asks()
            .comment(c.thread_id)
            .await?
            .ok_or_else(|| not_found("thread"))?;
        Ok(Some(root))
    }

    /// Where a comment goes: its document's project and issue (its quote must match once in
    /// its scope, by the engine's rules, and its block be in the document), or the issue the
    /// route names.
    async fn comment_place(
        &self,
        tx: &mut dyn WorkTx,
        req: &CommentRequest,
        artifact: Option<ArtifactId>,
    ) -> Result<(ProjectKey, Option<IssueKey>), Error> {
        let Some(d) = artifact else {
            let On::Issue(k) = &req.on else {
                return Err(no_document());
            };
            let issue = tx
                .issues()
                .issue(k)
                .await?
                .ok_or_else(|| not_found("issue"))?;
            return Ok((issue.project, Some(k.clone())));
        };
        let a = self.document_in(tx, d).await?;
        if let On::Issue(k) = &req.on
            && a.scope.issue() != Some(k)
        {
            return Err(invalid("`artifact` names no document of this issue"));
        }
        if let Some(q) = &req.new.quote {
            let d = self.console.documents().loaded(tx, &a).await?;
            let probe = doc::EditOp::Replace {
                quote: engine_quote(q),
                text: q.exact.clone(),
                block: req.new.block.clone(),
                block_token: None,
            };
            d.apply(None, &[probe], &mut || {
                self.console.documents().new_block_id()
            })?;
        } else if let Some(b) = &req.new.block {
            let d = self.console.documents().loaded(tx, &a).await?;
            if d.position(b).is_none() {
                return Err(Error::with_message(
                    ErrorCode::TARGET_NOT_FOUND,
                    "the document has no block with this id",
                ));
            }
        }
        Ok((
            a.scope.project().ok_or_else(no_document)?,
            a.scope.issue().cloned(),
        ))
    }

    /// A reply on an ask moves its turn (docs/asks.md, "Whose turn").
    fn replied(ask: &mut Ask, actor: &Actor, now: Time) {
        let next = match (ask.head.state, actor.is_human()) {
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
        let mut mentions: Vec<SessionId> = Vec::new();
        for m in &new.mentions {
            let m = SessionId::parse(m).ok_or_else(|| {
                Error::with_message(ErrorCode::INVALID_SESSION_ID, "a mention is a session id")
            })?;
            if !mentions.contains(&m) {
                mentions.push(m);
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
                ArtifactId::parse(a).ok_or_else(|| {
                    Error::with_message(ErrorCode::INVALID_QUERY, "`artifact` is a document id")
                })
            })
            .transpose()?;
        let mut tx = self.read().await?;
        if tx.issues().issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        let cs = tx
            .asks()
            .comments(&CommentFilter {
                issue: Some(key),
                artifact,
                ..Default::default()
            })
            .await?;
        self.comment_views(&mut *tx, cs).await
    }

    /// One comment with its whole thread, oldest first.
    pub async fn comment(&self, id: CommentId) -> Result<CommentThread, Error> {
        let mut tx = self.read().await?;
        let c = tx
            .asks()
            .comment(id)
            .await?
            .ok_or_else(|| not_found("comment"))?;
        let thread = tx
            .asks()
            .comments(&CommentFilter {
                thread: Some(c.thread_id),
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
        id: CommentId,
        kind: &'static str,
        change: impl Fn(&mut Comment, Time) -> Result<bool, Error> + Send + Sync,
    ) -> Result<CommentView, Error> {
        let now = self.console.now();
        transact!(self.console, |tx| {
            let mut c = tx
                .asks()
                .comment(id)
                .await?
                .ok_or_else(|| not_found("comment"))?;
            if let (Some(k), None) = (&c.issue, &c.artifact) {
                // Locks go comment, then issue.
                tx.issues().issue(k).await?;
            }
            if !change(&mut c, now)? {
                return self.comment_view(tx, c).await;
            }
            tx.asks().update_comment(&c).await?;
            let view = self.comment_view(tx, c).await?;
            let e = self.append_comment(tx, kind, actor, &view).await?;
            if kind == "comment.edited" {
                let c = &view.comment;
                let from = format!("countersign://comment/{}", c.id);
                self.console
                    .documents()
                    .keep_mentions(tx, &from, c.issue.as_ref(), (&c.body, true), &e)
                    .await?;
            }
            Ok(view)
        })
    }

    /// Edits a comment's body (a person). The same body changes nothing.
    pub async fn edit_comment(
        &self,
        actor: &Actor,
        id: CommentId,
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
        id: CommentId,
        resolve: bool,
    ) -> Result<CommentView, Error> {
        if !resolve && !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let root = {
            let mut tx = self.read().await?;
            tx.asks()
                .comment(id)
                .await?
                .ok_or_else(|| not_found("comment"))?
                .thread_id
        };
        let (want, kind) = if resolve {
            (ThreadState::Resolved, "comment.resolved")
        } else {
            (ThreadState::Open, "comment.reopened")
        };
        self.change_comment(actor, root, kind, |c, _| {
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
    pub async fn reject_suggestion(
        &self,
        actor: &Actor,
        id: CommentId,
    ) -> Result<CommentView, Error> {
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
        id: CommentId,
        body: &str,
    ) -> Result<CommentView, Error> {
        let session = actor.session().ok_or(ErrorCode::INVALID_SESSION_ID)?;
        let c = {
            let mut tx = self.read().await?;
            tx.asks()
                .comment(id)
                .await?
                .ok_or_else(|| not_found("comment"))?
        };
        if !c.mentions.iter().any(|m| m == session) {
            return Err(Error::with_message(
                ErrorCode::SESSION_FORBIDDEN,
                "only a session the comment mentions replies to it",
            ));
        }
        let new = NewComment {
            body: body.to_owned(),
            parent: Some(id.to_string()),
            ..Default::default()
        };
        match (c.artifact, &c.issue) {
            (Some(d), _) => self.add_comment(actor, On::Document(d), new).await,
            (None, Some(k)) => self.add_comment(actor, On::Issue(k.clone()), new).await,
            (None, None) => Err(not_found("comment")),
        }
    }

    /// Retries a comment's mention delivery: a new attempt to `target`, which must be one of
    /// its mentions (required when it mentions several). Answers the new attempt.
    pub async fn retry_mention(
        &self,
        actor: &Actor,
        id: CommentId,
        target: Option<&str>,
    ) -> Result<AttemptView, Error> {
        let target = target.map(SessionId::named).transpose()?;
        // The whole `WorkTx`: the attempt opens through the messages' code.
        let opened = transact!(self.console, |tx, after| {
            let c = tx
                .asks()
                .comment(id)
                .await?
                .ok_or_else(|| not_found("comment"))?;
            let session = match (&target, c.mentions.as_slice()) {
                (_, []) => return Err(invalid("the comment mentions no session")),
                (None, [only]) => only.clone(),
                (None, _) => {
                    return Err(invalid(
                        "the comment mentions several sessions: `target` names one",
                    ));
                }
                (Some(t), all) if all.contains(t) => t.clone(),
                (Some(_), _) => {
                    return Err(invalid("`target` is not one of the comment's mentions"));
                }
            };
            self.mention(tx, after, &c, &session, actor).await
        })?;
        Ok(AttemptView::from(&opened))
    }

    /// Accepts a comment's pending suggestion (a person): its quote is replaced by the
    /// replacement as a quote-anchored `replace` edit of the document, in the same transaction
    /// (the edit's refusals, QUOTE_NOT_FOUND, QUOTE_AMBIGUOUS, TARGET_NOT_FOUND, leave both
    /// unchanged); a decided or absent suggestion is SUGGESTION_STATE.
    pub async fn accept_suggestion(
        &self,
        actor: &Actor,
        id: CommentId,
    ) -> Result<CommentView, Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        // The whole `WorkTx`: the suggestion is applied through the documents' edit.
        transact!(self.console, |tx, after| {
            let mut c = tx
                .asks()
                .comment(id)
                .await?
                .ok_or_else(|| not_found("comment"))?;
            let replacement = match &c.suggestion {
                Some(CommentSuggestion {
                    replacement,
                    state: SuggestionState::Pending,
                }) => replacement.clone(),
                other => return Err(suggestion_state(other.as_ref())),
            };
            let (Some(artifact), Some(quote)) = (c.artifact, c.quote.clone()) else {
                return Err(suggestion_state(None));
            };
            let op = doc::EditOp::Replace {
                quote: engine_quote(&quote),
                text: replacement,
                block: c.block.clone(),
                block_token: None,
            };
            let (_, kept) = self
                .console
                .documents()
                .change_document(tx, actor, artifact, None, std::slice::from_ref(&op))
                .await?;
            after.keep_document(kept);
            if let Some(s) = c.suggestion.as_mut() {
                s.state = SuggestionState::Accepted;
            }
            tx.asks().update_comment(&c).await?;
            let view = self.comment_view(tx, c).await?;
            self.append_comment(tx, "suggestion.accepted", actor, &view)
                .await?;
            Ok(view)
        })
    }

    /// A document's comments, oldest first.
    pub async fn document_comments(&self, artifact: ArtifactId) -> Result<Vec<CommentView>, Error> {
        let mut tx = self.read().await?;
        self.document_in(&mut *tx, artifact).await?;
        let cs = tx
            .asks()
            .comments(&CommentFilter {
                artifact: Some(artifact),
                ..Default::default()
            })
            .await?;
        self.comment_views(&mut *tx, cs).await
    }
}

/// A body's id (`ask`, `parent`, `artifact`) parsed by its kind's rule: one that is not one
/// names nothing here, refused with the field's own words.
fn named<T>(
    id: Option<&str>,
    parse: fn(&str) -> Option<T>,
    refusal: &str,
) -> Result<Option<T>, Error> {
    id.map(|x| parse(x).ok_or_else(|| invalid(refusal)))
        .transpose()
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
    Document(ArtifactId),
}

/// A comment body once checked.
struct CheckedComment {
    body: String,
    mentions: Vec<SessionId>,
}

/// A new comment's request, checked before its transaction: what its route puts it on, its
/// checked body and mentions, and the ask, parent and document it names.
struct CommentRequest {
    on: On,
    new: NewComment,
    checked: CheckedComment,
    ask: Option<AskId>,
    parent: Option<CommentId>,
    artifact: Option<ArtifactId>,
}

impl CommentRequest {
    fn of(checked: CheckedComment, on: On, new: NewComment) -> Result<Self, Error> {
        let ask = named(new.ask.as_deref(), AskId::parse, "`ask` names no ask here")?;
        let parent = named(
            new.parent.as_deref(),
            CommentId::parse,
            "`parent` names no comment here",
        )?;
        let artifact = match &on {
            On::Document(d) => Some(*d),
            On::Issue(_) => named(
                new.artifact.as_deref(),
                ArtifactId::parse,
                "`artifact` names no document of this issue",
            )?,
        };
        if (new.quote.is_some() || new.block.is_some()) && artifact.is_none() {
            return Err(invalid(
                "a `quote` or `block` is in a document: name the `artifact`",
            ));
        }
        Ok(Self {
            on,
            new,
            checked,
            ask,
            parent,
            artifact,
        })
    }

    /// Whether a comment or ask on `issue` and `artifact` is where the route says.
    fn here(&self, issue: Option<&IssueKey>, artifact: Option<ArtifactId>) -> bool {
        match &self.on {
            On::Issue(k) => issue == Some(k),
            On::Document(d) => artifact == Some(*d),
        }
    }

    /// The comment's document: named, the thread's, or the ask's; they agree.
    fn document_of(
        &self,
        root: Option<&Comment>,
        ask: Option<&Ask>,
    ) -> Result<Option<ArtifactId>, Error> {
        let mut artifact = self.artifact;
        for other in [
            root.and_then(|r| r.artifact),
            ask.and_then(|a| a.head.artifact),
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
        Ok(artifact)
    }

    /// The comment as stored: in `root`'s thread (a thread of its own without one), on the
    /// ask `ask`, at `place`.
    fn comment(
        &self,
        id: CommentId,
        root: Option<&Comment>,
        ask: Option<AskId>,
        (project, issue, artifact): AskPlace,
        actor: &Actor,
        now: Time,
    ) -> Comment {
        Comment {
            id,
            thread_id: root.map_or(id, |r| r.id),
            parent: self.parent,
            project,
            issue,
            artifact,
            ask,
            quote: self.new.quote.clone(),
            block: self.new.block.clone(),
            body: self.checked.body.clone(),
            author: actor.clone(),
            suggestion: self.new.suggestion.as_ref().map(|s| CommentSuggestion {
                replacement: s.replacement.clone(),
                state: SuggestionState::Pending,
            }),
            mentions: self.checked.mentions.clone(),
            thread_state: root.is_none().then_some(ThreadState::Open),
            created_at: now,
            edited_at: None,
        }
    }
}
