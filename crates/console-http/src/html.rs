//! Server-rendered HTML through askama templates (`crates/console-http/templates/`), which
//! escape every value they print: text from a request, the broker or the database reaches a
//! page only through a template. This module holds the templates' types and the view models
//! the pages fill them from; no inline script or style is emitted, so the
//! Content-Security-Policy can forbid both.
//!
//! A value that is itself a template ([`When`], [`TimeLeft`], [`Notice`], [`InboxRows`], the
//! inbox's `AskRows`) escaped its own fields: it is marked [`askama::filters::HtmlSafe`] and
//! printed as it is. `|safe` is written only on the document engine's
//! [`SafeHtml`](countersign_console_core::doc::SafeHtml) (its
//! sanitizer's output, the one kind of HTML from text people and agents write); a test holds
//! the templates to that.
//!
//! Times have one format everywhere ([`when`]: `2026-11-24 14:05 UTC` in a `<time datetime>`
//! element, as its text and title); the pages' script shows every such time as words relative
//! to now ("3 min ago", "in 2 h", "yesterday"), the absolute time in its title.

use askama::Template;
use countersign_console_core::broker::{
    CredentialRecord, IssuedSecret, MachineLogin, issuer_words,
};
use countersign_console_core::console::{TokenInfo, rfc3339};
use countersign_console_core::{Human, Login, Time};

use countersign_console_core::storage::Decision;

mod grants;
pub use grants::{GrantRow, GrantsPage};

/// The one human format of a time.
pub const TIME_FORMAT: &str = "%Y-%m-%d %H:%M UTC";

/// `1 h 30 min`, `12 min`, `45 s`.
pub fn duration(secs: i64) -> String {
    let secs = secs.max(0);
    let (d, h, m, s) = (
        secs / 86400,
        secs % 86400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    match (d, h, m) {
        (0, 0, 0) => format!("{s} s"),
        (0, 0, m) => format!("{m} min"),
        (0, h, 0) => format!("{h} h"),
        (0, h, m) => format!("{h} h {m} min"),
        (d, 0, _) => format!("{d} d"),
        (d, h, _) => format!("{d} d {h} h"),
    }
}

/// A time for people, in a `<time>` element: the absolute time in the one format, as its text
/// and its title. The pages' script shows the text as words relative to now ("3 min ago",
/// "yesterday") and keeps them current; the title keeps the absolute time, shown on hover.
#[derive(Debug, Clone, Template)]
#[template(
    source = r#"<time datetime="{{ iso }}" title="{{ text }}">{{ text }}</time>"#,
    ext = "html"
)]
pub struct When {
    iso: String,
    text: String,
}

impl askama::filters::HtmlSafe for When {}

/// The one way a page shows a time.
pub fn when(t: &Time) -> When {
    When {
        iso: rfc3339(t),
        text: t.format(TIME_FORMAT).to_string(),
    }
}

/// A countdown the script keeps current.
#[derive(Debug, Clone, Template)]
#[template(
    source = r#"<span class="countdown" data-expires-at="{{ iso }}" title="{{ at }}">{{ text }}</span>"#,
    ext = "html"
)]
pub struct TimeLeft {
    iso: String,
    at: String,
    text: String,
}

impl askama::filters::HtmlSafe for TimeLeft {}

pub fn time_left(until: &Time, now: &Time) -> TimeLeft {
    let secs = (*until - *now).num_seconds();
    TimeLeft {
        iso: rfc3339(until),
        at: until.format(TIME_FORMAT).to_string(),
        text: if secs > 0 {
            format!("{} left", duration(secs))
        } else {
            "expired".to_owned()
        },
    }
}

/// A notice box (`kind`: `error`, `ok`, `info`).
#[derive(Debug, Clone, Template)]
#[template(path = "notice.html")]
pub struct Notice {
    kind: &'static str,
    text: String,
}

impl askama::filters::HtmlSafe for Notice {}

