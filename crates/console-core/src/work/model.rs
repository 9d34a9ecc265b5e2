//! The work records, as the console's answers show them (protocol §6.1, §7), and their keys.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::clock::Time;
use crate::ids::{ArtifactId, Login, SessionId};

/// A project key: `^[A-Z][A-Z0-9]{1,9}$`, case-sensitive.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct ProjectKey(String);

impl ProjectKey {
    pub fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        let ok = (2..=10).contains(&b.len())
            && b[0].is_ascii_uppercase()
            && b[1..]
                .iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
        ok.then(|| Self(s.to_owned()))
    }
}

/// `as_str` and `Display` for a key that is its text, once for both kinds.
macro_rules! key_text {
    ($($key:ident),+) => {$(
        impl $key {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $key {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    )+};
}

key_text!(ProjectKey, IssueKey);

/// An issue key: `<PROJECT>-<n>`, `n` from 1 with no leading zero.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[serde(transparent)]
pub struct IssueKey(String);

impl IssueKey {
    pub fn parse(s: &str) -> Option<Self> {
        let (p, n) = s.rsplit_once('-')?;
        ProjectKey::parse(p)?;
        let ok = !n.is_empty()
            && n.len() <= 18
            && !n.starts_with('0')
            && n.bytes().all(|c| c.is_ascii_digit());
        ok.then(|| Self(s.to_owned()))
    }

    pub fn new(project: &ProjectKey, number: i64) -> Self {
        Self(format!("{project}-{number}"))
    }

    pub fn project(&self) -> ProjectKey {
        let p = self.0.rsplit_once('-').map(|(p, _)| p).unwrap_or_default();
        ProjectKey(p.to_owned())
    }

    /// The issue's number within its project.
    pub fn number(&self) -> i64 {
        self.0
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse().ok())
            .unwrap_or(0)
    }
}

/// Who did something: a person, an agent (acting for a session when it named one), or the
/// console itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Actor {
    User {
        login: Login,
    },
    Agent {
        owner: Option<Login>,
        service: Option<String>,
        session: Option<SessionId>,
    },
    System {
        name: String,
    },
}

impl Actor {
    /// The session an agent acts for.
    pub fn session(&self) -> Option<&SessionId> {
        match self {
            Actor::Agent { session, .. } => session.as_ref(),
            _ => None,
        }
    }

    pub fn is_human(&self) -> bool {
        matches!(self, Actor::User { .. })
    }
}

/// A project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Project {
    pub key: ProjectKey,
    pub name: String,
    #[serde(with = "crate::work::model::rfc3339")]
    pub created_at: Time,
}

/// Issue statuses: four open, two closed; any may follow any.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Todo,
    InProgress,
    InReview,
    Blocked,
    Done,
    Cancelled,
}

impl Status {
    pub const ALL: [Status; 6] = [
        Status::Todo,
        Status::InProgress,
        Status::InReview,
        Status::Blocked,
        Status::Done,
        Status::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Todo => "todo",
            Status::InProgress => "in_progress",
            Status::InReview => "in_review",
            Status::Blocked => "blocked",
            Status::Done => "done",
            Status::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }

    pub fn is_open(self) -> bool {
        !matches!(self, Status::Done | Status::Cancelled)
    }
}

/// How an issue's components are set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComponentsMode {
    /// From the parent issue.
    Inherit,
    /// The ids given.
    Explicit,
    /// Not architectural work.
    None,
}

/// An issue's components.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Components {
    pub mode: ComponentsMode,
    #[serde(default)]
    pub ids: Vec<String>,
    #[serde(default)]
    pub reason: Option<String>,
}

impl Default for Components {
    fn default() -> Self {
        Self {
            mode: ComponentsMode::Inherit,
            ids: Vec::new(),
            reason: None,
        }
    }
}

/// Who holds an issue's claim, since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Claim {
    pub holder: Actor,
    #[serde(with = "crate::work::model::rfc3339")]
    pub at: Time,
}

/// An issue as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub key: IssueKey,
    pub project: ProjectKey,
    pub title: String,
    pub status: Status,
    pub priority: Option<u8>,
    pub labels: Vec<String>,
    pub route: Option<String>,
    pub parent: Option<IssueKey>,
    pub rank: String,
    pub assignee: Option<Login>,
    pub components: Components,
    pub claim: Option<Claim>,
    pub repo: Option<String>,
    /// The sequence of the issue's last event.
    pub sequence: i64,
    pub created_at: Time,
    pub updated_at: Time,
    pub closed_at: Option<Time>,
}

