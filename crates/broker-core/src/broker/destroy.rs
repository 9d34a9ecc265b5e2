//! Destroying issued credentials: the outbox's destroys, taken by whichever replica claims them,
//! and the reconciler that catches what no stored end queued and what an issuer holds without a
//! live grant (see [`super::issued`]).

use std::sync::atomic::Ordering;

use super::issued::{DestroyReport, ReconcileReport, backoff, seconds_since};
use super::outbox::queue_destroys;
use super::{Broker, Fail, read, transact};
use crate::error::Error;
use crate::ids::{GrantId, SecretName};
use crate::issuer::{Issued, IssuedState, Issuer, grant_of};
use crate::storage::OutboxItem;

/// A destroy message's payload.
#[derive(serde::Deserialize)]
struct Payload {
    grant: GrantId,
    secret: SecretName,
}

impl Broker {
    /// One destroyer pass: claims up to `limit` due destroys and asks each credential's issuer
    /// to destroy it. A destroy the issuer fails is kept with its error and tried again after a
    /// backoff (never given up: a credential that outlives its grant is what this prevents).
    pub async fn destroy_due(&self, limit: u32) -> Result<DestroyReport, Error> {
        let items = self
            .claim_outbox(OutboxItem::DESTROY, limit, self.destroy_lease())
            .await?;
        let mut report = DestroyReport::default();
        for item in items {
            let Ok(p) = serde_json::from_str::<Payload>(&item.payload) else {
                tracing::error!(id = %item.id, "a destroy message that does not parse: dropped");
                self.outbox_done(&item.id).await?;
                continue;
            };
            let row = self.issued_row(p.grant, &p.secret).await?;
            let Some(row) = row.filter(|r| r.state != IssuedState::Destroyed) else {
                self.outbox_done(&item.id).await?;
                continue;
            };
            // A mint still at work (its claim held) does not put this off: a minter that finds
            // its grant ended when it would keep the value destroys what it made itself
            // (`issued_value`), and a minter killed meanwhile leaves an orphan the sweep takes.
            let outcome = match self.issuer_of(&p.secret) {
                Some(issuer) => self.destroy_with(issuer.as_ref(), &row.name).await,
                None => Err(format!(
                    "no issuer is declared for {} any more: declare it again to destroy {}",
                    p.secret, row.name
                )),
            };
            match outcome {
                Ok(()) => {
                    self.mark_destroyed(row, Some(&item.id)).await?;
                    report.destroyed += 1;
                }
                Err(why) => {
                    let at = self.now() + backoff(item.attempts);
                    tracing::warn!(error = %why, credential = %row.name, attempts = item.attempts, "issuer destroy failed; tried again later");
                    metrics::counter!("countersign_issuer_destroy_failures_total").increment(1);
                    let mut row = row;
                    row.attempts = item.attempts;
                    row.last_error = Some(why);
                    row.next_attempt_at = Some(at);
                    transact!(self, "issued destroy retry", |tx| {
                        tx.put_issued(&row).await?;
                        tx.reschedule_outbox(&item.id, item.attempts, at).await?;
                        Ok::<_, Fail>(())
                    })?;
                    report.failed += 1;
                }
            }
        }
        Ok(report)
    }

    /// At a broker's start: every queued destroy is due now, those another destroyer claimed
    /// (its lease) or put off (its backoff) included, so that a broker killed mid-destroy and
    /// started again does not wait out its own lease, and a restart tries a failing issuer
    /// again at once. A replica still at work on one may see it run twice: the issuers'
    /// destroys are idempotent and it is recorded once ([`Broker::mark_destroyed`]). How many
    /// it took over.
    pub async fn take_over_destroys(&self) -> Result<usize, Error> {
        let now = self.now();
        let any_time = now + chrono::Duration::days(36_500);
        let taken = transact!(self, "destroy take-over", |tx| {
            let items = tx
                .take_outbox(OutboxItem::DESTROY, any_time, 10_000)
                .await?;
            let mut taken = 0;
            for item in items.iter().filter(|i| i.next_attempt_at > now) {
                tx.reschedule_outbox(&item.id, item.attempts, now).await?;
                taken += 1;
            }
            Ok::<_, Fail>(taken)
        })?;
        if taken > 0 {
            self.destroy_queued.store(true, Ordering::SeqCst);
        }
        Ok(taken)
    }

    /// Asks `issuer` to destroy `name`, timed.
    async fn destroy_with(&self, issuer: &dyn Issuer, name: &str) -> Result<(), String> {
        let started = self.clock.now();
        let r = issuer.destroy(name).await.map_err(|e| e.to_string());
        metrics::histogram!("countersign_issuer_destroy_seconds", "issuer" => issuer.kind())
            .record(seconds_since(started, self.clock.now()));
        r
    }

    async fn issued_row(
        &self,
        grant: GrantId,
        secret: &SecretName,
    ) -> Result<Option<Issued>, Error> {
        Ok(self
            .issued_of(grant)
            .await?
            .into_iter()
            .find(|r| &r.secret == secret))
    }

