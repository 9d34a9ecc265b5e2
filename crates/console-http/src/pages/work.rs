//! The work pages (issue 27): projects (list, create), a project's issues (paged list with
//! filters and sorting, or a board by status; create), the person's own issues, and the issue
//! page as the conversation: its fields edited in place, claim and release, its description with
//! task progress, and one timeline of comments (with replies), asks (with their answers),
//! messages, reviews and its history in words, all live. Every control calls the JSON API (the
//! contract at the top of `assets/console.js`); these handlers only read.

use std::collections::HashMap;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use countersign_console_core::Caller;
use countersign_console_core::Login;
use countersign_console_core::doc::SafeHtml;
use countersign_console_core::work::asks::{AskState, AskView, CommentView, ThreadState};
use countersign_console_core::work::{
    Actor, Event, EventPage, IssueAssignee, IssueCursor, IssueListQuery, IssueSort, ProjectKey,
    Status,
};
use serde_json::Value;

use super::{PageError, PageResult, St, chrome, human, page};
use crate::html::{Chrome, When, actor_text, when};

/// Rows on one page of an issue list: what a person reads.
pub const PAGE_ROWS: u32 = 50;
/// Cards per column on the board (the column links to its whole list).
pub const BOARD_CARDS: u32 = 20;
/// History entries the issue page reads (newest); the timeline shows them in order.
pub const HISTORY_READ: u32 = 200;

/// A status in words.
pub fn status_words(s: &str) -> String {
    s.replace('_', " ")
}

fn priority_text(p: Option<u8>) -> String {
    p.map(|p| format!("P{p}")).unwrap_or_else(|| "none".into())
}

// ----- projects -----

#[derive(Debug)]
pub struct ProjectRow {
    pub key: String,
    pub name: String,
    pub created: When,
}

#[derive(Debug, Template)]
#[template(path = "projects.html")]
pub struct ProjectsPage<'a> {
    pub chrome: Chrome<'a>,
    pub projects: Vec<ProjectRow>,
}

pub async fn projects_page(State(st): St, Extension(caller): Extension<Caller>) -> PageResult {
    let h = human(&caller)?;
    let ps = st.console.issues().projects().await?;
    Ok(page(
        StatusCode::OK,
        &ProjectsPage {
            chrome: chrome("Projects", h, "/projects"),
            projects: ps
                .iter()
                .map(|p| ProjectRow {
                    key: p.key.to_string(),
                    name: p.name.clone(),
                    created: when(&p.created_at),
                })
                .collect(),
        },
    ))
}

// ----- issue lists -----

/// An issue as a list row or a board card.
#[derive(Debug)]
pub struct IssueRow {
    pub key: String,
    pub title: String,
    pub status: &'static str,
    pub status_text: String,
    pub priority: String,
    pub labels: Vec<String>,
    pub assignee: String,
    pub claim: String,
    pub progress: String,
    pub open_asks: i64,
    pub updated: When,
}

impl IssueRow {
    pub fn of(r: &countersign_console_core::work::IssueRow) -> Self {
        let i = &r.issue;
        Self {
            key: i.key.to_string(),
            title: i.title.clone(),
            status: i.status.as_str(),
            status_text: status_words(i.status.as_str()),
            priority: priority_text(i.priority),
            labels: i.labels.clone(),
            assignee: i
                .assignee
                .as_ref()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            claim: i
                .claim
                .as_ref()
                .map(|c| actor_text(&c.holder))
                .unwrap_or_default(),
            progress: r
                .children
                .map(|c| format!("{}/{} children done", c.done, c.total))
                .unwrap_or_default(),
            open_asks: r.open_asks,
            updated: when(&i.updated_at),
        }
    }
}

/// The filters a list page was asked for, as the form shows them and links keep them.
#[derive(Debug, Default, Clone)]
pub struct Filters {
    pub status: String,
    pub label: String,
    pub priority: String,
    pub assignee: String,
    pub sort: String,
    pub view: String,
    /// Where this page resumes (the previous page's last row), opaque.
    pub after: String,
}