pub fn notice(kind: &'static str, text: impl Into<String>) -> Notice {
    Notice {
        kind,
        text: text.into(),
    }
}

/// What every page's frame needs: its title, the person (none on the sign-in page) and which
/// navigation item is current.
#[derive(Debug, Clone, Copy)]
pub struct Chrome<'a> {
    pub title: &'a str,
    pub human: Option<&'a Human>,
    pub active: &'a str,
}

/// The main navigation: work and people, then the delivery pages.
const NAV: &[(&str, &str)] = &[
    ("/", "Inbox"),
    ("/issues", "Issues"),
    ("/projects", "Projects"),
    ("/sessions", "Sessions"),
    ("/broadcasts", "Broadcasts"),
    ("/delivery", "Delivery"),
    ("/delivery/pipeline", "Pipeline"),
];

/// The second row: secrets, machines, tokens, what the person answered and decided, and the
/// settings.
const MORE: &[(&str, &str)] = &[
    ("/machines/approve", "Approve a machine"),
    ("/grants", "Grants"),
    ("/machines", "Machines"),
    ("/tokens", "Agent tokens"),
    ("/passkeys", "Passkeys"),
    ("/notifications", "Notifications"),
    ("/answers", "Your answers"),
    ("/history", "Decisions"),
    ("/settings", "Settings"),
];

impl Chrome<'_> {
    /// The navigation: `(href, label, current)`.
    pub fn nav(&self) -> Vec<(&'static str, &'static str, bool)> {
        NAV.iter()
            .map(|(href, label)| (*href, *label, *href == self.active))
            .collect()
    }

    /// The second navigation row, as [`Chrome::nav`].
    pub fn more(&self) -> Vec<(&'static str, &'static str, bool)> {
        MORE.iter()
            .map(|(href, label)| (*href, *label, *href == self.active))
            .collect()
    }

    /// The person's CSRF token, masked afresh for this answer (`Human::masked_csrf`: what a
    /// compressed page's length could tell about it changes with every page).
    pub fn csrf(&self) -> String {
        self.human
            .map(|h| h.masked_csrf(&countersign_common::clock::SystemEntropy))
            .unwrap_or_default()
    }
}

/// An error page inside the layout: the status, what went wrong and a way back.
#[derive(Debug, Template)]
#[template(path = "error.html")]
pub struct ErrorPage<'a> {
    pub chrome: Chrome<'a>,
    pub status: u16,
    pub reason: &'a str,
    pub code: &'a str,
    pub message: &'a str,
    /// Where "back" goes: `(href, label)`.
    pub back: (&'a str, &'a str),
}

fn who_decides(rec: &CredentialRecord, me: &Login) -> String {
    if rec.approver == "anyone" {
        "anyone signed in".into()
    } else if rec.approver == me.as_str() {
        "you".into()
    } else {
        rec.approver.clone()
    }
}

/// Where a request comes from, in words: its session's label and its machine's name (issue
/// 48), with the raw ids for a title on hover.
pub fn session_text(rec: &CredentialRecord) -> Requester {
    let stated = rec
        .session
        .request
        .as_deref()
        .or(rec.session.enrollment.as_deref());
    match &rec.enrollment {
        Some(e) => Requester {
            text: e.requester(stated).phrase(),
            raw: e.raw(stated),
        },
        None => Requester {
            text: "a machine logging in".into(),
            raw: String::new(),
        },
    }
}

/// A requester as a page shows it: in words, the raw ids on hover.
#[derive(Debug, Clone, Default)]
pub struct Requester {
    pub text: String,
    pub raw: String,
}

fn lifetime_text(rec: &CredentialRecord) -> String {
    match rec.lifetime_seconds {
        Some(s) => duration(i64::try_from(s).unwrap_or(i64::MAX)),
        None => "until the session ends".into(),
    }
}

/// A record's title: its secrets, or the machine logging in.
pub fn title_of(rec: &CredentialRecord) -> String {
    if rec.is_machine_login() {
        format!(
            "Machine login for {}",
            rec.identifiers.first().map(String::as_str).unwrap_or("?")
        )
    } else {
        rec.identifiers.join(", ")
    }
}

