//! The work core's operations: projects, issues, claims and the event log. Each write runs in
//! one transaction ([`transact!`]), retried on a storage conflict, and appends its event in that
//! transaction; after the commit the new event id wakes the event streams.

use serde::Deserialize;
use serde_json::{Value, json};

use super::*;
use crate::work::EventTx;
use crate::work::asks::AskView;
use crate::work::delivery::HostError;
use crate::work::documents::PrimaryDocument;
use crate::work::rules::{self, NameProblem};
use crate::work::{
    Actor, Claim, CodeRef, Components, ComponentsMode, Event, EventPage, Issue, IssueCursor,
    IssueFilter, IssueKey, IssueListQuery, IssueProgress, IssueRow, IssueRowPage, IssueView,
    NewEvent, Progress, Project, ProjectKey, ReadState, RouteFilter, RouteStatus, SearchKind,
    SearchPage, Status, Subscriber, WorkTx, search,
};

/// The session links this console replica holds (protocol §4.2). Which sessions are live is
/// shared by every replica through the storage (`console/messages/presence.rs`); this is the
/// way to the links themselves.
pub trait Presence: Send + Sync + std::fmt::Debug {
    /// This replica's id (random per process): the live-session rows it writes.
    fn replica(&self) -> &str;
    /// Hands a delivery to the session's link on this replica (the `deliver` frame); false
    /// when none here takes it.
    fn deliver(&self, d: &crate::work::messages::Delivery) -> bool;
}

/// A console ref (protocol §5): `countersign://issue/KEY`, ….
pub fn console_ref(kind: SearchKind, id: &str) -> String {
    let k = match kind {
        SearchKind::Issue => "issue",
        SearchKind::Document => "artifact",
        SearchKind::Ask => "ask",
        SearchKind::Comment => "comment",
        SearchKind::Message => "message",
    };
    format!("countersign://{k}/{id}")
}

/// How many of the newest issues sharing a word with a new one `advice.suggestions` scores.
pub const SIMILAR_CANDIDATES: u32 = 50;
/// How many of a new issue's rarest words draw those candidates.
pub const SIMILAR_DRAWN_BY: usize = 3;
/// How long `advice.suggestions` keeps a word's count, and the number of issues.
const WORD_COUNTS_FOR: chrono::Duration = chrono::Duration::seconds(60);
/// Words whose counts are kept at most; past it the kept counts start afresh.
const WORD_COUNTS_KEPT: usize = 4096;

/// The word counts `advice.suggestions` weighs words by (how many issues hold each, and how
/// many issues there are), each kept [`WORD_COUNTS_FOR`]: a weight a minute old ranks near
/// enough, and reading a common word's count reads its whole posting list.
#[derive(Debug, Default)]
pub(super) struct WordCounts {
    kept: std::sync::Mutex<KeptCounts>,
}

#[derive(Debug, Default)]
struct KeptCounts {
    words: HashMap<String, (i64, Time)>,
    total: Option<(i64, Time)>,
}

impl WordCounts {
    /// The counts kept and fresh at `now` (`None` where not), the total if fresh, and the
    /// indexes of the words to read.
    fn lookup(&self, words: &[String], now: Time) -> (Vec<Option<i64>>, Option<i64>, Vec<usize>) {
        let fresh = |at: &Time| *at <= now && now - *at < WORD_COUNTS_FOR;
        let kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        // A count of one or none is read again: the issue being advised holds each of its
        // words, so such a count says no other issue held the word, and that changes with the
        // next issue that does (the match that matters most). A rare word is cheap to count.
        let counts: Vec<Option<i64>> = words
            .iter()
            .map(|w| {
                kept.words
                    .get(w)
                    .filter(|(n, at)| *n > 1 && fresh(at))
                    .map(|(n, _)| *n)
            })
            .collect();
        let missing = counts
            .iter()
            .enumerate()
            .filter(|(_, c)| c.is_none())
            .map(|(i, _)| i)
            .collect();
        let total = kept.total.filter(|(_, at)| fresh(at)).map(|(n, _)| n);
        (counts, total, missing)
    }

    /// Keeps the counts read, and the number of issues when it was read.
    fn keep(&self, words: &[String], counts: &[i64], total: Option<i64>, now: Time) {
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        if kept.words.len() + words.len() > WORD_COUNTS_KEPT {
            kept.words.clear();
        }
        for (w, n) in words.iter().zip(counts) {
            kept.words.insert(w.clone(), (*n, now));
        }
        if let Some(total) = total {
            kept.total = Some((total, now));
        }
    }
}

/// One of `advice.suggestions` on a new issue.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Suggestion {
    #[serde(rename = "ref")]
    pub reference: String,
    pub title: String,
}

/// Caps of protocol §2.
const TITLE_MAX: usize = 1000;
const LABEL_MAX: usize = 64;
const LABELS_MAX: usize = 50;

/// `Some(x)` for a present field, `Some(None)` for `null` (PATCH: absent = unchanged, `null`
/// clears).
fn present<'de, T: Deserialize<'de>, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Where an issue goes among its project's issues.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum RankAt {
    Before(String),
    After(String),
}

/// A new native issue (protocol §6.1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewIssue {
    /// An issue to import: `owner/repo#n` (its title comes from the code host).
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub project: Option<String>,
    pub title: Option<String>,
    pub status: Option<Status>,
    pub priority: Option<u8>,
    #[serde(default)]
    pub labels: Vec<String>,
    pub route: Option<String>,
    pub parent: Option<String>,
    pub rank: Option<RankAt>,
    pub assignee: Option<String>,
    pub components: Option<Components>,
    /// The session a bearer acts for (read by the HTTP layer).
    pub actor: Option<String>,
}