impl Filters {
    fn of(q: &HashMap<String, String>) -> Self {
        let get = |k: &str| q.get(k).map(|v| v.trim().to_owned()).unwrap_or_default();
        Self {
            status: get("status"),
            label: get("label"),
            priority: get("priority"),
            assignee: get("assignee"),
            sort: get("sort"),
            view: get("view"),
            after: get("after"),
        }
    }

    /// The query string of these filters, with a view and where to resume, for links.
    pub fn query(&self, after: &str, view: &str) -> String {
        let mut s = url::form_urlencoded::Serializer::new(String::new());
        for (k, v) in [
            ("status", self.status.as_str()),
            ("label", &self.label),
            ("priority", &self.priority),
            ("assignee", &self.assignee),
            ("sort", &self.sort),
            ("view", view),
            ("after", after),
        ] {
            if !v.is_empty() {
                s.append_pair(k, v);
            }
        }
        let q = s.finish();
        if q.is_empty() { q } else { format!("?{q}") }
    }

    pub fn board(&self) -> bool {
        self.view == "board"
    }

    pub fn any(&self) -> bool {
        !(self.status.is_empty()
            && self.label.is_empty()
            && self.priority.is_empty()
            && self.assignee.is_empty())
    }

    /// The core query; a value that is not one (a status, a priority, a person) is refused.
    fn query_of(&self, project: Option<ProjectKey>) -> Result<IssueListQuery, PageError> {
        let bad = |m: &str| PageError::new(StatusCode::BAD_REQUEST, "INVALID_QUERY", m);
        let mut q = IssueListQuery {
            project,
            limit: PAGE_ROWS,
            ..Default::default()
        };
        match self.status.as_str() {
            "" => {}
            "open" => q.open = Some(true),
            "closed" => q.open = Some(false),
            s => q
                .status
                .push(Status::parse(s).ok_or_else(|| bad("the status filter is not a status"))?),
        }
        if !self.label.is_empty() {
            q.labels = vec![self.label.clone()];
        }
        match self.priority.as_str() {
            "" => {}
            "none" => q.priority = vec![None],
            p => {
                q.priority =
                    vec![Some(p.parse::<u8>().ok().filter(|p| *p <= 3).ok_or_else(
                        || bad("the priority filter is 0 to 3, or none"),
                    )?)]
            }
        }
        match self.assignee.as_str() {
            "" => {}
            "nobody" => q.assignee = Some(IssueAssignee::Nobody),
            a => {
                q.assignee = Some(IssueAssignee::Person(
                    Login::parse(a).ok_or_else(|| bad("the assignee filter is an e-mail"))?,
                ))
            }
        }
        if !self.sort.is_empty() {
            q.sort = IssueSort::parse(&self.sort)
                .ok_or_else(|| bad("the order is rank, updated, created or priority"))?;
        }
        if !self.after.is_empty() {
            q.after = Some(
                IssueCursor::parse(&self.after)
                    .filter(|c| c.sort == q.sort)
                    .ok_or_else(|| bad("this page's place in the list is not one"))?,
            );
        }
        Ok(q)
    }
}

/// Where a list page stands: which rows of how many, and the way on.
#[derive(Debug)]
pub struct Pager {
    pub shown: usize,
    pub total: i64,
    /// The first page, when this one is not it.
    pub first: Option<String>,
    pub next: Option<String>,
}

/// One column of the board.
#[derive(Debug)]
pub struct Column {
    pub status: &'static str,
    pub title: String,
    pub total: i64,
    pub cards: Vec<IssueRow>,
    /// The list of this column's whole set.
    pub more: String,
}

/// Who may be named as an assignee: everyone who has signed in.
async fn people(st: &crate::AppState) -> Vec<String> {
    st.console
        .people()
        .await
        .map(|p| p.iter().map(|l| l.to_string()).collect())
        .unwrap_or_default()
}

