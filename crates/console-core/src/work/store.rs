//! The work storage: one trait per aggregate, joined by a transaction ([`WorkTx`]) that the
//! console's storage (`Storage::begin`, a layer above this one) begins. A write transaction holds the event log's append lock
//! from its first append to its commit, so event ids are in commit order: a stream that has
//! sent id `n` never later finds an event below `n` committed.

use async_trait::async_trait;
use countersign_common::storage::StorageError;

use crate::clock::Time;
use crate::ids::{Login, SessionId};
use crate::work::model::{
    Candidate, Event, EventPage, Hit, Issue, IssueFilter, IssueKey, IssueListQuery, NewEvent,
    Project, ProjectKey, ReadState, SearchKind, Status,
};
use crate::work::repos::{RepoMapping, RepoName};

/// Projects.
#[async_trait]
pub trait ProjectTx: Send {
    /// Adds a project; false when its key is taken.
    async fn insert_project(&mut self, p: &Project) -> Result<bool, StorageError>;
    async fn project(&mut self, key: &ProjectKey) -> Result<Option<Project>, StorageError>;
    /// Every project, by key.
    async fn projects(&mut self) -> Result<Vec<Project>, StorageError>;
    /// Takes the project's next issue number (from 1), with the project's highest issue rank
    /// (new issues go after it); `None` when no project has the key. One statement: creating
    /// an issue holds the write lock, and each round trip counts.
    async fn take_issue_number(
        &mut self,
        key: &ProjectKey,
    ) -> Result<Option<(i64, Option<String>)>, StorageError>;
    /// Sets a repository's mapping; when it is its project's default, the project's other
    /// mappings stop being default.
    async fn put_mapping(&mut self, m: &RepoMapping) -> Result<(), StorageError>;
    async fn mapping(&mut self, repo: &RepoName) -> Result<Option<RepoMapping>, StorageError>;
    /// Every mapping, by repository.
    async fn mappings(&mut self) -> Result<Vec<RepoMapping>, StorageError>;
    /// Removes a mapping; false when there was none.
    async fn delete_mapping(&mut self, repo: &RepoName) -> Result<bool, StorageError>;
    /// The issues imported from the repository (their `repo` is `<repo>#n`), by key.
    async fn issues_of_repo(&mut self, repo: &RepoName) -> Result<Vec<IssueKey>, StorageError>;
}

