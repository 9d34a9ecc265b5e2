//! The document pages (issues 12 and 27): a document's blocks rendered (the engine's sanitized
//! HTML: no raw HTML passes, only safe URL schemes, and the console's strict
//! Content-Security-Policy lets no inline script run), its versions (each a page of its own)
//! with a diff between any two, its reviews, and live updates from the event stream; the
//! markdown editor with a preview, whose save is one quote-anchored edit guarded by the token
//! the person started from (a stale save shows what changed and keeps the person's text); a
//! project's documents with the forms that create and upload them. The behaviour is
//! `assets/documents.js`. A file's or image's page lists its versions to download.

use std::collections::HashMap;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use countersign_console_core::console::documents::{At, VersionRead};
use countersign_console_core::doc::{Document, RefTarget, SafeHtml, parse_ref};
use countersign_console_core::ids::ArtifactId;
use countersign_console_core::work::asks::Review;
use countersign_console_core::work::documents::{ArtifactKind, ArtifactView, VersionInfo};
use countersign_console_core::{Caller, ErrorCode};
use similar::{ChangeTag, TextDiff};

use super::{PageError, PageResult, St, chrome, error_text, html_response, human, page, status_of};
use crate::html::{Chrome, When, actor_text, when};

const SCRIPT: &str = include_str!("../../assets/documents.js");
const STYLE: &str = include_str!("../../assets/documents.css");

/// A diff gives up refining after this long (similar's deadline) and shows what it has.
const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

/// The most markdown a preview renders (a document's JSON body may hold 1 MiB).
const PREVIEW_LIMIT: usize = 1024 * 1024;

/// A long document's page shows its first top-level blocks up to this much HTML; the rest
/// follows in parts of [`NEXT_PART`] as the person reads on (`GET /artifacts/{id}/part`), so
/// the first load stays small whatever the document's size (issue 27: under 200 KB).
const FIRST_PART: usize = 128 * 1024;
const NEXT_PART: usize = 256 * 1024;

/// Some of a document's rendered blocks and, when more follow, the placeholder that fetches
/// the next part: the document page's article, and the answer of `/artifacts/{id}/part`.
#[derive(Debug, Template)]
#[template(path = "documents_part.html")]
pub struct DocumentPart {
    /// The engine's sanitized HTML of these blocks.
    pub html: SafeHtml,
    pub more: Option<MoreBlocks>,
}

/// Its fields are escaped by its own template.
impl askama::filters::HtmlSafe for DocumentPart {}

/// What follows a part: where to fetch it and how much it is.
#[derive(Debug)]
pub struct MoreBlocks {
    pub id: String,
    pub from: usize,
    /// The document's token: the part is of the text the page showed.
    pub token: String,
    pub blocks: usize,
    pub kib: usize,
}

impl DocumentPart {
    /// The blocks of `html` from `from` up to `budget` bytes, or None past the last block.
    fn of(id: &str, token: &str, html: &SafeHtml, from: usize, budget: usize) -> Option<Self> {
        let p = html.part(from, budget)?;
        Some(DocumentPart {
            html: p.html,
            more: p.next.map(|from| MoreBlocks {
                id: id.to_owned(),
                from,
                token: token.to_owned(),
                blocks: p.blocks_after,
                kib: p.bytes_after.div_ceil(1024),
            }),
        })
    }
}

/// One version as the page lists it.
#[derive(Debug)]
pub struct VersionRow {
    pub number: i64,
    pub name: String,
    pub kind: &'static str,
    pub by: String,
    pub at: When,
    pub href: String,
}

/// One line of a diff: `ins`, `del`, `same`, or `gap` between hunks.
#[derive(Debug)]
pub struct DiffLine {
    pub class: &'static str,
    pub sign: &'static str,
    pub text: String,
}

/// A diff between two versions.
#[derive(Debug)]
pub struct DiffView {
    pub from: i64,
    pub to: i64,
    pub lines: Vec<DiffLine>,
}

/// A review, for people.
#[derive(Debug)]
pub struct ReviewRow {
    pub version: i64,
    pub outcome: &'static str,
    pub by: String,
    pub at: When,
    pub body: String,
}