#[derive(Debug, Template)]
#[template(path = "issues.html")]
pub struct IssuesPage<'a> {
    pub chrome: Chrome<'a>,
    /// The project `(key, name)` (none: the person's own issues across projects).
    pub project: Option<(String, String)>,
    pub heading: String,
    /// The list's base path (`/projects/KEY/issues` or `/issues`).
    pub base: String,
    pub statuses: Vec<(&'static str, String)>,
    pub sorts: Vec<(&'static str, &'static str)>,
    pub f: Filters,
    pub rows: Vec<IssueRow>,
    pub pager: Pager,
    pub columns: Vec<Column>,
    pub people: Vec<String>,
    pub me: String,
    /// Whether the project has no issue at all (not only none matching).
    pub empty_project: bool,
}

impl IssuesPage<'_> {
    pub fn list_href(&self) -> String {
        format!("{}{}", self.base, self.f.query("", ""))
    }

    pub fn board_href(&self) -> String {
        format!("{}{}", self.base, self.f.query("", "board"))
    }

    pub fn mine_href(&self) -> String {
        let mut f = self.f.clone();
        f.assignee = self.me.clone();
        format!("{}{}", self.base, f.query("", &self.f.view))
    }
}

fn statuses() -> Vec<(&'static str, String)> {
    Status::ALL
        .iter()
        .map(|s| (s.as_str(), status_words(s.as_str())))
        .collect()
}

const SORTS: [(&str, &str); 4] = [
    ("rank", "rank"),
    ("updated", "recently updated"),
    ("created", "newest"),
    ("priority", "priority"),
];

/// Reads a list page, or the board's columns (each its first cards and its count).
async fn read_list(
    st: &crate::AppState,
    f: &Filters,
    q: IssueListQuery,
) -> Result<(Vec<IssueRow>, Pager, Vec<Column>), PageError> {
    let mut columns = Vec::new();
    let mut rows = Vec::new();
    let mut pager = Pager {
        shown: 0,
        total: 0,
        first: None,
        next: None,
    };
    if f.board() {
        let counts = st.console.issues().status_counts(&q).await?;
        for (s, total) in counts {
            if !q.status.is_empty() && !q.status.contains(&s) {
                continue;
            }
            if q.open.is_some_and(|open| open != s.is_open()) {
                continue;
            }
            let mut cq = q.clone();
            cq.status = vec![s];
            cq.open = None;
            cq.after = None;
            cq.limit = BOARD_CARDS;
            let cards = if total > 0 {
                st.console.issues().issue_rows(&cq).await?.rows
            } else {
                Vec::new()
            };
            let mut more = f.clone();
            more.status = s.as_str().to_owned();
            columns.push(Column {
                status: s.as_str(),
                title: status_words(s.as_str()),
                total,
                cards: cards.iter().map(IssueRow::of).collect(),
                more: more.query("", ""),
            });
        }
    } else {
        let page = st.console.issues().issue_rows(&q).await?;
        rows = page.rows.iter().map(IssueRow::of).collect();
        pager = Pager {
            shown: rows.len(),
            total: page.total,
            first: (!f.after.is_empty()).then(|| f.query("", "")),
            next: page.next.map(|n| f.query(&n, "")),
        };
    }
    Ok((rows, pager, columns))
}

pub async fn issues_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(project): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> PageResult {
    let h = human(&caller)?;
    let Some(key) = ProjectKey::parse(&project) else {
        return Err(no_project(&project));
    };
    let projects = st.console.issues().projects().await?;
    let Some(p) = projects.iter().find(|p| p.key == key) else {
        return Err(no_project(&project));
    };
    let f = Filters::of(&q);
    let query = f.query_of(Some(key.clone()))?;
    let (rows, pager, columns) = read_list(&st, &f, query).await?;
    let empty_project = !f.any() && pager.total == 0 && columns.iter().all(|c| c.total == 0);
    let heading = format!("{} · {}", key, p.name);
    Ok(page(
        StatusCode::OK,
        &IssuesPage {
            chrome: chrome(&heading, h, "/projects"),
            project: Some((key.to_string(), p.name.clone())),
            heading: heading.clone(),
            base: format!("/projects/{key}/issues"),
            statuses: statuses(),
            sorts: SORTS.to_vec(),
            f,
            rows,
            pager,
            columns,
            people: people(&st).await,
            me: h.login.to_string(),
            empty_project,
        },
    ))
}

