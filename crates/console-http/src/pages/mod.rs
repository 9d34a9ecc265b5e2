//! The pages: server-rendered HTML over the same core operations as the API; the pages' script
//! (`/assets/console.js`, whose top comment is the contract every page uses) sends the state
//! changes to the API with the session's CSRF token. Each page fills one askama template
//! ([`crate::html`]), which escapes what it prints.
//!
//! A page handler answers [`PageResult`]: `?` turns a core [`Error`] into a [`PageError`],
//! which [`render_faults`] (a layer on every page route) shows inside the layout with the
//! person's navigation, the status, the message and a way back.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::Extension;
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_console_core::clock::ct_eq;
use countersign_console_core::console::{NewSession, safe_return_to};
use countersign_console_core::{Caller, Error, ErrorCode, Human};

use crate::AppState;
use crate::auth::{cookie, from_this_console};
use crate::html::{self, Chrome, InboxRows, RequestView, notice};

pub mod asks;
pub mod delivery;
pub mod documents;
pub mod mailbox;
pub mod messages;
pub mod search;
pub mod work;

pub(crate) type St = State<Arc<AppState>>;

const SCRIPT: &str = include_str!("../../assets/console.js");
const STYLE: &str = include_str!("../../assets/console.css");

/// A script the pages load, revalidated on every load (`no-cache`) so that a new release's
/// is used at once.
pub(crate) fn script_asset(body: &'static str) -> Response {
    asset("text/javascript; charset=utf-8", body)
}

/// A style sheet the pages load, revalidated on every load as [`script_asset`]s are.
pub(crate) fn style_asset(body: &'static str) -> Response {
    asset("text/css; charset=utf-8", body)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

pub(crate) fn html_response(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Renders a template; a template that fails to render answers 500 with no detail.
pub(crate) fn page(status: StatusCode, t: &impl Template) -> Response {
    match t.render() {
        Ok(body) => html_response(status, body),
        Err(e) => {
            tracing::error!(error = %e, "a page failed to render");
            html_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the page failed to render".to_owned(),
            )
        }
    }
}

// ----- error pages -----

/// A page that cannot be shown, rendered inside the layout: its status, code, message and a
/// way back. Made from a core [`Error`] by `?`.
#[derive(Debug, Clone)]
pub struct PageError {
    pub status: StatusCode,
    pub code: String,
    pub message: String,
    /// Where "back" goes: `(href, label)`; the inbox when none.
    pub back: Option<(String, String)>,
}

/// What a page handler answers.
pub type PageResult = Result<Response, PageError>;

impl PageError {
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
            back: None,
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// The way back this page offers.
    pub fn back(mut self, href: impl Into<String>, label: impl Into<String>) -> Self {
        self.back = Some((href.into(), label.into()));
        self
    }

    /// The page, framed for `human` (none: the frame without navigation).
    pub fn render(&self, human: Option<&Human>) -> Response {
        let reason = self.status.canonical_reason().unwrap_or("Error");
        let back = self
            .back
            .as_ref()
            .map(|(h, l)| (h.as_str(), l.as_str()))
            .unwrap_or(("/", "Back to your inbox"));
        let title = format!("{} {reason}", self.status.as_u16());
        let mut r = page(
            self.status,
            &html::ErrorPage {
                chrome: Chrome {
                    title: &title,
                    human,
                    active: "",
                },
                status: self.status.as_u16(),
                reason,
                code: &self.code,
                message: &self.message,
                back,
            },
        );
        r.extensions_mut().insert(self.clone());
        r
    }
}

impl From<Error> for PageError {
    fn from(e: Error) -> Self {
        Self::new(status_of(&e), e.code_str(), e.message.clone())
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        self.render(None)
    }
}

/// The layer on every page route: a [`PageError`] answer is rendered again with the signed-in
/// person's navigation (the handler's answer had none).
pub async fn render_faults(req: Request, next: axum::middleware::Next) -> Response {
    let human = req
        .extensions()
        .get::<Caller>()
        .and_then(|c| c.human().ok())
        .cloned();
    let resp = next.run(req).await;
    match (resp.extensions().get::<PageError>(), &human) {
        (Some(fault), Some(h)) => fault.render(Some(h)),
        _ => resp,
    }
}

/// A path no route has, asked for by a browser: 404 inside the layout (API paths keep JSON).
pub fn no_page() -> Response {
    PageError::not_found("There is no page at this address.").render(None)
}

pub(crate) fn status_of(e: &Error) -> StatusCode {
    StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_GATEWAY)
}

