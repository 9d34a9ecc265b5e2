//! An issue created (native, or imported from the code host), read, resolved from a ref,
//! and listed (pages of views or rows, a board's counts).

use super::*;
use crate::work::asks::AskView;
use crate::work::delivery::HostError;
use crate::work::documents::PrimaryDocument;
use crate::work::{
    CodeRef, Issue, IssueCursor, IssueFilter, IssueListQuery, IssueProgress, IssueRow,
    IssueRowPage, IssueView, Progress, RouteFilter, RouteStatus,
};

impl Issues<'_> {
    /// The answer for an issue: its children, primary document and progress read in the same
    /// transaction.
    pub(super) async fn view(&self, tx: &mut dyn WorkTx, issue: Issue) -> Result<IssueView, Error> {
        let children = tx.issues().children(&issue.key).await?;
        let asks = tx
            .asks()
            .open_asks_of(std::slice::from_ref(&issue.key))
            .await?;
        let asks = asks.into_iter().map(AskView::listed).collect();
        let primary = tx
            .documents()
            .primary_documents(std::slice::from_ref(&issue.key))
            .await?
            .pop()
            .map(|(_, d)| d);
        let roles = self.console.messages().live_roles_in(tx).await?;
        Ok(self.view_with(issue, children, asks, primary, &roles))
    }

    /// The answer for an issue whose children, open asks and primary document were read
    /// already.
    fn view_with(
        &self,
        issue: Issue,
        children: Vec<(IssueKey, Status)>,
        open_asks: Vec<AskView>,
        primary: Option<PrimaryDocument>,
        live_roles: &[String],
    ) -> IssueView {
        let done = children.iter().filter(|(_, s)| !s.is_open()).count() as i64;
        let progress = IssueProgress {
            tasks: primary
                .as_ref()
                .filter(|d| d.tasks.1 > 0)
                .map(|d| Progress {
                    done: d.tasks.0,
                    total: d.tasks.1,
                }),
            children: (!children.is_empty()).then_some(Progress {
                done,
                total: children.len() as i64,
            }),
        };
        let route_status = self.route_status(&issue, live_roles);
        IssueView {
            route_status,
            progress,
            open_asks,
            primary_document: primary.map(|d| json!({ "id": d.id, "slug": d.slug })),
            children: children.into_iter().map(|(k, _)| k).collect(),
            key: issue.key,
            project: issue.project,
            title: issue.title,
            status: issue.status,
            priority: issue.priority,
            labels: issue.labels,
            route: issue.route,
            parent: issue.parent,
            rank: issue.rank,
            assignee: issue.assignee,
            components: issue.components,
            claim: issue.claim,
            repo: issue.repo,
            sequence: issue.sequence,
            created_at: issue.created_at,
            updated_at: issue.updated_at,
            closed_at: issue.closed_at,
        }
    }

    fn route_status(&self, issue: &Issue, live_roles: &[String]) -> Option<RouteStatus> {
        if !issue.status.is_open() {
            return None;
        }
        Some(match &issue.route {
            None => RouteStatus::Unknown,
            Some(r) if live_roles.contains(r) => RouteStatus::Live,
            Some(_) => RouteStatus::NoHolder,
        })
    }

    /// Creates an issue, native or imported from `owner/repo#n` ([`Console::import_issue`]).
    /// The assignee defaults to the creating person, a personal token's owner, or the
    /// parent's assignee. The answer says whether it is new (an import of a ref imported
    /// already answers the original).
    pub async fn create_issue(
        &self,
        actor: &Actor,
        new: NewIssue,
    ) -> Result<(IssueView, bool), Error> {
        if new.reference.is_some() {
            return self.import_issue(actor, new).await;
        }
        let project = new
            .project
            .as_deref()
            .and_then(ProjectKey::parse)
            .ok_or_else(|| {
                Error::with_message(ErrorCode::INVALID_PROJECT, "`project` is a project key")
            })?;
        self.insert_issue(actor, new, project, None).await
    }

    /// Imports an issue or pull request from the code host: its title from there, `done`
    /// when it is closed there (unless `status` says otherwise), the project given or the
    /// repository's mapping's. A ref imported already answers its issue, unchanged.
    async fn import_issue(&self, actor: &Actor, new: NewIssue) -> Result<(IssueView, bool), Error> {
        let r = new.reference.as_deref().unwrap_or_default();
        let r = CodeRef::parse(r).ok_or_else(|| invalid("`ref` is owner/repo#n"))?;
        if new.title.is_some() {
            return Err(invalid("an imported issue's title comes from its `ref`"));
        }
        let repo = r.to_string();
        {
            let mut tx = self.console.parts.storage.read().await?;
            let imported = tx.issues().issue_by_repo(&repo).await?;
            if let Some(i) = imported {
                return Ok((self.view(&mut *tx, i).await?, false));
            }
        }
        let project = match new.project.as_deref() {
            Some(p) => ProjectKey::parse(p).ok_or_else(|| {
                Error::with_message(ErrorCode::INVALID_PROJECT, "`project` is a project key")
            })?,
            None => {
                let mut tx = self.console.parts.storage.read().await?;
                tx.projects()
                    .mapping(&r.repo)
                    .await?
                    .map(|m| m.project)
                    .ok_or_else(|| {
                        Error::with_message(
                            ErrorCode::INVALID_PROJECT,
                            "no `project` given, and the repository is mapped to none",
                        )
                    })?
            }
        };
        let number = i64::try_from(r.number).map_err(|_| invalid("`ref` is owner/repo#n"))?;
        let hosted = self
            .console
            .host_session(ErrorCode::SOURCE_ACCESS)
            .await?
            .issue(r.repo.as_str(), number)
            .await
            .map_err(|e| match e {
                HostError::NoAccess(m) => Error::with_message(ErrorCode::SOURCE_ACCESS, m),
                HostError::NotFound => {
                    Error::with_message(ErrorCode::NOT_FOUND, format!("the code host has no {r}"))
                }
                HostError::Unavailable(m) => {
                    Error::with_message(ErrorCode::CODE_HOST_UNAVAILABLE, m)
                }
            })?;
        let mut new = new;
        if new.status.is_none() && hosted.state == "closed" {
            new.status = Some(Status::Done);
        }
        // A title longer than ours is cut, not refused: it is the code host's.
        new.title = Some(hosted.title.chars().take(TITLE_MAX).collect());
        self.insert_issue(actor, new, project, Some(repo)).await
    }

    /// Inserts a new issue (native, or imported from `repo`); false with the issue already
    /// imported from `repo`.
    async fn insert_issue(
        &self,
        actor: &Actor,
        new: NewIssue,
        project: ProjectKey,
        repo: Option<String>,
    ) -> Result<(IssueView, bool), Error> {
        let c = self.checked(new).await?;
        let (view, created) = transact!(self.console, |tx| {
            // Two imports of one ref at once: the second finds the first's.
            let imported = match &repo {
                Some(r) => tx.issues().issue_by_repo(r).await?,
                None => None,
            };
            if let Some(i) = imported {
                return Ok((self.view(tx, i).await?, false));
            }
            let issue = self
                .new_issue(tx, actor, &c, &project, repo.clone())
                .await?;
            tx.issues().insert_issue(&issue).await?;
            // A new issue has no children, asks or documents yet; the live roles matter only
            // to an open issue with a route (each statement here holds the write lock).
            let roles = if issue.route.is_some() && issue.status.is_open() {
                self.console.messages().live_roles_in(tx).await?
            } else {
                Vec::new()
            };
            let view = self.view_with(issue, Vec::new(), Vec::new(), None, &roles);
            self.console
                .append(
                    tx,
                    "issue.created",
                    actor,
                    Some(&view.project),
                    Some((&view.key, 1)),
                    json!(view),
                )
                .await?;
            Ok((view, true))
        })?;
        if created {
            tracing::info!(issue = %view.key, "issue created");
        }
        Ok((view, created))
    }

    /// A new issue's fields checked, before its transaction (the assignee named must have
    /// signed in).
    async fn checked(&self, new: NewIssue) -> Result<CheckedIssue, Error> {
        Ok(CheckedIssue {
            title: check_title(new.title.as_deref().unwrap_or(""))?,
            labels: check_labels(&new.labels)?,
            priority: check_priority(new.priority)?,
            route: check_route(new.route)?,
            components: check_components(new.components.unwrap_or_default())?,
            parent: match new.parent.as_deref() {
                None => None,
                Some(p) => {
                    Some(IssueKey::parse(p).ok_or_else(|| invalid("`parent` is an issue key"))?)
                }
            },
            assignee: match new.assignee.as_deref() {
                Some(a) => Some(self.console.assignee(a).await?),
                None => None,
            },
            status: new.status.unwrap_or(Status::Todo),
            rank: new.rank,
            at: self.console.now(),
        })
    }

    /// The new issue, in the transaction that inserts it: the project's next number, its
    /// parent, its assignee (the one named, else the creating person, a personal token's
    /// owner, or the parent's) and its rank (where placed, else after every other issue).
    async fn new_issue(
        &self,
        tx: &mut dyn WorkTx,
        actor: &Actor,
        c: &CheckedIssue,
        project: &ProjectKey,
        repo: Option<String>,
    ) -> Result<Issue, Error> {
        let Some((number, last_rank)) = tx.projects().take_issue_number(project).await? else {
            return Err(Error::with_message(
                ErrorCode::INVALID_PROJECT,
                "no project has this key",
            ));
        };
        let parent_issue = match &c.parent {
            None => None,
            Some(p) => Some(
                tx.issues()
                    .issue(p)
                    .await?
                    .ok_or_else(|| invalid("no issue has the `parent` key"))?,
            ),
        };
        let assignee = c.assignee.clone().or_else(|| match actor {
            Actor::User { login } => Some(login.clone()),
            Actor::Agent { owner: Some(o), .. } => Some(o.clone()),
            _ => parent_issue.as_ref().and_then(|p| p.assignee.clone()),
        });
        let rank = match &c.rank {
            // After every other issue: the number's rank, unless a placement went past it.
            None => {
                let by_number = rank_of_number(number);
                match last_rank {
                    Some(last) if last >= by_number => rank_between(Some(&last), None),
                    _ => by_number,
                }
            }
            Some(at) => self.rank_at(tx, at).await?,
        };
        let now = c.at;
        Ok(Issue {
            key: IssueKey::new(project, number),
            project: project.clone(),
            title: c.title.clone(),
            status: c.status,
            priority: c.priority,
            labels: c.labels.clone(),
            route: c.route.clone(),
            parent: c.parent.clone(),
            rank,
            assignee,
            components: c.components.clone(),
            claim: None,
            repo,
            sequence: 1,
            created_at: now,
            updated_at: now,
            closed_at: (!c.status.is_open()).then_some(now),
        })
    }

    /// The rank just before or after another issue of the same project.
    pub(super) async fn rank_at(&self, tx: &mut dyn WorkTx, at: &RankAt) -> Result<String, Error> {
        let (key, before) = match at {
            RankAt::Before(k) => (k, true),
            RankAt::After(k) => (k, false),
        };
        let key = IssueKey::parse(key).ok_or_else(|| invalid("`rank` names an issue key"))?;
        let other = tx
            .issues()
            .issue(&key)
            .await?
            .ok_or_else(|| invalid("`rank` names no issue"))?;
        Ok(if before {
            let lo = tx.issues().rank_before(&key).await?;
            rank_between(lo.as_deref(), Some(&other.rank))
        } else {
            let hi = tx.issues().rank_after(&key).await?;
            rank_between(Some(&other.rank), hi.as_deref())
        })
    }

    pub async fn issue(&self, key: &str) -> Result<IssueView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.console.parts.storage.read().await?;
        let issue = tx
            .issues()
            .issue(&key)
            .await?
            .ok_or_else(|| not_found("issue"))?;
        self.view(&mut *tx, issue).await
    }

    /// `?ref=`: an issue key, or the `owner/repo#n` an issue was imported from (it must
    /// exist).
    pub async fn resolve(&self, r: &str) -> Result<IssueKey, Error> {
        if let Some(c) = CodeRef::parse(r) {
            let mut tx = self.console.parts.storage.read().await?;
            return tx
                .issues()
                .issue_by_repo(&c.to_string())
                .await?
                .map(|i| i.key)
                .ok_or_else(|| not_found("issue imported from this ref"));
        }
        Ok(self.issue(r).await?.key)
    }

    /// The issues a filter selects, and how many in all. `route_status` is resolved against
    /// the live sessions' roles before the query.
    pub async fn list(
        &self,
        mut filter: IssueFilter,
        route_status: Option<RouteStatus>,
    ) -> Result<(Vec<IssueView>, i64), Error> {
        let mut tx = self.console.parts.storage.read().await?;
        let roles = self.console.messages().live_roles_in(&mut *tx).await?;
        filter.route = route_status.map(|s| match s {
            RouteStatus::Live => RouteFilter::In(roles.clone()),
            RouteStatus::NoHolder => RouteFilter::NotIn(roles.clone()),
            RouteStatus::Unknown => RouteFilter::NoRoute,
        });
        let (issues, total) = tx.issues().issues(&filter).await?;
        let keys: Vec<IssueKey> = issues.iter().map(|i| i.key.clone()).collect();
        let mut children: std::collections::HashMap<IssueKey, Vec<(IssueKey, Status)>> =
            Default::default();
        for (parent, child, status) in tx.issues().children_of(&keys).await? {
            children.entry(parent).or_default().push((child, status));
        }
        // The page's open asks in one query, not one per issue.
        let mut asks: std::collections::HashMap<IssueKey, Vec<AskView>> = Default::default();
        for a in tx.asks().open_asks_of(&keys).await? {
            if let Some(k) = a.head.issue.clone() {
                asks.entry(k).or_default().push(AskView::listed(a));
            }
        }
        let mut primary: std::collections::HashMap<IssueKey, PrimaryDocument> = tx
            .documents()
            .primary_documents(&keys)
            .await?
            .into_iter()
            .collect();
        let out = issues
            .into_iter()
            .map(|i| {
                let c = children.remove(&i.key).unwrap_or_default();
                let a = asks.remove(&i.key).unwrap_or_default();
                let d = primary.remove(&i.key);
                self.view_with(i, c, a, d, &roles)
            })
            .collect();
        Ok((out, total))
    }

    /// A page of issue rows for the console's lists ([`IssueListQuery`]): at most the
    /// query's page size, in its order, with each row's children's progress and open asks
    /// (one query each for the page, whatever its size), `next` to resume and the total.
    /// A cursor of another order is INVALID_QUERY.
    pub async fn issue_rows(&self, q: &IssueListQuery) -> Result<IssueRowPage, Error> {
        if q.after.as_ref().is_some_and(|c| c.sort != q.sort) {
            return Err(Error::with_message(
                ErrorCode::INVALID_QUERY,
                "the cursor belongs to another order",
            ));
        }
        let size = q.page_size();
        let mut tx = self.console.parts.storage.read().await?;
        let mut issues = tx.issues().issue_page(q, size + 1).await?;
        let more = issues.len() > size as usize;
        issues.truncate(size as usize);
        let total = tx.issues().issue_page_total(q).await?;
        let keys: Vec<IssueKey> = issues.iter().map(|i| i.key.clone()).collect();
        let mut children: std::collections::HashMap<IssueKey, Progress> = tx
            .issues()
            .child_progress(&keys)
            .await?
            .into_iter()
            .map(|(k, done, total)| (k, Progress { done, total }))
            .collect();
        let mut asks: std::collections::HashMap<IssueKey, i64> = Default::default();
        for a in tx.asks().open_asks_of(&keys).await? {
            if let Some(k) = a.head.issue {
                *asks.entry(k).or_default() += 1;
            }
        }
        let next = if more {
            issues
                .last()
                .map(|i| IssueCursor::after(q.sort, i).encode())
        } else {
            None
        };
        let rows = issues
            .into_iter()
            .map(|issue| IssueRow {
                children: children.remove(&issue.key),
                open_asks: asks.remove(&issue.key).unwrap_or(0),
                issue,
            })
            .collect();
        Ok(IssueRowPage { rows, next, total })
    }

    /// How many issues `q`'s filters select in each status (its `status` filter and cursor
    /// aside), in [`Status::ALL`]'s order, zeros included: a board's column counts.
    pub async fn status_counts(&self, q: &IssueListQuery) -> Result<Vec<(Status, i64)>, Error> {
        let mut tx = self.console.parts.storage.read().await?;
        let counts = tx.issues().status_counts(q).await?;
        Ok(Status::ALL
            .iter()
            .map(|s| {
                let n = counts.iter().find(|(c, _)| c == s).map_or(0, |(_, n)| *n);
                (*s, n)
            })
            .collect())
    }
}

/// A new issue's fields as checked before its transaction.
struct CheckedIssue {
    title: String,
    labels: Vec<String>,
    priority: Option<u8>,
    route: Option<String>,
    components: Components,
    parent: Option<IssueKey>,
    assignee: Option<Login>,
    status: Status,
    rank: Option<RankAt>,
    /// When it is created (read once, before the transaction and its retries).
    at: Time,
}