fn kind_of(rec: &CredentialRecord) -> &'static str {
    if rec.is_machine_login() {
        "Machine login"
    } else {
        "Secret request"
    }
}

// ----- the inbox -----

/// One pending request in the inbox.
#[derive(Debug, Clone)]
pub struct RequestRow {
    /// The record id, which the decision routes take.
    pub id: String,
    /// The name people know it by: the request id its session was given.
    pub name: String,
    pub machine: bool,
    pub kind: &'static str,
    pub title: String,
    pub reason: String,
    pub by: Requester,
    pub lifetime: String,
    pub requested: When,
    pub left: TimeLeft,
    pub decider: String,
}

/// The inbox's rows (the page and the fragment the page polls render the same template).
#[derive(Debug, Clone, Template)]
#[template(path = "inbox_rows.html")]
pub struct InboxRows {
    pub error: Option<Notice>,
    pub items: Vec<RequestRow>,
}

impl askama::filters::HtmlSafe for InboxRows {}

impl InboxRows {
    pub fn of(records: Option<&[CredentialRecord]>, me: &Login, now: &Time) -> Self {
        let Some(records) = records else {
            return Self::failed(notice("info", "No broker is configured for this console."));
        };
        let items = records
            .iter()
            .map(|rec| RequestRow {
                id: rec.record_id.clone(),
                name: rec.name().to_owned(),
                machine: rec.is_machine_login(),
                kind: kind_of(rec),
                title: title_of(rec),
                reason: rec.reason.clone(),
                by: session_text(rec),
                lifetime: lifetime_text(rec),
                requested: when(&rec.requested_at),
                left: time_left(&rec.expires_at, now),
                decider: who_decides(rec, me),
            })
            .collect();
        Self { error: None, items }
    }

    pub fn failed(n: Notice) -> Self {
        Self {
            error: Some(n),
            items: Vec::new(),
        }
    }
}

// ----- one request -----

/// How a decided request ended, as a notice.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub class: &'static str,
    pub text: String,
}

#[derive(Debug, Clone)]
pub struct RequestView {
    /// The record id, which the decision routes take.
    pub id: String,
    /// The name people know it by: the request id its session was given (a machine login:
    /// its record id).
    pub name: String,
    /// Who asks (none for a machine login).
    pub requester: Option<Requester>,
    pub heading: &'static str,
    pub machine: bool,
    pub pending: bool,
    pub state: String,
    pub facts: Vec<(&'static str, String)>,
    pub requested: When,
    pub left: Option<TimeLeft>,
    pub decider: String,
    pub decided: Option<(String, When)>,
    pub outcome: Option<Outcome>,
    /// The next request waiting for this person, once this one is decided.
    pub next: Option<String>,
    /// What the person's passkey signs to approve it, in words, when policy asks for a
    /// countersignature (docs/passkeys.md).
    pub countersign: Option<String>,
    /// Each requested secret an issuer makes per grant (issue 49), with the issuer in words.
    pub issued: Vec<(String, String)>,
}

impl RequestView {
    /// `by`: who decided it, when this console recorded the decision.
    pub fn of(
        rec: &CredentialRecord,
        me: &Login,
        now: &Time,
        by: Option<&Decision>,
        next: Option<String>,
    ) -> Self {
        let mut facts = Vec::new();
        if rec.is_machine_login() {
            facts.push((
                "Host",
                rec.identifiers
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "?".into()),
            ));
            facts.push(("Person", rec.approver.clone()));
            if let Some(s) = &rec.service {
                facts.push(("Service", s.clone()));
            }
        } else {
            facts.push(("Secrets", rec.identifiers.join(", ")));
            facts.push(("Lifetime asked", lifetime_text(rec)));
        }
        facts.push(("Reason", rec.reason.clone()));
        let pending = rec.state == "pending";
        let decider = match by {
            Some(d) if d.login == *me => "you".to_owned(),
            Some(d) => d.login.to_string(),
            None => who_decides(rec, me),
        };
        let outcome = rec.decided.as_ref().map(|d| {
            let by = match by {
                Some(b) if b.login == *me => " by you".to_owned(),
                Some(b) => format!(" by {}", b.login),
                None if d.event == "approved" || d.event == "denied" => {
                    if rec.approver == "anyone" {
                        String::new()
                    } else {
                        format!(" by {}", rec.approver)
                    }
                }
                None => String::new(),
            };
            let at = d.at.format(TIME_FORMAT);
            let (class, text) = match d.event.as_str() {
                "approved" => ("ok", format!("Approved{by} at {at}.")),
                "denied" => ("error", format!("Denied{by} at {at}.")),
                "expired" => ("info", format!("Expired undecided at {at}.")),
                "cancelled" => ("info", format!("Cancelled by its session at {at}.")),
                other => ("info", format!("{other} at {at}.")),
            };
            Outcome { class, text }
        });
        Self {
            id: rec.record_id.clone(),
            name: rec.name().to_owned(),
            requester: (!rec.is_machine_login()).then(|| session_text(rec)),
            heading: kind_of(rec),
            machine: rec.is_machine_login(),
            pending,
            state: rec.state.clone(),
            facts,
            requested: when(&rec.requested_at),
            left: pending.then(|| time_left(&rec.expires_at, now)),
            decider,
            decided: rec.decided.as_ref().map(|d| (d.event.clone(), when(&d.at))),
            outcome,
            next,
            countersign: None,
            issued: Vec::new(),
        }
    }

