//! The console's delivery area: delivery settings, the synced GitHub data behind the timeline,
//! measures and pipeline, session groups and architecture sources (issue 15; protocol §6.5,
//! §9), as one service, [`Delivery`], reached as [`Console::delivery`]. Each write runs in one
//! transaction (`transact!`, the area's store `tx.delivery()`) and appends its event there. The code host
//! and the KPI targets are set once at start ([`Console::set_code_host`]); syncs take a lock so
//! that the timer's and a PUT's never overlap.
//!
//! - this module: the service, its process state, and the helpers its parts share;
//! - [`settings`]: the delivery settings, checked and proven against the code host;
//! - [`sync`]: a sync of the deploy repository's pull requests, runs, jobs and deploys;
//! - [`reads`]: the window a read covers, the synced data kept in memory, the timeline,
//!   measures, pipeline and one run;
//! - [`groups`]: session groups;
//! - [`architecture`]: architecture sources, their import, and a project's component tree.

mod architecture;
mod groups;
mod reads;
mod settings;
mod sync;

pub use architecture::ComponentTree;
pub use groups::{NewSessionGroup, SessionGroupPatch};
pub use reads::{MeasuresAnswer, PipelineAnswer, TimelineAnswer, full_date};
pub use settings::is_repo;

use super::*;
use crate::work::WorkTx;
use crate::work::delivery::{CodeHost, HostError, HostSession, Targets};
use crate::work::{Actor, ProjectKey};
use reads::Synced;

/// The delivery area's operations (`console.delivery()`): a view of the console.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'c> {
    console: &'c Console,
}

impl Console {
    /// The delivery area: settings, syncs, the timeline, measures and pipeline, session groups
    /// and architecture sources.
    pub fn delivery(&self) -> Delivery<'_> {
        Delivery { console: self }
    }

    /// Sets the code host and the KPI targets (once, at start).
    pub fn set_code_host(&self, host: Arc<dyn CodeHost>, targets: Targets) {
        let _ = self.delivery.host.set((host, targets));
    }

    /// A session with the code host, refused with `access` when none is configured (the
    /// delivery area's, and the work area's issue import).
    pub(super) async fn host_session(
        &self,
        access: ErrorCode,
    ) -> Result<Box<dyn HostSession>, Error> {
        let host = self.delivery.host.get().map(|(h, _)| h).ok_or_else(|| {
            Error::with_message(access, "no [code_hosting] is configured for this console")
        })?;
        host.open().await.map_err(|e| host_error(e, access))
    }
}

impl Delivery<'_> {
    fn host(&self) -> Option<&Arc<dyn CodeHost>> {
        self.console.delivery.host.get().map(|(h, _)| h)
    }

    fn targets(&self) -> Targets {
        self.console
            .delivery
            .host
            .get()
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    }

    /// Whether a code host is configured (`[code_hosting]`): the delivery settings and the
    /// architecture sources need one.
    pub fn has_code_host(&self) -> bool {
        self.host().is_some()
    }

    /// Appends a delivery event (to no issue's log) and answers it.
    async fn append(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        project: Option<&ProjectKey>,
        data: serde_json::Value,
    ) -> Result<crate::work::Event, Error> {
        self.console
            .append(tx, kind, actor, project, None, data)
            .await
    }
}

/// The delivery area's process state: the code host, targets and sync locks.
#[derive(Debug, Default)]
pub struct DeliveryState {
    host: std::sync::OnceLock<(Arc<dyn CodeHost>, Targets)>,
    /// The synced data as last read whole, good while its generation holds.
    synced: std::sync::Mutex<Option<Arc<Synced>>>,
    sync: tokio::sync::Mutex<()>,
    architecture: tokio::sync::Mutex<()>,
}

fn bad(message: impl Into<String>) -> Error {
    Error::with_message(ErrorCode::INVALID_BODY, message)
}

fn host_error(e: HostError, access: ErrorCode) -> Error {
    match e {
        HostError::NoAccess(m) => Error::with_message(access, m),
        HostError::NotFound => Error::with_message(access, "the code host has no such thing"),
        HostError::Unavailable(m) => {
            tracing::warn!(error = %m, "code host unavailable");
            Error::new(ErrorCode::CODE_HOST_UNAVAILABLE)
        }
    }
}

fn not_configured() -> Error {
    Error::new(ErrorCode::DELIVERY_NOT_CONFIGURED)
}

fn system() -> Actor {
    Actor::System {
        name: "code-host".into(),
    }
}