/// A person's read state of one issue (protocol §6.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReadState {
    pub key: IssueKey,
    pub read_sequence: i64,
    pub last_sequence: i64,
    pub unread: bool,
    pub pinned: bool,
}

/// One match of a kind's full-text index, with its score in that kind (higher is better).
#[derive(Debug, Clone, PartialEq)]
pub struct Hit {
    /// Text: the id of whichever kind the match is (an issue key, a document's, an ask's, a
    /// comment's or a message's id).
    pub id: String,
    pub title: String,
    pub snippet: String,
    pub project: Option<ProjectKey>,
    /// The issue the match is, or belongs to (a comment, ask or message on it, a document of
    /// it).
    pub issue: Option<IssueKey>,
    /// The document the match is, or is on (a comment or ask on it).
    pub artifact: Option<String>,
    /// The broadcast the match is a copy of (a message): its copies show as one row.
    pub broadcast: Option<String>,
    pub at: Time,
    pub score: f64,
}

/// An issue that may be like a new one (`advice.suggestions`), with the text its index holds
/// (its title and labels), which search's `rank_similar` scores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub key: String,
    pub title: String,
    pub text: String,
}

/// The kinds search covers (protocol §6.5); issues are indexed now, the others with their
/// issues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SearchKind {
    Issue,
    Document,
    Ask,
    Comment,
    Message,
    /// Added by issue 48: a credential request, found by the id its agent was given (or its
    /// record's id), never by words ([`crate::Console::request_named`]).
    Request,
}

/// A search row (protocol §6.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchRow {
    pub kind: SearchKind,
    /// Text, as [`Hit::id`]: the id of the row's kind.
    pub id: String,
    /// The console ref (`countersign://issue/KEY`, …).
    #[serde(rename = "ref")]
    pub reference: String,
    pub title: String,
    pub snippet: String,
    pub project: Option<ProjectKey>,
    #[serde(with = "crate::work::model::rfc3339")]
    pub at: Time,
    /// Added to the spec's row (protocol §1.2 "Growth": answers grow by fields): the issue the
    /// row is or belongs to, the document it is or is on, and the console page that shows it
    /// (a comment: its issue's or its document's discussion, at the comment).
    pub issue: Option<IssueKey>,
    pub artifact: Option<String>,
    pub page: String,
    /// Added by issue 48 (protocol §1.2 "Growth"): the matched words of `title` and of
    /// `snippet`, each `[start, end)` in characters (Unicode scalar values), in order.
    pub title_marks: Vec<[usize; 2]>,
    pub snippet_marks: Vec<[usize; 2]>,
    /// The broadcast a message row stands for (its copies to each session show once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broadcast: Option<String>,
}

/// A page of search results: `reachable` is how many the pages can reach (each kind's best
/// 100), `total` how many match, each kind counted up to one past its 100: with `more`, some
/// kind has more matches than that, and `total` is a floor.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchPage {
    pub rows: Vec<SearchRow>,
    pub total: i64,
    /// Added by issue 48: some kind matches more than its 100 (counting stops there).
    pub more: bool,
    pub reachable: i64,
    pub limit: u32,
    pub offset: u32,
}

/// A session subscribed to an issue's topics.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Subscriber {
    /// The session of the events that subscribe it.
    pub session_id: SessionId,
    #[serde(with = "crate::work::model::rfc3339")]
    pub since: Time,
}

/// `{done, total}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Progress {
    pub done: i64,
    pub total: i64,
}

/// An issue's progress: tasks (from its primary document, once documents exist) and direct
/// children, each null when there are none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IssueProgress {
    pub tasks: Option<Progress>,
    pub children: Option<Progress>,
}

/// Whether a live session holds an open issue's route.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteStatus {
    Live,
    NoHolder,
    Unknown,
}

/// How a page of issue rows is ordered ([`IssueListQuery`]). Each order ends on the issue's
/// project and number, so it is total and a cursor resumes it exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum IssueSort {
    /// The project's rank order (the board's and the API's order).
    #[default]
    Rank,
    /// Most recently updated first.
    Updated,
    /// Newest first.
    Created,
    /// P0 first, issues with no priority last, then by rank.
    Priority,
}

impl IssueSort {
    pub const ALL: [IssueSort; 4] = [Self::Rank, Self::Updated, Self::Created, Self::Priority];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rank => "rank",
            Self::Updated => "updated",
            Self::Created => "created",
            Self::Priority => "priority",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// Whose issues a list shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IssueAssignee {
    /// Issues assigned to this person ("My issues" is the signed-in person's own login).
    Person(Login),
    /// Issues assigned to nobody.
    Nobody,
}