impl ReviewRow {
    fn of(r: &Review) -> Self {
        Self {
            version: r.version,
            outcome: match r.outcome.as_str() {
                "approve" => "approved",
                _ => "changes requested",
            },
            by: actor_text(&r.by),
            at: when(&r.at),
            body: r.body.clone().unwrap_or_default(),
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "documents_page.html")]
pub struct DocumentPage<'a> {
    pub chrome: Chrome<'a>,
    pub a: Shown,
    pub is_document: bool,
    pub version: String,
    pub updated: When,
    /// The rendered document's first part (all of it, when short).
    pub body: DocumentPart,
    pub versions: Vec<VersionRow>,
    pub diff: Option<DiffView>,
    pub diff_error: Option<String>,
    pub from: i64,
    pub to: i64,
    pub reviews: Vec<ReviewRow>,
    /// The latest version a review names, if any version is there.
    pub latest: Option<i64>,
}

#[derive(Debug, Template)]
#[template(path = "documents_version.html")]
pub struct VersionPage<'a> {
    pub chrome: Chrome<'a>,
    pub a: Shown,
    pub number: i64,
    pub heading: String,
    pub by: String,
    pub at: When,
    /// A document version rendered (sanitized HTML), or empty for a file.
    pub html: SafeHtml,
    /// A file's or image's bytes, to download (the API's URL).
    pub download: String,
    pub image: bool,
    pub previous: Option<i64>,
    pub next: Option<i64>,
}

#[derive(Debug, Template)]
#[template(path = "documents_edit.html")]
pub struct EditPage<'a> {
    pub chrome: Chrome<'a>,
    pub a: Shown,
    pub markdown: String,
    pub token: String,
}

/// A document or file as a list shows it.
#[derive(Debug)]
pub struct DocumentRow {
    pub id: String,
    pub filename: String,
    pub kind: &'static str,
    pub version: String,
    pub updated: When,
}

impl DocumentRow {
    fn of(a: &ArtifactView) -> Self {
        Self {
            id: a.id.to_string(),
            filename: a.filename.clone(),
            kind: a.kind.as_str(),
            version: a
                .version
                .as_ref()
                .map(|v| match &v.name {
                    Some(n) => format!("{} “{n}”", v.number),
                    None => v.number.to_string(),
                })
                .unwrap_or_else(|| "none yet".into()),
            updated: when(&a.updated_at),
        }
    }
}

#[derive(Debug, Template)]
#[template(path = "documents_list.html")]
pub struct ListPage<'a> {
    pub chrome: Chrome<'a>,
    pub project: String,
    pub name: String,
    /// The issue a new document goes to (`?issue=`), else the project.
    pub issue: String,
    pub rows: Vec<DocumentRow>,
}

/// The page of a version.
pub fn version_href(id: &str, number: i64) -> String {
    format!("/artifacts/{id}/versions/{number}")
}

fn version_row(id: &str, v: &VersionInfo) -> VersionRow {
    VersionRow {
        number: v.number,
        name: v.name.clone().unwrap_or_default(),
        kind: v.kind.as_str(),
        by: actor_text(&v.by),
        at: when(&v.created_at),
        href: version_href(id, v.number),
    }
}

/// Where a console ref in a document points among the pages (as the document page does).
fn page_of(url: &str) -> Option<String> {
    Some(match parse_ref(url)? {
        RefTarget::Issue { key } => format!("/issues/{key}"),
        RefTarget::Project { key } => format!("/projects/{key}/issues"),
        RefTarget::Artifact { id } => format!("/artifacts/{id}"),
        RefTarget::Ask { id } => format!("/asks/{id}"),
        RefTarget::Message { id } => format!("/messages/{id}"),
        _ => return None,
    })
}

/// Markdown rendered as the document page renders it (sanitized; block ids are throwaway).
pub fn render(markdown: &str) -> SafeHtml {
    let mut n = 0u64;
    Document::parse(markdown, &mut || {
        n += 1;
        format!("p{n}")
    })
    .to_html_with(&page_of)
}