pub(crate) fn error_text(e: &Error) -> String {
    format!("{}: {}", e.code_str(), e.message)
}

/// The signed-in person a page is for; else the caller's refusal (an agent's bearer on a
/// person's page: 403 HUMAN_ONLY), as an error page.
pub(crate) fn human(caller: &Caller) -> Result<&Human, PageError> {
    caller.human().map_err(PageError::from)
}

pub(crate) fn redirect(location: &str) -> Response {
    (
        StatusCode::SEE_OTHER,
        [(header::LOCATION, location.to_owned())],
    )
        .into_response()
}

fn set_cookie(resp: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

// ----- the person's pages -----

/// The frame of a signed-in person's page.
pub(crate) fn chrome<'a>(title: &'a str, h: &'a Human, active: &'a str) -> Chrome<'a> {
    Chrome {
        title,
        human: Some(h),
        active,
    }
}

pub async fn inbox_rows(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let now = st.console.now();
    Ok(match st.console.inbox(h).await {
        Ok(list) => page(
            StatusCode::OK,
            &InboxRows::of(list.as_deref(), &h.login, &now),
        ),
        Err(e) => page(
            status_of(&e),
            &InboxRows::failed(notice("error", error_text(&e))),
        ),
    })
}

pub async fn request_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    let now = st.console.now();
    let (status, view) = match st.console.record(h, &id).await {
        Ok(rec) => {
            // Once decided, the way on: the next request waiting for this person.
            let next = if rec.state == "pending" {
                None
            } else {
                match st.console.inbox(h).await {
                    Ok(Some(list)) => list
                        .iter()
                        .find(|r| r.record_id != rec.record_id)
                        .map(|r| r.name().to_owned()),
                    _ => None,
                }
            };
            let by = st.console.decision_on(&rec.record_id).await.ok().flatten();
            let mut view = RequestView::of(&rec, &h.login, &now, by.as_ref(), next);
            // Which of its secrets an issuer makes per grant (issue 49): the page says so.
            if !view.machine {
                match st.console.issued_secrets().await {
                    Ok(list) => view.note_issued(&rec, &list),
                    Err(e) => tracing::warn!(error = %e, "the broker's issued secrets: not read"),
                }
            }
            // Where policy asks for a passkey, the statement in words, before the key is
            // touched (a broker without passkeys, or one this person may not decide: none).
            if view.pending
                && let Ok(s) = st.console.statement(h, &rec.record_id).await
                && s.required
            {
                view.countersign = Some(s.words);
            }
            (StatusCode::OK, Ok(view))
        }
        Err(e) => (status_of(&e), Err(notice("error", error_text(&e)))),
    };
    let title = match &view {
        Ok(v) => v.heading,
        Err(_) => "Request",
    };
    Ok(page(
        status,
        &html::RequestPage {
            chrome: chrome(title, h, ""),
            view,
        },
    ))
}

pub async fn machine_approve_page(Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    Ok(page(
        StatusCode::OK,
        &html::MachineApprovePage {
            chrome: chrome("Approve a machine", h, "/machines/approve"),
        },
    ))
}

pub async fn grants_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let now = st.console.now();
    let (status, list) = match st.console.grants(h).await {
        Ok(g) => (
            StatusCode::OK,
            Ok(g.iter().map(|g| html::GrantRow::of(g, &now)).collect()),
        ),
        Err(e) => (status_of(&e), Err(notice("error", error_text(&e)))),
    };
    Ok(page(
        status,
        &html::GrantsPage {
            chrome: chrome("Grants", h, "/grants"),
            list,
        },
    ))
}

