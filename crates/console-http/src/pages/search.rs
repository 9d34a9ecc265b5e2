//! The search page (issue 27): every kind of result links to its page (a comment to its
//! issue's or document's conversation, an ask to its page, a message to where it was written),
//! with a title a person reads and a snippet of what matched, never an id as link text.

use std::collections::HashMap;

use askama::Template;
use axum::Extension;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use countersign_console_core::Caller;
use countersign_console_core::ids::CommentId;
use countersign_console_core::work::{SearchKind, SearchRow, search};

use super::{PageResult, St, chrome, error_text, human, page};
use crate::html::{Chrome, When, when};

/// How many results a page of the search shows.
pub const PER_PAGE: u32 = 20;

/// A part of a result's title or snippet: the page escapes each, and marks the matched words.
#[derive(Debug)]
pub struct Part {
    pub text: String,
    pub mark: bool,
}

/// `text` in parts, the words `words` matches marked ([`search::marked`]).
fn parts(text: &str, words: &[String]) -> Vec<Part> {
    search::marked(text, words)
        .into_iter()
        .map(|(text, mark)| Part { text, mark })
        .collect()
}

/// A search result as the page lists it.
#[derive(Debug)]
pub struct ResultRow {
    pub kind: &'static str,
    pub href: String,
    pub title: Vec<Part>,
    /// Where it is (an issue, a document), when that is not the title.
    pub context: String,
    /// What matched, when it says more than the title.
    pub snippet: Vec<Part>,
    pub at: When,
}

#[derive(Debug, Template)]
#[template(path = "search.html")]
pub struct SearchPage<'a> {
    pub chrome: Chrome<'a>,
    pub q: String,
    pub total: i64,
    /// Some kind matches more than the pages reach (`total` is a floor).
    pub more: bool,
    pub reachable: i64,
    pub offset: u32,
    pub next: Option<u32>,
    pub previous: Option<u32>,
    pub rows: Vec<ResultRow>,
    pub error: Option<String>,
}

impl SearchPage<'_> {
    /// The query, for a link's `q=`.
    pub fn q_param(&self) -> String {
        url::form_urlencoded::byte_serialize(self.q.as_bytes()).collect()
    }
}

/// One line of at most `max` characters (an ellipsis marks the cut).
fn line(text: &str, max: usize) -> String {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let flat: String = first.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        flat
    } else {
        let mut s: String = flat.chars().take(max).collect();
        s.push('…');
        s
    }
}

/// The snippet, unless it only repeats the title.
fn snippet_beside(title: &str, snippet: &str) -> String {
    let flat: String = snippet.split_whitespace().collect::<Vec<_>>().join(" ");
    let core = flat.trim_matches('…').trim();
    if core.is_empty() || title.trim_end_matches('…').contains(core) || core == title {
        String::new()
    } else {
        flat
    }
}

/// Where a comment is read: its ask's page, its document's discussion, or its issue.
async fn comment_place(st: &crate::AppState, id: &str) -> (String, String) {
    let thread = match CommentId::named(id) {
        Ok(id) => st.console.asks().comment(id).await,
        Err(e) => Err(e),
    };
    match thread {
        Ok(t) => {
            let c = &t.comment.comment;
            match (&c.ask, &c.artifact, &c.issue) {
                (Some(ask), _, _) => (format!("/asks/{ask}"), "a reply on an ask".to_owned()),
                (None, Some(doc), _) => {
                    let read = st.console.documents().artifact(*doc).await.ok();
                    let name = read
                        .map(|a| a.filename)
                        .unwrap_or_else(|| "a document".to_owned());
                    (
                        format!("/artifacts/{doc}/discussion#comment-{id}"),
                        format!("on {name}"),
                    )
                }
                (None, None, Some(k)) => (format!("/issues/{k}#comment-{id}"), format!("on {k}")),
                _ => (format!("/projects/{}/issues", c.project), String::new()),
            }
        }
        Err(_) => ("/search".to_owned(), String::new()),
    }
}

