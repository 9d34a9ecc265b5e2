//! The document page (issue 12): a document's blocks rendered (the engine's sanitized HTML:
//! no raw HTML passes, only safe URL schemes, and the console's strict Content-Security-Policy
//! lets no inline script run), its versions with a diff between any two, and live updates
//! from the event stream (`assets/documents.js`). A file's or image's page lists its versions
//! to download.

use std::collections::HashMap;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_console_core::Caller;
use countersign_console_core::console::documents::VersionRead;
use countersign_console_core::work::Actor;
use countersign_console_core::work::documents::{ArtifactKind, ArtifactView, VersionInfo};
use similar::{ChangeTag, TextDiff};

use super::{St, chrome, error_text, human, page, status_of};
use crate::html::{Chrome, When, notice, when};

const SCRIPT: &str = include_str!("../../assets/documents.js");
const STYLE: &str = include_str!("../../assets/documents.css");

/// A diff gives up refining after this long (similar's deadline) and shows what it has.
const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_millis(500);

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

#[derive(Debug, Template)]
#[template(path = "documents_page.html")]
pub struct DocumentPage<'a> {
    pub chrome: Chrome<'a>,
    pub a: ArtifactView,
    pub is_document: bool,
    /// Where the artifact belongs: `(href, label)`.
    pub scope: Option<(String, String)>,
    pub version: String,
    pub updated: When,
    /// The rendered document: the engine's sanitized HTML.
    pub html: String,
    pub versions: Vec<VersionRow>,
    pub diff: Option<DiffView>,
    pub diff_error: Option<String>,
    pub from: i64,
    pub to: i64,
}

fn actor_text(a: &Actor) -> String {
    match a {
        Actor::User { login } => login.to_string(),
        Actor::Agent {
            session: Some(s), ..
        } => format!("session {s}"),
        Actor::Agent {
            service: Some(s), ..
        } => s.clone(),
        Actor::Agent { .. } => "an agent".into(),
        Actor::System { name } => name.clone(),
    }
}

fn version_row(id: &str, v: &VersionInfo) -> VersionRow {
    VersionRow {
        number: v.number,
        name: v.name.clone().unwrap_or_default(),
        kind: v.kind.as_str(),
        by: actor_text(&v.by),
        at: when(&v.created_at),
        href: format!("/api/v1/artifacts/{id}/versions/{}", v.number),
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
) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let fail =
        |e: countersign_console_core::Error| page(status_of(&e), &notice("error", error_text(&e)));
    let a = match st.console.artifact(&id).await {
        Ok(a) => a,
        Err(e) => return fail(e),
    };
    let is_document = a.kind == ArtifactKind::Document;
    let (html, versions) = if is_document {
        match st.console.rendered(&a.id).await {
            Ok(r) => (r.html, r.versions),
            Err(e) => return fail(e),
        }
    } else {
        match st.console.versions(&a.id).await {
            Ok(v) => (String::new(), v),
            Err(e) => return fail(e),
        }
    };
    let latest = versions.last().map_or(0, |v| v.number);
    let number = |k: &str| q.get(k).and_then(|v| v.parse::<i64>().ok());
    let (from, to) = (
        number("from").unwrap_or((latest - 1).max(1)),
        number("to").unwrap_or(latest),
    );
    let (mut diff, mut diff_error) = (None, None);
    if is_document && q.contains_key("from") && q.contains_key("to") {
        let read = |n: i64| {
            let st = st.clone();
            let id = a.id.clone();
            async move {
                match st.console.version(&id, &n.to_string()).await? {
                    VersionRead::Document(d) => Ok(d.markdown),
                    VersionRead::Bytes { .. } => Ok(String::new()),
                }
            }
        };
        match (read(from).await, read(to).await) {
            (Ok(old), Ok(new)) => {
                diff = Some(DiffView {
                    from,
                    to,
                    lines: diff_lines(&old, &new),
                })
            }
            (Err(e), _) | (_, Err(e)) => diff_error = Some(error_text(&e)),
        }
    }
    let scope = match (&a.issue, &a.project, &a.session) {
        (Some(k), _, _) => Some((format!("/issues/{k}"), k.to_string())),
        (None, Some(p), _) => Some((format!("/projects/{p}/issues"), p.to_string())),
        (None, None, Some(s)) => Some((String::new(), format!("session {s}"))),
        _ => None,
    };
    let version = a
        .version
        .as_ref()
        .map(|v| match &v.name {
            Some(n) => format!("{} “{n}” ({})", v.number, v.kind.as_str()),
            None => format!("{} ({})", v.number, v.kind.as_str()),
        })
        .unwrap_or_else(|| "none yet".into());
    page(
        StatusCode::OK,
        &DocumentPage {
            chrome: chrome("Document", h, "/projects"),
            is_document,
            scope,
            version,
            updated: when(&a.updated_at),
            html,
            versions: versions
                .iter()
                .rev()
                .map(|v| version_row(&a.id, v))
                .collect(),
            diff,
            diff_error,
            from,
            to,
            a,
        },
    )
}

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
