//! Asks on documents: block asks, approval requests, reviews.

use super::*;

/// A document that is not one (a file, an image, an agent conversation's artifact).
pub(super) fn no_document() -> Error {
    Error::with_message(
        ErrorCode::NOT_FOUND,
        "no such document: asks and comments go on an issue's or a project's markdown document",
    )
}

/// An approval request (protocol §6.2): `{summary?, actor?}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalIn {
    pub summary: Option<String>,
    pub actor: Option<String>,
}

/// A review (protocol §6.2): `{outcome, version, body?}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewIn {
    pub outcome: ReviewOutcome,
    pub version: i64,
    pub body: Option<String>,
}

/// `approval.requested`, `approval.approved`, `approval.changes_requested`.
#[derive(Serialize)]
struct ApprovalData<'a> {
    artifact: ArtifactId,
    version: i64,
    ask: Option<AskId>,
    by: &'a Actor,
    #[serde(with = "rfc3339")]
    at: Time,
}

/// What an approval request answers: the ask, and whether it is new (201) or the open one
/// handed back to a person (200).
#[derive(Debug, Clone)]
pub struct ApprovalRequested {
    pub ask: AskView,
    pub created: bool,
}

/// A new approval ask for `approval`'s version of document `a`, worded by `summary` or
/// "Approve version n of file?", with the two options a review takes.
fn approval_ask(
    id: AskId,
    a: &Artifact,
    approval: Approval,
    summary: Option<String>,
    actor: &Actor,
    now: Time,
) -> Result<Ask, Error> {
    let version = approval.version;
    let question =
        summary.unwrap_or_else(|| format!("Approve version {version} of {}?", a.filename));
    let options = vec![
        AskOption {
            id: "approve".into(),
            label: "Approve".into(),
        },
        AskOption {
            id: "request_changes".into(),
            label: "Request changes".into(),
        },
    ];
    let place = (
        a.scope.project().ok_or_else(no_document)?,
        a.scope.issue().cloned(),
        Some(a.id),
    );
    Ok(Ask {
        approval: Some(approval),
        ..Ask::opened(id, AskKind::Approval, place, question, options, actor, now)
    })
}

/// The `:::ask` block of an ask.
fn ask_block(ask: &Ask) -> Result<String, Error> {
    doc::write_ask(&doc::AskBlock {
        id: ask.head.id.to_string(),
        state: ask.head.state.as_str().to_owned(),
        question: ask.head.question.clone(),
        options: ask
            .head
            .options
            .iter()
            .map(|o| doc::AskOption {
                id: o.id.clone(),
                label: o.label.clone(),
            })
            .collect(),
        attributes: Default::default(),
    })
    .map_err(|e| invalid(e.to_string()))
}

/// An edit op on the whole text of block `id` (made by `op` from that text); `None` when the
/// document has no such block.
fn whole_block(
    d: &doc::Document,
    id: &str,
    op: impl FnOnce(String) -> doc::EditOp,
) -> Option<doc::EditOp> {
    let p = d.position(id)?;
    let text = d.markdown().get(p.block.range.start..p.block.range.end)?;
    Some(op(text.to_owned()))
}

/// A comment's quote as the engine takes it.
pub(super) fn engine_quote(q: &Quote) -> doc::Quote {
    doc::Quote {
        exact: q.exact.clone(),
        prefix: q.prefix.clone(),
        suffix: q.suffix.clone(),
    }
}

/// The loaded document and the events and document to keep of a change made in a transaction.
type Changed = Option<(Artifact, doc::Document)>;