/// A row titled by its words (one line of 120 characters at most), what matched beside them.
fn titled(
    kind: &'static str,
    href: String,
    context: String,
    r: &SearchRow,
    words: &[String],
) -> ResultRow {
    let title = line(&r.title, 120);
    ResultRow {
        kind,
        href,
        snippet: parts(&snippet_beside(&title, &r.snippet), words),
        title: parts(&title, words),
        context,
        at: when(&r.at),
    }
}

async fn row_of(st: &crate::AppState, r: SearchRow, words: &[String]) -> ResultRow {
    let in_project = r.project.as_ref().map(|p| format!("in {p}"));
    let in_project = in_project.unwrap_or_default();
    match r.kind {
        SearchKind::Issue => {
            // The key is not indexed: never marked.
            let mut title = vec![Part {
                text: format!("{} · ", r.id),
                mark: false,
            }];
            title.extend(parts(&line(&r.title, 120), words));
            ResultRow {
                kind: "issue",
                href: format!("/issues/{}", r.id),
                title,
                context: String::new(),
                snippet: parts(&snippet_beside(&r.title, &r.snippet), words),
                at: when(&r.at),
            }
        }
        SearchKind::Document => titled(
            "document",
            format!("/artifacts/{}", r.id),
            in_project,
            &r,
            words,
        ),
        SearchKind::Ask => titled("ask", format!("/asks/{}", r.id), in_project, &r, words),
        // Issue 48: a credential request found by its id; `page` is its page.
        SearchKind::Request => titled("request", r.page.clone(), String::new(), &r, words),
        SearchKind::Comment => {
            let (href, context) = comment_place(st, &r.id).await;
            titled("comment", href, context, &r, words)
        }
        // A broadcast's copies are one row, linked to the broadcast.
        SearchKind::Message => match &r.broadcast {
            Some(b) => titled(
                "broadcast",
                format!("/broadcasts/{b}"),
                "to several sessions".to_owned(),
                &r,
                words,
            ),
            None => titled(
                "message",
                format!("/messages/{}", r.id),
                in_project,
                &r,
                words,
            ),
        },
    }
}

/// `GET /search?q=&offset=`: issues, documents, asks, comments and messages by their words
/// (a word's prefix matches too).
pub async fn search_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Query(q): Query<HashMap<String, String>>,
) -> PageResult {
    let h = human(&caller)?;
    let text = q.get("q").map(|t| t.trim().to_owned()).unwrap_or_default();
    // A credential request's record id, as the CLI and MCP print it while a request waits:
    // its page.
    if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(axum::response::Redirect::to(&format!(
            "/requests/{}",
            text.to_ascii_lowercase()
        ))
        .into_response());
    }
    let offset = q
        .get("offset")
        .and_then(|o| o.parse::<u32>().ok())
        .unwrap_or(0)
        .min(500);
    let mut view = SearchPage {
        chrome: chrome("Search", h, ""),
        q: text.clone(),
        total: 0,
        more: false,
        reachable: 0,
        offset,
        next: None,
        previous: None,
        rows: Vec::new(),
        error: None,
    };
    let mut status = StatusCode::OK;
    if !text.is_empty() {
        match st
            .console
            .search_as_person(&text, None, PER_PAGE, offset)
            .await
        {
            Ok(found) => {
                view.total = found.total;
                view.reachable = found.reachable;
                let shown = found.rows.len() as u32;
                if i64::from(offset + shown) < found.reachable && shown == PER_PAGE {
                    view.next = Some(offset + PER_PAGE);
                }
                if offset > 0 {
                    view.previous = Some(offset.saturating_sub(PER_PAGE));
                }
                view.more = found.more;
                let words = search::words(&text);
                for r in found.rows {
                    view.rows.push(row_of(&st, r, &words).await);
                }
            }
            Err(e) => {
                status = super::status_of(&e);
                view.error = Some(error_text(&e));
            }
        }
    }
    Ok(page(status, &view))
}
