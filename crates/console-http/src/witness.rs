//! The console as a witness of the broker's audit log, outside the broker's database (the
//! broker's `docs/audit.md`, "Witnesses"). Every [`INTERVAL`], the console presents to the
//! broker's `POST /v1/audit/witness` (with the console token) the highest head of the broker's
//! chain it has been answered, kept in the console's own database
//! ([`SqlStorage::witness_record`]); the broker checks that its chain still holds that head and
//! answers its own, which the console keeps when it is higher. A broker whose chain is behind
//! the console's record fails closed (503, `audit log: …`), and the console logs it at ERROR.

use std::time::Duration;

use countersign_broker_client::{Auth, BrokerClient, Failure};
// The witness route's body both ways, the broker's own type.
use countersign_common::wire::WitnessHead as Head;
use countersign_console_sql::{SqlStorage, WitnessRecord};
use zeroize::Zeroizing;

/// How often the console presents its record.
pub const INTERVAL: Duration = Duration::from_secs(2);

/// The chain's start: what a witness that has seen nothing presents.
const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What one round found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Round {
    /// The broker holds the record; what is kept now.
    Kept(WitnessRecord),
    /// The broker refused: its chain is behind the record (or otherwise broken), or it is not
    /// ready yet; the broker's message.
    Refused(u16, String),
}

/// The witness of one broker.
pub struct Witness {
    storage: SqlStorage,
    client: BrokerClient,
    token: Zeroizing<String>,
}

impl std::fmt::Debug for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Witness")
            .field("broker", &self.client.base_url())
            .finish_non_exhaustive()
    }
}

impl Witness {
    pub fn new(
        storage: SqlStorage,
        broker: &str,
        token: Zeroizing<String>,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        Ok(Self {
            storage,
            client: crate::broker_client::client(broker, timeout)?,
            token,
        })
    }

    /// The broker's URL, which keys the record.
    fn broker(&self) -> &str {
        self.client.base_url()
    }

    /// One round: present the record, keep the answer.
    pub async fn round(&self) -> anyhow::Result<Round> {
        let rec = self
            .storage
            .witness_record(self.broker())
            .await
            .map_err(|e| anyhow::anyhow!("console database: {e}"))?
            .unwrap_or(WitnessRecord {
                position: 0,
                hash: GENESIS.to_owned(),
                accepted: 0,
            });
        let body = Head {
            position: rec.position,
            hash: rec.hash.clone(),
            accepted: rec.accepted,
        };
        let sent = self
            .client
            .call(
                "POST",
                "/v1/audit/witness",
                Some(&serde_json::to_vec(&body)?),
                Auth::Bearer(self.token.as_str()),
            )
            .await;
        let head: Head = match sent {
            Ok(answer) => answer.json()?,
            Err(e) if e.kind == Failure::Refused => {
                return Ok(Round::Refused(e.status.unwrap_or_default(), e.message));
            }
            Err(e) => return Err(e.into()),
        };
        let answered = WitnessRecord {
            position: head.position,
            hash: head.hash,
            accepted: head.accepted,
        };
        let now = chrono::Utc::now().timestamp_millis();
        self.storage
            .witness_keep(self.broker(), &answered, now)
            .await
            .map_err(|e| anyhow::anyhow!("console database: {e}"))?;
        let kept = self
            .storage
            .witness_record(self.broker())
            .await
            .map_err(|e| anyhow::anyhow!("console database: {e}"))?
            .unwrap_or(answered);
        Ok(Round::Kept(kept))
    }

    /// Runs a round on each of `ticks` ([`INTERVAL`]), for as long as the task lives.
    pub fn spawn(self, mut ticks: countersign_common::tick::Ticks) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let _pass = ticks.next().await;
                match self.round().await {
                    Ok(Round::Kept(_)) => {}
                    Ok(Round::Refused(503, m)) if m.starts_with("audit log:") => {
                        tracing::error!(broker = %self.broker(), message = %m, "the broker's audit log is behind what this console witnessed, or broken: it fails closed")
                    }
                    Ok(Round::Refused(status, m)) => {
                        tracing::warn!(broker = %self.broker(), status, message = %m, "audit witness refused")
                    }
                    Err(e) => {
                        tracing::debug!(broker = %self.broker(), error = %e, "audit witness round failed")
                    }
                }
            }
        })
    }
}