impl Asks<'_> {
    /// An issue's or project's markdown document, locked in a write transaction.
    pub(super) async fn document_in(
        &self,
        tx: &mut dyn WorkTx,
        id: ArtifactId,
    ) -> Result<Artifact, Error> {
        let a = tx
            .documents()
            .artifact(id)
            .await?
            .ok_or_else(|| not_found("artifact"))?;
        if a.kind != ArtifactKind::Document || matches!(a.scope, DocScope::Agent(_)) {
            return Err(no_document());
        }
        Ok(a)
    }

    /// Open approval asks of a document go to their agent's turn: the content changed after
    /// the request (protocol §6.3: an open approval ask follows later versions and waits on
    /// its agent until the approval route hands it back). Called by the documents' writes in
    /// their transaction.
    pub(crate) async fn approval_follows(
        &self,
        tx: &mut dyn WorkTx,
        artifact: ArtifactId,
    ) -> Result<(), Error> {
        let now = self.console.now();
        let open = tx
            .asks()
            .asks(&AskFilter {
                artifact: Some(artifact),
                states: vec![AskState::Open],
                ..Default::default()
            })
            .await?;
        for mut a in open {
            if a.head.kind == AskKind::Approval && a.turn != Some(Turn::Agent) {
                a.turn = Some(Turn::Agent);
                a.turn_since = now;
                a.updated_at = now;
                tx.asks().update_ask(&a).await?;
            }
        }
        Ok(())
    }

    /// Rewrites a block ask's `:::ask` block to say what the ask says now (its wording, its
    /// state). A block the document no longer has (someone removed it) is left alone.
    pub(super) async fn rewrite_block(
        &self,
        tx: &mut dyn WorkTx,
        actor: &Actor,
        ask: &mut Ask,
    ) -> Result<Changed, Error> {
        let (Some(artifact), Some(_)) = (ask.head.artifact, ask.head.block.as_ref()) else {
            return Ok(None);
        };
        let a = self.document_in(tx, artifact).await?;
        let current = self.console.documents().loaded(tx, &a).await?;
        let Some(block) = current
            .asks()
            .into_iter()
            .find(|x| x.ask.id == ask.head.id)
            .map(|x| x.block)
        else {
            return Ok(None);
        };
        let md = ask_block(ask)?;
        // As an edit op (the document's log replays ops): the block's whole text replaced.
        let Some(op) = whole_block(&current, &block, |text| doc::EditOp::Replace {
            quote: doc::Quote::exact(text),
            text: md.clone(),
            block: Some(block.clone()),
            block_token: None,
        }) else {
            return Ok(None);
        };
        let (_, kept) = self
            .console
            .documents()
            .change_document(tx, actor, artifact, None, std::slice::from_ref(&op))
            .await?;
        if let Some((_, d)) = &kept {
            ask.head.block = d
                .asks()
                .into_iter()
                .find(|x| x.ask.id == ask.head.id)
                .map(|x| x.block)
                .or(ask.head.block.take());
        }
        Ok(kept)
    }

    /// Opens a question ask on a document; with `block`, an `:::ask` block goes in after that
    /// block (a block ask; TARGET_NOT_FOUND for a block the document lacks).
    pub async fn open_document_ask(
        &self,
        actor: &Actor,
        artifact: ArtifactId,
        new: NewAsk,
    ) -> Result<AskView, Error> {
        let question = check_text(&new.question, "a question", QUESTION_MAX)?;
        let options = check_options(&new.options)?;
        let now = self.console.now();
        let id = self.console.new_id(AskId::from_random);
        // The whole `WorkTx`: a block ask goes into its document through the documents' edit.
        let view = transact!(self.console, |tx, after| {
            let a = self.document_in(tx, artifact).await?;
            let mut ask = Ask::opened(
                id,
                AskKind::Question,
                (
                    a.scope.project().ok_or_else(no_document)?,
                    a.scope.issue().cloned(),
                    Some(a.id),
                ),
                question.clone(),
                options.clone(),
                actor,
                now,
            );
            if let Some(block) = &new.block {
                let md = ask_block(&ask)?;
                // As an edit op (the document's log replays ops): after the whole text of
                // the top-level block holding `after`, the ask block as a block of its own.
                let current = self.console.documents().loaded(tx, &a).await?;
                let top = current
                    .position(block)
                    .map(|p| {
                        p.block
                            .path
                            .first()
                            .map(|s| s.id.to_string())
                            .unwrap_or_else(|| p.block.id.to_string())
                    })
                    .ok_or_else(|| {
                        Error::with_message(
                            ErrorCode::TARGET_NOT_FOUND,
                            "the document has no block with this id",
                        )
                    })?;
                let op = whole_block(&current, &top, |text| doc::EditOp::InsertAfter {
                    quote: doc::Quote::exact(text),
                    text: format!("\n\n{md}"),
                    block: Some(top.clone()),
                    block_token: None,
                })
                .ok_or_else(|| not_found("block"))?;
                let (_, kept) = self
                    .console
                    .documents()
                    .change_document(tx, actor, artifact, None, std::slice::from_ref(&op))
                    .await?;
                ask.head.block = kept.as_ref().and_then(|(_, d)| {
                    d.asks()
                        .into_iter()
                        .find(|x| x.ask.id == id)
                        .map(|x| x.block)
                });
                after.keep_document(kept);
            }
            tx.asks().insert_ask(&ask).await?;
            self.console.notify_ask(tx, &ask).await?;
            let view = self.ask_full(tx, ask).await?;
            self.append_ask(tx, "ask.opened", actor, &view).await?;
            Ok(view)
        })?;
        tracing::info!(ask = %view.head.id, "ask opened on a document");
        Ok(view)
    }

    /// A document's asks, oldest first, in `states` (any when empty).
    pub async fn document_asks(
        &self,
        artifact: ArtifactId,
        states: Vec<AskState>,
    ) -> Result<Vec<AskView>, Error> {
        let mut tx = self.read().await?;
        self.document_in(&mut *tx, artifact).await?;
        let f = AskFilter {
            artifact: Some(artifact),
            states,
            ..Default::default()
        };
        Self::listed(&mut *tx, f).await
    }

    /// Opens an approval ask for a document's latest version (its content settles into a
    /// version first), showing an earlier approval; or, when one is open, hands it back to a
    /// person for the latest version (`created` false). Appends `approval.requested` (and
    /// `ask.opened` for a new ask).
    pub async fn request_approval(
        &self,
        actor: &Actor,
        artifact: ArtifactId,
        r: ApprovalIn,
    ) -> Result<ApprovalRequested, Error> {
        let summary = r
            .summary
            .as_deref()
            .map(|s| check_text(s, "a summary", QUESTION_MAX))
            .transpose()?;
        let now = self.console.now();
        let id = self.console.new_id(AskId::from_random);
        // The whole `WorkTx`: the document settles into a version in it.
        transact!(self.console, |tx| {
            let a = self.document_in(tx, artifact).await?;
            let version = self
                .console
                .documents()
                .settle_now(tx, artifact, actor)
                .await?
                .map(|v| v.number)
                .ok_or_else(|| invalid("the document has no version to approve"))?;
            let approved = Self::last_approved(tx, artifact).await?;
            let approval = Approval { version, approved };
            let (view, created) = match Self::open_approval(tx, artifact).await? {
                Some(ask) => {
                    let view = self
                        .hand_back(tx, ask, approval, summary.as_deref(), now)
                        .await?;
                    (view, false)
                }
                None => {
                    let ask = approval_ask(id, &a, approval, summary.clone(), actor, now)?;
                    tx.asks().insert_ask(&ask).await?;
                    self.console.notify_ask(tx, &ask).await?;
                    let view = self.ask_full(tx, ask).await?;
                    self.append_ask(tx, "ask.opened", actor, &view).await?;
                    (view, true)
                }
            };
            let data = ApprovalData {
                artifact,
                version,
                ask: Some(view.head.id),
                by: actor,
                at: now,
            };
            let place = Place {
                project: &view.head.project,
                issue: view.head.issue.as_ref(),
                artifact: Some(artifact),
            };
            let data = serde_json::to_value(data).unwrap_or_default();
            self.append_at(tx, "approval.requested", actor, place, data)
                .await?;
            Ok(ApprovalRequested { ask: view, created })
        })
    }

    /// The latest version of a document a review approved, if any.
    async fn last_approved(
        tx: &mut dyn WorkTx,
        artifact: ArtifactId,
    ) -> Result<Option<Approved>, Error> {
        Ok(tx
            .asks()
            .reviews(artifact)
            .await?
            .into_iter()
            .rev()
            .find(|x| x.outcome == ReviewOutcome::Approve)
            .map(|x| Approved {
                version: x.version,
                at: x.at,
                by: x.by,
            }))
    }

    /// A document's open approval ask, if any (as listed: not locked).
    async fn open_approval(
        tx: &mut dyn WorkTx,
        artifact: ArtifactId,
    ) -> Result<Option<Ask>, Error> {
        Ok(tx
            .asks()
            .asks(&AskFilter {
                artifact: Some(artifact),
                states: vec![AskState::Open],
                ..Default::default()
            })
            .await?
            .into_iter()
            .find(|x| x.head.kind == AskKind::Approval))
    }

    /// Hands an open approval ask back to a person for `approval`'s version, reworded by
    /// `summary` if given.
    async fn hand_back(
        &self,
        tx: &mut dyn WorkTx,
        ask: Ask,
        approval: Approval,
        summary: Option<&str>,
        now: Time,
    ) -> Result<AskView, Error> {
        // Locks go ask, then document: read it again locked.
        let mut ask = tx
            .asks()
            .ask(ask.head.id)
            .await?
            .unwrap_or_else(|| ask.clone());
        ask.approval = Some(approval);
        if let Some(s) = summary {
            ask.head.question = s.to_owned();
        }
        ask.turn = Some(Turn::Human);
        ask.turn_since = now;
        ask.updated_at = now;
        tx.asks().update_ask(&ask).await?;
        self.ask_full(tx, ask).await
    }

    /// A person's review of a document's latest settled version (another version:
    /// DOCUMENT_CHANGED, naming the latest). It answers the open approval ask, if there is
    /// one, keeping its thread. Appends `approval.approved` or `approval.changes_requested`
    /// (and `ask.answered`).
    pub async fn review(
        &self,
        actor: &Actor,
        artifact: ArtifactId,
        r: ReviewIn,
    ) -> Result<(Review, Option<AskView>), Error> {
        self.review_answering(actor, artifact, r, None).await
    }

    /// A review that answers approval ask `ask` (the answer route on an approval ask), or
    /// with `None` the open approval ask if there is one.
    pub(super) async fn review_answering(
        &self,
        actor: &Actor,
        artifact: ArtifactId,
        r: ReviewIn,
        ask: Option<AskId>,
    ) -> Result<(Review, Option<AskView>), Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let body = match r.body.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(b) if rules::chars(b) > TEXT_MAX => {
                return Err(cap("a review's body is at most 65536 characters"));
            }
            Some(b) => Some(b.to_owned()),
        };
        let now = self.console.now();
        let id = self.console.new_id(ReviewId::from_random);
        // The whole `WorkTx`: the document may settle into a version in it.
        transact!(self.console, |tx| {
            // Any approval ask first (locks go ask, then document).
            let open = match ask {
                Some(id) => Some(id),
                None => Self::open_approval(tx, artifact).await?.map(|x| x.head.id),
            };
            let open = match open {
                Some(id) => tx.asks().ask(id).await?,
                None => None,
            };
            let (a, latest) = self.reviewed(tx, artifact, r.version, actor).await?;
            let review = Review {
                id,
                artifact,
                version: latest,
                outcome: r.outcome,
                body: body.clone(),
                by: actor.clone(),
                at: now,
                ask: open.as_ref().map(|x| x.head.id),
            };
            tx.asks().insert_review(&review).await?;
            let mut answered = None;
            if let Some(ask) = open {
                let view = self.answer_by_review(tx, ask, &review).await?;
                self.append_ask(tx, "ask.answered", actor, &view).await?;
                answered = Some(view);
            }
            let kind = match r.outcome {
                ReviewOutcome::Approve => "approval.approved",
                ReviewOutcome::RequestChanges => "approval.changes_requested",
            };
            let data = ApprovalData {
                artifact,
                version: latest,
                ask: review.ask,
                by: actor,
                at: now,
            };
            let project = a.scope.project().ok_or_else(no_document)?;
            let place = Place {
                project: &project,
                issue: a.scope.issue(),
                artifact: Some(artifact),
            };
            let data = serde_json::to_value(data).unwrap_or_default();
            self.append_at(tx, kind, actor, place, data).await?;
            Ok((review, answered))
        })
    }

    /// The document a review finds, and its latest settled version, which the review must
    /// name (else DOCUMENT_CHANGED, naming it): content due to settle is a version already.
    async fn reviewed(
        &self,
        tx: &mut dyn WorkTx,
        artifact: ArtifactId,
        version: i64,
        actor: &Actor,
    ) -> Result<(Artifact, i64), Error> {
        let mut a = self.document_in(tx, artifact).await?;
        if !a.settled
            && self.console.now() - a.changed_at >= crate::console::documents::settle_after()
        {
            self.console
                .documents()
                .settle_now(tx, artifact, actor)
                .await?;
            a = self.document_in(tx, artifact).await?;
        }
        let latest = a.version.as_ref().map_or(0, |v| v.number);
        if version != latest {
            return Err(Error::with_message(
                ErrorCode::DOCUMENT_CHANGED,
                format!("version {latest} is the latest settled version: review that one"),
            )
            .with_detail("version", latest)
            .with_detail("token", a.token.clone()));
        }
        Ok((a, latest))
    }

    /// An approval ask answered by a review: the review's outcome is its answer, and an
    /// approval is its `approval.approved`; out of the inbox (issue 27).
    async fn answer_by_review(
        &self,
        tx: &mut dyn WorkTx,
        mut ask: Ask,
        review: &Review,
    ) -> Result<AskView, Error> {
        let now = review.at;
        let answer = Answer {
            options: vec![review.outcome.as_str().to_owned()],
            text: review.body.clone(),
            by: review.by.clone(),
            at: now,
        };
        tx.asks().add_answer(ask.head.id, &answer).await?;
        ask.head.answer = Some(answer);
        ask.head.state = AskState::Answered;
        ask.turn = None;
        ask.turn_since = now;
        ask.updated_at = now;
        if review.outcome == ReviewOutcome::Approve
            && let Some(ap) = ask.approval.as_mut()
        {
            ap.approved = Some(Approved {
                version: review.version,
                at: now,
                by: review.by.clone(),
            });
        }
        tx.asks().update_ask(&ask).await?;
        self.ask_full(tx, ask).await
    }

    /// A document's reviews, oldest first.
    pub async fn reviews(&self, artifact: ArtifactId) -> Result<Vec<Review>, Error> {
        let mut tx = self.read().await?;
        self.document_in(&mut *tx, artifact).await?;
        Ok(tx.asks().reviews(artifact).await?)
    }
}
