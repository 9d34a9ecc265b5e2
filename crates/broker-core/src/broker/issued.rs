//! Dynamic secrets in the broker (issue 49): a credential made for one grant at its first
//! release, the same one answered by every release of that grant, and destroyed by every end.
//!
//! - **Mint**: a transaction records the credential's name, claimed by this minter for
//!   [`CLAIM`] (the guard seals a `credential_mint` entry into the audit chain with it), and only
//!   then is the issuer called; a second transaction stores the secret, encrypted, and marks it
//!   live, unless the grant ended meanwhile. A crash at any point leaves a named row: a later
//!   release takes over a lapsed claim and mints again (the issuer replaces a credential of that
//!   name), and an end destroys it at once, claim or not: a minter that finds its grant ended
//!   when it would store the value destroys what it made, and one killed meanwhile leaves an
//!   orphan the sweep destroys.
//! - **Destroy**: whatever ends a grant writes its end through the guard, which marks each of its
//!   unended credentials `destroying` and queues a destroy in the outbox (topic
//!   [`OutboxItem::DESTROY`](crate::storage::OutboxItem::DESTROY)) in the same transaction.
//!   [`Broker::destroy_due`] claims due destroys (a lease: whichever replica takes one), calls
//!   the issuer, and on success marks the credential destroyed (a sealed `credential_destroy`
//!   entry) and deletes the message; on failure it keeps the issuer's error and the next try on
//!   the credential, backing off.
//! - **Reconcile**: [`Broker::reconcile_issued`] (at start and on a schedule) queues a destroy
//!   for every unended credential whose grant is no longer live as of now (ends that no write has
//!   stored yet: an expiry, a lapsed lease), and destroys what an issuer holds under its prefix
//!   that no live grant backs (orphans).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use chrono::Duration;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

use super::{Broker, Fail, read, transact};
use crate::clock::Time;
use crate::error::{Error, ErrorCode};
use crate::ids::{GrantId, Login, SecretName};
use crate::issuer::{Issued, IssuedState, Issuer, IssuerError, Minted, credential_name};
use crate::model::Grant;
use crate::policy::{PolicyEntry, Tier};
use crate::secrets::SecretValue;

/// How long a minter holds its claim on a credential being made.
pub const CLAIM: Duration = Duration::seconds(30);
/// The first retry of a failed destroy; each later one waits twice as long, up to [`BACKOFF_MAX`].
pub const BACKOFF_FIRST: Duration = Duration::seconds(1);
pub const BACKOFF_MAX: Duration = Duration::minutes(5);
/// How long a destroyer holds a claimed destroy before another replica (or this broker,
/// restarted after a crash) may take it, unless set otherwise ([`Broker::set_destroy_lease`]:
/// the server makes it half its reconciler's period, so that a crash mid-destroy delays a
/// credential's end by less than one sweep, the next poll included).
pub const DESTROY_LEASE: Duration = Duration::seconds(60);
/// The shortest destroy lease. A destroy that outlives its lease (the PostgreSQL issuer waits up
/// to 5 s for open sessions to end) may be run by a second destroyer too: the issuers' destroys
/// are idempotent, and it is recorded once.
pub const DESTROY_LEASE_MIN: Duration = Duration::seconds(2);

/// A secret policy declares as issued: its name, owner and tier (as a stored secret's tags
/// would say) and the issuer that makes its credentials.
#[derive(Debug, Clone)]
pub struct IssuedSecret {
    pub name: SecretName,
    pub owner: Login,
    pub tier: Tier,
    pub issuer: Arc<dyn Issuer>,
}

impl IssuedSecret {
    /// Its policy entry: the resource name says which issuer and prefix.
    pub fn entry(&self) -> PolicyEntry {
        PolicyEntry {
            name: self.name.clone(),
            owner: self.owner.clone(),
            tier: self.tier,
            resource_name: format!("{}:{}", self.issuer.kind(), self.issuer.prefix()),
            issuer: Some(self.issuer.kind().to_string()),
        }
    }
}

/// The declared issued secrets.
#[derive(Debug, Default)]
pub(crate) struct Issuers {
    pub(crate) secrets: BTreeMap<SecretName, IssuedSecret>,
}

