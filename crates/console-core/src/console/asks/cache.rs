//! The inbox's kept answers: each person's inbox as last read, good until an event commits,
//! patched from the events since when they name what changed.

use super::*;

/// Kinds of event that name no issue, document or ask and change no inbox: a kept inbox
/// answer stays good across them. Any other kind naming none of those is read afresh.
const NOT_IN_INBOXES: &[&str] = &[
    "architecture.synced",
    "broadcast.sent",
    "delivery.attempt",
    "delivery.settings_changed",
    "delivery.synced",
    "message.accepted",
    "message.replied",
    "message.sent",
    "project.created",
    "repo_mapping.changed",
    "session.gone",
    "session.live",
    "session.updated",
    "session_group.changed",
    "subscription.removed",
];

/// What a run of events may have changed in anyone's inbox: the asks on the issues and
/// documents they are in, and the asks they name (`data.ask`: a snooze, an ask's own
/// events). `None` when one may have changed more (a kind not known to leave inboxes alone
/// that names nothing): the inbox is read afresh.
///
/// It holds because each write that changes an ask, an issue's assignee or a snooze appends
/// its event in the same transaction, in the log of that ask's issue or document.
pub(super) fn inbox_scope(events: &[Event]) -> Option<InboxScope> {
    let mut scope = InboxScope::default();
    for e in events {
        let mut named = false;
        if let Some(i) = &e.facts.issue {
            scope.issues.push(i.as_str().to_owned());
            named = true;
        }
        if let Some(a) = &e.facts.artifact {
            scope.artifacts.push(a.to_string());
            named = true;
        }
        if let Some(a) = e.facts.data.get("ask").and_then(serde_json::Value::as_str) {
            scope.asks.push(a.to_owned());
            named = true;
        }
        if !named && !NOT_IN_INBOXES.contains(&e.kind.as_str()) {
            return None;
        }
    }
    for v in [&mut scope.asks, &mut scope.issues, &mut scope.artifacts] {
        v.sort_unstable();
        v.dedup();
    }
    Some(scope)
}

/// An inbox answer's JSON, shared by every read of it (a person's inbox may be megabytes).
#[derive(Debug, Clone)]
pub struct InboxJson(Arc<SpareBuffer>);

impl std::ops::Deref for InboxJson {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0.0
    }
}

impl AsRef<[u8]> for InboxJson {
    fn as_ref(&self) -> &[u8] {
        &self.0.0
    }
}

/// Buffers of inbox answers no longer read, kept for the next answer's JSON (each console's
/// own, in its [`InboxCache`]). An answer after each write is megabytes made afresh, and a
/// fresh allocation that size is mapped anew by the allocator and faulted in page by page (then
/// unmapped when freed, which stalls the other threads while their TLBs are flushed); a buffer
/// kept is written in place.
#[derive(Debug, Default, Clone)]
pub(crate) struct Spares(Arc<Mutex<Vec<Vec<u8>>>>);

/// Spare buffers kept at most, and the sizes kept (a smaller allocation is recycled by the
/// allocator itself).
const SPARE_BUFFERS_KEPT: usize = 2;
const SPARE_BUFFER_SIZES: std::ops::RangeInclusive<usize> = (1 << 20)..=(64 << 20);

impl Spares {
    /// A buffer of at least `capacity`, empty: a spare one if any.
    fn buffer(&self, capacity: usize) -> Vec<u8> {
        if capacity < *SPARE_BUFFER_SIZES.start() {
            return Vec::with_capacity(capacity);
        }
        let spare = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match spare {
            Some(mut b) => {
                b.clear();
                b.reserve(capacity);
                b
            }
            None => Vec::with_capacity(capacity),
        }
    }
}

/// A buffer that goes back to its console's [`Spares`] when dropped (when there is room).
#[derive(Debug)]
pub struct SpareBuffer(Vec<u8>, Spares);

impl Drop for SpareBuffer {
    fn drop(&mut self) {
        if !SPARE_BUFFER_SIZES.contains(&self.0.capacity()) {
            return;
        }
        let mut spare = self.1.0.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < SPARE_BUFFERS_KEPT {
            spare.push(std::mem::take(&mut self.0));
        }
    }
}