/// Where a page of issue rows resumes: the last row's sort value, project and number
/// (keyset paging: a page is one index range however deep it is, and rows written meanwhile
/// neither repeat nor skip). Opaque to clients: [`IssueCursor::encode`] and
/// [`IssueCursor::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssueCursor {
    pub sort: IssueSort,
    /// The rank (`Rank`), or the milliseconds (`Updated`, `Created`), or the priority with
    /// none as 4 (`Priority`), as text.
    pub value: String,
    pub project: ProjectKey,
    pub number: i64,
}

impl IssueCursor {
    /// The cursor after `issue` in `sort`'s order.
    pub fn after(sort: IssueSort, issue: &Issue) -> Self {
        let value = match sort {
            IssueSort::Rank => issue.rank.clone(),
            IssueSort::Updated => issue.updated_at.timestamp_millis().to_string(),
            IssueSort::Created => issue.created_at.timestamp_millis().to_string(),
            IssueSort::Priority => issue.priority.map_or(4, i64::from).to_string(),
        };
        Self {
            sort,
            value,
            project: issue.project.clone(),
            number: issue.key.number(),
        }
    }

    /// `<sort>.<value>.<project>.<number>`: every part is letters or digits.
    pub fn encode(&self) -> String {
        format!(
            "{}.{}.{}.{}",
            self.sort.as_str(),
            self.value,
            self.project.as_str(),
            self.number
        )
    }

    /// A cursor [`IssueCursor::encode`] wrote; `None` for anything else.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('.');
        let sort = IssueSort::parse(parts.next()?)?;
        let value = parts.next()?;
        let project = ProjectKey::parse(parts.next()?)?;
        let number: i64 = parts.next()?.parse().ok()?;
        if parts.next().is_some() || number < 1 {
            return None;
        }
        let ok = match sort {
            IssueSort::Rank => {
                !value.is_empty()
                    && value.len() <= 1024
                    && value.bytes().all(|b| b.is_ascii_alphanumeric())
            }
            IssueSort::Updated | IssueSort::Created => value.parse::<i64>().is_ok(),
            IssueSort::Priority => matches!(value, "0" | "1" | "2" | "3" | "4"),
        };
        ok.then(|| Self {
            sort,
            value: value.to_owned(),
            project,
            number,
        })
    }
}

/// A page of issue rows for the console's lists ("My issues", a project's issues, a board's
/// column): filters, an order, and where to resume. Every filter is ANDed; a list filter
/// (`status`, `priority`, `labels`) matches any of its values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssueListQuery {
    pub project: Option<ProjectKey>,
    pub status: Vec<Status>,
    pub assignee: Option<IssueAssignee>,
    /// `None` in the list is "no priority".
    pub priority: Vec<Option<u8>>,
    pub labels: Vec<String>,
    pub open: Option<bool>,
    pub sort: IssueSort,
    /// Resume after this cursor (an [`IssueRowPage::next`]); its sort must be `sort`'s.
    pub after: Option<IssueCursor>,
    /// At most this many rows (1 to [`IssueListQuery::MAX_LIMIT`]; 0 is the default, 50).
    pub limit: u32,
}

impl IssueListQuery {
    pub const DEFAULT_LIMIT: u32 = 50;
    pub const MAX_LIMIT: u32 = 250;

    /// The page size asked for, within bounds.
    pub fn page_size(&self) -> u32 {
        match self.limit {
            0 => Self::DEFAULT_LIMIT,
            n => n.min(Self::MAX_LIMIT),
        }
    }
}

/// One row of an issue list: the issue, its children's progress and its open asks' count.
#[derive(Debug, Clone, PartialEq)]
pub struct IssueRow {
    pub issue: Issue,
    /// Direct children, done of total; `None` when it has none.
    pub children: Option<Progress>,
    pub open_asks: i64,
}

/// A page of issue rows: `next` resumes after the last row (`None` on the last page), and
/// `total` counts every issue the filters select (not only this page's).
#[derive(Debug, Clone, PartialEq)]
pub struct IssueRowPage {
    pub rows: Vec<IssueRow>,
    pub next: Option<String>,
    pub total: i64,
}

/// The issue list's filters and page, applied by the storage's query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IssueFilter {
    pub project: Option<ProjectKey>,
    pub status: Vec<Status>,
    pub parent: Option<IssueKey>,
    pub labels: Vec<String>,
    /// `None` in the list is "no priority".
    pub priority: Vec<Option<u8>>,
    pub open: Option<bool>,
    pub updated_since: Option<Time>,
    /// Keys pinned by this person (`pinned=true`).
    pub pinned_by: Option<Login>,
    /// Only issues whose route one of these roles is (route_status `live`), or whose route no
    /// live session holds (`no_holder`: `Some(false)`), or with no route (`unknown`).
    pub route: Option<RouteFilter>,
    pub limit: Option<u32>,
    pub offset: u32,
}