pub async fn machines_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let now = st.console.now();
    let (status, list) = match st.console.machine_logins(h).await {
        Ok(m) => (
            StatusCode::OK,
            Ok(m.iter().map(|m| html::MachineRow::of(m, &now)).collect()),
        ),
        Err(e) => (status_of(&e), Err(notice("error", error_text(&e)))),
    };
    Ok(page(
        status,
        &html::MachinesPage {
            chrome: chrome("Machines", h, "/machines"),
            list,
        },
    ))
}

pub async fn tokens_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let (status, list) = match st.console.tokens(h).await {
        Ok(t) => (
            StatusCode::OK,
            Ok(t.iter().map(html::TokenRow::of).collect()),
        ),
        Err(e) => (status_of(&e), Err(notice("error", error_text(&e)))),
    };
    Ok(page(
        status,
        &html::TokensPage {
            chrome: chrome("Agent tokens", h, "/tokens"),
            list,
        },
    ))
}

pub async fn notifications_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let view = match st.notifier.as_deref() {
        None => Err(notice(
            "info",
            "This console sends no notifications: its configuration has no [notifications] section.",
        )),
        Some(n) => match n.prefs(&h.login).await {
            Ok(p) => Ok(html::NotificationsView {
                email: p.email,
                slack_url: p.slack_url.unwrap_or_default(),
                webhook_url: p.webhook_url.unwrap_or_default(),
                digest: p.digest,
                can_email: n.available().contains(&"email"),
                can_webhook: n.available().contains(&"webhook"),
            }),
            Err(e) => {
                let e = countersign_console_core::Error::from(e);
                Err(notice("error", error_text(&e)))
            }
        },
    };
    Ok(page(
        StatusCode::OK,
        &html::NotificationsPage {
            chrome: chrome("Notifications", h, "/notifications"),
            view,
            mailbox: st
                .notifier
                .as_deref()
                .is_some_and(|n| n.mailbox().is_some()),
        },
    ))
}

/// The Passkeys page, with `shown` the enrollment code dev mode's button made (or why none).
async fn passkeys_view(
    st: &AppState,
    h: &Human,
    shown: Option<Result<String, String>>,
) -> PageResult {
    let (status, list) = match st.console.passkeys(h).await {
        Ok(p) => (
            StatusCode::OK,
            Ok(p.iter().map(html::PasskeyRow::of).collect::<Vec<_>>()),
        ),
        Err(e) => (status_of(&e), Err(notice("error", error_text(&e)))),
    };
    // Only a person without a passkey needs a code: a later passkey is vouched for by one.
    let first = list.as_ref().map(|l| l.is_empty()).unwrap_or(true);
    let enroll = first.then(|| match &st.dev {
        Some(_) => html::EnrollHelp::Dev { shown },
        None => html::EnrollHelp::Operator {
            command: format!(
                "countersign-broker passkeys enroll-code {} --config <the broker's configuration>",
                h.login.as_str()
            ),
        },
    });
    Ok(page(
        status,
        &html::PasskeysPage {
            chrome: chrome("Passkeys", h, "/passkeys"),
            list,
            enroll,
        },
    ))
}

pub async fn passkeys_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    passkeys_view(&st, h, None).await
}

/// Dev mode: a fresh enrollment code (15 minutes, single use) for the signed-in person's
/// first passkey, answered as the Passkeys page showing it and filling it in. A form's POST,
/// same-origin and CSRF-checked as every control is; `serve` has no such route (404): its
/// operator makes codes with the broker's seal key.
pub async fn passkeys_enroll_code(
    State(st): St,
    Extension(caller): Extension<Caller>,
) -> PageResult {
    let h = human(&caller)?;
    let Some(dev) = &st.dev else {
        return Err(Error::with_message(
            ErrorCode::NOT_FOUND,
            "enrollment codes are made here in dev mode only: an operator makes them with `countersign-broker passkeys enroll-code`",
        )
        .into());
    };
    let shown = (dev.enroll_code)(h.login.as_str()).map_err(|e| format!("{e:#}"));
    passkeys_view(&st, h, Some(shown)).await
}