/// An issue update: absent fields stay, `null` clears (protocol §1.2, §6.1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuePatch {
    pub title: Option<String>,
    pub status: Option<Status>,
    #[serde(default, deserialize_with = "present")]
    pub priority: Option<Option<u8>>,
    pub labels: Option<Vec<String>>,
    pub labels_add: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    pub route: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub parent: Option<Option<String>>,
    pub rank: Option<RankAt>,
    #[serde(default, deserialize_with = "present")]
    pub assignee: Option<Option<String>>,
    pub components: Option<Components>,
    pub expected_sequence: Option<i64>,
    pub actor: Option<String>,
}

pub(super) fn invalid(message: impl Into<String>) -> Error {
    Error::with_message(ErrorCode::INVALID_BODY, message)
}

pub(super) fn not_found(what: &str) -> Error {
    Error::with_message(ErrorCode::NOT_FOUND, format!("no such {what}"))
}

/// A role name (a session's `roles`, an issue's `route`): `^[a-z][a-z0-9._-]{0,63}$`.
pub fn is_role(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=64).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

fn check_title(t: &str) -> Result<String, Error> {
    let t = t.trim();
    if t.is_empty() || t.chars().any(char::is_control) {
        return Err(invalid(
            "a title has a visible character and no control character",
        ));
    }
    if rules::chars(t) > TITLE_MAX {
        return Err(Error::with_message(
            ErrorCode::CAP_EXCEEDED,
            "a title is at most 1000 characters",
        ));
    }
    Ok(t.to_owned())
}

fn check_labels(labels: &[String]) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = Vec::new();
    for l in labels {
        let l = l.trim();
        if l.is_empty() || l.chars().any(char::is_control) {
            return Err(invalid(
                "a label has a visible character and no control character",
            ));
        }
        if rules::chars(l) > LABEL_MAX {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "a label is at most 64 characters",
            ));
        }
        if !out.iter().any(|o| o == l) {
            out.push(l.to_owned());
        }
    }
    if out.len() > LABELS_MAX {
        return Err(Error::with_message(
            ErrorCode::CAP_EXCEEDED,
            "an issue holds at most 50 labels",
        ));
    }
    Ok(out)
}

fn check_priority(p: Option<u8>) -> Result<Option<u8>, Error> {
    match p {
        Some(p) if p > 3 => Err(invalid("priority is 0 to 3, or null")),
        p => Ok(p),
    }
}

fn check_route(r: Option<String>) -> Result<Option<String>, Error> {
    match r {
        Some(r) if !is_role(&r) => Err(invalid("a route is a role name: ^[a-z][a-z0-9._-]{0,63}$")),
        r => Ok(r),
    }
}

fn check_components(c: Components) -> Result<Components, Error> {
    let ok = match c.mode {
        ComponentsMode::Explicit => !c.ids.is_empty(),
        ComponentsMode::Inherit | ComponentsMode::None => c.ids.is_empty(),
    };
    if !ok || c.ids.iter().any(|i| i.is_empty() || i.len() > 253) {
        return Err(invalid(
            "components: `explicit` names ids; `inherit` and `none` name none",
        ));
    }
    Ok(c)
}