/// Issues.
#[async_trait]
pub trait IssueTx: Send {
    async fn insert_issue(&mut self, i: &Issue) -> Result<(), StorageError>;
    /// The issue imported from a code-hosting ref (`owner/repo#n`), if any.
    async fn issue_by_repo(&mut self, r: &str) -> Result<Option<Issue>, StorageError>;
    /// The issue; in a write transaction its row is locked until commit (PostgreSQL's
    /// `FOR UPDATE`; SQLite's write transactions are serial).
    async fn issue(&mut self, key: &IssueKey) -> Result<Option<Issue>, StorageError>;
    async fn update_issue(&mut self, i: &Issue) -> Result<(), StorageError>;
    /// The issue's assignee, read without locking the issue (who is told of an ask on it).
    async fn assignee_of(&mut self, key: &IssueKey) -> Result<Option<Login>, StorageError>;
    /// A page of the issues the filter selects, by project then number, and how many it
    /// selects in all.
    async fn issues(&mut self, f: &IssueFilter) -> Result<(Vec<Issue>, i64), StorageError>;
    /// At most `limit` of the issues `q`'s filters select, in its order, after its cursor
    /// (keyset paging; every list argument is bound as one JSON array).
    async fn issue_page(
        &mut self,
        q: &IssueListQuery,
        limit: u32,
    ) -> Result<Vec<Issue>, StorageError>;
    /// How many issues `q`'s filters select (its cursor aside).
    async fn issue_page_total(&mut self, q: &IssueListQuery) -> Result<i64, StorageError>;
    /// How many issues `q`'s filters select in each status, its `status` filter and cursor
    /// aside (a board's columns); statuses with none are left out.
    async fn status_counts(
        &mut self,
        q: &IssueListQuery,
    ) -> Result<Vec<(Status, i64)>, StorageError>;
    /// The direct children's progress of several issues at once: `(parent, done, total)`
    /// for each that has children (done: not open).
    async fn child_progress(
        &mut self,
        parents: &[IssueKey],
    ) -> Result<Vec<(IssueKey, i64, i64)>, StorageError>;
    /// Direct children's keys and statuses, by number.
    async fn children(&mut self, key: &IssueKey) -> Result<Vec<(IssueKey, Status)>, StorageError>;
    /// The direct children of several issues at once: `(parent, child, status)`, by child
    /// number (a list's page answers each issue's children in one query, not one each).
    async fn children_of(
        &mut self,
        parents: &[IssueKey],
    ) -> Result<Vec<(IssueKey, IssueKey, Status)>, StorageError>;
    /// The highest rank in the project (new issues go after it).
    async fn last_rank(&mut self, project: &ProjectKey) -> Result<Option<String>, StorageError>;
    /// The rank just after `key`'s in its project, if any.
    async fn rank_after(&mut self, key: &IssueKey) -> Result<Option<String>, StorageError>;
    /// The rank just before `key`'s in its project, if any.
    async fn rank_before(&mut self, key: &IssueKey) -> Result<Option<String>, StorageError>;
    /// A person's read state of one issue: `(read_sequence, pinned)`, if any.
    async fn read_state(
        &mut self,
        login: &Login,
        key: &IssueKey,
    ) -> Result<Option<(i64, bool)>, StorageError>;
    /// Sets a person's read state of one issue.
    async fn put_read_state(
        &mut self,
        login: &Login,
        key: &IssueKey,
        read_sequence: i64,
        pinned: bool,
    ) -> Result<(), StorageError>;
    /// Every read state a person has, with each issue's last sequence, by issue key.
    async fn read_states(&mut self, login: &Login) -> Result<Vec<ReadState>, StorageError>;
    /// The issues whose title or labels hold every one of `words`, within `project`, best
    /// first, at most `limit`, and how many match in all.
    /// `words` are lowercase runs of letters and digits ([`crate::work::search::words`]).
    async fn search_issues(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError>;
    /// How many issues hold each of `words` (as [`IssueTx::search_issues`] takes them) in
    /// their title or labels, in the order given: the words' weights for
    /// `advice.suggestions`.
    async fn word_counts(&mut self, words: &[String]) -> Result<Vec<i64>, StorageError>;
    /// How many issues there are.
    async fn issue_count(&mut self) -> Result<i64, StorageError>;
    /// The newest `limit` issues whose title or labels hold one of `words` at least, newest
    /// first, each with the text its index holds (`advice.suggestions` scores them).
    async fn similar_candidates(
        &mut self,
        words: &[String],
        limit: u32,
    ) -> Result<Vec<Candidate>, StorageError>;
    /// Sessions subscribed to an issue: each that acted there (an event naming it) since its
    /// last unsubscribe, with the time of its first such event; by that time.
    async fn subscribers(&mut self, key: &IssueKey)
    -> Result<Vec<(SessionId, Time)>, StorageError>;
    /// Unsubscribes a session from an issue: its events up to now no longer subscribe it.
    async fn unsubscribe(
        &mut self,
        key: &IssueKey,
        session: &SessionId,
    ) -> Result<(), StorageError>;
}

/// The event log.
#[async_trait]
pub trait EventTx: Send {
    /// Appends an event (its id strictly above every committed one), with `sequence` when it
    /// belongs to an issue's log.
    async fn append_event(
        &mut self,
        e: &NewEvent,
        sequence: Option<i64>,
    ) -> Result<Event, StorageError>;
    /// Events with id above `after`, by id, at most `limit`.
    async fn events_after(&mut self, after: i64, limit: u32) -> Result<Vec<Event>, StorageError>;
    /// A page of one issue's log.
    async fn issue_events(
        &mut self,
        key: &IssueKey,
        page: &EventPage,
    ) -> Result<Vec<Event>, StorageError>;
    /// The highest event id committed (0 when none).
    async fn last_event_id(&mut self) -> Result<i64, StorageError>;
}

/// One transaction over the work storage, handing out one store per area: each is a small
/// trait of its own ([`ProjectTx`], [`IssueTx`], [`EventTx`], [`crate::work::AskTx`],
/// [`crate::work::DocumentTx`], [`crate::work::MessageTx`], [`crate::work::AttemptTx`],
/// [`crate::work::PresenceTx`], [`crate::work::MessageInboxTx`], [`crate::work::DeliveryTx`],
/// [`crate::work::NoticeTx`]), and a storage implements each with a type of its own over the
/// transaction's one connection (`tx.issues().issue(&key)`). An area's operation takes the
/// transaction and reaches the stores it uses; what it reads of another area is in the same
/// transaction.
///
/// A store is handed out boxed (a pointer-sized box per call, beside the future `async_trait`
/// boxes per statement already), which keeps the trait usable as `dyn WorkTx`.
#[async_trait]
pub trait WorkTx: Send {
    fn projects(&mut self) -> Box<dyn ProjectTx + '_>;
    fn issues(&mut self) -> Box<dyn IssueTx + '_>;
    fn events(&mut self) -> Box<dyn EventTx + '_>;
    fn asks(&mut self) -> Box<dyn crate::work::AskTx + '_>;
    fn documents(&mut self) -> Box<dyn crate::work::DocumentTx + '_>;
    fn messages(&mut self) -> Box<dyn crate::work::MessageTx + '_>;
    fn attempts(&mut self) -> Box<dyn crate::work::AttemptTx + '_>;
    fn presence(&mut self) -> Box<dyn crate::work::PresenceTx + '_>;
    fn message_inbox(&mut self) -> Box<dyn crate::work::MessageInboxTx + '_>;
    fn delivery(&mut self) -> Box<dyn crate::work::DeliveryTx + '_>;
    fn notices(&mut self) -> Box<dyn crate::work::NoticeTx + '_>;
    /// Commits, answering the highest event id the transaction appended (`None`: it appended
    /// none). The unit of work (the console's `commit_work`) publishes it once the commit is
    /// done: the storage sees every append, so no event can be left out.
    async fn commit(self: Box<Self>) -> Result<Option<i64>, StorageError>;
    /// Every kind search reads, each as its own method answers it with every word required
    /// ([`IssueTx::search_issues`], [`crate::work::DocumentTx::search_documents`],
    /// `search_asks` not answered only, `search_comments`, `search_messages`): each kind with
    /// its hits and its count, in any order. The storage may read them in one statement
    /// (issue 48: six statements, each a round trip to PostgreSQL, were a third of a search's
    /// time there).
    async fn search_kinds(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<Vec<(SearchKind, Vec<Hit>, i64)>, StorageError>;
}

/// Time helper for storage adapters: milliseconds since the epoch.
pub fn ms(t: &Time) -> i64 {
    t.timestamp_millis()
}
