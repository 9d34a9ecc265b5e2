//! The issue lists: [`IssueTx::issues`]' filters with a count and an offset page (one
//! label's page answered from the label rows alone), and the console's lists (issue 27):
//! keyset pages whose cursor is a row-value comparison, their totals and a board's counts per
//! status.
//!
//! [`IssueTx::issues`]: countersign_console_core::work::IssueTx::issues

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{
    Issue, IssueAssignee, IssueFilter, IssueListQuery, IssueSort, RouteFilter, Status,
};
use sqlx::Row;

use super::{Args, ISSUE_COLUMNS, IssueStore, corrupt, issue_of};

/// The `WHERE` of the label rows a filter selects: the labels given (`labels`, their
/// placeholders), narrowed by the project and the statuses (`status` and `open` together) the
/// rows carry themselves.
fn label_rows_where(a: &mut Args, f: &IssueFilter, labels: &[String]) -> String {
    let mut w = format!("label IN ({})", labels.join(", "));
    if let Some(p) = &f.project {
        w.push_str(&format!(" AND project = {}", a.push(p.as_str().to_owned())));
    }
    let statuses: Vec<String> = Status::ALL
        .iter()
        .filter(|s| f.status.is_empty() || f.status.contains(s))
        .filter(|s| f.open.is_none_or(|o| s.is_open() == o))
        .map(|s| a.push(s.as_str().to_owned()))
        .collect();
    if statuses.is_empty() {
        w.push_str(" AND 1 = 0");
    } else if statuses.len() < Status::ALL.len() {
        w.push_str(&format!(" AND status IN ({})", statuses.join(", ")));
    }
    w
}

/// The `WHERE` conditions of an issue list query's filters (`with_status`: its status
/// filter too; a board's counts leave it out).
fn list_conds(
    a: &mut Args,
    backend: Backend,
    q: &IssueListQuery,
    with_status: bool,
) -> Vec<String> {
    let mut conds: Vec<String> = Vec::new();
    if let Some(p) = &q.project {
        conds.push(format!("project = {}", a.push(p.as_str().to_owned())));
    }
    if with_status && !q.status.is_empty() {
        let list: Vec<&str> = q.status.iter().map(|s| s.as_str()).collect();
        conds.push(format!("status IN {}", a.list(backend, &list)));
    }
    match &q.assignee {
        None => {}
        Some(IssueAssignee::Person(l)) => {
            conds.push(format!("assignee = {}", a.push(l.as_str().to_owned())))
        }
        Some(IssueAssignee::Nobody) => conds.push("assignee IS NULL".into()),
    }
    if !q.priority.is_empty() {
        let vals: Vec<i64> = q.priority.iter().flatten().map(|p| i64::from(*p)).collect();
        let mut alts: Vec<String> = Vec::new();
        if !vals.is_empty() {
            alts.push(format!("priority IN {}", a.int_list(backend, &vals)));
        }
        if q.priority.iter().any(Option::is_none) {
            alts.push("priority IS NULL".into());
        }
        conds.push(format!("({})", alts.join(" OR ")));
    }
    if !q.labels.is_empty() {
        let list = a.list(backend, &q.labels);
        conds.push(format!(
            "key IN (SELECT issue FROM console_issue_labels WHERE label IN {list})"
        ));
    }
    if let Some(open) = q.open {
        conds.push(format!("is_open = {}", a.push(i64::from(open))));
    }
    conds
}

/// An issue list's order: the sort expression and its direction (the project and number
/// follow it in the same direction).
fn list_order(sort: IssueSort) -> (&'static str, &'static str) {
    match sort {
        IssueSort::Rank => ("rank", "ASC"),
        IssueSort::Updated => ("updated_at", "DESC"),
        IssueSort::Created => ("created_at", "DESC"),
        IssueSort::Priority => ("COALESCE(priority, 4)", "ASC"),
    }
}

/// ` WHERE` and the conditions joined by `AND`, or nothing when there are none.
fn where_clause(conds: &[String]) -> String {
    if conds.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", conds.join(" AND "))
    }
}

/// The one label and the page size of a filter the label rows answer alone: a page of one
/// label within a project and statuses, with no other filter.
fn one_label_page(f: &IssueFilter) -> Option<(&String, u32)> {
    match (f.labels.as_slice(), f.limit) {
        ([label], Some(limit))
            if f.parent.is_none()
                && f.priority.is_empty()
                && f.updated_since.is_none()
                && f.pinned_by.is_none()
                && f.route.is_none() =>
        {
            Some((label, limit))
        }
        _ => None,
    }
}