    /// Notes each requested secret that `issued` (the broker's settings) lists: the page says
    /// a credential is made for this grant alone and destroyed when it ends.
    pub fn note_issued(&mut self, rec: &CredentialRecord, issued: &[IssuedSecret]) {
        if rec.is_machine_login() {
            return;
        }
        self.issued = rec
            .identifiers
            .iter()
            .filter_map(|n| {
                let i = issued.iter().find(|i| i.name == *n)?;
                Some((n.clone(), issuer_words(&i.issuer).to_owned()))
            })
            .collect();
    }
}

#[derive(Debug, Template)]
#[template(path = "request.html")]
pub struct RequestPage<'a> {
    pub chrome: Chrome<'a>,
    pub view: Result<RequestView, Notice>,
}

#[derive(Debug, Template)]
#[template(path = "machine_approve.html")]
pub struct MachineApprovePage<'a> {
    pub chrome: Chrome<'a>,
}

// ----- grants, machines, tokens -----

#[derive(Debug, Clone)]
pub struct MachineRow {
    pub id: String,
    pub host: String,
    pub who: String,
    pub approved: String,
    pub issued: When,
    /// `None` once expired (its sessions may still run).
    pub expires: Option<TimeLeft>,
}

impl MachineRow {
    pub fn of(m: &MachineLogin, now: &Time) -> Self {
        let who = match (&m.service, &m.subject) {
            (Some(s), Some(sub)) => format!("service {s} ({sub})"),
            (Some(s), None) => format!("service {s}"),
            _ => "a person's machine".to_owned(),
        };
        let approved = if m.approved_by.is_empty() {
            "token login".to_owned()
        } else {
            m.approved_by.clone()
        };
        Self {
            id: m.credential_id.clone(),
            host: m.host.clone(),
            who,
            approved,
            issued: when(&m.issued_at),
            expires: (!m.expired).then(|| time_left(&m.expires_at, now)),
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "machines.html")]
pub struct MachinesPage<'a> {
    pub chrome: Chrome<'a>,
    pub list: Result<Vec<MachineRow>, Notice>,
}

#[derive(Debug, Clone)]
pub struct TokenRow {
    pub id: String,
    pub name: String,
    pub created: When,
}

