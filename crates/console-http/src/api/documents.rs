//! The documents routes (issue 12): artifacts by id, by an issue's or project's `{slug}`, and
//! in an agent session's conversation; uploads (JSON or multipart), versions and their
//! downloads, the document event log, references, subscribers.

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use countersign_console_core::console::documents::{At, Upload, VersionRead};
use countersign_console_core::doc::EditOp;
use countersign_console_core::ids::{ArtifactId, SessionId};
use countersign_console_core::work::Actor;
use countersign_console_core::{Caller, Error, ErrorCode};
use serde::Deserialize;

use super::edge::{Acting, Acts, Read, Who, Write, acts_by_actor};
use super::{Input, JSON_LIMIT, Query, Reading, St, acting, created, event_page, ok};
use crate::AppState;
use crate::error::{ApiError, ApiResult};

/// The largest multipart upload (protocol §2).
pub const UPLOAD_LIMIT: usize = 25 * 1024 * 1024;

/// A JSON upload: `{filename, slug?, content_type, content | content_base64, actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UploadJson {
    filename: String,
    slug: Option<String>,
    content_type: String,
    content: Option<String>,
    content_base64: Option<String>,
    actor: Option<String>,
}

fn artifact_input(message: impl Into<String>) -> ApiError {
    Error::with_message(ErrorCode::ARTIFACT_INPUT, message).into()
}

/// Whether the request's body is `multipart/form-data`.
pub fn is_multipart(headers: &HeaderMap) -> bool {
    media_essence(headers).as_deref() == Some("multipart/form-data")
}

fn media_essence(headers: &HeaderMap) -> Option<String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
}

/// Reads an upload by the rules of protocol §2: JSON (at most 1 MiB) or multipart (at most
/// 25 MiB: one `file` part with its filename and type, an optional `slug` part); another
/// media type is 415, anything malformed 400 ARTIFACT_INPUT. `multipart_only`: an agent
/// conversation's upload, for which JSON content is ARTIFACT_INPUT (spec). Answers the upload
/// and the JSON body's `actor`.
async fn read_upload(req: Request, multipart_only: bool) -> ApiResult<(Upload, Option<String>)> {
    match media_essence(req.headers()).as_deref() {
        Some("application/json") => json_upload(req, multipart_only).await,
        Some("multipart/form-data") => Ok((multipart_upload(req).await?, None)),
        _ => Err(Error::with_message(
            ErrorCode::UNSUPPORTED_MEDIA_TYPE,
            "an upload is application/json or multipart/form-data",
        )
        .into()),
    }
}

/// A JSON upload ([`UploadJson`], at most 1 MiB) and its `actor`.
async fn json_upload(req: Request, multipart_only: bool) -> ApiResult<(Upload, Option<String>)> {
    let bytes = axum::body::to_bytes(req.into_body(), JSON_LIMIT)
        .await
        .map_err(|_| Error::new(ErrorCode::REQUEST_TOO_LARGE))?;
    if multipart_only {
        return Err(artifact_input(
            "an agent's conversation takes multipart uploads of files and images",
        ));
    }
    let b: UploadJson = serde_json::from_slice(&bytes)
        .map_err(|e| artifact_input(format!("{} ({e})", ErrorCode::ARTIFACT_INPUT.message())))?;
    let content = match (b.content, b.content_base64) {
        (Some(c), None) => c.into_bytes(),
        (None, Some(c)) => base64::engine::general_purpose::STANDARD
            .decode(c.trim())
            .map_err(|_| artifact_input("content_base64 is base64 (RFC 4648 §4)"))?,
        _ => return Err(artifact_input("give one of content and content_base64")),
    };
    Ok((
        Upload {
            filename: b.filename,
            slug: b.slug,
            content_type: b.content_type,
            content,
        },
        b.actor,
    ))
}