/// The `WHERE` conditions of an [`IssueFilter`], their values pushed to `a`.
fn filter_conds(a: &mut Args, f: &IssueFilter) -> Vec<String> {
    let mut conds: Vec<String> = Vec::new();
    if let Some(p) = &f.project {
        conds.push(format!("project = {}", a.push(p.as_str().to_owned())));
    }
    if !f.status.is_empty() {
        let list: Vec<String> = f
            .status
            .iter()
            .map(|s| a.push(s.as_str().to_owned()))
            .collect();
        conds.push(format!("status IN ({})", list.join(", ")));
    }
    if let Some(p) = &f.parent {
        conds.push(format!("parent = {}", a.push(p.as_str().to_owned())));
    }
    if !f.labels.is_empty() {
        // The label rows narrowed by the project and statuses they carry themselves.
        let list: Vec<String> = f.labels.iter().map(|l| a.push(l.clone())).collect();
        let sub = label_rows_where(a, f, &list);
        conds.push(format!(
            "key IN (SELECT issue FROM console_issue_labels WHERE {sub})"
        ));
    }
    if !f.priority.is_empty() {
        conds.push(priority_cond(a, &f.priority));
    }
    if let Some(open) = f.open {
        conds.push(format!("is_open = {}", a.push(i64::from(open))));
    }
    if let Some(t) = &f.updated_since {
        conds.push(format!("updated_at >= {}", a.push(ms(t))));
    }
    if let Some(l) = &f.pinned_by {
        conds.push(format!(
            "key IN (SELECT issue FROM console_read_state WHERE pinned = 1 AND login = {})",
            a.push(l.as_str().to_owned())
        ));
    }
    if let Some(route) = &f.route {
        conds.push(route_cond(a, route));
    }
    conds
}

/// The condition of a filter's priorities (`None`: no priority), each bound on its own.
fn priority_cond(a: &mut Args, priority: &[Option<u8>]) -> String {
    let mut alts: Vec<String> = Vec::new();
    let vals: Vec<String> = priority
        .iter()
        .flatten()
        .map(|p| a.push(i64::from(*p)))
        .collect();
    if !vals.is_empty() {
        alts.push(format!("priority IN ({})", vals.join(", ")));
    }
    if priority.iter().any(Option::is_none) {
        alts.push("priority IS NULL".into());
    }
    format!("({})", alts.join(" OR "))
}

/// The condition of a filter's route.
fn route_cond(a: &mut Args, route: &RouteFilter) -> String {
    match route {
        RouteFilter::NoRoute => "is_open = 1 AND route IS NULL".into(),
        RouteFilter::In(roles) if roles.is_empty() => "1 = 0".into(),
        RouteFilter::In(roles) => {
            let list: Vec<String> = roles.iter().map(|r| a.push(r.clone())).collect();
            format!("is_open = 1 AND route IN ({})", list.join(", "))
        }
        RouteFilter::NotIn(roles) if roles.is_empty() => "is_open = 1 AND route IS NOT NULL".into(),
        RouteFilter::NotIn(roles) => {
            let list: Vec<String> = roles.iter().map(|r| a.push(r.clone())).collect();
            format!(
                "is_open = 1 AND route IS NOT NULL AND route NOT IN ({})",
                list.join(", ")
            )
        }
    }
}