/// The encrypted form of a minted credential.
#[derive(Serialize, Deserialize)]
struct Plain {
    value: String,
    env: Vec<(String, String)>,
    #[serde(default)]
    public: Vec<String>,
}

impl Drop for Plain {
    fn drop(&mut self) {
        use zeroize::Zeroize;
        self.value.zeroize();
        for (_, v) in &mut self.env {
            v.zeroize();
        }
    }
}

/// What became of a mint when its value was to be kept.
enum Kept {
    /// Stored and live: the release answers it.
    Live,
    /// The grant ended meanwhile: the minter destroys what it made.
    Ended,
    /// Another release made the credential live after this one's claim lapsed: the issuer
    /// replaced what this one made, and nothing is destroyed.
    Superseded,
}

/// What the claim transaction found.
enum Step {
    Ready(Issued),
    Mint(Issued),
}

/// What one pass of [`Broker::destroy_due`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DestroyReport {
    pub destroyed: usize,
    pub failed: usize,
}

/// What one pass of [`Broker::reconcile_issued`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReconcileReport {
    /// Destroys queued for credentials whose grant ended without a stored end.
    pub queued: usize,
    /// Credentials an issuer held that no live grant backs, destroyed.
    pub orphans: usize,
    /// Issuers that could not be listed or an orphan that could not be destroyed.
    pub failures: usize,
}

fn context(grant: GrantId, secret: &SecretName) -> String {
    format!("issued:{grant}:{secret}")
}

fn issuer_error(e: &IssuerError) -> Error {
    Error::with_message(
        ErrorCode::ISSUER_UNAVAILABLE,
        match e {
            IssuerError::Unavailable(_) => {
                "the issuer that makes this secret's credential did not answer; try again"
            }
            IssuerError::Refused(_) => {
                "the issuer that makes this secret's credential refused; an operator must act"
            }
        },
    )
}

/// Seconds from `start` to `end` on the injected clock (for the issuer's histograms).
pub(crate) fn seconds_since(start: Time, end: Time) -> f64 {
    (end - start).num_microseconds().unwrap_or(0).max(0) as f64 / 1e6
}

/// The backoff after `attempts` failed tries.
pub fn backoff(attempts: u32) -> Duration {
    let doubled = BACKOFF_FIRST
        .checked_mul(1i32 << attempts.saturating_sub(1).min(16))
        .unwrap_or(BACKOFF_MAX);
    doubled.min(BACKOFF_MAX)
}

impl Broker {
    /// Declares the issued secrets (replacing any declared before): the next policy load
    /// serves them beside the store's.
    pub fn set_issued_secrets(&self, secrets: impl IntoIterator<Item = IssuedSecret>) {
        let mut map = self.issuers.write().unwrap_or_else(|p| p.into_inner());
        map.secrets = secrets.into_iter().map(|s| (s.name.clone(), s)).collect();
    }

    /// The declared issued secrets.
    pub fn issued_secrets(&self) -> Vec<IssuedSecret> {
        let map = self.issuers.read().unwrap_or_else(|p| p.into_inner());
        map.secrets.values().cloned().collect()
    }

    pub(crate) fn issuer_of(&self, secret: &SecretName) -> Option<Arc<dyn Issuer>> {
        let map = self.issuers.read().unwrap_or_else(|p| p.into_inner());
        map.secrets.get(secret).map(|s| s.issuer.clone())
    }

    /// Sets how long a claimed destroy is held before another destroyer may take it, at least
    /// [`DESTROY_LEASE_MIN`] and at most [`DESTROY_LEASE`].
    pub fn set_destroy_lease(&self, lease: Duration) {
        let ms = lease
            .clamp(DESTROY_LEASE_MIN, DESTROY_LEASE)
            .num_milliseconds();
        self.destroy_lease_ms.store(ms, Ordering::SeqCst);
    }

    pub(crate) fn destroy_lease(&self) -> Duration {
        Duration::milliseconds(self.destroy_lease_ms.load(Ordering::SeqCst))
    }

    /// Takes the "a destroy was queued" flag: the destroyer runs at once when it was set.
    pub fn take_destroy_queued(&self) -> bool {
        self.destroy_queued.swap(false, Ordering::SeqCst)
    }

