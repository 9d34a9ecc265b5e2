//! The pages: server-rendered HTML over the same core operations as the API; the pages' script
//! (`/assets/console.js`) sends the state changes to the API with the session's CSRF token.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{ConnectInfo, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_console_core::clock::ct_eq;
use countersign_console_core::console::{NewSession, safe_return_to};
use countersign_console_core::{Caller, Error, ErrorCode, Human};

use crate::AppState;
use crate::auth::{cookie, same_origin};
use crate::html::{self, esc, layout, notice};

type St = State<Arc<AppState>>;

const SCRIPT: &str = include_str!("../assets/console.js");
const STYLE: &str = include_str!("../assets/console.css");

fn html_response(status: StatusCode, body: String) -> Response {
    let mut r = (status, body).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

fn status_of(e: &Error) -> StatusCode {
    StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_GATEWAY)
}

fn error_text(e: &Error) -> String {
    format!("{}: {}", e.code_str(), e.message)
}

fn human(caller: &Caller) -> Result<&Human, Box<Response>> {
    caller
        .human()
        .map_err(|e| Box::new(html_response(status_of(&e), error_text(&e))))
}

fn redirect(location: &str) -> Response {
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

pub async fn inbox(State(st): St, Extension(caller): Extension<Caller>) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let now = st.console.now();
    let rows = match st.console.inbox(h).await {
        Ok(list) => html::inbox_rows(list.as_deref(), &h.login, &now),
        Err(e) => notice("error", &error_text(&e)),
    };
    let body = format!(
        "<h1>Inbox</h1><p class=\"lead\">Requests waiting for your decision. New ones appear here \
         as agents ask.</p><p id=\"flash\" class=\"notice\" role=\"status\" hidden></p>\
         <section id=\"inbox\" data-poll=\"/inbox/rows\">{rows}</section>"
    );
    html_response(StatusCode::OK, layout("Inbox", Some(h), "/", &body))
}

pub async fn inbox_rows(State(st): St, Extension(caller): Extension<Caller>) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let now = st.console.now();
    match st.console.inbox(h).await {
        Ok(list) => html_response(
            StatusCode::OK,
            html::inbox_rows(list.as_deref(), &h.login, &now),
        ),
        Err(e) => html_response(status_of(&e), notice("error", &error_text(&e))),
    }
}

pub async fn request_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let now = st.console.now();
    let (status, body) = match st.console.record(h, &id).await {
        Ok(rec) => {
            let actions = if rec.state != "pending" {
                String::new()
            } else if rec.is_machine_login() {
                format!(
                    "<div class=\"decide\"><label for=\"code\">Confirmation code shown on the machine</label>\
                     <input id=\"code\" name=\"code\" autocomplete=\"off\" placeholder=\"XXXX-XXXX\" maxlength=\"16\">\
                     <div class=\"actions\"><button type=\"button\" class=\"approve\" data-action=\"approve\" data-record=\"{0}\" data-with-code=\"1\">Approve</button>\
                     <button type=\"button\" class=\"deny\" data-action=\"deny\" data-record=\"{0}\" data-with-code=\"1\">Deny</button></div></div>",
                    esc(&rec.record_id)
                )
            } else {
                format!(
                    "<div class=\"actions\"><button type=\"button\" class=\"approve\" data-action=\"approve\" data-record=\"{0}\">Approve</button>\
                     <button type=\"button\" class=\"deny\" data-action=\"deny\" data-record=\"{0}\">Deny</button></div>",
                    esc(&rec.record_id)
                )
            };
            let title = if rec.is_machine_login() {
                "Machine login"
            } else {
                "Secret request"
            };
            (
                StatusCode::OK,
                format!(
                    "<h1>{title}</h1>{}{actions}<p id=\"result\" class=\"notice\" role=\"status\" hidden></p>",
                    html::record_facts(&rec, &h.login, &now)
                ),
            )
        }
        Err(e) => (
            status_of(&e),
            format!("<h1>Request</h1>{}", notice("error", &error_text(&e))),
        ),
    };
    html_response(status, layout("Request", Some(h), "", &body))
}

pub async fn machine_approve_page(Extension(caller): Extension<Caller>) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let body = "<h1>Approve a machine</h1>\
        <p class=\"lead\">A machine logging in as you shows a confirmation code. Type it here to see \
        the login's facts, then approve it if they are yours.</p>\
        <form id=\"lookup\" class=\"code-form\" autocomplete=\"off\">\
        <label for=\"code\">Confirmation code</label>\
        <input id=\"code\" name=\"code\" placeholder=\"XXXX-XXXX\" maxlength=\"16\" required autofocus>\
        <button type=\"submit\">Look up</button></form>\
        <section id=\"machine\" hidden><h2>This login</h2><dl id=\"machine-facts\" class=\"facts wide\"></dl>\
        <div class=\"actions\"><button type=\"button\" class=\"approve\" data-action=\"approve-machine\">Approve</button>\
        <button type=\"button\" class=\"deny\" data-action=\"deny-machine\">Deny</button></div></section>\
        <p id=\"result\" class=\"notice\" role=\"status\" hidden></p>";
    html_response(
        StatusCode::OK,
        layout("Approve a machine", Some(h), "/machines/approve", body),
    )
}