impl IssueStore<'_> {
    /// [`IssueTx::issues`](countersign_console_core::work::IssueTx::issues): the filter's page
    /// (all of them with no limit) and how many match in all.
    pub(super) async fn filtered_issues(
        &mut self,
        f: &IssueFilter,
    ) -> Result<(Vec<Issue>, i64), StorageError> {
        if let Some((label, limit)) = one_label_page(f) {
            return self.label_page(f, label, limit).await;
        }
        let mut a = Args::default();
        let filter = where_clause(&filter_conds(&mut a, f));
        // The total first, with the same arguments (a second copy: the page adds two).
        let count_sql = format!("SELECT COUNT(*) AS n FROM console_issues{filter}");
        let total: i64 = sqlx::query_with(&count_sql, a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        let page = match f.limit {
            Some(limit) => {
                let l = a.push(i64::from(limit));
                let o = a.push(i64::from(f.offset));
                format!(" LIMIT {l} OFFSET {o}")
            }
            None => String::new(),
        };
        let sql = format!(
            "SELECT {ISSUE_COLUMNS} FROM console_issues{filter} ORDER BY project, rank, number{page}"
        );
        let rows = sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        let issues = rows.iter().map(issue_of).collect::<Result<Vec<_>, _>>()?;
        Ok((issues, total))
    }

    /// A page of one label ([`one_label_page`]): the label rows answer the count and the
    /// page's keys from one index range, without reading an issue not shown.
    async fn label_page(
        &mut self,
        f: &IssueFilter,
        label: &str,
        limit: u32,
    ) -> Result<(Vec<Issue>, i64), StorageError> {
        let mut a = Args::default();
        let l = a.push(label.to_owned());
        let sub = label_rows_where(&mut a, f, &[l]);
        let total: i64 = sqlx::query_with(
            &format!("SELECT COUNT(*) AS n FROM console_issue_labels WHERE {sub}"),
            a.build(),
        )
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("n")
        .map_err(db_err)?;
        let (l, o) = (a.push(i64::from(limit)), a.push(i64::from(f.offset)));
        let rows = sqlx::query_with(
            &format!(
                "SELECT {ISSUE_COLUMNS} FROM console_issues WHERE key IN \
                 (SELECT issue FROM console_issue_labels WHERE {sub} \
                  ORDER BY project, rank, number LIMIT {l} OFFSET {o}) \
                 ORDER BY project, rank, number"
            ),
            a.build(),
        )
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        let issues = rows.iter().map(issue_of).collect::<Result<Vec<_>, _>>()?;
        Ok((issues, total))
    }

    /// [`IssueTx::issue_page`](countersign_console_core::work::IssueTx::issue_page): a keyset
    /// page of a list, after its cursor.
    pub(super) async fn keyset_page(
        &mut self,
        q: &IssueListQuery,
        limit: u32,
    ) -> Result<Vec<Issue>, StorageError> {
        let mut a = Args::default();
        let mut conds = list_conds(&mut a, self.backend, q, true);
        let (expr, dir) = list_order(q.sort);
        // The rank order is within a project: a list across projects goes project by
        // project; the other orders put the project after the sort value.
        let cols: [&str; 3] = if q.sort == IssueSort::Rank {
            ["project", expr, "number"]
        } else {
            [expr, "project", "number"]
        };
        if let Some(after) = after_cursor(&mut a, q, &cols, dir) {
            conds.push(after);
        }
        let filter = where_clause(&conds);
        let order = cols
            .iter()
            .map(|c| format!("{c} {dir}"))
            .collect::<Vec<_>>()
            .join(", ");
        let l = a.push(i64::from(limit));
        let sql = format!(
            "SELECT {ISSUE_COLUMNS} FROM console_issues{filter} ORDER BY {order} LIMIT {l}"
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(issue_of)
            .collect()
    }

    /// [`IssueTx::issue_page_total`](countersign_console_core::work::IssueTx::issue_page_total).
    pub(super) async fn keyset_total(&mut self, q: &IssueListQuery) -> Result<i64, StorageError> {
        let mut a = Args::default();
        let filter = where_clause(&list_conds(&mut a, self.backend, q, true));
        sqlx::query_with(
            &format!("SELECT COUNT(*) AS n FROM console_issues{filter}"),
            a.build(),
        )
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("n")
        .map_err(db_err)
    }

    /// [`IssueTx::status_counts`](countersign_console_core::work::IssueTx::status_counts): a
    /// list's count in each status, its own status filter left out.
    pub(super) async fn counts_by_status(
        &mut self,
        q: &IssueListQuery,
    ) -> Result<Vec<(Status, i64)>, StorageError> {
        let mut a = Args::default();
        let filter = where_clause(&list_conds(&mut a, self.backend, q, false));
        sqlx::query_with(
            &format!("SELECT status, COUNT(*) AS n FROM console_issues{filter} GROUP BY status"),
            a.build(),
        )
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            let s: String = r.try_get("status").map_err(db_err)?;
            Ok((
                Status::parse(&s).ok_or_else(|| corrupt("status"))?,
                r.try_get("n").map_err(db_err)?,
            ))
        })
        .collect()
    }
}

/// The keyset condition of a list's cursor: the row value of the order's columns `cols` past
/// the cursor's in the order's direction `dir`.
fn after_cursor(a: &mut Args, q: &IssueListQuery, cols: &[&str; 3], dir: &str) -> Option<String> {
    let c = q.after.as_ref()?;
    let v = match q.sort {
        IssueSort::Rank => a.push(c.value.clone()),
        _ => a.push(c.value.parse::<i64>().unwrap_or(0)),
    };
    let p = a.push(c.project.as_str().to_owned());
    let n = a.push(c.number);
    let cmp = if dir == "ASC" { ">" } else { "<" };
    let vals = if q.sort == IssueSort::Rank {
        format!("{p}, {v}, {n}")
    } else {
        format!("{v}, {p}, {n}")
    };
    Some(format!("({}) {cmp} ({vals})", cols.join(", ")))
}