/// The rank a new issue gets from its number: seven base-25 digits `b`..`z`, so ranks of issues
/// created one after another grow in order without growing in length (midpoints after the
/// last rank would add a character every few issues). Never ends in `a`.
pub fn rank_of_number(number: i64) -> String {
    let mut n = number.max(0) as u64;
    let mut out = [b'b'; 7];
    for d in out.iter_mut().rev() {
        *d = b'b' + (n % 25) as u8;
        n /= 25;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A rank strictly between `lo` and `hi` (either open), over `a`..`z`, ordered bytewise
/// (fractional indexing). A rank never ends in `a`, so there is always room below it.
pub fn rank_between(lo: Option<&str>, hi: Option<&str>) -> String {
    const BELOW: u8 = b'a' - 1;
    const ABOVE: u8 = b'z' + 1;
    let lo = lo.unwrap_or("").as_bytes();
    let mut hi = hi.map(str::as_bytes);
    let mut out = Vec::new();
    for i in 0..1024 {
        let a = lo.get(i).copied().unwrap_or(BELOW);
        let b = match hi {
            Some(h) => match h.get(i) {
                Some(&b) => b,
                // `hi` is not above `lo` (bad input): only `lo` bounds.
                None => {
                    hi = None;
                    ABOVE
                }
            },
            None => ABOVE,
        };
        if b > a + 1 {
            let mid = a + (b - a) / 2;
            if mid > b'a' {
                out.push(mid);
                break;
            }
            out.push(b'a');
            hi = None;
        } else if a == b {
            out.push(a);
        } else if a == BELOW {
            out.push(b);
        } else {
            out.push(a);
            hi = None;
        }
    }
    String::from_utf8(out).unwrap_or_default()
}

impl Console {
    /// Wakes event streams: events up to `id` are committed.
    pub fn event_committed(&self, id: i64) {
        self.committed.send_if_modified(|c| {
            if id > *c {
                *c = id;
                true
            } else {
                false
            }
        });
    }

    /// A receiver that changes whenever events are committed.
    pub fn events_watch(&self) -> tokio::sync::watch::Receiver<i64> {
        self.committed.subscribe()
    }

    pub(super) async fn append(
        &self,
        tx: &mut dyn EventTx,
        kind: &'static str,
        actor: &Actor,
        project: Option<&ProjectKey>,
        issue: Option<(&IssueKey, i64)>,
        data: Value,
    ) -> Result<Event, Error> {
        let e = NewEvent {
            kind,
            at: self.now(),
            actor: actor.clone(),
            project: project.cloned(),
            issue: issue.map(|(k, _)| k.clone()),
            artifact: None,
            session: actor.session().map(str::to_owned),
            data,
        };
        Ok(tx.append_event(&e, issue.map(|(_, s)| s)).await?)
    }

    // ----- projects -----

    pub async fn projects(&self) -> Result<Vec<Project>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.projects().await?)
    }

    /// Creates a project: INVALID_PROJECT for a bad key or name, CAP_EXCEEDED for a name over
    /// 80 characters, PROJECT_EXISTS for a key taken.
    pub async fn create_project(
        &self,
        actor: &Actor,
        key: &str,
        name: &str,
    ) -> Result<Project, Error> {
        let key = ProjectKey::parse(key).ok_or_else(|| {
            Error::with_message(
                ErrorCode::INVALID_PROJECT,
                "a project key is 2 to 10 capital letters and digits, starting with a letter",
            )
        })?;
        rules::check_project_name(name).map_err(|p| match p {
            NameProblem::TooLong => Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "a project name is at most 80 characters",
            ),
            NameProblem::Empty => Error::with_message(ErrorCode::INVALID_PROJECT, "a project name is not empty"),
            NameProblem::Control => Error::with_message(
                ErrorCode::INVALID_PROJECT,
                "a project name holds no control character and no bidi embedding, override or isolate",
            ),
            NameProblem::Invisible => Error::with_message(
                ErrorCode::INVALID_PROJECT,
                "a project name has a visible character",
            ),
        })?;
        let project = Project {
            key,
            name: name.to_owned(),
            created_at: self.now(),
        };
        let event = transact!(self, |tx| {
            if !tx.insert_project(&project).await? {
                return Err(ErrorCode::PROJECT_EXISTS.into());
            }
            self.append(
                tx,
                "project.created",
                actor,
                Some(&project.key),
                None,
                json!(project),
            )
            .await
        })?;
        self.event_committed(event.id);
        Ok(project)
    }

    // ----- issues -----

    /// The answer for an issue: its children, primary document and progress read in the same
    /// transaction.
    async fn view(&self, tx: &mut dyn WorkTx, issue: Issue) -> Result<IssueView, Error> {
        let children = tx.children(&issue.key).await?;
        let asks = tx.open_asks_of(std::slice::from_ref(&issue.key)).await?;
        let asks = asks.into_iter().map(AskView::listed).collect();
        let primary = tx
            .primary_documents(std::slice::from_ref(&issue.key))
            .await?
            .pop()
            .map(|(_, d)| d);
        let roles = self.live_roles_in(tx).await?;
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

    /// The person an assignee names: a login someone signed in with.
    pub(super) async fn assignee(&self, login: &str) -> Result<Login, Error> {
        let not_allowed = || {
            Error::with_message(
                ErrorCode::ASSIGNEE_NOT_ALLOWED,
                "an assignee is the e-mail of a person who has signed in",
            )
        };
        let l = Login::parse(login).ok_or_else(not_allowed)?;
        if self.parts.storage.has_person(&l).await? {
            Ok(l)
        } else {
            Err(not_allowed())
        }
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
            let mut tx = self.parts.storage.read().await?;
            if let Some(i) = tx.issue_by_repo(&repo).await? {
                return Ok((self.view(&mut *tx, i).await?, false));
            }
        }
        let project = match new.project.as_deref() {
            Some(p) => ProjectKey::parse(p).ok_or_else(|| {
                Error::with_message(ErrorCode::INVALID_PROJECT, "`project` is a project key")
            })?,
            None => {
                let mut tx = self.parts.storage.read().await?;
                tx.mapping(&r.repo)
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
        let title = check_title(new.title.as_deref().unwrap_or(""))?;
        let labels = check_labels(&new.labels)?;
        let priority = check_priority(new.priority)?;
        let route = check_route(new.route)?;
        let components = check_components(new.components.unwrap_or_default())?;
        let parent = match new.parent.as_deref() {
            None => None,
            Some(p) => Some(IssueKey::parse(p).ok_or_else(|| invalid("`parent` is an issue key"))?),
        };
        let explicit = match new.assignee.as_deref() {
            Some(a) => Some(self.assignee(a).await?),
            None => None,
        };
        let now = self.now();
        let (view, event) = transact!(self, |tx| {
            // Two imports of one ref at once: the second finds the first's.
            if let Some(r) = &repo
                && let Some(i) = tx.issue_by_repo(r).await?
            {
                return Ok((self.view(tx, i).await?, None));
            }
            let Some((number, last_rank)) = tx.take_issue_number(&project).await? else {
                return Err(Error::with_message(
                    ErrorCode::INVALID_PROJECT,
                    "no project has this key",
                ));
            };
            let parent_issue = match &parent {
                None => None,
                Some(p) => Some(
                    tx.issue(p)
                        .await?
                        .ok_or_else(|| invalid("no issue has the `parent` key"))?,
                ),
            };
            let assignee = explicit.clone().or_else(|| match actor {
                Actor::User { login } => Some(login.clone()),
                Actor::Agent { owner: Some(o), .. } => Some(o.clone()),
                _ => parent_issue.as_ref().and_then(|p| p.assignee.clone()),
            });
            let rank = match &new.rank {
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
            let issue = Issue {
                key: IssueKey::new(&project, number),
                project: project.clone(),
                title: title.clone(),
                status: new.status.unwrap_or(Status::Todo),
                priority,
                labels: labels.clone(),
                route: route.clone(),
                parent: parent.clone(),
                rank,
                assignee,
                components: components.clone(),
                claim: None,
                repo: repo.clone(),
                sequence: 1,
                created_at: now,
                updated_at: now,
                closed_at: (!new.status.unwrap_or(Status::Todo).is_open()).then_some(now),
            };
            tx.insert_issue(&issue).await?;
            // A new issue has no children, asks or documents yet; the live roles matter only
            // to an open issue with a route (each statement here holds the write lock).
            let roles = if issue.route.is_some() && issue.status.is_open() {
                self.live_roles_in(tx).await?
            } else {
                Vec::new()
            };
            let view = self.view_with(issue, Vec::new(), Vec::new(), None, &roles);
            let event = self
                .append(
                    tx,
                    "issue.created",
                    actor,
                    Some(&view.project),
                    Some((&view.key, 1)),
                    json!(view),
                )
                .await?;
            Ok((view, Some(event)))
        })?;
        let created = event.is_some();
        if let Some(e) = event {
            self.event_committed(e.id);
            tracing::info!(issue = %view.key, "issue created");
        }
        Ok((view, created))
    }

    /// The rank just before or after another issue of the same project.
    async fn rank_at(&self, tx: &mut dyn WorkTx, at: &RankAt) -> Result<String, Error> {
        let (key, before) = match at {
            RankAt::Before(k) => (k, true),
            RankAt::After(k) => (k, false),
        };
        let key = IssueKey::parse(key).ok_or_else(|| invalid("`rank` names an issue key"))?;
        let other = tx
            .issue(&key)
            .await?
            .ok_or_else(|| invalid("`rank` names no issue"))?;
        Ok(if before {
            let lo = tx.rank_before(&key).await?;
            rank_between(lo.as_deref(), Some(&other.rank))
        } else {
            let hi = tx.rank_after(&key).await?;
            rank_between(Some(&other.rank), hi.as_deref())
        })
    }

    pub async fn issue(&self, key: &str) -> Result<IssueView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.parts.storage.read().await?;
        let issue = tx.issue(&key).await?.ok_or_else(|| not_found("issue"))?;
        self.view(&mut *tx, issue).await
    }

    /// `?ref=`: an issue key, or the `owner/repo#n` an issue was imported from (it must
    /// exist).
    pub async fn resolve(&self, r: &str) -> Result<IssueKey, Error> {
        if let Some(c) = CodeRef::parse(r) {
            let mut tx = self.parts.storage.read().await?;
            return tx
                .issue_by_repo(&c.to_string())
                .await?
                .map(|i| i.key)
                .ok_or_else(|| not_found("issue imported from this ref"));
        }
        Ok(self.issue(r).await?.key)
    }

    /// The issues a filter selects, and how many in all. `route_status` is resolved against
    /// the live sessions' roles before the query.
    pub async fn issues(
        &self,
        mut filter: IssueFilter,
        route_status: Option<RouteStatus>,
    ) -> Result<(Vec<IssueView>, i64), Error> {
        let mut tx = self.parts.storage.read().await?;
        let roles = self.live_roles_in(&mut *tx).await?;
        filter.route = route_status.map(|s| match s {
            RouteStatus::Live => RouteFilter::In(roles.clone()),
            RouteStatus::NoHolder => RouteFilter::NotIn(roles.clone()),
            RouteStatus::Unknown => RouteFilter::NoRoute,
        });
        let (issues, total) = tx.issues(&filter).await?;
        let keys: Vec<IssueKey> = issues.iter().map(|i| i.key.clone()).collect();
        let mut children: std::collections::HashMap<IssueKey, Vec<(IssueKey, Status)>> =
            Default::default();
        for (parent, child, status) in tx.children_of(&keys).await? {
            children.entry(parent).or_default().push((child, status));
        }
        // The page's open asks in one query, not one per issue.
        let mut asks: std::collections::HashMap<IssueKey, Vec<AskView>> = Default::default();
        for a in tx.open_asks_of(&keys).await? {
            if let Some(k) = a.issue.clone() {
                asks.entry(k).or_default().push(AskView::listed(a));
            }
        }
        let mut primary: std::collections::HashMap<IssueKey, PrimaryDocument> =
            tx.primary_documents(&keys).await?.into_iter().collect();
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
        let mut tx = self.parts.storage.read().await?;
        let mut issues = tx.issue_page(q, size + 1).await?;
        let more = issues.len() > size as usize;
        issues.truncate(size as usize);
        let total = tx.issue_page_total(q).await?;
        let keys: Vec<IssueKey> = issues.iter().map(|i| i.key.clone()).collect();
        let mut children: std::collections::HashMap<IssueKey, Progress> = tx
            .child_progress(&keys)
            .await?
            .into_iter()
            .map(|(k, done, total)| (k, Progress { done, total }))
            .collect();
        let mut asks: std::collections::HashMap<IssueKey, i64> = Default::default();
        for a in tx.open_asks_of(&keys).await? {
            if let Some(k) = a.issue {
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
        let mut tx = self.parts.storage.read().await?;
        let counts = tx.status_counts(q).await?;
        Ok(Status::ALL
            .iter()
            .map(|s| {
                let n = counts.iter().find(|(c, _)| c == s).map_or(0, |(_, n)| *n);
                (*s, n)
            })
            .collect())
    }

    /// Updates an issue: conditional on `expected_sequence` (ISSUE_CHANGED), a closed issue
    /// changes only status and components (ISSUE_CLOSED), `labels_add` adds to the labels held
    /// when the write commits. A patch that changes nothing appends no event.
    pub async fn update_issue(
        &self,
        actor: &Actor,
        key: &str,
        patch: IssuePatch,
    ) -> Result<IssueView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        if patch.labels.is_some() && patch.labels_add.is_some() {
            return Err(invalid("`labels` and `labels_add` do not go together"));
        }
        let title = patch.title.as_deref().map(check_title).transpose()?;
        let labels = patch.labels.as_deref().map(check_labels).transpose()?;
        let labels_add = patch.labels_add.as_deref().map(check_labels).transpose()?;
        let priority = patch.priority.map(check_priority).transpose()?;
        let route = patch.route.clone().map(check_route).transpose()?;
        let components = patch.components.clone().map(check_components).transpose()?;
        let parent = match &patch.parent {
            None => None,
            Some(None) => Some(None),
            Some(Some(p)) => Some(Some(
                IssueKey::parse(p).ok_or_else(|| invalid("`parent` is an issue key"))?,
            )),
        };
        let assignee = match &patch.assignee {
            None => None,
            Some(None) => Some(None),
            Some(Some(a)) => Some(Some(self.assignee(a).await?)),
        };
        let (view, event) = transact!(self, |tx| {
            let old = tx.issue(&key).await?.ok_or_else(|| not_found("issue"))?;
            if let Some(seq) = patch.expected_sequence
                && seq != old.sequence
            {
                return Err(
                    Error::new(ErrorCode::ISSUE_CHANGED).with_detail("sequence", old.sequence)
                );
            }
            let mut new = old.clone();
            let mut changes = serde_json::Map::new();
            let mut change = |field: &str, was: Value, now: Value| {
                if was != now {
                    changes.insert(field.to_owned(), json!([was, now]));
                }
            };
            if let Some(t) = &title {
                change("title", json!(old.title), json!(t));
                new.title = t.clone();
            }
            if let Some(s) = patch.status {
                change("status", json!(old.status), json!(s));
                new.status = s;
            }
            if let Some(p) = priority {
                change("priority", json!(old.priority), json!(p));
                new.priority = p;
            }
            if let Some(l) = &labels {
                change("labels", json!(old.labels), json!(l));
                new.labels = l.clone();
            }
            if let Some(add) = &labels_add {
                let mut l = old.labels.clone();
                l.extend(add.iter().filter(|a| !old.labels.contains(a)).cloned());
                let l = check_labels(&l)?;
                change("labels", json!(old.labels), json!(l));
                new.labels = l;
            }
            if let Some(r) = &route {
                change("route", json!(old.route), json!(r));
                new.route = r.clone();
            }
            if let Some(p) = &parent {
                if p.as_ref() == Some(&key) {
                    return Err(invalid("an issue is not its own parent"));
                }
                if let Some(pk) = p
                    && tx.issue(pk).await?.is_none()
                {
                    return Err(invalid("no issue has the `parent` key"));
                }
                change("parent", json!(old.parent), json!(p));
                new.parent = p.clone();
            }
            if let Some(at) = &patch.rank {
                let r = self.rank_at(tx, at).await?;
                change("rank", json!(old.rank), json!(r));
                new.rank = r;
            }
            if let Some(a) = &assignee {
                change("assignee", json!(old.assignee), json!(a));
                new.assignee = a.clone();
            }
            if let Some(c) = &components {
                change("components", json!(old.components), json!(c));
                new.components = c.clone();
            }
            if changes.is_empty() {
                let view = self.view(tx, old).await?;
                return Ok((view, None));
            }
            if !old.status.is_open() && changes.keys().any(|k| k != "status" && k != "components") {
                return Err(ErrorCode::ISSUE_CLOSED.into());
            }
            let now = self.now();
            match (old.status.is_open(), new.status.is_open()) {
                (true, false) => new.closed_at = Some(now),
                (false, true) => new.closed_at = None,
                _ => {}
            }
            new.sequence = old.sequence + 1;
            new.updated_at = now;
            tx.update_issue(&new).await?;
            let view = self.view(tx, new).await?;
            let mut data = json!(view);
            data["changes"] = Value::Object(changes);
            let event = self
                .append(
                    tx,
                    "issue.updated",
                    actor,
                    Some(&view.project),
                    Some((&view.key, view.sequence)),
                    data,
                )
                .await?;
            Ok((view, Some(event)))
        })?;
        if let Some(e) = event {
            self.event_committed(e.id);
        }
        Ok(view)
    }

    /// Whether `actor` is the claim's holder.
    fn holds(claim: &Claim, actor: &Actor) -> bool {
        match (&claim.holder, actor) {
            (Actor::User { login: a }, Actor::User { login: b }) => a == b,
            (
                Actor::Agent {
                    session: Some(a), ..
                },
                Actor::Agent {
                    session: Some(b), ..
                },
            ) => a == b,
            _ => false,
        }
    }

    /// Whether a holder still holds: a person always, a session while it is live.
    async fn holder_live(&self, holder: &Actor) -> Result<bool, Error> {
        match holder {
            Actor::Agent {
                session: Some(s), ..
            } => self.session_is_live(s).await,
            Actor::Agent { session: None, .. } => Ok(false),
            _ => Ok(true),
        }
    }

    /// Claims an issue for the calling session or person. The claim is a compare-and-set on
    /// the holder read first: a live or human holder is ISSUE_CLAIMED (a person may `force`);
    /// a holder that changes under the request is read again once, and a second change is
    /// CLAIM_CONTENDED. The status does not move.
    pub async fn claim(&self, actor: &Actor, key: &str, force: bool) -> Result<Claim, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        if force && !actor.is_human() {
            return Err(Error::with_message(
                ErrorCode::HUMAN_ONLY,
                "only a person may force a claim",
            ));
        }
        for _ in 0..2 {
            let seen = self.read_claim(&key).await?;
            if let Some(c) = &seen {
                if Self::holds(c, actor) {
                    return Ok(c.clone());
                }
                if self.holder_live(&c.holder).await? && !force {
                    return Err(
                        Error::new(ErrorCode::ISSUE_CLAIMED).with_detail("holder", &c.holder)
                    );
                }
            }
            let claim = Claim {
                holder: actor.clone(),
                at: self.now(),
            };
            if self
                .swap_claim(
                    actor,
                    &key,
                    &seen,
                    Some(claim.clone()),
                    "issue.claimed",
                    &claim.holder,
                )
                .await?
            {
                return Ok(claim);
            }
        }
        Err(ErrorCode::CLAIM_CONTENDED.into())
    }

    /// The issue's claim as it is now.
    async fn read_claim(&self, key: &IssueKey) -> Result<Option<Claim>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx
            .issue(key)
            .await?
            .ok_or_else(|| not_found("issue"))?
            .claim)
    }

    /// Sets the issue's claim to `next` if it is still `seen` (the compare-and-set of claims),
    /// appending `kind` naming `holder`; false when the claim changed in between.
    async fn swap_claim(
        &self,
        actor: &Actor,
        key: &IssueKey,
        seen: &Option<Claim>,
        next: Option<Claim>,
        kind: &'static str,
        holder: &Actor,
    ) -> Result<bool, Error> {
        let done = transact!(self, |tx| {
            let mut issue = tx.issue(key).await?.ok_or_else(|| not_found("issue"))?;
            if issue.claim != *seen {
                return Ok(None);
            }
            issue.claim = next.clone();
            issue.sequence += 1;
            issue.updated_at = self.now();
            tx.update_issue(&issue).await?;
            let data = json!({ "key": issue.key, "holder": holder });
            let e = self
                .append(
                    tx,
                    kind,
                    actor,
                    Some(&issue.project),
                    Some((&issue.key, issue.sequence)),
                    data,
                )
                .await?;
            Ok(Some(e))
        })?;
        match done {
            Some(e) => {
                self.event_committed(e.id);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Releases an issue's claim: its holder, any person, or anyone once the holding session
    /// is no longer live. No claim: done already.
    pub async fn release(&self, actor: &Actor, key: &str) -> Result<(), Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        for _ in 0..2 {
            let seen = self.read_claim(&key).await?;
            let Some(c) = &seen else {
                return Ok(());
            };
            if !Self::holds(c, actor) && !actor.is_human() && self.holder_live(&c.holder).await? {
                return Err(Error::new(ErrorCode::ISSUE_CLAIMED).with_detail("holder", &c.holder));
            }
            if self
                .swap_claim(actor, &key, &seen, None, "issue.released", &c.holder)
                .await?
            {
                return Ok(());
            }
        }
        Err(ErrorCode::CLAIM_CONTENDED.into())
    }

    /// Appends an event about a live session (`session.live`, `session.updated`,
    /// `session.gone`), which no transaction of the work records carries.
    pub async fn session_event(
        &self,
        kind: &'static str,
        actor: &Actor,
        data: Value,
    ) -> Result<(), Error> {
        let e = transact!(self, |tx| self
            .append(tx, kind, actor, None, None, data.clone())
            .await)?;
        self.event_committed(e.id);
        Ok(())
    }

    /// A page of an issue's event log.
    pub async fn issue_events(&self, key: &str, page: &EventPage) -> Result<Vec<Event>, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.parts.storage.read().await?;
        if tx.issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        Ok(tx.issue_events(&key, page).await?)
    }

    /// Events with id above `after`, at most `limit` (the stream's replay and its live reads).
    pub async fn events_after(&self, after: i64, limit: u32) -> Result<Vec<Event>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.events_after(after, limit).await?)
    }

    /// The highest committed event id.
    pub async fn last_event_id(&self) -> Result<i64, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.last_event_id().await?)
    }

    /// Full-text search (protocol §6.5): each kind's index ranks its best 100, the kinds are
    /// fused, and the page is cut from the fused list. CAP_EXCEEDED over 1,000 characters,
    /// INVALID_PROJECT for a project that is not a project key.
    pub async fn search(
        &self,
        q: &str,
        project: Option<&str>,
        limit: u32,
        offset: u32,
    ) -> Result<SearchPage, Error> {
        let q = q.trim();
        if rules::chars(q) > 1000 {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "q is at most 1000 characters",
            ));
        }
        if q.is_empty() {
            return Err(Error::with_message(
                ErrorCode::INVALID_QUERY,
                "`q` names what to search for",
            ));
        }
        let project = project
            .map(|p| {
                ProjectKey::parse(p).ok_or_else(|| {
                    Error::with_message(ErrorCode::INVALID_PROJECT, "`project` is a project key")
                })
            })
            .transpose()?;
        let words = search::words(q);
        let mut kinds: Vec<(SearchKind, Vec<crate::work::Hit>)> = Vec::new();
        let mut total = 0;
        if !words.is_empty() {
            let mut tx = self.parts.storage.read().await?;
            let p = project.as_ref();
            let (hits, n) = tx.search_issues(&words, p, search::PER_KIND).await?;
            total += n;
            kinds.push((SearchKind::Issue, hits));
            let (hits, n) = tx
                .search_documents(&words, false, p, search::PER_KIND)
                .await?;
            total += n;
            kinds.push((SearchKind::Document, hits));
            let (hits, n) = tx
                .search_asks(&words, false, p, false, search::PER_KIND)
                .await?;
            total += n;
            kinds.push((SearchKind::Ask, hits));
            let (hits, n) = tx.search_comments(&words, p, search::PER_KIND).await?;
            total += n;
            kinds.push((SearchKind::Comment, hits));
            let (hits, n) = tx
                .search_messages(&words, false, p, search::PER_KIND)
                .await?;
            total += n;
            kinds.push((SearchKind::Message, hits));
        }
        let reachable = kinds.iter().map(|(_, h)| h.len() as i64).sum();
        let rows = search::fuse(kinds, console_ref)
            .into_iter()
            .skip(offset as usize)
            .take(limit as usize)
            .collect();
        Ok(SearchPage {
            rows,
            total,
            reachable,
            limit,
            offset,
        })
    }

    /// The three items most similar to a new issue, from the same index, read after its write
    /// committed (so it never slows or blocks the write); empty when the search fails.
    ///
    /// The newest [`SIMILAR_CANDIDATES`] issues holding one of the title's [`SIMILAR_DRAWN_BY`]
    /// rarest words that another issue holds too are scored by BM25 over all its words
    /// ([`search::rank_similar`]), each word weighted by how many issues hold it. Those counts
    /// are what the index's own `bm25` reads whole posting lists for on every query (a common
    /// word's, tens of thousands of rows on 100,000 issues); here they are kept a minute
    /// ([`WordCounts`]), so an issue's advice reads only its candidates, with no transaction
    /// (the counts and the candidates need not agree).
    pub async fn similar_to(&self, key: &IssueKey, title: &str) -> Vec<Suggestion> {
        let mut words = search::words(title);
        words.sort_unstable();
        words.dedup();
        if words.is_empty() {
            return Vec::new();
        }
        let found = async {
            let mut tx = self.parts.storage.read_loose().await?;
            let (counts, total) = self.word_counts(&mut *tx, &words).await?;
            // Drawn by the rarest words another issue holds too (this one holds each): they
            // say the most about likeness, and each word drawn by is a posting list to walk.
            let mut by_rarity: Vec<(i64, &String)> = counts
                .iter()
                .copied()
                .zip(&words)
                .filter(|(n, _)| *n > 1)
                .collect();
            by_rarity.sort();
            let drawn: Vec<String> = by_rarity
                .into_iter()
                .take(SIMILAR_DRAWN_BY)
                .map(|(_, w)| w.clone())
                .collect();
            let candidates = tx.similar_candidates(&drawn, SIMILAR_CANDIDATES).await?;
            Ok::<_, crate::storage::StorageError>(search::rank_similar(
                &words,
                &counts,
                total,
                candidates,
                key.as_str(),
                3,
            ))
        };
        match found.await {
            Ok(found) => found
                .into_iter()
                .map(|c| Suggestion {
                    reference: console_ref(SearchKind::Issue, &c.key),
                    title: c.title,
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "similar issues not found");
                Vec::new()
            }
        }
    }

    /// How many issues hold each of `words`, and how many there are: from the counts kept,
    /// the rest read in `tx` (and kept).
    async fn word_counts(
        &self,
        tx: &mut dyn WorkTx,
        words: &[String],
    ) -> Result<(Vec<i64>, i64), crate::storage::StorageError> {
        let now = self.now();
        let (mut counts, total, missing) = self.advice.lookup(words, now);
        let unknown: Vec<String> = missing.iter().map(|&i| words[i].clone()).collect();
        let read = if unknown.is_empty() {
            Vec::new()
        } else {
            tx.word_counts(&unknown).await?
        };
        let read_total = match total {
            Some(_) => None,
            None => Some(tx.issue_count().await?),
        };
        for (&i, n) in missing.iter().zip(&read) {
            counts[i] = Some(*n);
        }
        self.advice.keep(&unknown, &read, read_total, now);
        let total = total.or(read_total).unwrap_or(0);
        Ok((counts.into_iter().map(|c| c.unwrap_or(0)).collect(), total))
    }

    /// A person's read state of every issue they read or pinned.
    pub async fn read_states(&self, human: &Human) -> Result<Vec<ReadState>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.read_states(&human.login).await?)
    }

    /// Updates a person's read state of an issue: `read_sequence` only moves forward (an
    /// earlier one leaves it) and is at most the issue's last sequence; `pinned` is what
    /// `GET /issues?pinned=true` reads.
    pub async fn update_read_state(
        &self,
        human: &Human,
        key: &str,
        read_sequence: Option<i64>,
        pinned: Option<bool>,
    ) -> Result<ReadState, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        if read_sequence.is_some_and(|r| r < 0) {
            return Err(invalid("read_sequence is 0 or more"));
        }
        transact!(self, |tx| {
            let issue = tx.issue(&key).await?.ok_or_else(|| not_found("issue"))?;
            let (was_read, was_pinned) = tx
                .read_state(&human.login, &key)
                .await?
                .unwrap_or((0, false));
            let read = read_sequence
                .map(|r| r.min(issue.sequence).max(was_read))
                .unwrap_or(was_read);
            let pinned = pinned.unwrap_or(was_pinned);
            tx.put_read_state(&human.login, &key, read, pinned).await?;
            Ok(ReadState {
                key: key.clone(),
                read_sequence: read,
                last_sequence: issue.sequence,
                unread: read < issue.sequence,
                pinned,
            })
        })
    }

    /// Sessions subscribed to an issue's topics (protocol §6.2: those that created, claimed,
    /// edited, asked, commented or were messaged there), first subscribed first.
    pub async fn subscribers(&self, key: &str) -> Result<Vec<Subscriber>, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.parts.storage.read().await?;
        if tx.issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        Ok(tx
            .subscribers(&key)
            .await?
            .into_iter()
            .map(|(session_id, since)| Subscriber { session_id, since })
            .collect())
    }

    /// Unsubscribes a session from an issue (a later action there subscribes it again);
    /// appends `subscription.removed`. A session not subscribed: done already.
    pub async fn unsubscribe(&self, actor: &Actor, key: &str, session: &str) -> Result<(), Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let event = transact!(self, |tx| {
            let issue = tx.issue(&key).await?.ok_or_else(|| not_found("issue"))?;
            if !tx
                .subscribers(&key)
                .await?
                .iter()
                .any(|(s, _)| s == session)
            {
                return Ok(None);
            }
            tx.unsubscribe(&key, session).await?;
            let data =
                json!({ "issue": key, "artifact": null, "session_id": session, "by": actor });
            Ok(Some(
                self.append(
                    tx,
                    "subscription.removed",
                    actor,
                    Some(&issue.project),
                    None,
                    data,
                )
                .await?,
            ))
        })?;
        if let Some(e) = event {
            self.event_committed(e.id);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_by_number_keep_order_and_length() {
        let ranks: Vec<String> = (1..2000).map(rank_of_number).collect();
        assert!(ranks.windows(2).all(|w| w[0] < w[1]));
        assert!(ranks.iter().all(|r| r.len() == 7 && !r.ends_with('a')));
        let m = rank_between(Some(&ranks[0]), Some(&ranks[1]));
        assert!(ranks[0] < m && m < ranks[1], "{m}");
    }

    #[test]
    fn ranks_fall_strictly_between() {
        let mut ranks = vec![rank_between(None, None)];
        for _ in 0..50 {
            let last = ranks.last().cloned();
            ranks.push(rank_between(last.as_deref(), None));
        }
        for w in ranks.windows(2) {
            assert!(w[0] < w[1], "{w:?}");
        }
        let (a, b) = ("n".to_owned(), "o".to_owned());
        let mut lo = a.clone();
        for _ in 0..30 {
            let m = rank_between(Some(&lo), Some(&b));
            assert!(lo < m && m < b, "{lo} {m} {b}");
            lo = m;
        }
        for hi in ["b", "am", "ab", "n"] {
            let m = rank_between(None, Some(hi));
            assert!(m.as_str() < hi && !m.ends_with('a'), "{m} {hi}");
        }
        let m = rank_between(Some("az"), Some("b"));
        assert!("az" < m.as_str() && m.as_str() < "b", "{m}");
    }

    #[test]
    fn word_counts_are_kept_a_minute() {
        let kept = WordCounts::default();
        let t0 = chrono::DateTime::UNIX_EPOCH + chrono::Duration::days(20_000);
        let words: Vec<String> = ["refund", "fees"].map(String::from).into();
        assert_eq!(
            kept.lookup(&words, t0),
            (vec![None, None], None, vec![0, 1])
        );
        kept.keep(&words, &[7, 1], Some(100), t0);
        let later = t0 + chrono::Duration::seconds(59);
        // A count of one (the advised issue's own word) is read again each time.
        assert_eq!(
            kept.lookup(&words, later),
            (vec![Some(7), None], Some(100), vec![1])
        );
        // Counts kept later leave the number of issues its time when not read with them.
        kept.keep(&words[1..], &[3], None, later);
        assert_eq!(
            kept.lookup(&words, later),
            (vec![Some(7), Some(3)], Some(100), vec![])
        );
        // A minute on, or a clock gone back, reads them again.
        for at in [t0 + WORD_COUNTS_FOR, t0 - chrono::Duration::seconds(1)] {
            let (counts, total, _) = kept.lookup(&words, at);
            assert_eq!((&counts[..1], total), (&[None][..], None), "{at}");
        }
        // Past the cap, the kept counts start afresh.
        let many: Vec<String> = (0..WORD_COUNTS_KEPT).map(|i| format!("w{i}")).collect();
        kept.keep(&many, &vec![2; many.len()], None, t0);
        assert_eq!(kept.lookup(&words, t0).0, vec![None, None]);
        assert_eq!(kept.lookup(&many[..1], t0).0, vec![Some(2)]);
    }
}