/// A multipart upload (at most 25 MiB): one `file` part with its filename and type, an
/// optional `slug` part.
async fn multipart_upload(req: Request) -> ApiResult<Upload> {
    let boundary = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| multer::parse_boundary(v).ok())
        .ok_or_else(|| artifact_input("a multipart body names its boundary"))?;
    let constraints = multer::Constraints::new()
        .size_limit(multer::SizeLimit::new().whole_stream(UPLOAD_LIMIT as u64));
    let mut form = multer::Multipart::with_constraints(
        req.into_body().into_data_stream(),
        boundary,
        constraints,
    );
    let mut file: Option<(String, String, Vec<u8>)> = None;
    let mut slug: Option<String> = None;
    while let Some(field) = form.next_field().await.map_err(multipart_fail)? {
        match field.name() {
            Some("file") if file.is_none() => {
                let filename = field
                    .file_name()
                    .map(str::to_owned)
                    .ok_or_else(|| artifact_input("the `file` part names its filename"))?;
                let content_type = field
                    .content_type()
                    .map(|m| m.to_string())
                    .unwrap_or_else(|| "application/octet-stream".to_owned());
                let bytes = field.bytes().await.map_err(multipart_fail)?;
                file = Some((filename, content_type, bytes.to_vec()));
            }
            Some("slug") if slug.is_none() => {
                slug = Some(
                    field
                        .text()
                        .await
                        .map_err(multipart_fail)?
                        .trim()
                        .to_owned(),
                );
            }
            Some(other) => {
                return Err(artifact_input(format!(
                    "an upload has one `file` part and at most one `slug` part, not `{}`",
                    other.chars().take(64).collect::<String>()
                )));
            }
            None => return Err(artifact_input("every part is named")),
        }
    }
    let (filename, content_type, content) =
        file.ok_or_else(|| artifact_input("an upload has a `file` part"))?;
    Ok(Upload {
        filename,
        slug,
        content_type,
        content,
    })
}

/// A multipart body that fails: over its size limit 413, else 400 ARTIFACT_INPUT.
fn multipart_fail(e: multer::Error) -> ApiError {
    let too_large = matches!(
        e,
        multer::Error::StreamSizeExceeded { .. } | multer::Error::FieldSizeExceeded { .. }
    );
    if too_large {
        Error::new(ErrorCode::REQUEST_TOO_LARGE).into()
    } else {
        artifact_input(format!("the multipart body does not parse ({e})"))
    }
}

/// A path segment, percent-encoded (RFC 3986 §2.1) for a `Location`.
fn segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Who uploads: the caller, for a bearer naming its session in `actor` (JSON) or `?session=`
/// (multipart), not both.
fn uploader(
    caller: &Caller,
    q: &Query,
    actor: Option<String>,
) -> ApiResult<countersign_console_core::work::Actor> {
    let session = q.one("session")?;
    if session.is_some() && actor.is_some() {
        return Err(Error::with_message(
            ErrorCode::INVALID_BODY,
            "name the session once: `actor` or `?session=`",
        )
        .into());
    }
    acting(caller, actor.as_deref().or(session), false)
}

async fn upload_at(
    st: &St,
    caller: &Caller,
    q: &Query,
    at: At<'_>,
    req: Request,
) -> ApiResult<Response> {
    let multipart_only = matches!(at, At::Agent(_));
    let (up, actor) = read_upload(req, multipart_only).await?;
    let actor = uploader(caller, q, actor)?;
    let view = st.console.documents().upload(&actor, at, up).await?;
    let location = match &view.session {
        Some(s) => format!(
            "/api/v1/agents/{}/artifacts/{}",
            segment(s.as_str()),
            segment(&view.slug)
        ),
        None => format!("/api/v1/artifacts/{}", view.id),
    };
    Ok(created(view, Some(location)))
}

/// A version's answer: a document's as JSON; a file's or image's bytes under the type they
/// were stored as, never as active content: `nosniff`, a sandboxing CSP, and anything but one
/// of the four images as an attachment; immutable (a version never changes).
fn download(v: VersionRead) -> Response {
    match v {
        VersionRead::Document(d) => ok(d),
        VersionRead::Bytes {
            bytes,
            content_type,
            filename,
            image,
        } => {
            let mut r = (StatusCode::OK, bytes).into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(&content_type)
                    .unwrap_or(HeaderValue::from_static("application/octet-stream")),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("private, max-age=31536000, immutable"),
            );
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox; default-src 'none'"),
            );
            if !image && let Ok(v) = HeaderValue::from_str(&attachment(&filename)) {
                h.insert(header::CONTENT_DISPOSITION, v);
            }
            r
        }
    }
}

/// 200 with a JSON answer serialized already (kept by the core), not stored by caches.
fn json_bytes(json: std::sync::Arc<[u8]>) -> Response {
    let mut r = (
        StatusCode::OK,
        Body::from(axum::body::Bytes::from_owner(json)),
    )
        .into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// `attachment` with the filename (RFC 6266 §4.3): an ASCII fallback, and the name itself as
/// `filename*` (RFC 8187).
fn attachment(filename: &str) -> String {
    let ascii: String = filename
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for b in filename.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// `{name, actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NameBody {
    name: String,
    actor: Option<String>,
}

impl Input for NameBody {}

/// `{expected_token?, ops, actor?}`: the ops of protocol §6.2, each naming its kind in `op`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    expected_token: Option<String>,
    ops: Vec<EditOp>,
    actor: Option<String>,
}