fn no_project(key: &str) -> PageError {
    PageError::not_found(format!("There is no project {key}."))
        .back("/projects", "See the projects")
}

/// `GET /issues`: the person's issues across projects (another person's with `?assignee=`).
pub async fn my_issues_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Query(q): Query<HashMap<String, String>>,
) -> PageResult {
    let h = human(&caller)?;
    let mut f = Filters::of(&q);
    if f.assignee.is_empty() {
        f.assignee = h.login.to_string();
    }
    let query = f.query_of(None)?;
    let (rows, pager, columns) = read_list(&st, &f, query).await?;
    let heading = if f.assignee == h.login.as_str() {
        "Your issues".to_owned()
    } else if f.assignee == "nobody" {
        "Issues assigned to nobody".to_owned()
    } else {
        format!("Issues of {}", f.assignee)
    };
    Ok(page(
        StatusCode::OK,
        &IssuesPage {
            chrome: chrome(&heading, h, "/issues"),
            project: None,
            heading: heading.clone(),
            base: "/issues".into(),
            statuses: statuses(),
            sorts: SORTS.to_vec(),
            f,
            rows,
            pager,
            columns,
            people: people(&st).await,
            me: h.login.to_string(),
            empty_project: false,
        },
    ))
}

// ----- the issue page -----

/// The issue's fields as the page shows and edits them.
#[derive(Debug)]
pub struct IssueFacts {
    pub key: String,
    pub project: String,
    pub title: String,
    pub status: &'static str,
    pub status_text: String,
    pub priority: Option<u8>,
    pub labels: Vec<String>,
    pub labels_text: String,
    pub assignee: String,
    pub route: String,
    pub claim: Option<(String, When)>,
    pub claimed_by_me: bool,
    pub parent: Option<String>,
    pub children: Vec<String>,
    pub tasks: Option<(i64, i64)>,
    pub children_done: Option<(i64, i64)>,
    pub sequence: i64,
    pub created: When,
    pub updated: When,
}

/// One entry of the timeline.
#[derive(Debug)]
pub enum Entry {
    Comment(CommentEntry),
    Ask(Box<AskEntry>),
    Message {
        id: String,
        by: String,
        to: String,
        body: String,
        at: When,
    },
    /// A history line in words ("ada changed status from todo to in progress").
    Change {
        by: String,
        what: String,
        at: When,
    },
}

#[derive(Debug)]
pub struct CommentEntry {
    pub id: String,
    pub by: String,
    pub at: When,
    /// The body as sanitized HTML (the document engine's markdown).
    pub html: SafeHtml,
    pub on: Option<(String, String)>,
    pub quote: String,
    pub mentions: Vec<String>,
    pub resolved: bool,
    pub edited: bool,
    pub replies: Vec<CommentEntry>,
}

#[derive(Debug)]
pub struct AskEntry {
    pub id: String,
    pub by: String,
    pub at: When,
    pub question: String,
    pub options: Vec<String>,
    pub state: &'static str,
    pub open: bool,
    pub answer: Option<String>,
    pub answered_by: String,
    pub closed: Option<String>,
    pub replies: Vec<CommentEntry>,
}

#[derive(Debug, Template)]
#[template(path = "issue.html")]
pub struct IssuePage<'a> {
    pub chrome: Chrome<'a>,
    pub i: IssueFacts,
    pub statuses: Vec<(&'static str, String)>,
    /// The description: `(document page, sanitized HTML)`.
    pub description: Option<(String, SafeHtml)>,
    pub documents: Vec<(String, String)>,
    pub timeline: Vec<Entry>,
    pub people: Vec<String>,
    pub sessions: Vec<(String, String)>,
}