/// An inbox answer: its rows in order, each with its JSON made once; the whole JSON and the
/// typed answer are made on first use.
#[derive(Debug)]
pub struct CachedInbox {
    rows: Vec<KeptRow>,
    /// The first snooze in it to end: the answer is good until then.
    until: Option<Time>,
    json: std::sync::OnceLock<InboxJson>,
    inbox: std::sync::OnceLock<Inbox>,
    /// Where the JSON's buffer comes from and goes back to.
    spares: Spares,
}

#[derive(Debug, Clone)]
struct KeptRow {
    turn_since: Time,
    seq: i64,
    section: Section,
    row: Arc<InboxRow>,
    json: Arc<str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Human,
    Agent,
    Snoozed,
}

impl KeptRow {
    pub(super) fn of(
        e: InboxEntry,
        now: Time,
        row: fn(InboxAsk, Option<Time>) -> InboxRow,
    ) -> Option<Self> {
        let snoozed = e.snoozed_until.filter(|u| *u > now);
        let section = match (snoozed, e.ask.turn) {
            (Some(_), _) => Section::Snoozed,
            (None, Some(Turn::Human)) => Section::Human,
            (None, Some(Turn::Agent)) => Section::Agent,
            (None, None) => return None,
        };
        let (turn_since, seq) = (e.ask.turn_since, e.seq);
        let row = row(e.ask, snoozed);
        // Serializing an inbox row cannot fail.
        let json = serde_json::to_string(&row).unwrap_or_default();
        Some(Self {
            turn_since,
            seq,
            section,
            row: Arc::new(row),
            json: Arc::from(json),
        })
    }
}

impl CachedInbox {
    pub(super) fn of(
        entries: Vec<InboxEntry>,
        now: Time,
        row: fn(InboxAsk, Option<Time>) -> InboxRow,
        spares: Spares,
    ) -> Self {
        Self::sorted(
            entries
                .into_iter()
                .filter_map(|e| KeptRow::of(e, now, row))
                .collect(),
            spares,
        )
    }

    fn sorted(mut rows: Vec<KeptRow>, spares: Spares) -> Self {
        // Oldest turn first; asks made in one millisecond as they were made.
        rows.sort_by_key(|r| (r.turn_since, r.seq));
        let until = rows
            .iter()
            .filter(|r| r.section == Section::Snoozed)
            .filter_map(|r| r.row.snoozed_until)
            .min();
        Self {
            rows,
            until,
            json: std::sync::OnceLock::new(),
            inbox: std::sync::OnceLock::new(),
            spares,
        }
    }

    /// This answer with the part in `scope` replaced by `fresh` (that part read again).
    pub(super) fn patched(
        &self,
        scope: &InboxScope,
        fresh: Vec<InboxEntry>,
        now: Time,
        row: fn(InboxAsk, Option<Time>) -> InboxRow,
    ) -> Self {
        // The scope's ids as the rows' kinds (one that is not one names no row).
        let asks: HashSet<AskId> = scope.asks.iter().filter_map(|a| AskId::parse(a)).collect();
        let issues: HashSet<&str> = scope.issues.iter().map(String::as_str).collect();
        let artifacts: HashSet<ArtifactId> = scope
            .artifacts
            .iter()
            .filter_map(|a| ArtifactId::parse(a))
            .collect();
        let within = |r: &InboxRow| {
            asks.contains(&r.id)
                || r.issue
                    .as_ref()
                    .is_some_and(|i| issues.contains(i.as_str()))
                || r.artifact.is_some_and(|a| artifacts.contains(&a))
        };
        let mut rows: Vec<KeptRow> = self
            .rows
            .iter()
            .filter(|k| !within(&k.row))
            .cloned()
            .collect();
        rows.extend(fresh.into_iter().filter_map(|e| KeptRow::of(e, now, row)));
        Self::sorted(rows, self.spares.clone())
    }