impl TokenRow {
    pub fn of(t: &TokenInfo) -> Self {
        let created = chrono::DateTime::parse_from_rfc3339(&t.created_at)
            .map(|t| when(&t.to_utc()))
            .unwrap_or_else(|_| When {
                iso: t.created_at.clone(),
                text: t.created_at.clone(),
            });
        Self {
            id: t.id.clone(),
            name: t.name.clone(),
            created,
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "tokens.html")]
pub struct TokensPage<'a> {
    pub chrome: Chrome<'a>,
    pub list: Result<Vec<TokenRow>, Notice>,
}

// ----- notifications -----

#[derive(Debug, Clone)]
pub struct NotificationsView {
    pub email: bool,
    pub slack_url: String,
    pub webhook_url: String,
    pub digest: bool,
    pub can_email: bool,
    pub can_webhook: bool,
}

#[derive(Debug, Template)]
#[template(path = "notifications.html")]
pub struct NotificationsPage<'a> {
    pub chrome: Chrome<'a>,
    pub view: Result<NotificationsView, Notice>,
    /// Dev mode's mailbox is on: the page links to it.
    pub mailbox: bool,
}

// ----- passkeys -----

#[derive(Debug, Clone)]
pub struct PasskeyRow {
    pub id: String,
    pub name: String,
    /// "synced" or "this device only".
    pub kind: &'static str,
    pub created: When,
    pub enrolled_by: String,
}

impl PasskeyRow {
    pub fn of(p: &countersign_console_core::broker::PasskeyItem) -> Self {
        Self {
            id: p.id.clone(),
            name: p.name.clone(),
            kind: if p.synced {
                "synced"
            } else {
                "this device only"
            },
            created: when(&p.created_at),
            enrolled_by: match p.enrolled_by.strip_prefix("passkey:") {
                Some(_) => "vouched for by another of your passkeys".to_owned(),
                None => "an operator's enrollment code".to_owned(),
            },
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "passkeys.html")]
pub struct PasskeysPage<'a> {
    pub chrome: Chrome<'a>,
    pub list: Result<Vec<PasskeyRow>, Notice>,
    /// How a person without a passkey gets an enrollment code (none once they have one).
    pub enroll: Option<EnrollHelp>,
}

impl PasskeysPage<'_> {
    /// The code dev mode's button just made, to fill the form with (empty otherwise).
    pub fn fresh_code(&self) -> &str {
        match &self.enroll {
            Some(EnrollHelp::Dev {
                shown: Some(Ok(code)),
            }) => code,
            _ => "",
        }
    }
}

/// Where a first passkey's enrollment code comes from.
#[derive(Debug, Clone)]
pub enum EnrollHelp {
    /// Dev mode: a button shows a fresh one; `shown` once it was pressed (the code, or why
    /// there is none).
    Dev {
        shown: Option<Result<String, String>>,
    },
    /// `serve`: the operator's command, with the person's login in it.
    Operator { command: String },
}

// ----- history -----

#[derive(Debug, Clone)]
pub struct HistoryRow {
    pub id: String,
    pub event: String,
    pub at: When,
    pub title: String,
    pub reason: String,
}

#[derive(Debug, Template)]
#[template(path = "history.html")]
pub struct HistoryPage<'a> {
    pub chrome: Chrome<'a>,
    pub entries: Vec<HistoryRow>,
}

// ----- work -----

pub(crate) fn actor_text(a: &countersign_console_core::work::Actor) -> String {
    use countersign_console_core::work::Actor;
    match a {
        Actor::User { login } => login.to_string(),
        Actor::Agent {
            session: Some(s), ..
        } => format!("session {s}"),
        Actor::Agent {
            service: Some(s), ..
        } => s.clone(),
        Actor::Agent { owner: Some(o), .. } => format!("an agent of {o}"),
        Actor::Agent { .. } => "an agent".into(),
        Actor::System { name } => name.clone(),
    }
}

// ----- signing in -----