/// Markdown as the document engine renders it: sanitized, no raw HTML.
fn markdown_html(md: &str) -> SafeHtml {
    let mut n = 0u32;
    countersign_console_core::doc::Document::parse(md, &mut || {
        n += 1;
        format!("c{n}")
    })
    .to_html()
}

fn ask_state(s: AskState) -> &'static str {
    match s {
        AskState::Open => "open",
        AskState::Answered => "answered",
        AskState::Retracted => "retracted",
        AskState::Resolved => "resolved",
    }
}

fn comment_entry(view: &CommentView, docs: &HashMap<String, String>) -> CommentEntry {
    let c = &view.comment;
    CommentEntry {
        id: c.id.clone(),
        by: actor_text(&c.author),
        at: when(&c.created_at),
        html: markdown_html(&c.body),
        on: c.artifact.as_ref().map(|a| {
            (
                format!("/artifacts/{a}/discussion"),
                docs.get(a).cloned().unwrap_or_else(|| "a document".into()),
            )
        }),
        quote: c
            .quote
            .as_ref()
            .map(|q| q.exact.clone())
            .unwrap_or_default(),
        mentions: view.mentions.iter().map(|m| m.session_id.clone()).collect(),
        resolved: c.thread_state == Some(ThreadState::Resolved),
        edited: c.edited_at.is_some(),
        replies: Vec::new(),
    }
}

/// A value of a change, in words.
fn value_words(field: &str, v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::String(s) if field == "status" => status_words(s),
        Value::String(s) => s.clone(),
        Value::Number(n) if field == "priority" => format!("P{n}"),
        Value::Array(a) if a.is_empty() => "none".into(),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| x.to_string())
            })
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    }
}

/// An event of the issue's log in words, or none when the timeline shows it as its own entry
/// (comments, asks, messages).
pub fn event_words(e: &Event) -> Option<String> {
    let d = &e.data;
    let s = |k: &str| d[k].as_str().unwrap_or("").to_owned();
    Some(match e.kind.as_str() {
        "issue.created" => "created the issue".into(),
        "issue.updated" => {
            let changes = d["changes"].as_object()?;
            let mut parts = Vec::new();
            for (field, pair) in changes {
                let (was, now) = (&pair[0], &pair[1]);
                let name = match field.as_str() {
                    "assignee" => "the assignee",
                    "labels" => "the labels",
                    "parent" => "the parent",
                    "priority" => "the priority",
                    "rank" => {
                        parts.push("moved it in the order".to_owned());
                        continue;
                    }
                    "components" => {
                        parts.push("changed its components".to_owned());
                        continue;
                    }
                    other => other,
                };
                parts.push(format!(
                    "changed {name} from {} to {}",
                    value_words(field, was),
                    value_words(field, now)
                ));
            }
            if parts.is_empty() {
                return None;
            }
            parts.join(", ")
        }
        "issue.claimed" => "claimed the issue".into(),
        "issue.released" => "released the claim".into(),
        "document.created" => format!("added the document {}", s("filename")),
        "document.versioned" => "named a version of a document".into(),
        "approval.requested" => "asked for approval of a document".into(),
        "approval.approved" => "approved a document".into(),
        "approval.changes_requested" => "asked for changes to a document".into(),
        "comment.resolved" => "resolved a thread".into(),
        "comment.reopened" => "reopened a thread".into(),
        "suggestion.accepted" => "accepted a suggestion".into(),
        "suggestion.rejected" => "rejected a suggestion".into(),
        "ask.answered" | "ask.retracted" | "ask.resolved" | "ask.reworded" => return None,
        "comment.created" | "comment.edited" | "ask.opened" | "ask.followed" | "ask.unfollowed" => {
            return None;
        }
        "message.sent" | "message.replied" | "message.accepted" => return None,
        "document.edited" => "edited a document".into(),
        other => other.replace(['.', '_'], " "),
    })
}