/// Where an artifact belongs, as a crumb: `(href, label)`.
/// The artifact an artifact's page (the document, a version, the editor) shows, with where it
/// belongs (the crumbs' first link); its fields read as the artifact's.
#[derive(Debug)]
pub struct Shown {
    pub view: ArtifactView,
    /// Where the artifact belongs: `(href, label)`.
    pub scope: Option<(String, String)>,
}

impl std::ops::Deref for Shown {
    type Target = ArtifactView;

    fn deref(&self) -> &ArtifactView {
        &self.view
    }
}

impl Shown {
    /// The artifact `id` names, else the error page with the way back to the projects.
    async fn read(st: &crate::AppState, id: &str) -> Result<Self, PageError> {
        let view = match ArtifactId::named(id) {
            Ok(id) => st.console.documents().artifact(id).await,
            Err(e) => Err(e),
        }
        .map_err(|e| PageError::from(e).back("/projects", "Back to the projects"))?;
        Ok(Self {
            scope: scope_of(&view),
            view,
        })
    }
}

fn scope_of(a: &ArtifactView) -> Option<(String, String)> {
    match (&a.issue, &a.project, &a.session) {
        (Some(k), _, _) => Some((format!("/issues/{k}"), k.to_string())),
        (None, Some(p), _) => Some((format!("/projects/{p}/documents"), p.to_string())),
        (None, None, Some(s)) => Some((format!("/sessions/{s}"), format!("session {s}"))),
        _ => None,
    }
}

/// A line diff (unified, three lines of context) between two texts.
pub fn diff_lines(old: &str, new: &str) -> Vec<DiffLine> {
    let diff = TextDiff::configure()
        .timeout(DIFF_DEADLINE)
        .diff_lines(old, new);
    let mut out = Vec::new();
    for (i, group) in diff.grouped_ops(3).iter().enumerate() {
        if i > 0 {
            out.push(DiffLine {
                class: "gap",
                sign: " ",
                text: "…".into(),
            });
        }
        for op in group {
            for change in diff.iter_changes(op) {
                let (class, sign) = match change.tag() {
                    ChangeTag::Delete => ("del", "-"),
                    ChangeTag::Insert => ("ins", "+"),
                    ChangeTag::Equal => ("same", " "),
                };
                out.push(DiffLine {
                    class,
                    sign,
                    text: change.value().trim_end_matches('\n').to_owned(),
                });
            }
        }
    }
    out
}

pub async fn document_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> PageResult {
    let h = human(&caller)?;
    let a = Shown::read(&st, &id).await?;
    let is_document = a.kind == ArtifactKind::Document;
    let (body, versions) = if is_document {
        let r = st.console.documents().rendered(a.id).await?;
        let body = DocumentPart::of(&a.id.to_string(), &r.token, &r.html, 0, FIRST_PART);
        (body, r.versions)
    } else {
        (None, st.console.documents().versions(a.id).await?)
    };
    let body = body.unwrap_or(DocumentPart {
        html: SafeHtml::default(),
        more: None,
    });
    let reviews = if is_document {
        reviews_of(&st, a.id).await
    } else {
        Vec::new()
    };
    let latest = versions.last().map(|v| v.number);
    let latest_n = latest.unwrap_or(0);
    let number = |k: &str| q.get(k).and_then(|v| v.parse::<i64>().ok());
    let (from, to) = (
        number("from").unwrap_or((latest_n - 1).max(1)),
        number("to").unwrap_or(latest_n),
    );
    let (diff, diff_error) = if is_document && q.contains_key("from") && q.contains_key("to") {
        diff_of(&st, a.id, from, to).await
    } else {
        (None, None)
    };
    let version = version_text(&a.view);
    Ok(page(
        StatusCode::OK,
        &DocumentPage {
            chrome: chrome("Document", h, "/projects"),
            is_document,
            version,
            updated: when(&a.updated_at),
            body,
            versions: versions
                .iter()
                .rev()
                .map(|v| version_row(&a.id.to_string(), v))
                .collect(),
            diff,
            diff_error,
            from,
            to,
            reviews,
            latest,
            a,
        },
    ))
}