/// How many decisions the history page shows (each is read from the broker).
const HISTORY_SHOWN: u32 = 50;

pub async fn history_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let decisions = match st.console.decisions(h, HISTORY_SHOWN).await {
        Ok(d) => d,
        Err(e) => {
            return Ok(page(
                status_of(&e),
                &html::HistoryPage {
                    chrome: chrome("History", h, "/history"),
                    entries: Vec::new(),
                },
            ));
        }
    };
    let mut entries = Vec::new();
    for d in decisions {
        // The record's facts as the broker has them now; a record it no longer has keeps its
        // id as its title.
        let (title, reason) = match st.console.record(h, &d.record_id).await {
            Ok(rec) => (html::title_of(&rec), rec.reason),
            Err(_) => (d.record_id.clone(), String::new()),
        };
        entries.push(html::HistoryRow {
            id: d.record_id,
            event: d.event,
            at: html::when(&d.at),
            title,
            reason,
        });
    }
    Ok(page(
        StatusCode::OK,
        &html::HistoryPage {
            chrome: chrome("History", h, "/history"),
            entries,
        },
    ))
}

pub async fn sign_out(State(st): St, Extension(caller): Extension<Caller>) -> Response {
    if let Ok(h) = caller.human() {
        let _ = st.console.sign_out(h).await;
    }
    let mut r = redirect("/sign-in");
    set_cookie(&mut r, &st.cookie(st.session_cookie(), "", 0));
    r
}

// ----- signing in -----

/// Renders the sign-in page (with a fresh form token for the local form, when enabled).
fn sign_in_response(
    st: &AppState,
    next: &str,
    error: Option<&str>,
    status: StatusCode,
) -> Response {
    let token = st
        .console
        .config()
        .local_sign_in
        .then(|| st.console.random_token());
    let local = st.console.config().local_sign_in;
    let idp = st.console.idp_name();
    let sign_in = html::SignInPage {
        chrome: Chrome {
            title: "Sign in",
            human: None,
            active: "",
        },
        error,
        unconfigured: idp.is_none() && !local,
        idp,
        next_query: url::form_urlencoded::byte_serialize(next.as_bytes()).collect(),
        next,
        form_token: token.as_deref().filter(|_| local),
        hint: st.local_sign_in_hint.as_deref().unwrap_or(""),
    };
    let mut r = page(status, &sign_in);
    if let Some(t) = token {
        set_cookie(&mut r, &st.cookie(st.form_cookie(), &t, 600));
    }
    r
}

pub async fn sign_in_page(State(st): St, Query(q): Query<HashMap<String, String>>) -> Response {
    let next = safe_return_to(q.get("next").map(String::as_str));
    sign_in_response(&st, next, None, StatusCode::OK)
}

pub async fn oidc_start(State(st): St, Query(q): Query<HashMap<String, String>>) -> Response {
    let next = safe_return_to(q.get("next").map(String::as_str));
    match st.console.begin_sign_in(Some(next)).await {
        Ok(start) => {
            let mut r = redirect(&start.url);
            set_cookie(&mut r, &st.cookie(st.sign_in_cookie(), &start.state, 600));
            r
        }
        Err(e) => sign_in_response(&st, next, Some(&error_text(&e)), status_of(&e)),
    }
}

pub async fn oidc_callback(
    State(st): St,
    headers: HeaderMap,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if let Some(err) = q.get("error") {
        let text = format!(
            "SIGN_IN_FAILED: the identity provider refused: {err}{}",
            q.get("error_description")
                .map(|d| format!(" ({d})"))
                .unwrap_or_default()
        );
        return sign_in_response(&st, "/", Some(&text), StatusCode::UNAUTHORIZED);
    }
    let (Some(state), Some(code)) = (q.get("state"), q.get("code")) else {
        return sign_in_response(
            &st,
            "/",
            Some("SIGN_IN_FAILED: the callback lacks code or state"),
            StatusCode::BAD_REQUEST,
        );
    };
    let browser = cookie(&headers, st.sign_in_cookie());
    match st
        .console
        .finish_sign_in(state, code, browser.as_deref())
        .await
    {
        Ok((session, return_to)) => signed_in(&st, session, &return_to),
        Err(e) => {
            let mut r = sign_in_response(&st, "/", Some(&error_text(&e)), status_of(&e));
            set_cookie(&mut r, &st.cookie(st.sign_in_cookie(), "", 0));
            r
        }
    }
}