impl Input for EditBody {}

/// A POST with no body (`{}` at most).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoBody {}

impl Input for NoBody {}
impl Acts for NoBody {}
acts_by_actor!(Who::Caller => NameBody, EditBody);

/// An agent route's session id, checked before anything else (spec: INVALID_SESSION_ID on
/// every agent artifact route).
fn agent_session(s: &str) -> ApiResult<()> {
    SessionId::named(s)?;
    Ok(())
}

// ----- by id -----

pub async fn read(State(st): St, Read(id): Read<ArtifactId>) -> ApiResult<Response> {
    Ok(ok(st.console.documents().artifact(id).await?))
}

pub async fn text(State(st): St, Read(id): Read<ArtifactId>) -> ApiResult<Response> {
    Ok(ok(st.console.documents().text(id).await?))
}

pub async fn blocks(State(st): St, Read(id): Read<ArtifactId>) -> ApiResult<Response> {
    Ok(json_bytes(st.console.documents().blocks_json(id).await?))
}

pub async fn block(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path((id, block)): Path<(String, String)>,
) -> ApiResult<Response> {
    acting(&caller, q.one("session")?, false)?;
    Ok(ok(st
        .console
        .documents()
        .block(ArtifactId::named(&id)?, &block)
        .await?))
}

pub async fn edit(State(st): St, w: Write<ArtifactId, EditBody>) -> ApiResult<Response> {
    edited(&st, &w.actor, w.id, &w.body).await
}

/// An edit's answer.
async fn edited(st: &AppState, actor: &Actor, id: ArtifactId, b: &EditBody) -> ApiResult<Response> {
    let (documents, token) = (st.console.documents(), b.expected_token.as_deref());
    Ok(ok(documents.edit(actor, id, token, &b.ops).await?))
}

pub async fn rebuild(State(st): St, w: Write<ArtifactId, NoBody>) -> ApiResult<Response> {
    Ok(ok(st.console.documents().rebuild(&w.actor, w.id).await?))
}

pub async fn block_schema() -> ApiResult<Response> {
    Ok(ok(
        countersign_console_core::console::documents::block_schema(),
    ))
}

pub async fn name_version(State(st): St, w: Write<ArtifactId, NameBody>) -> ApiResult<Response> {
    named(&st, &w.actor, w.id, &w.body).await
}

/// A version named: 201 with its location.
async fn named(st: &AppState, actor: &Actor, id: ArtifactId, b: &NameBody) -> ApiResult<Response> {
    let documents = st.console.documents();
    let v = documents.name_version(actor, id, &b.name).await?;
    let location = format!("/api/v1/artifacts/{id}/versions/{}", v.number());
    Ok(created(v, Some(location)))
}

pub async fn version(
    State(st): St,
    Path((id, number)): Path<(String, String)>,
    _: Reading,
) -> ApiResult<Response> {
    versioned(&st, ArtifactId::named(&id)?, &number).await
}

/// A version's download.
async fn versioned(st: &crate::AppState, id: ArtifactId, number: &str) -> ApiResult<Response> {
    Ok(download(st.console.documents().version(id, number).await?))
}

pub async fn events(
    State(st): St,
    q: Query,
    Path(id): Path<String>,
    _: Reading,
) -> ApiResult<Response> {
    let page = event_page(&q)?;
    let id = ArtifactId::named(&id)?;
    Ok(ok(st
        .console
        .documents()
        .document_events(id, &page)
        .await?))
}

pub async fn references(State(st): St, Read(id): Read<ArtifactId>) -> ApiResult<Response> {
    Ok(ok(st.console.documents().artifact_references(id).await?))
}

pub async fn subscribers(State(st): St, Path(id): Path<String>) -> ApiResult<Response> {
    Ok(ok(st
        .console
        .documents()
        .document_subscribers(ArtifactId::named(&id)?)
        .await?))
}

pub async fn unsubscribe(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path((id, session)): Path<(String, String)>,
) -> ApiResult<Response> {
    let session = SessionId::named(&session)?;
    let actor = acting(&caller, None, false)?;
    st.console
        .documents()
        .document_unsubscribe(&actor, ArtifactId::named(&id)?, &session)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- the reference graph -----

pub async fn graph(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
) -> ApiResult<Response> {
    acting(&caller, q.one("session")?, false)?;
    let since: Option<i64> = q.parsed("since")?;
    Ok(ok(st
        .console
        .documents()
        .references(q.one("to")?, q.one("from")?, q.one("kind")?, since)
        .await?))
}

pub async fn issue_references(State(st): St, Read(key): Read<String>) -> ApiResult<Response> {
    Ok(ok(st.console.documents().issue_references(&key).await?))
}

// ----- in an issue or project, by `{slug}` -----

/// Which scope a route's `{key}` names: an issue's and a project's `{slug}` routes are the
/// same handlers ([`scoped`]), each taking its scope as a type (`scoped::read::<OnIssue>`).
pub trait Scoped: Send + Sync + 'static {
    fn at(key: &str) -> At<'_>;
}