pub async fn issue_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    let issue = match st.console.issues().issue(&key).await {
        Ok(i) => i,
        Err(e) if e.status() == 404 => {
            return Err(PageError::not_found(format!("There is no issue {key}."))
                .back("/issues", "See your issues"));
        }
        Err(e) => return Err(e.into()),
    };
    let me = Actor::User {
        login: h.login.clone(),
    };
    let artifacts = st
        .console
        .documents()
        .artifacts_of(countersign_console_core::console::documents::At::Issue(
            &key,
        ))
        .await
        .unwrap_or_default();
    let docs: HashMap<String, String> = artifacts
        .iter()
        .map(|a| (a.id.clone(), a.filename.clone()))
        .collect();
    let primary = issue
        .primary_document
        .as_ref()
        .and_then(|d| d["id"].as_str().map(str::to_owned));
    let description = match &primary {
        Some(id) => st
            .console
            .documents()
            .rendered(id)
            .await
            .ok()
            .map(|r| (format!("/artifacts/{id}"), r.html)),
        None => None,
    };
    let documents = artifacts
        .iter()
        .map(|a| (format!("/artifacts/{}", a.id), a.filename.clone()))
        .collect();

    // The timeline: comments (replies under their root), asks (with their replies), messages
    // and the history, in order.
    let comments = st.console.asks().issue_comments(&key, None).await?;
    let asks = st
        .console
        .asks()
        .issue_asks(&key, AskState::ALL.to_vec())
        .await?;
    let history = st
        .console
        .issues()
        .issue_events(
            &key,
            &EventPage {
                after: None,
                before: None,
                ids: vec![],
                descending: true,
                limit: HISTORY_READ,
            },
        )
        .await?;
    let mut timeline: Vec<(countersign_console_core::Time, Entry)> = Vec::new();
    let mut roots: Vec<CommentEntry> = Vec::new();
    let mut replies: HashMap<String, Vec<CommentEntry>> = HashMap::new();
    let mut ask_replies: HashMap<String, Vec<CommentEntry>> = HashMap::new();
    let mut root_at = Vec::new();
    for view in &comments {
        let entry = comment_entry(view, &docs);
        let c = &view.comment;
        if let Some(p) = &c.parent {
            replies.entry(p.clone()).or_default().push(entry);
        } else if let Some(a) = &c.ask {
            ask_replies.entry(a.clone()).or_default().push(entry);
        } else {
            root_at.push(c.created_at);
            roots.push(entry);
        }
    }
    /// A root's replies, and theirs, in thread order (shown as one list under the root).
    fn attach(e: &mut CommentEntry, replies: &mut HashMap<String, Vec<CommentEntry>>) {
        fn under(
            id: &str,
            replies: &mut HashMap<String, Vec<CommentEntry>>,
            out: &mut Vec<CommentEntry>,
        ) {
            for r in replies.remove(id).unwrap_or_default() {
                let rid = r.id.clone();
                out.push(r);
                under(&rid, replies, out);
            }
        }
        let mut out = Vec::new();
        under(&e.id, replies, &mut out);
        e.replies = out;
    }
    for (mut e, at) in roots.into_iter().zip(root_at) {
        attach(&mut e, &mut replies);
        timeline.push((at, Entry::Comment(e)));
    }
    for a in &asks {
        let mut rs = Vec::new();
        for mut r in ask_replies.remove(&a.id).unwrap_or_default() {
            attach(&mut r, &mut replies);
            let more = std::mem::take(&mut r.replies);
            rs.push(r);
            rs.extend(more);
        }
        timeline.push((a.created_at, Entry::Ask(Box::new(ask_entry(a, rs)))));
    }
    for e in &history {
        match e.kind.as_str() {
            "message.sent" | "message.replied" => {
                let d = &e.data;
                let to = d["target"]
                    .as_object()
                    .map(|t| {
                        t.values()
                            .filter_map(Value::as_str)
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .or_else(|| d["target"].as_str().map(str::to_owned))
                    .unwrap_or_default();
                timeline.push((
                    e.at,
                    Entry::Message {
                        id: d["id"].as_str().unwrap_or("").to_owned(),
                        by: actor_text(&e.actor),
                        to,
                        body: d["body"].as_str().unwrap_or("").to_owned(),
                        at: when(&e.at),
                    },
                ));
            }
            _ => {
                if let Some(what) = event_words(e) {
                    timeline.push((
                        e.at,
                        Entry::Change {
                            by: actor_text(&e.actor),
                            what,
                            at: when(&e.at),
                        },
                    ));
                }
            }
        }
    }
    timeline.sort_by_key(|(at, _)| *at);

    let sessions = st
        .console
        .messages()
        .live_sessions()
        .await
        .map(|l| {
            l.into_iter()
                .map(|s| (s.session_id, s.title))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let claim = issue
        .claim
        .as_ref()
        .map(|c| (actor_text(&c.holder), when(&c.at)));
    let facts = IssueFacts {
        key: issue.key.to_string(),
        project: issue.project.to_string(),
        title: issue.title.clone(),
        status: issue.status.as_str(),
        status_text: status_words(issue.status.as_str()),
        priority: issue.priority,
        labels: issue.labels.clone(),
        labels_text: issue.labels.join(", "),
        assignee: issue
            .assignee
            .as_ref()
            .map(|a| a.to_string())
            .unwrap_or_default(),
        route: issue.route.clone().unwrap_or_default(),
        claimed_by_me: issue.claim.as_ref().is_some_and(|c| c.holder == me),
        claim,
        parent: issue.parent.as_ref().map(|p| p.to_string()),
        children: issue.children.iter().map(|c| c.to_string()).collect(),
        tasks: issue.progress.tasks.map(|p| (p.done, p.total)),
        children_done: issue.progress.children.map(|p| (p.done, p.total)),
        sequence: issue.sequence,
        created: when(&issue.created_at),
        updated: when(&issue.updated_at),
    };
    let title = format!("{} {}", facts.key, facts.title);
    Ok(page(
        StatusCode::OK,
        &IssuePage {
            chrome: chrome(&title, h, ""),
            i: facts,
            statuses: statuses(),
            description,
            documents,
            timeline: timeline.into_iter().map(|(_, e)| e).collect(),
            people: people(&st).await,
            sessions,
        },
    ))
}

fn ask_entry(a: &AskView, replies: Vec<CommentEntry>) -> AskEntry {
    let label = |id: &str| {
        a.options
            .iter()
            .find(|o| o.id == id)
            .map(|o| o.label.clone())
            .unwrap_or_else(|| id.to_owned())
    };
    AskEntry {
        id: a.id.clone(),
        by: actor_text(&a.author),
        at: when(&a.created_at),
        question: a.question.clone(),
        options: a.options.iter().map(|o| o.label.clone()).collect(),
        state: ask_state(a.state),
        open: a.state == AskState::Open,
        answer: a.answer.as_ref().map(|ans| {
            let mut parts: Vec<String> = ans.options.iter().map(|o| label(o)).collect();
            if let Some(t) = ans.text.as_deref().filter(|t| !t.is_empty()) {
                parts.push(t.to_owned());
            }
            parts.join(" — ")
        }),
        answered_by: a
            .answer
            .as_ref()
            .map(|ans| {
                format!(
                    "{} at {}",
                    actor_text(&ans.by),
                    ans.at.format(crate::html::TIME_FORMAT)
                )
            })
            .unwrap_or_default(),
        closed: a.closed.as_ref().map(|c| {
            format!(
                "{} by {}{}",
                ask_state(a.state),
                actor_text(&c.by),
                c.note
                    .as_deref()
                    .map(|n| format!(": {n}"))
                    .unwrap_or_default()
            )
        }),
        replies,
    }
}
