//! The broker routes the helper signs proofs for.
//!
//! An `{id}` segment is one UUID by the shared rule (`countersign_common::ids::parse_uuid`: the
//! hyphenated form, any case), the rule the broker reads the id by.
//!
//! Session proofs: the session routes of the spec (its own enrollment, requests and grants, and
//! the renewal of its lease). Launcher proofs: only the four operator routes; enrolling and
//! unenrolling are the helper's own calls, and a launcher proof for anything else is
//! `BAD_REQUEST`.

/// A route pattern: method and path segments, `{id}` standing for one UUID.
type Pattern = (&'static str, &'static str);

/// Routes a session proof may be signed for.
pub const SESSION_ROUTES: &[Pattern] = &[
    ("GET", "/v1/enrollments/self"),
    ("POST", "/v1/enrollments/{id}/renew"),
    ("POST", "/v1/requests"),
    ("GET", "/v1/requests/{id}"),
    ("POST", "/v1/requests/{id}/cancel"),
    ("POST", "/v1/grants/{id}/values"),
    ("POST", "/v1/grants/{id}/revoke"),
];

/// The four operator routes, the only ones a launcher proof is signed for on request.
pub const OPERATOR_ROUTES: &[Pattern] = &[
    ("GET", "/v1/operator/machines"),
    ("POST", "/v1/operator/machines/{id}/revoke"),
    ("GET", "/v1/operator/grants"),
    ("POST", "/v1/operator/grants/{id}/revoke"),
];

/// Whether `method path` is one of `routes`.
#[must_use]
pub fn matches(routes: &[Pattern], method: &str, path: &str) -> bool {
    routes
        .iter()
        .any(|(m, p)| *m == method && path_matches(p, path))
}

/// Whether a session proof may be signed for `method path`.
#[must_use]
pub fn is_session_route(method: &str, path: &str) -> bool {
    matches(SESSION_ROUTES, method, path)
}

/// Whether a launcher proof may be signed for `method path`.
#[must_use]
pub fn is_operator_route(method: &str, path: &str) -> bool {
    matches(OPERATOR_ROUTES, method, path)
}

fn path_matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some("{id}"), Some(seg)) if countersign_common::ids::parse_uuid(seg).is_some() => {}
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

    #[test]
    fn operator_routes_only() {
        assert!(is_operator_route("GET", "/v1/operator/machines"));
        assert!(is_operator_route("GET", "/v1/operator/grants"));
        assert!(is_operator_route(
            "POST",
            &format!("/v1/operator/machines/{ID}/revoke")
        ));
        assert!(is_operator_route(
            "POST",
            &format!("/v1/operator/grants/{ID}/revoke")
        ));
        for (m, p) in [
            ("POST", "/v1/enrollments".to_owned()),
            ("DELETE", format!("/v1/enrollments/{ID}")),
            ("POST", "/v1/operator/machines".to_owned()),
            ("get", "/v1/operator/machines".to_owned()),
            ("GET", "/v1/operator/machines/".to_owned()),
            ("GET", "/v1/operator/machines?x=1".to_owned()),
            ("POST", "/v1/operator/grants/not-a-uuid/revoke".to_owned()),
            ("POST", format!("/v1/operator/grants/{ID}/revoke/x")),
            (
                "POST",
                format!("/v1/operator/grants/{ID}/../../enrollments"),
            ),
            ("GET", "/v1/requests".to_owned()),
        ] {
            assert!(!is_operator_route(m, &p), "{m} {p}");
        }
    }

    #[test]
    fn session_routes() {
        assert!(is_session_route("POST", "/v1/requests"));
        assert!(is_session_route("GET", &format!("/v1/requests/{ID}")));
        assert!(is_session_route("POST", &format!("/v1/grants/{ID}/values")));
        assert!(!is_session_route("GET", "/v1/operator/machines"));
        assert!(!is_session_route("POST", "/v1/enrollments"));
        assert!(!is_session_route("GET", "/v1/requests/self"));
    }

    /// An `{id}` segment is read by the broker's UUID rule: each way of writing an id the rule
    /// reads is signed for, and no other.
    #[test]
    fn an_id_segment_is_a_uuid_by_the_shared_rule() {
        let forms = [
            (ID.to_owned(), true),
            (ID.to_uppercase(), true),
            (format!("{}{}", ID[..9].to_uppercase(), &ID[9..]), true),
            (ID.replace('-', ""), false),
            (format!("{{{ID}}}"), false),
            (format!("urn:uuid:{ID}"), false),
            (format!("{ID}0"), false),
            (ID[..35].to_owned(), false),
            (ID.replace('-', "_"), false),
            ("0f8fad5b-d9cb-469f-a165-70867728950g".to_owned(), false),
        ];
        for (form, ok) in forms {
            assert_eq!(
                countersign_common::ids::parse_uuid(&form).is_some(),
                ok,
                "{form:?}"
            );
            assert_eq!(
                is_session_route("GET", &format!("/v1/requests/{form}")),
                ok,
                "{form:?}"
            );
            assert_eq!(
                is_operator_route("POST", &format!("/v1/operator/grants/{form}/revoke")),
                ok,
                "{form:?}"
            );
        }
    }
}