/// The diff between versions `from` and `to` of a document, or the error text when one
/// cannot be read.
async fn diff_of(
    st: &std::sync::Arc<crate::AppState>,
    id: ArtifactId,
    from: i64,
    to: i64,
) -> (Option<DiffView>, Option<String>) {
    let read = |n: i64| {
        let st = st.clone();
        async move {
            match st.console.documents().version(id, &n.to_string()).await? {
                VersionRead::Document(d) => Ok(d.markdown),
                VersionRead::Bytes { .. } => Ok(String::new()),
            }
        }
    };
    match (read(from).await, read(to).await) {
        (Ok(old), Ok(new)) => (
            Some(DiffView {
                from,
                to,
                lines: diff_lines(&old, &new),
            }),
            None,
        ),
        (Err(e), _) | (_, Err(e)) => (None, Some(error_text(&e))),
    }
}

/// A document's reviews, newest first (none when they cannot be read: the page shows the
/// rest).
async fn reviews_of(st: &crate::AppState, id: ArtifactId) -> Vec<ReviewRow> {
    st.console
        .asks()
        .reviews(id)
        .await
        .map(|r| r.iter().rev().map(ReviewRow::of).collect())
        .unwrap_or_default()
}

/// The artifact's current version in words: its number, its name if any, and its kind.
fn version_text(a: &ArtifactView) -> String {
    a.version
        .as_ref()
        .map(|v| match &v.name {
            Some(n) => format!("{} “{n}” ({})", v.number, v.kind.as_str()),
            None => format!("{} ({})", v.number, v.kind.as_str()),
        })
        .unwrap_or_else(|| "none yet".into())
}

/// `GET /artifacts/{id}/part?from=N&token=T`: the next part of a long document's page (its
/// top-level blocks from index `N`, as an HTML fragment with the placeholder for the part after
/// it). 409 when the document's text is no longer `T` (the page then shows it afresh), 404 past
/// its last block.
pub async fn part(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> PageResult {
    human(&caller)?;
    let from = q.get("from").and_then(|v| v.parse::<usize>().ok());
    let (Some(from), Some(token)) = (from, q.get("token")) else {
        return Ok(part_refusal(
            ErrorCode::INVALID_QUERY,
            "This part of the document needs `from` (a block index) and `token`.",
        ));
    };
    let r = st
        .console
        .documents()
        .rendered(ArtifactId::named(&id)?)
        .await?;
    if r.token != *token {
        return Ok(part_refusal(
            ErrorCode::DOCUMENT_CHANGED,
            "The document changed since this page showed it: it is shown afresh.",
        ));
    }
    match DocumentPart::of(
        &r.artifact.id.to_string(),
        &r.token,
        &r.html,
        from,
        NEXT_PART,
    ) {
        Some(p) => Ok(html_response(StatusCode::OK, p.to_string())),
        None => Ok(part_refusal(
            ErrorCode::NOT_FOUND,
            "The document has no block at that index.",
        )),
    }
}

/// A refusal of `/artifacts/{id}/part`, as the fragment the page puts where the part would
/// go: the catalogue's status, and its code on the element (`data-code`). `message` is one of
/// this module's fixed sentences (no markup, nothing of the request).
fn part_refusal(code: ErrorCode, message: &'static str) -> Response {
    html_response(
        status_of(&code.into()),
        format!(
            "<p class=\"notice error\" data-code=\"{}\">{message}</p>",
            code.as_str()
        ),
    )
}

/// `GET /artifacts/{id}/versions/{number}`: one version as a page (a document's rendered, a
/// file's or image's to download), with the way to the versions beside it.
pub async fn version_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path((id, number)): Path<(String, String)>,
) -> PageResult {
    let h = human(&caller)?;
    let a = Shown::read(&st, &id).await?;
    let versions = match st.console.documents().versions(a.id).await {
        Ok(v) => v,
        Err(e) => return Err(e.into()),
    };
    let Some(info) = number
        .parse::<i64>()
        .ok()
        .and_then(|n| versions.iter().find(|v| v.number == n))
    else {
        return Err(
            PageError::not_found(format!("{} has no version {number}.", a.filename)).back(
                format!("/artifacts/{}", a.id),
                format!("Back to {}", a.filename),
            ),
        );
    };
    let n = info.number;
    let (html, image) = match st.console.documents().version(a.id, &n.to_string()).await {
        Ok(VersionRead::Document(d)) => (render(&d.markdown), false),
        Ok(VersionRead::Bytes { image, .. }) => (SafeHtml::default(), image),
        Err(e) => return Err(e.into()),
    };
    let heading = match &info.name {
        Some(name) => format!("{} · version {n} “{name}”", a.filename),
        None => format!("{} · version {n}", a.filename),
    };
    let previous = versions
        .iter()
        .rev()
        .find(|v| v.number < n)
        .map(|v| v.number);
    let next = versions.iter().find(|v| v.number > n).map(|v| v.number);
    Ok(page(
        StatusCode::OK,
        &VersionPage {
            chrome: chrome("Version", h, "/projects"),
            number: n,
            heading,
            by: actor_text(&info.by),
            at: when(&info.created_at),
            html,
            download: format!("/api/v1/artifacts/{}/versions/{n}", a.id),
            image,
            previous,
            next,
            a,
        },
    ))
}