fn signed_in(st: &AppState, session: NewSession, return_to: &str) -> Response {
    let mut r = redirect(safe_return_to(Some(return_to)));
    let max_age = (session.expires_at - st.console.now()).num_seconds().max(0);
    set_cookie(
        &mut r,
        &st.cookie(st.session_cookie(), &session.token, max_age),
    );
    set_cookie(&mut r, &st.cookie(st.sign_in_cookie(), "", 0));
    set_cookie(&mut r, &st.cookie(st.form_cookie(), "", 0));
    r
}

/// Dev mode's sign-in: loopback callers only, same origin, the form's token matching its
/// cookie (double submit), then the e-mail.
pub async fn local_sign_in(State(st): St, req: Request) -> Response {
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    let headers = req.headers().clone();
    let refuse = |st: &AppState, next: &str, e: Error| {
        sign_in_response(st, next, Some(&error_text(&e)), status_of(&e))
    };
    if !st.console.config().local_sign_in {
        return refuse(&st, "/", Error::new(ErrorCode::LOCAL_SIGN_IN_OFF));
    }
    if !peer.is_some_and(|p| p.ip().is_loopback()) {
        return refuse(
            &st,
            "/",
            Error::with_message(
                ErrorCode::LOCAL_SIGN_IN_OFF,
                "local sign-in answers loopback callers only",
            ),
        );
    }
    let Ok(bytes) = axum::body::to_bytes(req.into_body(), 16 * 1024).await else {
        return refuse(&st, "/", Error::new(ErrorCode::REQUEST_TOO_LARGE));
    };
    let form: HashMap<String, String> = url::form_urlencoded::parse(&bytes).into_owned().collect();
    let next = safe_return_to(form.get("next").map(String::as_str)).to_owned();
    let expected = cookie(&headers, st.form_cookie());
    let presented = form.get("csrf");
    let token_ok =
        matches!((&expected, presented), (Some(a), Some(b)) if ct_eq(a.as_bytes(), b.as_bytes()));
    if !from_this_console(&st, &headers) || !token_ok {
        return refuse(&st, &next, Error::new(ErrorCode::CSRF_REJECTED));
    }
    match st
        .console
        .sign_in_local(form.get("email").map(String::as_str).unwrap_or(""))
        .await
    {
        Ok(session) => signed_in(&st, session, &next),
        Err(e) => refuse(&st, &next, e),
    }
}

// ----- assets -----

const FAVICON: &str = include_str!("../../assets/favicon.svg");

/// The icon (an SVG; also answered at `/favicon.ico`, which browsers ask for by themselves).
pub async fn favicon() -> Response {
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        FAVICON,
    )
        .into_response()
}

/// What waits on the person, for the navigation's count and the title: asks whose turn is the
/// person's, and credential requests waiting for their decision.
pub async fn inbox_count(State(st): St, Extension(caller): Extension<Caller>) -> Response {
    let Ok(h) = caller.human() else {
        return StatusCode::FORBIDDEN.into_response();
    };
    let asks = match st.console.asks().inbox_asks(h, None, None).await {
        Ok(inbox) => inbox.inbox().human_turn.len(),
        Err(_) => 0,
    };
    let requests = match st.console.inbox(h).await {
        Ok(Some(list)) => list.len(),
        _ => 0,
    };
    (
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(serde_json::json!({ "count": asks + requests })),
    )
        .into_response()
}

pub async fn script() -> Response {
    script_asset(SCRIPT)
}

pub async fn style() -> Response {
    style_asset(STYLE)
}
