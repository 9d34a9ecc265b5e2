//! Dev mode's mailbox (issue 48): every notice the person would have been sent, kept by
//! [`crate::notify::Mailbox`] and shown at `GET /notifications/mailbox`, each message as its
//! e-mail and webhooks would carry it, with the links to open.

use askama::Template;
use axum::Extension;
use axum::extract::State;
use axum::http::StatusCode;
use countersign_console_core::Caller;

use super::{PageResult, St, chrome, human, notice, page};
use crate::html::{Chrome, Notice, When};

/// One message of dev mode's mailbox.
#[derive(Debug, Clone)]
pub struct MailboxRow {
    pub id: String,
    pub at: When,
    pub subject: String,
    /// `(title, url)`: each item and the page it opens.
    pub items: Vec<(String, String)>,
    pub email: String,
    pub webhook: String,
    pub slack: String,
}

impl MailboxRow {
    pub fn of(k: &crate::notify::Kept) -> Self {
        Self {
            id: k.id.clone(),
            at: crate::html::when(
                &chrono::DateTime::from_timestamp_millis(k.at).unwrap_or_default(),
            ),
            subject: k.subject.clone(),
            items: k.items.clone(),
            email: k.email.clone(),
            webhook: k.webhook.clone(),
            slack: k.slack.clone(),
        }
    }
}

/// Dev mode's mailbox: what the person would have been sent, newest first.
#[derive(Debug, Template)]
#[template(path = "mailbox.html")]
pub struct MailboxPage<'a> {
    pub chrome: Chrome<'a>,
    pub messages: Result<Vec<MailboxRow>, Notice>,
}

/// Dev mode's mailbox (issue 48): what the person would have been sent, newest first, each
/// message as its e-mail and webhooks would carry it, with the links to open. Outside dev mode
/// the page says there is none.
pub async fn mailbox_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let messages = match st.notifier.as_deref().and_then(|n| n.mailbox()) {
        None => Err(notice(
            "info",
            "This console has no dev mailbox: it is dev mode's (countersign-console dev). Choose how you hear on the Notifications page.",
        )),
        Some(m) => match m.of(&h.login).await {
            Ok(kept) => Ok(kept.iter().map(MailboxRow::of).collect()),
            Err(e) => {
                tracing::warn!(error = %e, "the dev mailbox could not be read");
                Err(notice("error", "The dev mailbox could not be read."))
            }
        },
    };
    Ok(page(
        StatusCode::OK,
        &MailboxPage {
            chrome: chrome("Dev mailbox", h, "/notifications"),
            messages,
        },
    ))
}