/// `GET /artifacts/{id}/edit`: the markdown editor, with the token the text was read at.
pub async fn edit_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    let a = Shown::read(&st, &id).await?;
    let text = match st.console.documents().text(a.id).await {
        Ok(t) => t,
        Err(e) => return Err(e.into()),
    };
    Ok(page(
        StatusCode::OK,
        &EditPage {
            chrome: chrome("Edit a document", h, "/projects"),
            markdown: text.markdown,
            token: text.token,
            a,
        },
    ))
}

/// `POST /documents/preview`: markdown (the body) rendered as the document page renders it.
pub async fn preview(Extension(caller): Extension<Caller>, body: String) -> PageResult {
    human(&caller)?;
    if body.len() > PREVIEW_LIMIT {
        return Ok(html_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "<p class=\"notice error\">The text is too long to preview.</p>".to_owned(),
        ));
    }
    Ok(html_response(StatusCode::OK, render(&body).to_string()))
}

/// `GET /projects/{key}/documents`: a project's documents and files, with the forms that
/// create and upload one (to the project, or to `?issue=`).
pub async fn list_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> PageResult {
    let h = human(&caller)?;
    let project = match st.console.issues().projects().await {
        Ok(ps) => ps.into_iter().find(|p| p.key.as_str() == key),
        Err(e) => return Err(e.into()),
    };
    let Some(project) = project else {
        return Err(
            PageError::not_found(format!("No project has the key {key}."))
                .back("/projects", "Back to the projects"),
        );
    };
    let rows = match st
        .console
        .documents()
        .artifacts_of(At::Project(project.key.as_str()))
        .await
    {
        Ok(list) => list.iter().rev().map(DocumentRow::of).collect(),
        Err(e) => return Err(e.into()),
    };
    let issue = q
        .get("issue")
        .map(|i| i.trim().to_owned())
        .unwrap_or_default();
    Ok(page(
        StatusCode::OK,
        &ListPage {
            chrome: chrome("Documents", h, "/projects"),
            project: project.key.to_string(),
            name: project.name.clone(),
            issue,
            rows,
        },
    ))
}

pub async fn script() -> Response {
    super::script_asset(SCRIPT)
}

pub async fn style() -> Response {
    super::style_asset(STYLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_show_lines_in_and_out_with_context() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = "a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk\n";
        let lines = diff_lines(old, new);
        let shown: Vec<String> = lines
            .iter()
            .map(|l| format!("{}{}", l.sign, l.text))
            .collect();
        assert_eq!(
            shown,
            [
                " a", "-b", "+B", " c", " d", " e", " …", " h", " i", " j", "+k"
            ]
        );
        assert!(diff_lines("same\n", "same\n").is_empty());
    }
}