    /// The credentials issued for a grant (the console's and the operator's view).
    pub async fn issued_of(&self, grant: GrantId) -> Result<Vec<Issued>, Error> {
        read!(self, "issued read", |tx| Ok::<_, Fail>(
            tx.issued_of(grant).await?
        ))
    }

    /// The credential of `secret` for a live `grant`: the one minted at an earlier release, or
    /// a new one. ISSUER_UNAVAILABLE when the issuer fails (nothing half-made is kept: what it
    /// may have made is destroyed, or left to the destroy the grant's end queues) or while
    /// another release is minting it; GRANT_NOT_LIVE when the grant ended meanwhile.
    pub(crate) async fn issued_value(
        &self,
        grant: &Grant,
        secret: &SecretName,
    ) -> Result<Minted, Error> {
        let issuer = self
            .issuer_of(secret)
            .ok_or(ErrorCode::SECRET_NOT_IN_STORE)?;
        let ctx = context(grant.id, secret);
        let c = match self.claim_issued(grant, secret, issuer.as_ref()).await? {
            Step::Ready(c) => return self.open_issued(&c, &ctx),
            Step::Mint(c) => c,
        };
        let minted = self.mint_with(issuer.as_ref(), grant.id, &c).await?;
        let plain = Plain {
            value: minted.value.expose().to_string(),
            env: minted
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_string()))
                .collect(),
            public: minted.public.clone(),
        };
        let text = Zeroizing::new(serde_json::to_string(&plain).unwrap_or_default());
        let sealed = self
            .sealer
            .encrypt(&ctx, text.as_bytes())
            .ok_or_else(|| Error::new(ErrorCode::INTERNAL))?;
        match self.keep_live(grant.id, secret, sealed).await? {
            Kept::Live => {}
            Kept::Ended => {
                // The grant ended while the issuer worked, and its destroy may have run before
                // the issuer made anything: what this mint made is destroyed here, at once (the
                // orphan sweep catches it if this fails).
                if let Err(e) = issuer.destroy(&c.name).await {
                    tracing::warn!(error = %e, credential = %c.name, "destroying a credential minted for a grant that ended meanwhile failed: the sweep destroys it");
                }
                self.destroy_queued.store(true, Ordering::SeqCst);
                return Err(ErrorCode::GRANT_NOT_LIVE.into());
            }
            Kept::Superseded => {
                return Err(Error::with_message(
                    ErrorCode::ISSUER_UNAVAILABLE,
                    "this grant's credential was made again by another release; try again",
                ));
            }
        }
        metrics::counter!("countersign_issued_total", "issuer" => issuer.kind()).increment(1);
        tracing::info!(grant = %grant.id, secret = %secret, credential = %c.name, "credential minted");
        Ok(minted)
    }

    /// The claim transaction: the live credential when there is one; else the row recorded
    /// (or a lapsed claim taken over) for this minter, with the grant checked live again.
    async fn claim_issued(
        &self,
        grant: &Grant,
        secret: &SecretName,
        issuer: &dyn Issuer,
    ) -> Result<Step, Error> {
        let now = self.now();
        transact!(self, "issued claim", |tx| {
            // The grant read (and locked) again: an end written before this claim finds no
            // credential to destroy, so a grant ended by now gets none.
            let live = match (
                tx.get_grant(grant.id).await?,
                tx.get_enrollment(grant.enrollment_id).await?,
            ) {
                (Some(g), Some(e)) => g.settled(now, &e).is_live(),
                _ => false,
            };
            if !live {
                return Err(ErrorCode::GRANT_NOT_LIVE.into());
            }
            let found = tx
                .issued_of(grant.id)
                .await?
                .into_iter()
                .find(|c| &c.secret == secret);
            let mut c = match found {
                Some(c) if c.state == IssuedState::Live => return Ok(Step::Ready(c)),
                Some(c) if !c.state.unended() => return Err(ErrorCode::GRANT_NOT_LIVE.into()),
                Some(c) if c.claimed_until.is_some_and(|t| t > now) => {
                    return Err(Fail::Refuse(Error::with_message(
                        ErrorCode::ISSUER_UNAVAILABLE,
                        "this grant's credential is being made by another release; try again",
                    )));
                }
                Some(c) => c,
                None => Issued {
                    grant_id: grant.id,
                    secret: secret.clone(),
                    issuer: issuer.kind().to_string(),
                    name: credential_name(issuer.prefix(), grant.id),
                    state: IssuedState::Minting,
                    claimed_until: None,
                    sealed_value: None,
                    expires_at: grant.expires_at,
                    created_at: now,
                    destroyed_at: None,
                    attempts: 0,
                    last_error: None,
                    next_attempt_at: None,
                },
            };
            c.claimed_until = Some(now + CLAIM);
            tx.put_issued(&c).await?;
            Ok::<_, Fail>(Step::Mint(c))
        })
    }

    /// Asks the issuer to make the claimed credential, timed. On failure whatever it may have
    /// made is destroyed at once and the claim given back; the row stays minting, so that a
    /// later release mints again and an end destroys.
    async fn mint_with(
        &self,
        issuer: &dyn Issuer,
        grant: GrantId,
        c: &Issued,
    ) -> Result<Minted, Error> {
        let started = self.clock.now();
        let minted = issuer.mint(&c.name, c.expires_at).await;
        metrics::histogram!("countersign_issuer_mint_seconds", "issuer" => issuer.kind())
            .record(seconds_since(started, self.clock.now()));
        let e = match minted {
            Ok(m) => return Ok(m),
            Err(e) => e,
        };
        tracing::warn!(error = %e, grant = %grant, secret = %c.secret, credential = %c.name, "issuer mint failed");
        if let Err(d) = issuer.destroy(&c.name).await {
            tracing::warn!(error = %d, credential = %c.name, "clean-up after a failed mint failed: the grant's end or the sweep destroys it");
        }
        self.release_claim(grant, &c.secret).await;
        Err(issuer_error(&e))
    }

    /// Stores the minted credential's encrypted value and marks it live, unless the grant
    /// ended while the issuer worked, or another release (whose claim took over this one's
    /// lapsed claim) made it live first.
    async fn keep_live(
        &self,
        grant: GrantId,
        secret: &SecretName,
        sealed: String,
    ) -> Result<Kept, Error> {
        transact!(self, "issued live", |tx| {
            let Some(mut row) = tx
                .issued_of(grant)
                .await?
                .into_iter()
                .find(|r| &r.secret == secret)
            else {
                return Ok(Kept::Ended);
            };
            match row.state {
                IssuedState::Minting => {}
                IssuedState::Live => return Ok(Kept::Superseded),
                _ => {
                    if row.claimed_until.take().is_some() {
                        tx.put_issued(&row).await?;
                    }
                    return Ok(Kept::Ended);
                }
            }
            row.claimed_until = None;
            row.state = IssuedState::Live;
            row.sealed_value = Some(sealed.clone());
            tx.put_issued(&row).await?;
            Ok::<_, Fail>(Kept::Live)
        })
    }

    /// Gives up a claim after a failed mint, so that the next release need not wait for it.
    async fn release_claim(&self, grant: GrantId, secret: &SecretName) {
        let r = transact!(self, "issued claim release", |tx| {
            if let Some(mut row) = tx
                .issued_of(grant)
                .await?
                .into_iter()
                .find(|r| &r.secret == secret)
            {
                row.claimed_until = None;
                tx.put_issued(&row).await?;
            }
            Ok::<_, Fail>(())
        });
        if let Err(e) = r {
            tracing::warn!(error = %e, "could not release a mint's claim: it lapses on its own");
        }
    }

    /// A live credential's value and parts, decrypted.
    fn open_issued(&self, c: &Issued, ctx: &str) -> Result<Minted, Error> {
        let tampered = || {
            super::guard::tampered("issued", &c.name, "encrypted value");
            Error::new(ErrorCode::GRANT_CHAIN_INVALID)
        };
        let sealed = c.sealed_value.as_deref().ok_or_else(tampered)?;
        let text = self.sealer.decrypt(ctx, sealed).ok_or_else(tampered)?;
        let plain: Plain = serde_json::from_slice(&text).map_err(|_| tampered())?;
        let secret = |s: &str| SecretValue::new(Zeroizing::new(s.to_string()));
        Ok(Minted {
            value: secret(&plain.value),
            env: plain
                .env
                .iter()
                .map(|(k, v)| (k.clone(), secret(v)))
                .collect(),
            public: plain.public.clone(),
        })
    }
}
