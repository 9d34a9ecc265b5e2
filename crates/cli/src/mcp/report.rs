//! What one tool call tells the client while it waits ([`Reporter`]): the tools make one per
//! call, and the waits for a person (requests) and the commands (exec) report through it.

use std::sync::atomic::{AtomicU32, Ordering};

use rmcp::model::{
    ElicitRequestParams, ProgressNotificationParam, ProgressToken, RequestMetaObject,
};
use rmcp::service::ElicitationMode;
use rmcp::{Peer, RoleServer};

use super::log;

/// What one tool call tells the client while it waits: progress notifications (when the client
/// sent a progress token), and the approval page as a URL-mode elicitation (when the client
/// declared `elicitation: { url: {} }`, MCP 2025-11-25).
#[derive(Debug)]
pub struct Reporter {
    to: Option<(Peer<RoleServer>, ProgressToken)>,
    /// The client, when it takes URL-mode elicitations.
    pages: Option<Peer<RoleServer>>,
    step: AtomicU32,
}

impl Reporter {
    pub(super) fn new(meta: &RequestMetaObject, peer: Peer<RoleServer>) -> Self {
        let pages = peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Url)
            .then(|| peer.clone());
        Self {
            to: meta.get_progress_token().map(|t| (peer, t)),
            pages,
            step: AtomicU32::new(0),
        }
    }

    /// A reporter that says nothing (tests, or a client without a progress token).
    #[must_use]
    pub fn silent() -> Self {
        Self {
            to: None,
            pages: None,
            step: AtomicU32::new(0),
        }
    }

    /// Whether the client takes URL-mode elicitations.
    #[must_use]
    pub fn shows_pages(&self) -> bool {
        self.pages.is_some()
    }

    /// Asks the client to offer the person `url` (`elicitation/create`, `mode: "url"`, the
    /// request's id as `elicitationId`). Sent, not awaited: the wait for the approval goes on
    /// meanwhile, and the client's answer (accept, decline, cancel) is only logged, since the
    /// approval itself is read from the broker. Nothing without the capability.
    pub fn show_page(&self, request_id: &str, message: String, url: String) {
        let Some(peer) = self.pages.clone() else {
            return;
        };
        let id = request_id.to_owned();
        log(format!(
            "request {id}: the approval page offered to the client (URL elicitation)"
        ));
        tokio::spawn(async move {
            let asked = peer
                .create_elicitation(ElicitRequestParams::UrlElicitationParams {
                    meta: None,
                    message,
                    url,
                    elicitation_id: id.clone(),
                })
                .await;
            match asked {
                Ok(r) => log(format!(
                    "request {id}: the client answered the approval page's elicitation: {:?}",
                    r.action
                )),
                Err(e) => log(format!(
                    "request {id}: the approval page's elicitation failed: {e}"
                )),
            }
        });
    }

    /// Sends one progress notification with `message`.
    pub async fn say(&self, message: &str) {
        let step = self.step.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some((peer, token)) = &self.to {
            let _ = peer
                .notify_progress(
                    ProgressNotificationParam::new(token.clone(), f64::from(step))
                        .with_message(message),
                )
                .await;
        }
    }
}