pub async fn grants_page(State(st): St, Extension(caller): Extension<Caller>) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let now = st.console.now();
    let (status, list) = match st.console.grants(h).await {
        Ok(g) => (StatusCode::OK, html::grants_table(&g, &now)),
        Err(e) => (status_of(&e), notice("error", &error_text(&e))),
    };
    let body = format!(
        "<h1>Live grants</h1><p class=\"lead\">Grants you approved and grants of your machines' sessions. \
         Revoking one stops its session reading the secrets at once.</p>\
         <p id=\"result\" class=\"notice\" role=\"status\" hidden></p><section id=\"list\">{list}</section>"
    );
    html_response(status, layout("Grants", Some(h), "/grants", &body))
}

pub async fn machines_page(State(st): St, Extension(caller): Extension<Caller>) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let now = st.console.now();
    let (status, list) = match st.console.machine_logins(h).await {
        Ok(m) => (StatusCode::OK, html::machines_table(&m, &now)),
        Err(e) => (status_of(&e), notice("error", &error_text(&e))),
    };
    let body = format!(
        "<h1>Machines</h1><p class=\"lead\">Your machines' logins and every service's. Revoking one \
         ends every session it enrolled.</p>\
         <p id=\"result\" class=\"notice\" role=\"status\" hidden></p><section id=\"list\">{list}</section>"
    );
    html_response(status, layout("Machines", Some(h), "/machines", &body))
}

pub async fn tokens_page(State(st): St, Extension(caller): Extension<Caller>) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let (status, list) = match st.console.tokens(h).await {
        Ok(t) => (StatusCode::OK, html::tokens_table(&t)),
        Err(e) => (status_of(&e), notice("error", &error_text(&e))),
    };
    let body = format!(
        "<h1>Agent tokens</h1><p class=\"lead\">A personal token lets an agent call this console as \
         yours (bearer token). It cannot approve anything: decisions are made by a signed-in person.</p>\
         <form id=\"mint\" class=\"code-form\" autocomplete=\"off\"><label for=\"token-name\">Name</label>\
         <input id=\"token-name\" name=\"name\" maxlength=\"100\" placeholder=\"e.g. laptop agent\">\
         <button type=\"submit\">Mint a token</button></form>\
         <div id=\"minted\" class=\"notice ok\" hidden><p>Copy it now; it is not shown again.</p>\
         <code id=\"minted-token\"></code></div>\
         <p id=\"result\" class=\"notice\" role=\"status\" hidden></p><section id=\"list\">{list}</section>"
    );
    html_response(status, layout("Agent tokens", Some(h), "/tokens", &body))
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

fn sign_in_body(
    st: &AppState,
    next: &str,
    form_token: Option<&str>,
    error: Option<&str>,
) -> String {
    let mut body = String::from("<div class=\"sign-in\"><h1>Sign in</h1>");
    if let Some(e) = error {
        body.push_str(&notice("error", e));
    }
    let next_q = url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>();
    if let Some(name) = st.console.idp_name() {
        body.push_str(&format!(
            "<p><a class=\"button primary\" id=\"oidc\" href=\"/auth/oidc?next={}\">Sign in with {}</a></p>",
            esc(&next_q),
            esc(&name)
        ));
    }
    if let (true, Some(token)) = (st.console.config().local_sign_in, form_token) {
        body.push_str(&format!(
            "<form method=\"post\" action=\"/auth/local\" class=\"local\">\
             <p class=\"lead\">Dev mode: sign in by naming your e-mail (this console answers only on loopback).</p>\
             <label for=\"email\">E-mail</label>\
             <input id=\"email\" name=\"email\" type=\"email\" required autofocus value=\"{}\">\
             <input type=\"hidden\" name=\"csrf\" value=\"{}\"><input type=\"hidden\" name=\"next\" value=\"{}\">\
             <button type=\"submit\" class=\"primary\">Sign in</button></form>",
            esc(st.local_sign_in_hint.as_deref().unwrap_or("")),
            esc(token),
            esc(next)
        ));
    }
    if st.console.idp_name().is_none() && !st.console.config().local_sign_in {
        body.push_str(&notice(
            "error",
            "No identity provider is configured: set [oidc] in the console's configuration.",
        ));
    }
    body.push_str("</div>");
    body
}

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
    let body = sign_in_body(st, next, token.as_deref(), error);
    let mut r = html_response(status, layout("Sign in", None, "", &body));
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
    if !same_origin(&headers, &st.public_origin) || !token_ok {
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

pub async fn script() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        SCRIPT,
    )
        .into_response()
}

pub async fn style() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        STYLE,
    )
        .into_response()
}