/// An issue's `{key}`.
#[derive(Debug)]
pub enum OnIssue {}

/// A project's `{key}`.
#[derive(Debug)]
pub enum OnProject {}

impl Scoped for OnIssue {
    fn at(key: &str) -> At<'_> {
        At::Issue(key)
    }
}

impl Scoped for OnProject {
    fn at(key: &str) -> At<'_> {
        At::Project(key)
    }
}

/// The handlers of a scope's artifacts: `{key}`'s list and uploads, and an artifact by its
/// `{slug}` there. A read checks its caller ([`Reading`]) once the path is read, as the
/// routes by id do.
pub mod scoped {
    use super::*;

    /// The `{key}` of a scope and an artifact's `{slug}` in it.
    type Slug = (String, String);

    /// The id of the artifact a scope's `{slug}` names.
    async fn resolve<S: Scoped>(st: &St, (key, slug): &Slug) -> ApiResult<ArtifactId> {
        Ok(st
            .console
            .documents()
            .resolve_artifact(S::at(key), slug)
            .await?)
    }

    pub async fn list<S: Scoped>(
        State(st): St,
        Path(key): Path<String>,
        _: Reading,
    ) -> ApiResult<Response> {
        Ok(ok(st.console.documents().artifacts_of(S::at(&key)).await?))
    }

    pub async fn upload<S: Scoped>(
        State(st): St,
        Extension(caller): Extension<Caller>,
        q: Query,
        Path(key): Path<String>,
        req: Request<Body>,
    ) -> ApiResult<Response> {
        upload_at(&State(st.clone()), &caller, &q, S::at(&key), req).await
    }

    pub async fn read<S: Scoped>(st: St, Path(p): Path<Slug>, _: Reading) -> ApiResult<Response> {
        let id = resolve::<S>(&st, &p).await?;
        super::read(st, Read(id)).await
    }

    pub async fn text<S: Scoped>(st: St, Path(p): Path<Slug>, _: Reading) -> ApiResult<Response> {
        let id = resolve::<S>(&st, &p).await?;
        super::text(st, Read(id)).await
    }

    pub async fn blocks<S: Scoped>(st: St, Path(p): Path<Slug>, _: Reading) -> ApiResult<Response> {
        let id = resolve::<S>(&st, &p).await?;
        super::blocks(st, Read(id)).await
    }

    pub async fn edit<S: Scoped>(
        st: St,
        Path(p): Path<Slug>,
        a: Acting<EditBody>,
    ) -> ApiResult<Response> {
        edited(&st, &a.actor, resolve::<S>(&st, &p).await?, &a.body).await
    }

    pub async fn name_version<S: Scoped>(
        st: St,
        Path(p): Path<Slug>,
        a: Acting<NameBody>,
    ) -> ApiResult<Response> {
        named(&st, &a.actor, resolve::<S>(&st, &p).await?, &a.body).await
    }

    pub async fn version<S: Scoped>(
        st: St,
        Path((key, slug, number)): Path<(String, String, String)>,
        _: Reading,
    ) -> ApiResult<Response> {
        let id = resolve::<S>(&st, &(key, slug)).await?;
        versioned(&st, id, &number).await
    }
}

// ----- an agent session's conversation -----

pub async fn agent_upload(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path(session): Path<String>,
    req: Request<Body>,
) -> ApiResult<Response> {
    agent_session(&session)?;
    upload_at(&State(st.clone()), &caller, &q, At::Agent(&session), req).await
}

pub async fn agent_read(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path((session, slug)): Path<(String, String)>,
) -> ApiResult<Response> {
    agent_session(&session)?;
    acting(&caller, q.one("session")?, false)?;
    Ok(ok(st
        .console
        .documents()
        .agent_artifact(&session, &slug)
        .await?))
}

pub async fn agent_version(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path((session, slug, number)): Path<(String, String, String)>,
) -> ApiResult<Response> {
    agent_session(&session)?;
    acting(&caller, q.one("session")?, false)?;
    Ok(download(
        st.console
            .documents()
            .agent_version(&session, &slug, &number)
            .await?,
    ))
}