    /// Records a credential destroyed (the guard seals a `credential_destroy` entry) and, when
    /// a message queued it, deletes the message.
    async fn mark_destroyed(&self, row: Issued, message: Option<&str>) -> Result<(), Error> {
        let now = self.now();
        transact!(self, "issued destroyed", |tx| {
            let current = tx
                .issued_of(row.grant_id)
                .await?
                .into_iter()
                .find(|r| r.secret == row.secret);
            // A queued destroy another replica finished meanwhile (its lease lapsed and both
            // ran it; the issuer's destroy is idempotent): recorded once, the message gone.
            if message.is_some()
                && current
                    .as_ref()
                    .is_some_and(|r| r.state == IssuedState::Destroyed)
            {
                if let Some(id) = message {
                    tx.delete_outbox(id).await?;
                }
                return Ok(());
            }
            let mut c = current.unwrap_or_else(|| row.clone());
            c.state = IssuedState::Destroyed;
            c.destroyed_at = Some(now);
            c.claimed_until = None;
            c.sealed_value = None;
            c.last_error = None;
            c.next_attempt_at = None;
            tx.put_issued(&c).await?;
            if let Some(id) = message {
                tx.delete_outbox(id).await?;
            }
            Ok::<_, Fail>(())
        })?;
        metrics::counter!("countersign_issued_destroyed_total").increment(1);
        tracing::info!(grant = %row.grant_id, secret = %row.secret, credential = %row.name, "credential destroyed");
        Ok(())
    }

    /// The reconciler (at start and on a schedule): queues a destroy for each unended
    /// credential whose grant is not live as of now, and destroys each credential an issuer
    /// holds under its prefix that no unended credential of a grant names (an orphan).
    pub async fn reconcile_issued(&self) -> Result<ReconcileReport, Error> {
        let mut report = ReconcileReport::default();
        let now = self.now();
        let rows = read!(self, "issued reconcile", |tx| Ok::<_, Fail>(
            tx.unsettled_issued(10_000).await?
        ))?;
        for c in rows.into_iter().filter(|c| c.state.unended()) {
            if self.grant_live(c.grant_id, now).await? {
                continue;
            }
            let queued = transact!(self, "issued reconcile queue", |tx| {
                Ok::<_, Fail>(queue_destroys(tx, c.grant_id, now).await?)
            })?;
            if queued {
                report.queued += 1;
                self.destroy_queued.store(true, Ordering::SeqCst);
            }
        }
        for s in self.issued_secrets() {
            let names = match s.issuer.list().await {
                Ok(n) => n,
                Err(e) => {
                    tracing::warn!(error = %e, secret = %s.name, "issuer list failed: orphans of this issuer wait for the next sweep");
                    report.failures += 1;
                    continue;
                }
            };
            for name in names {
                if self.backed(&s.name, s.issuer.prefix(), &name).await? {
                    continue;
                }
                match self.destroy_with(s.issuer.as_ref(), &name).await {
                    Ok(()) => {
                        report.orphans += 1;
                        if let Some(grant) = grant_of(s.issuer.prefix(), &name) {
                            let row = self.orphan_row(grant, &s.name, s.issuer.kind(), &name);
                            self.mark_destroyed(row, None).await?;
                        } else {
                            tracing::warn!(credential = %name, "destroyed a credential under the prefix that no grant's name matches");
                        }
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, credential = %name, "orphan destroy failed");
                        report.failures += 1;
                    }
                }
            }
        }
        Ok(report)
    }

    /// Whether a name an issuer holds is backed: an unended credential, or one whose destroy is
    /// queued (the destroyer has it), names it.
    async fn backed(&self, secret: &SecretName, prefix: &str, name: &str) -> Result<bool, Error> {
        let Some(grant) = grant_of(prefix, name) else {
            return Ok(false);
        };
        Ok(self
            .issued_row(grant, secret)
            .await?
            .is_some_and(|r| r.state != IssuedState::Destroyed))
    }

    fn orphan_row(&self, grant: GrantId, secret: &SecretName, kind: &str, name: &str) -> Issued {
        let now = self.now();
        Issued {
            grant_id: grant,
            secret: secret.clone(),
            issuer: kind.to_string(),
            name: name.to_string(),
            state: IssuedState::Destroying,
            claimed_until: None,
            sealed_value: None,
            expires_at: None,
            created_at: now,
            destroyed_at: None,
            attempts: 0,
            last_error: None,
            next_attempt_at: None,
        }
    }

    /// Whether a grant is live as of `now`, settled against its session.
    async fn grant_live(&self, grant: GrantId, now: crate::clock::Time) -> Result<bool, Error> {
        read!(self, "issued grant read", |tx| {
            let Some(g) = tx.get_grant(grant).await? else {
                return Ok(false);
            };
            let Some(e) = tx.get_enrollment(g.enrollment_id).await? else {
                return Ok(false);
            };
            Ok::<_, Fail>(g.settled(now, &e).is_live())
        })
    }
}