/// The `route_status` filter, resolved against the live sessions' roles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteFilter {
    /// Open issues whose route is one of these roles.
    In(Vec<String>),
    /// Open issues with a route that is none of these roles.
    NotIn(Vec<String>),
    /// Open issues with no route.
    NoRoute,
}

/// Which of an issue's events to page (protocol §7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventPage {
    pub after: Option<i64>,
    pub before: Option<i64>,
    pub ids: Vec<i64>,
    pub descending: bool,
    pub limit: u32,
}

/// What an event says beside its kind: when, who, where (its project, issue, document and
/// session) and its data. An event to append and an appended one say it alike.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventFacts {
    #[serde(with = "crate::work::model::rfc3339")]
    pub at: Time,
    pub actor: Actor,
    pub project: Option<ProjectKey>,
    pub issue: Option<IssueKey>,
    pub artifact: Option<ArtifactId>,
    pub session: Option<SessionId>,
    pub data: Value,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: &'static str,
    pub facts: EventFacts,
}

/// An event as stored and sent (the envelope of protocol §7): `id`, `kind`, its facts in
/// their order, then `sequence`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    pub id: i64,
    pub kind: String,
    #[serde(flatten)]
    pub facts: EventFacts,
    /// The issue's or document's sequence (in their logs; omitted on the stream).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence: Option<i64>,
}

/// Times on the wire: RFC 3339, UTC, milliseconds, `Z` (protocol §5).
pub mod rfc3339 {
    use serde::Serializer;

    use crate::clock::Time;

    pub fn format(t: &Time) -> String {
        t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    }

    pub fn serialize<S: Serializer>(t: &Time, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(t))
    }
}

/// Optional times on the wire.
pub mod rfc3339_opt {
    use serde::Serializer;

    use crate::clock::Time;

    pub fn serialize<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
        match t {
            Some(t) => s.serialize_str(&super::rfc3339::format(t)),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert!(ProjectKey::parse("PAY").is_some());
        assert!(ProjectKey::parse("P1").is_some());
        for bad in ["P", "pay", "1PAY", "PAYMENTSXYZ", "PA-Y", ""] {
            assert!(ProjectKey::parse(bad).is_none(), "{bad}");
        }
        let k = IssueKey::parse("PAY-12").expect("key");
        assert_eq!((k.project().as_str(), k.number()), ("PAY", 12));
        for bad in ["PAY-0", "PAY-01", "PAY-", "pay-1", "PAY-1a", "PAY"] {
            assert!(IssueKey::parse(bad).is_none(), "{bad}");
        }
    }

    /// The envelope of protocol §7, to the byte: its fields in their order, `sequence` only
    /// in a log.
    #[test]
    fn events_on_the_wire() {
        let at = chrono::DateTime::from_timestamp_millis(1_925_000_000_123).unwrap_or_default();
        let artifact = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        let mut e = Event {
            id: 7,
            kind: "delivery.attempt".into(),
            facts: EventFacts {
                at,
                actor: Actor::System {
                    name: "console".into(),
                },
                project: ProjectKey::parse("PAY"),
                issue: IssueKey::parse("PAY-1"),
                artifact: ArtifactId::parse(artifact),
                session: SessionId::parse("s1"),
                data: serde_json::json!({"n": 1}),
            },
            sequence: Some(3),
        };
        let head = r#"{"id":7,"kind":"delivery.attempt","at":"2031-01-01T02:13:20.123Z","actor":{"kind":"system","name":"console"},"project":"PAY","issue":"PAY-1""#;
        assert_eq!(
            serde_json::to_string(&e).ok(),
            Some(format!(
                r#"{head},"artifact":"{artifact}","session":"s1","data":{{"n":1}},"sequence":3}}"#
            ))
        );
        (e.facts.artifact, e.facts.session, e.sequence) = (None, None, None);
        assert_eq!(
            serde_json::to_string(&e).ok(),
            Some(format!(
                r#"{head},"artifact":null,"session":null,"data":{{"n":1}}}}"#
            ))
        );
    }

    #[test]
    fn actors_on_the_wire() {
        let a = Actor::Agent {
            owner: None,
            service: None,
            session: SessionId::parse("s1"),
        };
        assert_eq!(
            serde_json::to_value(&a).ok(),
            Some(
                serde_json::json!({"kind": "agent", "owner": null, "service": null, "session": "s1"})
            )
        );
    }
}