    /// The typed answer (the home page's), made on first use.
    pub fn inbox(&self) -> &Inbox {
        self.inbox.get_or_init(|| {
            let of = |s: Section| -> Vec<InboxRow> {
                self.rows
                    .iter()
                    .filter(|r| r.section == s)
                    .map(|r| (*r.row).clone())
                    .collect()
            };
            Inbox {
                human_turn: of(Section::Human),
                agent_turn: of(Section::Agent),
                snoozed: of(Section::Snoozed),
            }
        })
    }

    /// The answer's JSON (what serializing [`CachedInbox::inbox`] writes), made once for
    /// every reader of this answer from each row's JSON.
    pub fn json(&self) -> InboxJson {
        self.json
            .get_or_init(|| {
                let size: usize = self.rows.iter().map(|r| r.json.len() + 1).sum();
                let mut out = self.spares.buffer(64 + size);
                for (i, (name, s)) in [
                    ("human_turn", Section::Human),
                    ("agent_turn", Section::Agent),
                    ("snoozed", Section::Snoozed),
                ]
                .into_iter()
                .enumerate()
                {
                    out.extend_from_slice(if i == 0 { b"{\"" } else { b"],\"" });
                    out.extend_from_slice(name.as_bytes());
                    out.extend_from_slice(b"\":[");
                    let mut first = true;
                    for r in self.rows.iter().filter(|r| r.section == s) {
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        out.extend_from_slice(r.json.as_bytes());
                    }
                }
                out.extend_from_slice(b"]}");
                // Shared as it was written: `Arc<[u8]>` would copy the megabytes once more.
                InboxJson(Arc::new(SpareBuffer(out, self.spares.clone())))
            })
            .clone()
    }

    /// Rows in it (what the cache's budget counts).
    fn rows(&self) -> usize {
        self.rows.len()
    }
}

/// What the cache holds for a person's inbox with filters.
pub(super) enum Lookup {
    /// Read since the last event committed, its snoozes still on.
    Hit(Arc<CachedInbox>),
    /// Read before the events after this watermark.
    Stale(Arc<CachedInbox>, i64),
    Miss,
}

/// People's inboxes as last read (per person and filters): an answer is good while no event
/// has committed since it was read, and until the first snooze in it ends; one read before
/// later events is patched from them. At most [`InboxCache::ROWS`] rows are kept, the oldest
/// answers dropped first.
#[derive(Debug, Default)]
pub(crate) struct InboxCache {
    entries: Mutex<std::collections::VecDeque<CacheEntry>>,
    /// Buffers of answers no longer read, for the next answer's JSON.
    pub(super) spares: Spares,
}

#[derive(Debug)]
struct CacheEntry {
    filter: InboxFilter,
    watermark: i64,
    inbox: Arc<CachedInbox>,
}

impl InboxCache {
    /// The rows kept in all (about 1 KiB each with their JSON).
    const ROWS: usize = 100_000;
    /// Events since a kept answer that are read to patch it; more, and it is read afresh.
    pub(super) const PATCH_EVENTS: u32 = 200;

    pub(super) fn get(&self, f: &InboxFilter, watermark: i64, now: Time) -> Lookup {
        let Ok(entries) = self.entries.lock() else {
            return Lookup::Miss;
        };
        let Some(e) = entries
            .iter()
            .find(|e| &e.filter == f && e.inbox.until.is_none_or(|u| now < u))
        else {
            return Lookup::Miss;
        };
        if e.watermark == watermark {
            Lookup::Hit(e.inbox.clone())
        } else if e.watermark < watermark {
            Lookup::Stale(e.inbox.clone(), e.watermark)
        } else {
            // Read after events this reader has not seen yet: read afresh.
            Lookup::Miss
        }
    }

    pub(super) fn put(&self, filter: InboxFilter, watermark: i64, inbox: Arc<CachedInbox>) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries
            .iter()
            .any(|e| e.filter == filter && e.watermark > watermark)
        {
            return;
        }
        entries.retain(|e| e.filter != filter);
        entries.push_back(CacheEntry {
            filter,
            watermark,
            inbox,
        });
        let mut rows: usize = entries.iter().map(|e| e.inbox.rows()).sum();
        while rows > Self::ROWS && entries.len() > 1 {
            if let Some(old) = entries.pop_front() {
                rows -= old.inbox.rows();
            }
        }
    }
}
