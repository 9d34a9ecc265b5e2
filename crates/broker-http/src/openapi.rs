//! The route table and the OpenAPI 3.1 document built from it. The router is built from the same
//! table ([`api`]), so the document cannot list a route the server lacks or miss
//! one it has; a test checks each route's refusal codes against the error catalogue.

use countersign_common::wire as w;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use schemars::{JsonSchema, Schema};
use serde_json::{Map, Value, json};

/// An answer type's schema, written into a generator that keeps each named type once under
/// `#/components/schemas/`.
pub type Answer = fn(&mut SchemaGenerator) -> Schema;

/// The schema of answer type `T` ([`RouteSpec::answer`]).
fn schema<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// The generator of the answers' schemas: JSON Schema 2020-12 (OpenAPI 3.1's dialect), named
/// types under `components/schemas`, describing answers as serialized (a field left out when
/// empty is not required).
fn generator() -> SchemaGenerator {
    SchemaSettings::draft2020_12()
        .with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
        })
        .for_serialize()
        .into_generator()
}

/// Credential kinds (spec, "Authentication").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    None,
    Machine,
    Renewal,
    Session,
    Console,
}

impl Credential {
    pub fn as_str(self) -> &'static str {
        match self {
            Credential::None => "none",
            Credential::Machine => "machine credential",
            Credential::Renewal => "renewal session proof",
            Credential::Session => "session proof",
            Credential::Console => "console token",
        }
    }

    /// The refusals the credential itself can give.
    pub fn codes(self) -> &'static [&'static str] {
        match self {
            Credential::None => &[],
            Credential::Machine => &["DATABASE_UNAVAILABLE", "LAUNCHER_INVALID"],
            Credential::Renewal => &[
                "DATABASE_UNAVAILABLE",
                "ENROLLMENT_NOT_LIVE",
                "PROOF_INVALID",
            ],
            Credential::Session => &["DATABASE_UNAVAILABLE", "PROOF_INVALID"],
            Credential::Console => &["UI_INVALID"],
        }
    }
}

/// One route.
#[derive(Clone, Copy)]
pub struct RouteSpec {
    pub method: &'static str,
    pub path: &'static str,
    pub credential: Credential,
    pub success: u16,
    pub summary: &'static str,
    /// The refusal codes the spec lists for the route.
    pub codes: &'static [&'static str],
    /// The body-shape code, for routes with a JSON body.
    pub body: Option<&'static str>,
    /// The JSON Schema of the success answer: its type in `countersign_common::wire`, the one
    /// the handler answers with and readers read with. `None`: no body (204).
    pub answer: Option<Answer>,
    /// Mounts the route's handler ([`crate::routes`]) under the row's method: the router is
    /// built from the rows, so no row is joined to its handler by matching strings.
    pub handler: fn() -> axum::routing::MethodRouter<std::sync::Arc<crate::AppState>>,
}

use Credential as C;

impl std::fmt::Debug for RouteSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouteSpec")
            .field("method", &self.method)
            .field("path", &self.path)
            .field("credential", &self.credential)
            .finish_non_exhaustive()
    }
}

/// The API router, built from the route table [`ROUTES`] (without the operational routes
/// `/metrics` and `/v1/openapi.json`, which `server.rs`'s `router` adds).
pub fn api() -> axum::Router<std::sync::Arc<crate::AppState>> {
    ROUTES.iter().fold(axum::Router::new(), |router, r| {
        router.route(r.path, (r.handler)())
    })
}

/// The axum method filter of a row's method (the table's methods are these).
const fn method_filter(method: &str) -> axum::routing::MethodFilter {
    use axum::routing::MethodFilter;
    match method.as_bytes() {
        b"GET" => MethodFilter::GET,
        b"DELETE" => MethodFilter::DELETE,
        b"PUT" => MethodFilter::PUT,
        b"PATCH" => MethodFilter::PATCH,
        _ => MethodFilter::POST,
    }
}

/// A row: its handler (a function of [`crate::routes`]), method, path, credential, success
/// status, summary, refusal codes, body-shape code and answer type.
macro_rules! route {
    ($h:ident, $m:literal, $p:literal, $c:expr, $s:literal, $sum:literal, [$($code:literal),*], $body:expr, $answer:expr) => {
        RouteSpec {
            method: $m,
            path: $p,
            credential: $c,
            success: $s,
            summary: $sum,
            codes: &[$($code),*],
            body: $body,
            answer: $answer,
            handler: || axum::routing::on(method_filter($m), crate::routes::$h),
        }
    };
}