#[derive(Debug, Template)]
#[template(path = "sign_in.html")]
pub struct SignInPage<'a> {
    pub chrome: Chrome<'a>,
    pub error: Option<&'a str>,
    pub idp: Option<String>,
    /// `next`, URL-encoded for the provider link's query.
    pub next_query: String,
    pub next: &'a str,
    /// The local form's CSRF token, when dev mode's local sign-in is on.
    pub form_token: Option<&'a str>,
    pub hint: &'a str,
    pub unconfigured: bool,
}

#[cfg(test)]
mod tests {
    /// `|safe` is written only on the document engine's `SafeHtml`: each use is listed here
    /// with its field, whose type the compiler holds to `SafeHtml`. A new `|safe` fails this
    /// test until it is one of them (a template type needs no `|safe`: it is `HtmlSafe`).
    #[test]
    fn safe_is_only_on_sanitized_html() {
        const SANITIZED: &[(&str, &str)] = &[
            ("asks_discussion.html", "html"),   // DiscussionPage::html
            ("documents_part.html", "html"),    // DocumentPart::html
            ("documents_version.html", "html"), // VersionPage::html
            ("issue.html", "c.html"),           // CommentEntry::html
            ("issue.html", "d.1"),              // IssuePage::description.1
        ];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates");
        let mut found = Vec::new();
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            for part in text.split("|safe").collect::<Vec<_>>().iter().rev().skip(1) {
                let expr = part
                    .rsplit("{{")
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                found.push((name.clone(), expr));
            }
        }
        assert!(!found.is_empty(), "no template read from {}", dir.display());
        for (file, expr) in &found {
            assert!(
                SANITIZED.contains(&(file.as_str(), expr.as_str())),
                "{file} prints {expr} with |safe: only the sanitizer's SafeHtml may be"
            );
        }
        assert_eq!(found.len(), SANITIZED.len(), "{found:?}");
    }

    use super::*;
    use countersign_console_core::broker::{Decided, EnrollmentSummary, GrantItem, SessionIds};

    const NASTY: &str = "<script>alert(\"x\")</script> & 'q'";

    fn t(s: &str) -> Time {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.to_utc())
            .unwrap_or_default()
    }

    fn record(machine: bool) -> CredentialRecord {
        CredentialRecord {
            record_id: format!("rec-{NASTY}"),
            request_id: Some(format!("req-{NASTY}")),
            kind: if machine {
                "launcher_credential"
            } else {
                "agent_secret"
            }
            .into(),
            state: "approved".into(),
            approver: format!("ada{NASTY}@example.com"),
            enrollment: Some(EnrollmentSummary {
                kind: "claude".into(),
                runtime_id: format!("rt{NASTY}"),
                operator: format!("op{NASTY}"),
                slot: None,
            }),
            session: SessionIds::default(),
            identifiers: vec![format!("host{NASTY}"), format!("secret{NASTY}")],
            service: None,
            reason: format!("reason {NASTY}"),
            lifetime_seconds: Some(5400),
            rules_version: String::new(),
            expires_at: t("2026-11-24T15:05:00Z"),
            requested_at: t("2026-11-24T14:05:00Z"),
            decided: Some(Decided {
                event: "approved".into(),
                at: t("2026-11-24T14:07:00Z"),
                credential_id: None,
            }),
        }
    }

    /// No user-controlled text reaches the HTML raw: the nasty string never appears
    /// unescaped, and its escaped form does.
    fn assert_escaped(html: &str) {
        assert!(!html.contains("<script>"), "raw <script> in\n{html}");
        assert!(!html.contains("\"x\""), "raw quote in\n{html}");
        assert!(!html.contains("& 'q'"), "raw ampersand in\n{html}");
        assert!(html.contains("&#60;script&#62;") || html.contains("&lt;script&gt;"));
    }

    #[test]
    fn pages_escape_what_users_write() -> Result<(), askama::Error> {
        // A login may hold markup characters (no whitespace): the header shows it.
        let me = Login::parse("<script>\"a\"&'q'@example.com").ok_or(askama::Error::Fmt)?;
        let human = Human {
            login: me.clone(),
            csrf_token: format!("csrf{NASTY}"),
            session_key: String::new(),
        };
        let now = t("2026-11-24T14:10:00Z");
        let chrome = Chrome {
            title: "T",
            human: Some(&human),
            active: "/",
        };
        let rec = record(false);
        let machine = record(true);

        let inbox = InboxRows::of(Some(&[rec.clone(), machine.clone()]), &me, &now).render()?;
        assert_escaped(&inbox);
        assert!(
            inbox.contains("<p class=\"reason\">reason &#60;script&#62;"),
            "{inbox}"
        );

        for r in [&rec, &machine] {
            let page = RequestPage {
                chrome,
                view: Ok(RequestView::of(
                    r,
                    &me,
                    &now,
                    None,
                    Some(r.record_id.clone()),
                )),
            }
            .render()?;
            assert_escaped(&page);
        }

        let grant = GrantItem {
            grant_id: format!("g{NASTY}"),
            granted: "approval".into(),
            record_id: None,
            enrollment: rec.enrollment.clone().unwrap_or_else(|| unreachable!()),
            names: vec![format!("secret{NASTY}")],
            approver: Some(format!("bob{NASTY}")),
            expires_at: None,
            created_at: now,
            state: "live".into(),
            credentials: vec![countersign_console_core::broker::IssuedCredential {
                secret: format!("secret{NASTY}"),
                issuer: format!("postgres{NASTY}"),
                name: format!("role{NASTY}"),
                state: "destroying".into(),
                error: Some(format!("error{NASTY}")),
                next_attempt_at: Some(now),
                destroyed_at: None,
            }],
        };
        let grants = GrantsPage {
            chrome,
            list: Ok(vec![GrantRow::of(&grant, &now)]),
        }
        .render()?;
        assert_escaped(&grants);

        let m = MachineLogin {
            credential_id: format!("c{NASTY}"),
            host: format!("host{NASTY}"),
            service: Some(format!("svc{NASTY}")),
            subject: None,
            approved_by: format!("ada{NASTY}"),
            issued_at: now,
            expires_at: now,
            expired: false,
        };
        let machines = MachinesPage {
            chrome,
            list: Ok(vec![MachineRow::of(&m, &now)]),
        }
        .render()?;
        assert_escaped(&machines);

        let tokens = TokensPage {
            chrome,
            list: Ok(vec![TokenRow::of(&TokenInfo {
                id: format!("t{NASTY}"),
                name: format!("laptop{NASTY}"),
                created_at: "2026-11-24T14:05:00Z".into(),
                expires_at: None,
            })]),
        }
        .render()?;
        assert_escaped(&tokens);
        assert!(
            tokens.contains(
                "<time datetime=\"2026-11-24T14:05:00Z\" title=\"2026-11-24 14:05 UTC\">2026-11-24 14:05 UTC</time>"
            )
        );

        let history = HistoryPage {
            chrome,
            entries: vec![HistoryRow {
                id: rec.record_id.clone(),
                event: "approved".into(),
                at: when(&now),
                title: title_of(&rec),
                reason: rec.reason.clone(),
            }],
        }
        .render()?;
        assert_escaped(&history);
        assert_escaped(&notice("error", NASTY).render()?);
        assert_escaped(&InboxRows::failed(notice("error", NASTY)).render()?);

        let sign_in = SignInPage {
            chrome: Chrome {
                title: "Sign in",
                human: None,
                active: "",
            },
            error: Some(NASTY),
            idp: Some(format!("Idp{NASTY}")),
            next_query: String::new(),
            next: NASTY,
            form_token: Some(NASTY),
            hint: NASTY,
            unconfigured: false,
        }
        .render()?;
        assert_escaped(&sign_in);
        Ok(())
    }

    #[test]
    fn a_decided_request_says_who_decided_and_when() -> Result<(), askama::Error> {
        let me = Login::parse("ada@example.com").ok_or(askama::Error::Fmt)?;
        let bob = Login::parse("bob@example.com").ok_or(askama::Error::Fmt)?;
        let now = t("2026-11-24T14:10:00Z");
        let mut rec = record(false);
        rec.approver = "anyone".into();
        let by = |login: &Login| Decision {
            login: login.clone(),
            record_id: rec.record_id.clone(),
            event: "approved".into(),
            at: now,
        };
        let text = |v: RequestView| v.outcome.map(|o| o.text).unwrap_or_default();
        // Recorded by this console: you, or the person who decided.
        let mine = RequestView::of(&rec, &me, &now, Some(&by(&me)), Some("next".into()));
        assert_eq!(mine.decider, "you");
        assert_eq!(mine.next.as_deref(), Some("next"));
        assert_eq!(text(mine), "Approved by you at 2026-11-24 14:07 UTC.");
        let his = RequestView::of(&rec, &me, &now, Some(&by(&bob)), None);
        assert_eq!(
            text(his),
            "Approved by bob@example.com at 2026-11-24 14:07 UTC."
        );
        // Not recorded here: the record's named approver, or nobody named for `anyone`.
        assert_eq!(
            text(RequestView::of(&rec, &me, &now, None, None)),
            "Approved at 2026-11-24 14:07 UTC."
        );
        rec.approver = "bob@example.com".into();
        assert_eq!(
            text(RequestView::of(&rec, &me, &now, None, None)),
            "Approved by bob@example.com at 2026-11-24 14:07 UTC."
        );
        rec.state = "expired".into();
        rec.decided = Some(Decided {
            event: "expired".into(),
            at: t("2026-11-24T15:05:00Z"),
            credential_id: None,
        });
        let expired = RequestView::of(&rec, &me, &now, None, None);
        assert!(!expired.pending && expired.left.is_none());
        assert_eq!(text(expired), "Expired undecided at 2026-11-24 15:05 UTC.");
        // Pending: no outcome, a countdown, the decide buttons.
        rec.state = "pending".into();
        rec.decided = None;
        let pending = RequestView::of(&rec, &me, &now, None, None);
        assert!(pending.pending && pending.left.is_some() && pending.outcome.is_none());
        let html = RequestPage {
            chrome: Chrome {
                title: "T",
                human: None,
                active: "",
            },
            view: Ok(pending),
        }
        .render()?;
        assert!(html.contains("data-action=\"approve\"") && !html.contains("id=\"next-request\""));
        // Who is to decide a pending request, not who did.
        assert!(html.contains("<dt>Decides</dt>") && !html.contains("Decided by"));
        Ok(())
    }

    #[test]
    fn a_request_notes_each_issued_secret_it_asks_for() {
        let me = Login::parse("ada@example.com").unwrap_or_else(|| unreachable!());
        let list = ["OTHER", &format!("secret{NASTY}")].map(|name| IssuedSecret {
            name: name.into(),
            kind: "issued".into(),
            issuer: "aws-iam".into(),
            owner: String::new(),
            tier: String::new(),
        });
        let noted = |rec: CredentialRecord| {
            let mut v = RequestView::of(&rec, &me, &rec.requested_at, None, None);
            v.note_issued(&rec, &list);
            v.issued
        };
        let want = [(format!("secret{NASTY}"), "AWS IAM".to_owned())];
        assert_eq!(noted(record(false)), want);
        assert!(noted(record(true)).is_empty());
    }

    #[test]
    fn one_time_format_and_durations() -> Result<(), askama::Error> {
        assert_eq!(
            when(&t("2026-11-24T14:05:09Z")).render()?,
            "<time datetime=\"2026-11-24T14:05:09Z\" title=\"2026-11-24 14:05 UTC\">2026-11-24 14:05 UTC</time>"
        );
        assert_eq!(duration(45), "45 s");
        assert_eq!(duration(600), "10 min");
        assert_eq!(duration(3600), "1 h");
        assert_eq!(duration(5400), "1 h 30 min");
        assert_eq!(duration(86400 + 7200), "1 d 2 h");
        Ok(())
    }
}
