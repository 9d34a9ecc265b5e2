//! Who is calling, by the route's class: a bearer token (`Authorization: Bearer …`, which wins
//! when present) or the browser session cookie. A person's state-changing request must come
//! from this site (`Origin` / `Sec-Fetch-Site`) and carry the session's CSRF token, in the
//! `X-CSRF-Token` header (the pages' script) or a `csrf` form field (the sign-out form).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use countersign_console_core::{Caller, ErrorCode};

use crate::AppState;
use crate::error::ApiError;
use crate::route::{Auth, Kind, RouteSpec};

/// The CSRF header the pages' script sends.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// The largest form body read for its CSRF field.
const FORM_LIMIT: usize = 16 * 1024;

/// A cookie's value from the request's `Cookie` headers.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The bearer token, if the request carries `Authorization`; `Err` when it is not a bearer.
fn bearer(headers: &HeaderMap) -> Option<Result<String, ()>> {
    let v = headers.get(header::AUTHORIZATION)?;
    let v = match v.to_str() {
        Ok(v) => v.trim(),
        Err(_) => return Some(Err(())),
    };
    match v.split_once(' ') {
        Some((scheme, token))
            if scheme.eq_ignore_ascii_case("bearer") && !token.trim().is_empty() =>
        {
            Some(Ok(token.trim().to_owned()))
        }
        _ => Some(Err(())),
    }
}

/// Whether a browser's request comes from this site: its `Origin` is ours, or (without
/// `Origin`) `Sec-Fetch-Site` does not say another site. A request with neither is not from a
/// current browser's cross-site form or script; the CSRF token still has to match.
pub fn same_origin(headers: &HeaderMap, origin: &str) -> bool {
    if let Some(o) = headers.get(header::ORIGIN) {
        return o.to_str().map(|o| o == origin).unwrap_or(false);
    }
    match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        Some(s) => matches!(s, "same-origin" | "none"),
        None => true,
    }
}

/// Whether a browser's request comes from this console: [`same_origin`] with its public
/// origin, or, in dev mode only, with the other loopback name it answers at
/// ([`crate::config::DevHooks::also_origin`]: `127.0.0.1` beside the `localhost` it prints).
/// `serve` keeps its one exact origin.
pub fn from_this_console(st: &AppState, headers: &HeaderMap) -> bool {
    same_origin(headers, &st.public_origin)
        || st
            .dev
            .as_ref()
            .and_then(|d| d.also_origin.as_deref())
            .is_some_and(|o| same_origin(headers, o))
}

fn refuse(code: ErrorCode) -> Response {
    ApiError::from(code).into_response()
}

/// Sends a person who is not signed in to the sign-in page (and clears a stale cookie).
fn to_sign_in(st: &AppState, req: &Request, stale: bool) -> Response {
    let next = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let next = if req.method() == Method::GET {
        next
    } else {
        "/"
    };
    let location = format!(
        "/sign-in?next={}",
        url::form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()
    );
    let mut resp = (StatusCode::SEE_OTHER, [(header::LOCATION, location)]).into_response();
    if stale && let Ok(v) = HeaderValue::from_str(&st.cookie(st.session_cookie(), "", 0)) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
    resp
}

/// The route layer every route of the table gets, with its own class.
pub async fn authenticate(
    State((st, spec)): State<(Arc<AppState>, RouteSpec)>,
    mut req: Request,
    next: Next,
) -> Response {
    if spec.auth == Auth::Anyone {
        return next.run(req).await;
    }
    match bearer(req.headers()) {
        Some(Err(())) => return refuse(ErrorCode::UNAUTHENTICATED),
        Some(Ok(token)) => {
            let caller = match st.console.authenticate_bearer(&token).await {
                Ok(c) => c,
                Err(e) => {
                    let mut r = ApiError(e).into_response();
                    if r.status() == StatusCode::UNAUTHORIZED {
                        r.headers_mut().insert(
                            header::WWW_AUTHENTICATE,
                            HeaderValue::from_static(
                                "Bearer realm=\"countersign\", error=\"invalid_token\"",
                            ),
                        );
                    }
                    return r;
                }
            };
            if spec.auth == Auth::HumanOnly {
                return refuse(ErrorCode::HUMAN_ONLY);
            }
            req.extensions_mut().insert(caller);
            return next.run(req).await;
        }
        None => {}
    }
    let token = cookie(req.headers(), st.session_cookie());
    let human = match &token {
        None => None,
        Some(t) => match st.console.session(t).await {
            Ok(h) => Some(h),
            Err(e) if e.is(ErrorCode::UNAUTHENTICATED) => None,
            Err(e) => return ApiError(e).into_response(),
        },
    };
    let Some(human) = human else {
        return match spec.kind {
            Kind::Page => to_sign_in(&st, &req, token.is_some()),
            Kind::Api => refuse(ErrorCode::UNAUTHENTICATED),
        };
    };
    if spec.auth == Auth::AgentOnly {
        return refuse(ErrorCode::AGENT_ONLY);
    }
    if !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
        if !from_this_console(&st, req.headers()) {
            return refuse(ErrorCode::CSRF_REJECTED);
        }
        let (rebuilt, presented) = match csrf_of(req).await {
            Ok(x) => x,
            Err(resp) => return resp,
        };
        req = rebuilt;
        if let Err(e) = st.console.check_csrf(&human, presented.as_deref()) {
            return ApiError(e).into_response();
        }
    }
    req.extensions_mut().insert(Caller::Human(human));
    next.run(req).await
}

/// The CSRF token of a request: its header, or a form body's `csrf` field (the body is read
/// and put back).
async fn csrf_of(req: Request) -> Result<(Request, Option<String>), Response> {
    if let Some(v) = req.headers().get(CSRF_HEADER) {
        let v = v.to_str().ok().map(str::to_owned);
        return Ok((req, v));
    }
    let is_form = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    if !is_form {
        return Ok((req, None));
    }
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, FORM_LIMIT)
        .await
        .map_err(|_| refuse(ErrorCode::REQUEST_TOO_LARGE))?;
    let token = url::form_urlencoded::parse(&bytes)
        .find(|(k, _)| k == "csrf")
        .map(|(_, v)| v.into_owned());
    Ok((Request::from_parts(parts, Body::from(bytes)), token))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_str(v).expect("header"));
        }
        h
    }

    #[test]
    fn origin_rules() {
        let o = "https://console.example.com";
        assert!(same_origin(&headers(&[("origin", o)]), o));
        assert!(!same_origin(
            &headers(&[("origin", "https://evil.example")]),
            o
        ));
        assert!(!same_origin(&headers(&[("origin", "null")]), o));
        assert!(!same_origin(
            &headers(&[("sec-fetch-site", "cross-site")]),
            o
        ));
        assert!(!same_origin(
            &headers(&[("sec-fetch-site", "same-site")]),
            o
        ));
        assert!(same_origin(
            &headers(&[("sec-fetch-site", "same-origin")]),
            o
        ));
        assert!(same_origin(&headers(&[]), o));
    }

    #[test]
    fn cookies_and_bearers() {
        let h = headers(&[("cookie", "a=1; countersign_session=tok; b=2")]);
        assert_eq!(cookie(&h, "countersign_session").as_deref(), Some("tok"));
        assert_eq!(cookie(&h, "c"), None);
        assert_eq!(
            bearer(&headers(&[("authorization", "bearer abc")])),
            Some(Ok("abc".into()))
        );
        assert_eq!(
            bearer(&headers(&[("authorization", "Basic abc")])),
            Some(Err(()))
        );
        assert_eq!(bearer(&headers(&[])), None);
    }
}
