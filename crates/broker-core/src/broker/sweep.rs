//! The sweep: writes the time-driven transitions (expiry, lease lapse) that reads already apply
//! lazily, so that cascades run, records show their end, and expiry notifications are queued.

use super::{Broker, Fail, transact};
use crate::error::Error;

use crate::model::{GrantEnd, RecordKind, RecordState};

/// What one sweep wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub records: usize,
    pub enrollments: usize,
    pub grants: usize,
}

impl Broker {
    /// Applies every due transition, each in its own transaction, up to `limit` of each kind.
    pub async fn sweep(&self, limit: u32) -> Result<SweepReport, Error> {
        let now = self.now();
        let due = super::read!(self, "sweep", |tx| Ok::<_, Fail>(tx.due(now, limit).await?))?;
        let mut report = SweepReport::default();
        for id in due.enrollments {
            transact!(self, "sweep enrollment", |tx| {
                if let Some(e) = tx.get_enrollment(id).await?
                    && e.ended.is_none()
                    && !e.is_live(now)
                {
                    self.end_enrollment(tx, e, "broker", now).await?;
                }
                Ok::<_, Fail>(())
            })?;
            report.enrollments += 1;
        }
        for id in due.records {
            let owners = self.record_owners(&id).await?;
            transact!(self, "sweep record", |tx| {
                self.lock_session_of(tx, owners).await?;
                let Some(rec) = tx.get_record(&id).await? else {
                    return Ok(());
                };
                if rec.state != RecordState::Pending || now < rec.body.expires_at {
                    return Ok(());
                }
                match (rec.body.kind, rec.body.request_id, rec.body.enrollment_id) {
                    (RecordKind::AgentSecret, Some(rid), Some(eid)) => {
                        if let (Some(r), Some(e)) =
                            (tx.get_request(rid).await?, tx.get_enrollment(eid).await?)
                        {
                            self.settle_request_write(tx, r, &e, now).await?;
                        }
                        // The request's settle decides the record; make sure it left pending.
                        if let Some(rec) = tx
                            .get_record(&id)
                            .await?
                            .filter(|r| r.state == RecordState::Pending)
                        {
                            self.expire_record(tx, rec).await?;
                        }
                    }
                    _ => self.expire_record(tx, rec).await?,
                }
                Ok::<_, Fail>(())
            })?;
            report.records += 1;
        }
        for id in due.grants {
            transact!(self, "sweep grant", |tx| {
                if let Some(g) = tx.get_grant(id).await?
                    && g.end.is_none()
                    && g.expires_at.is_some_and(|t| now >= t)
                {
                    let mut g = g;
                    g.end = Some((GrantEnd::Expired, g.expires_at.unwrap_or(now)));
                    tx.put_grant(&g).await?;
                }
                Ok::<_, Fail>(())
            })?;
            report.grants += 1;
        }
        Ok(report)
    }

    /// Decides a record that outlived its wait as expired, by the broker, at its expiry.
    async fn expire_record(
        &self,
        tx: &mut dyn crate::storage::Tx,
        rec: crate::model::Record,
    ) -> Result<(), Fail> {
        let at = rec.body.expires_at;
        self.decide_record(
            tx,
            rec,
            RecordState::Expired,
            "broker",
            at,
            Default::default(),
        )
        .await?;
        Ok(())
    }
}