/// Every route of the broker API, in the spec's order.
pub const ROUTES: &[RouteSpec] = &[
    route!(
        enroll,
        "POST",
        "/v1/enrollments",
        C::Machine,
        201,
        "Enroll a session's or pod's signing key",
        [
            "ALREADY_ENROLLED",
            "INTERNAL",
            "INVALID_ENROLLMENT",
            "INVALID_KIND",
            "INVALID_SLOT",
            "LAUNCHER_INVALID",
            "OPERATOR_MISMATCH",
            "POD_IDENTITY_MISMATCH",
            "POD_TOKEN_EXPIRED",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_ENROLLMENT"),
        Some(schema::<w::Enrolled>)
    ),
    route!(
        unenroll,
        "DELETE",
        "/v1/enrollments/{id}",
        C::Machine,
        204,
        "End an enrollment",
        [
            "ENROLLMENT_ID_INPUT",
            "INTERNAL",
            "NOT_ENROLLING_CREDENTIAL",
            "OPERATOR_MISMATCH",
            "NOT_FOUND"
        ],
        None,
        None
    ),
    route!(
        login_start,
        "POST",
        "/v1/launcher-credentials",
        C::None,
        202,
        "Start a person's machine login",
        [
            "INTERNAL",
            "INVALID_REQUEST",
            "RATE_LIMITED",
            "REQUEST_INVALID",
            "REQUEST_TOO_LARGE",
            "SERVICE_LOGS_IN_WITH_TOKEN"
        ],
        Some("INVALID_REQUEST"),
        Some(schema::<w::LoginStarted>)
    ),
    route!(
        token_login,
        "POST",
        "/v1/launcher-credentials/token",
        C::None,
        200,
        "Log a service in with its ServiceAccount token",
        [
            "ACCOUNT_NOT_LISTED",
            "INTERNAL",
            "INVALID_REQUEST",
            "KEY_HOLDS_LIVE_CREDENTIAL",
            "RATE_LIMITED",
            "REQUEST_INVALID",
            "REQUEST_TOO_LARGE",
            "TOKEN_EXPIRED",
            "TOKEN_INVALID",
            "TOKEN_LOGIN_OFF",
            "TOKEN_TOO_LONG_LIVED"
        ],
        Some("INVALID_REQUEST"),
        Some(schema::<w::TokenLogin>)
    ),
    route!(
        login_poll,
        "GET",
        "/v1/launcher-credentials/{pending}",
        C::None,
        200,
        "Poll a machine login",
        ["INTERNAL", "NOT_FOUND"],
        None,
        Some(schema::<w::LoginPoll>)
    ),
    route!(
        renew,
        "POST",
        "/v1/enrollments/{id}/renew",
        C::Renewal,
        200,
        "Extend the caller's own lease",
        [
            "ENROLLMENT_ID_INPUT",
            "ENROLLMENT_NOT_LIVE",
            "INTERNAL",
            "INVALID_RENEWAL",
            "NOT_YOURS",
            "POD_IDENTITY_MISMATCH",
            "POD_TOKEN_EXPIRED",
            "POD_TOKEN_REQUIRED",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_RENEWAL"),
        Some(schema::<w::Renewed>)
    ),
    route!(
        enrollment_self,
        "GET",
        "/v1/enrollments/self",
        C::Session,
        200,
        "Describe the caller's enrollment and live grants",
        ["INTERNAL", "PROOF_INVALID"],
        None,
        Some(schema::<w::EnrollmentSelf>)
    ),
    route!(
        create_request,
        "POST",
        "/v1/requests",
        C::Session,
        200,
        "Request secrets",
        [
            "INTERNAL",
            "INVALID_REQUEST",
            "MIXED_APPROVERS",
            "PROOF_INVALID",
            "REQUEST_INVALID",
            "REQUEST_PENDING",
            "REQUEST_TOO_LARGE",
            "SESSION_ID_INPUT",
            "UNKNOWN_SECRET"
        ],
        Some("INVALID_REQUEST"),
        Some(schema::<w::RequestAnswer>)
    ),
    route!(
        get_request,
        "GET",
        "/v1/requests/{id}",
        C::Session,
        200,
        "Read one of the caller's requests",
        ["INTERNAL", "NOT_FOUND", "NOT_YOURS", "REQUEST_ID_INPUT"],
        None,
        Some(schema::<w::RequestAnswer>)
    ),
    route!(
        cancel_request,
        "POST",
        "/v1/requests/{id}/cancel",
        C::Session,
        200,
        "Cancel the caller's pending request",
        [
            "INTERNAL",
            "NOT_FOUND",
            "NOT_YOURS",
            "REQUEST_ID_INPUT",
            "REQUEST_TERMINAL"
        ],
        None,
        Some(schema::<w::StateAnswer>)
    ),
    route!(
        grant_values,
        "POST",
        "/v1/grants/{id}/values",
        C::Session,
        200,
        "Release a live grant's values",
        [
            "GRANT_CHAIN_INVALID",
            "GRANT_ID_INPUT",
            "GRANT_NOT_LIVE",
            "INTERNAL",
            "ISSUER_UNAVAILABLE",
            "NOT_YOURS",
            "PASSKEY_REQUIRED",
            "SECRET_NOT_IN_STORE",
            "NOT_FOUND"
        ],
        None,
        Some(schema::<w::GrantValues>)
    ),
    route!(
        revoke_grant,
        "POST",
        "/v1/grants/{id}/revoke",
        C::Session,
        200,
        "End a grant the caller holds",
        ["GRANT_ID_INPUT", "INTERNAL", "NOT_FOUND", "NOT_YOURS"],
        None,
        Some(schema::<w::StateAnswer>)
    ),
    route!(
        pending,
        "GET",
        "/v1/pending",
        C::Console,
        200,
        "Undecided records the named person decides",
        ["APPROVER_REQUIRED", "INTERNAL"],
        None,
        Some(schema::<w::PendingList>)
    ),
    route!(
        get_record,
        "GET",
        "/v1/credential-requests/{record}",
        C::Console,
        200,
        "Read a credential-request record, by its record id or by the id of the request it decides",
        ["INTERNAL", "NOT_FOUND", "RECORD_ID_INPUT"],
        None,
        Some(schema::<w::CredentialRecord>)
    ),
    route!(
        approve,
        "POST",
        "/v1/credential-requests/{record}/approve",
        C::Console,
        200,
        "Approve a record",
        [
            "APPROVER_REQUIRED",
            "CODE_MISMATCH",
            "CODE_REQUIRED",
            "GRANT_CHAIN_INVALID",
            "INTERNAL",
            "INVALID_DECISION",
            "KEY_HOLDS_LIVE_CREDENTIAL",
            "NOT_APPROVER",
            "NOT_FOUND",
            "PASSKEY_INVALID",
            "PASSKEY_REQUIRED",
            "PASSKEYS_OFF",
            "RECORD_ID_INPUT",
            "RECORD_TERMINAL",
            "REQUEST_TOO_LARGE",
            "SERVICE_LOGS_IN_WITH_TOKEN"
        ],
        Some("INVALID_DECISION"),
        Some(schema::<w::Approval>)
    ),
    route!(
        deny,
        "POST",
        "/v1/credential-requests/{record}/deny",
        C::Console,
        200,
        "Deny a record",
        [
            "APPROVER_REQUIRED",
            "CODE_MISMATCH",
            "CODE_REQUIRED",
            "INTERNAL",
            "INVALID_DECISION",
            "NOT_APPROVER",
            "NOT_FOUND",
            "RECORD_ID_INPUT",
            "RECORD_TERMINAL",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_DECISION"),
        Some(schema::<w::StateAnswer>)
    ),
    route!(
        lookup,
        "POST",
        "/v1/machine-logins/lookup",
        C::Console,
        200,
        "Find a pending machine login by its code",
        [
            "CODE_REQUIRED",
            "INTERNAL",
            "INVALID_LOOKUP",
            "NO_SUCH_CODE",
            "RATE_LIMITED",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_LOOKUP"),
        Some(schema::<w::CredentialRecord>)
    ),
    route!(
        credentials_for,
        "GET",
        "/v1/launcher-credentials",
        C::Console,
        200,
        "Machine logins the named person sees",
        ["APPROVER_REQUIRED", "INTERNAL"],
        None,
        Some(schema::<w::MachineLoginList>)
    ),
    route!(
        revoke_credential_by_approver,
        "POST",
        "/v1/launcher-credentials/{id}/revoke-by-approver",
        C::Console,
        200,
        "End a machine login",
        [
            "APPROVER_REQUIRED",
            "CREDENTIAL_ID_INPUT",
            "INTERNAL",
            "INVALID_REVOKE",
            "NOT_APPROVER",
            "NOT_FOUND",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_REVOKE"),
        Some(schema::<w::StateAnswer>)
    ),
    route!(
        grants_for,
        "GET",
        "/v1/grants",
        C::Console,
        200,
        "Live grants of the named person's sessions and those they approved",
        ["APPROVER_REQUIRED", "INTERNAL"],
        None,
        Some(schema::<w::GrantList>)
    ),
    route!(
        revoke_grant_by_approver,
        "POST",
        "/v1/grants/{id}/revoke-by-approver",
        C::Console,
        200,
        "Revoke a grant as its approver or its enrollment's operator",
        [
            "APPROVER_REQUIRED",
            "GRANT_ID_INPUT",
            "INTERNAL",
            "INVALID_REVOKE",
            "NOT_APPROVER",
            "NOT_FOUND",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_REVOKE"),
        Some(schema::<w::StateAnswer>)
    ),
    route!(
        passkeys,
        "GET",
        "/v1/passkeys",
        C::Console,
        200,
        "The named person's passkeys",
        ["APPROVER_REQUIRED", "INTERNAL"],
        None,
        Some(schema::<w::PasskeyList>)
    ),
    route!(
        passkey_challenge,
        "POST",
        "/v1/passkeys/challenge",
        C::Console,
        200,
        "A registration challenge for the named person's new passkey",
        [
            "APPROVER_REQUIRED",
            "INTERNAL",
            "INVALID_PASSKEY",
            "PASSKEYS_OFF",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_PASSKEY"),
        Some(schema::<w::PasskeyOffer>)
    ),
    route!(
        passkey_register,
        "POST",
        "/v1/passkeys",
        C::Console,
        201,
        "Register a passkey: with an enrollment code, or endorsed by a registered one",
        [
            "APPROVER_REQUIRED",
            "INTERNAL",
            "INVALID_PASSKEY",
            "PASSKEY_ENROLLMENT_REQUIRED",
            "PASSKEY_EXISTS",
            "PASSKEY_INVALID",
            "PASSKEYS_OFF",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_PASSKEY"),
        Some(schema::<w::PasskeyItem>)
    ),
    route!(
        passkey_rename,
        "PATCH",
        "/v1/passkeys/{id}",
        C::Console,
        200,
        "Rename one of the named person's passkeys",
        [
            "APPROVER_REQUIRED",
            "INTERNAL",
            "INVALID_PASSKEY",
            "NOT_FOUND",
            "PASSKEYS_OFF",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_PASSKEY"),
        Some(schema::<w::PasskeyItem>)
    ),
    route!(
        passkey_remove,
        "POST",
        "/v1/passkeys/{id}/remove",
        C::Console,
        200,
        "Remove one of the named person's passkeys",
        [
            "APPROVER_REQUIRED",
            "INTERNAL",
            "INVALID_PASSKEY",
            "NOT_FOUND",
            "PASSKEYS_OFF",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_PASSKEY"),
        Some(schema::<w::StateAnswer>)
    ),
    route!(
        statement,
        "POST",
        "/v1/credential-requests/{record}/statement",
        C::Console,
        200,
        "The approval statement the named person countersigns, with a fresh nonce",
        [
            "APPROVER_REQUIRED",
            "INTERNAL",
            "INVALID_DECISION",
            "NOT_APPROVER",
            "NOT_FOUND",
            "PASSKEYS_OFF",
            "RECORD_ID_INPUT",
            "RECORD_TERMINAL",
            "REQUEST_TOO_LARGE"
        ],
        Some("INVALID_DECISION"),
        Some(schema::<w::ApprovalStatement>)
    ),
    route!(
        operator_machines,
        "GET",
        "/v1/operator/machines",
        C::Machine,
        200,
        "The operator's own machines' logins",
        ["INTERNAL", "SERVICE_CREDENTIAL"],
        None,
        Some(schema::<w::MachineLoginList>)
    ),
    route!(
        operator_revoke_machine,
        "POST",
        "/v1/operator/machines/{id}/revoke",
        C::Machine,
        200,
        "End one of the operator's machine logins",
        [
            "CREDENTIAL_ID_INPUT",
            "INTERNAL",
            "NOT_APPROVER",
            "NOT_FOUND",
            "SERVICE_CREDENTIAL"
        ],
        None,
        Some(schema::<w::StateAnswer>)
    ),
    route!(
        operator_grants,
        "GET",
        "/v1/operator/grants",
        C::Machine,
        200,
        "Live grants of the operator's sessions and those the operator approved",
        ["INTERNAL", "SERVICE_CREDENTIAL"],
        None,
        Some(schema::<w::GrantList>)
    ),
    route!(
        operator_revoke_grant,
        "POST",
        "/v1/operator/grants/{id}/revoke",
        C::Machine,
        200,
        "End a grant as the operator, withholding automatic secrets",
        [
            "GRANT_ID_INPUT",
            "INTERNAL",
            "NOT_APPROVER",
            "NOT_FOUND",
            "SERVICE_CREDENTIAL"
        ],
        None,
        Some(schema::<w::StateAnswer>)
    ),
    route!(
        settings,
        "GET",
        "/v1/settings",
        C::None,
        200,
        "The secret store's settings",
        [],
        None,
        Some(schema::<w::Settings>)
    ),
    route!(
        reread,
        "POST",
        "/v1/secrets/{name}/reread",
        C::None,
        200,
        "Reread one secret from the store now",
        [
            "INTERNAL",
            "RATE_LIMITED",
            "REQUEST_ENDED",
            "SECRET_NAME_INVALID"
        ],
        None,
        Some(schema::<w::Reread>)
    ),
    route!(
        healthz,
        "GET",
        "/healthz",
        C::None,
        200,
        "Health",
        ["DATABASE_UNAVAILABLE"],
        None,
        Some(schema::<w::Health>)
    ),
];

fn status_of(code: &str) -> u16 {
    countersign_broker_core::ErrorCode::ALL
        .iter()
        .find(|c| c.as_str() == code)
        .map(|c| c.status())
        .unwrap_or(500)
}

/// One route's operation: its responses (success, and each refusal code it can answer
/// grouped by status), its path parameters, its credential, and its body.
fn operation(r: &RouteSpec, g: &mut SchemaGenerator) -> Value {
    let mut responses = Map::new();
    let success = match r.answer {
        Some(answer) => json!({
            "description": "success",
            "content": { "application/json": { "schema": answer(g) } },
        }),
        None => json!({ "description": "success" }),
    };
    responses.insert(r.success.to_string(), success);
    let mut by_status: std::collections::BTreeMap<u16, Vec<&str>> = Default::default();
    let mut all: Vec<&str> = r
        .codes
        .iter()
        .chain(r.credential.codes())
        .copied()
        .collect();
    if r.body.is_some() {
        all.push("REQUEST_TOO_LARGE");
    }
    all.push("INTERNAL");
    all.sort();
    all.dedup();
    for c in all {
        by_status.entry(status_of(c)).or_default().push(c);
    }
    for (status, codes) in by_status {
        responses.insert(
            status.to_string(),
            json!({
                "description": codes.join(", "),
                "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } },
                "x-codes": codes,
            }),
        );
    }
    let params: Vec<Value> = r
        .path
        .split('/')
        .filter_map(|seg| seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')))
        .map(|name| json!({ "name": name, "in": "path", "required": true, "schema": { "type": "string" } }))
        .chain(
            matches!(r.path, "/v1/pending" | "/v1/launcher-credentials" | "/v1/grants")
                .then(|| json!({ "name": "approver", "in": "query", "required": true, "schema": { "type": "string" } })),
        )
        .collect();
    let security = match r.credential {
        C::None => json!([]),
        C::Console => json!([{ "consoleToken": [] }]),
        _ => json!([{ "proof": [] }]),
    };
    let mut op = json!({
        "summary": r.summary,
        "operationId": format!("{} {}", r.method.to_lowercase(), r.path),
        "x-credential": r.credential.as_str(),
        "parameters": params,
        "security": security,
        "responses": responses,
    });
    if let (Some(code), Some(obj)) = (r.body, op.as_object_mut()) {
        obj.insert(
            "requestBody".into(),
            json!({
                "required": true,
                "description": format!("one JSON object; a malformed one is {code}"),
                "content": { "application/json": { "schema": { "type": "object" } } },
            }),
        );
    }
    op
}

/// The OpenAPI 3.1 document.
pub fn document() -> Value {
    let mut paths = Map::new();
    let mut g = generator();
    for r in ROUTES {
        let op = operation(r, &mut g);
        let entry = paths.entry(r.path.to_owned()).or_insert_with(|| json!({}));
        if let Some(obj) = entry.as_object_mut() {
            obj.insert(r.method.to_lowercase(), op);
        }
    }
    let mut schemas = g.take_definitions(true);
    schemas.insert(
        "Error".into(),
        json!({
            "type": "object",
            "required": ["code", "error"],
            "properties": { "code": { "type": "string" }, "error": { "type": "string" } },
        }),
    );
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Countersign secrets broker",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Every refusal is an error status with {\"code\",\"error\"}. Proofs: protocol.md §2.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "proof": { "type": "apiKey", "in": "header", "name": "Proof", "description": "an ES256 JWS proof (session or launcher), protocol.md §2" },
                "consoleToken": { "type": "http", "scheme": "bearer" },
            }
        }
    })
}
