//! Claims: who works an issue, taken and given back by compare-and-set on the holder.

use super::*;
use crate::work::Claim;

impl Issues<'_> {
    /// Whether `actor` is the claim's holder.
    fn holds(claim: &Claim, actor: &Actor) -> bool {
        match (&claim.holder, actor) {
            (Actor::User { login: a }, Actor::User { login: b }) => a == b,
            (
                Actor::Agent {
                    session: Some(a), ..
                },
                Actor::Agent {
                    session: Some(b), ..
                },
            ) => a == b,
            _ => false,
        }
    }

    /// Whether a holder still holds: a person always, a session while it is live.
    async fn holder_live(&self, holder: &Actor) -> Result<bool, Error> {
        match holder {
            Actor::Agent {
                session: Some(s), ..
            } => self.console.messages().session_is_live(s).await,
            Actor::Agent { session: None, .. } => Ok(false),
            _ => Ok(true),
        }
    }

    /// Claims an issue for the calling session or person. The claim is a compare-and-set on
    /// the holder read first: a live or human holder is ISSUE_CLAIMED (a person may `force`);
    /// a holder that changes under the request is read again once, and a second change is
    /// CLAIM_CONTENDED. The status does not move.
    pub async fn claim(&self, actor: &Actor, key: &str, force: bool) -> Result<Claim, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        if force && !actor.is_human() {
            return Err(Error::with_message(
                ErrorCode::HUMAN_ONLY,
                "only a person may force a claim",
            ));
        }
        for _ in 0..2 {
            let seen = self.read_claim(&key).await?;
            if let Some(c) = &seen {
                if Self::holds(c, actor) {
                    return Ok(c.clone());
                }
                if self.holder_live(&c.holder).await? && !force {
                    return Err(
                        Error::new(ErrorCode::ISSUE_CLAIMED).with_detail("holder", &c.holder)
                    );
                }
            }
            let claim = Claim {
                holder: actor.clone(),
                at: self.console.now(),
            };
            if self
                .swap_claim(
                    actor,
                    &key,
                    &seen,
                    Some(claim.clone()),
                    "issue.claimed",
                    &claim.holder,
                )
                .await?
            {
                return Ok(claim);
            }
        }
        Err(ErrorCode::CLAIM_CONTENDED.into())
    }

    /// The issue's claim as it is now.
    async fn read_claim(&self, key: &IssueKey) -> Result<Option<Claim>, Error> {
        let mut tx = self.console.parts.storage.read().await?;
        Ok(tx
            .issues()
            .issue(key)
            .await?
            .ok_or_else(|| not_found("issue"))?
            .claim)
    }

    /// Sets the issue's claim to `next` if it is still `seen` (the compare-and-set of claims),
    /// appending `kind` naming `holder`; false when the claim changed in between.
    async fn swap_claim(
        &self,
        actor: &Actor,
        key: &IssueKey,
        seen: &Option<Claim>,
        next: Option<Claim>,
        kind: &'static str,
        holder: &Actor,
    ) -> Result<bool, Error> {
        transact!(self.console, |tx| {
            let mut issue = tx
                .issues()
                .issue(key)
                .await?
                .ok_or_else(|| not_found("issue"))?;
            if issue.claim != *seen {
                return Ok(false);
            }
            issue.claim = next.clone();
            issue.sequence += 1;
            issue.updated_at = self.console.now();
            tx.issues().update_issue(&issue).await?;
            let data = json!({ "key": issue.key, "holder": holder });
            self.console
                .append(
                    tx,
                    kind,
                    actor,
                    Some(&issue.project),
                    Some((&issue.key, issue.sequence)),
                    data,
                )
                .await?;
            Ok(true)
        })
    }

    /// Releases an issue's claim: its holder, any person, or anyone once the holding session
    /// is no longer live. No claim: done already.
    pub async fn release(&self, actor: &Actor, key: &str) -> Result<(), Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        for _ in 0..2 {
            let seen = self.read_claim(&key).await?;
            let Some(c) = &seen else {
                return Ok(());
            };
            if !Self::holds(c, actor) && !actor.is_human() && self.holder_live(&c.holder).await? {
                return Err(Error::new(ErrorCode::ISSUE_CLAIMED).with_detail("holder", &c.holder));
            }
            if self
                .swap_claim(actor, &key, &seen, None, "issue.released", &c.holder)
                .await?
            {
                return Ok(());
            }
        }
        Err(ErrorCode::CLAIM_CONTENDED.into())
    }
}
