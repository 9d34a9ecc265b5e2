//! The work pages (issue 27): projects (list, create), a project's issues (paged list with
//! filters and sorting, or a board by status; create), the person's own issues, and the issue
//! page as the conversation (`issue.rs`): its fields edited in place, claim and release, its
//! description with task progress, and one timeline of comments (with replies), asks (with
//! their answers), messages, reviews and its history in words, all live. Every control calls
//! the JSON API (the contract at the top of `assets/console.js`); these handlers only read.

use std::collections::HashMap;

use askama::Template;
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use countersign_console_core::Caller;
use countersign_console_core::Login;
use countersign_console_core::work::{
    IssueAssignee, IssueCursor, IssueListQuery, IssueSort, ProjectKey, Status,
};

use super::{PageError, PageResult, St, chrome, human, page};

pub mod issue;

use crate::html::{Chrome, When, actor_text, when};
pub use issue::issue_page;

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
