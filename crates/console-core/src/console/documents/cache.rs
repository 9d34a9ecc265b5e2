//! What one console keeps of its documents in memory: loaded documents, serialized blocks
//! answers and rendered HTML, each good for one state of its artifact, each bounded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::doc::{self, Document};
use crate::ids::ArtifactId;
use crate::work::documents::Artifact;

use super::Documents;

/// Loaded documents a console keeps.
const LOADED_MAX: usize = 32;
/// Serialized blocks answers a console keeps, at most this many bytes in all.
const ANSWERS_BYTES: usize = 64 * 1024 * 1024;
/// How many documents' rendered HTML a console keeps.
const RENDERED_KEPT: usize = 32;

/// What one [`Console`] keeps of its documents, each entry good only for the state it was made
/// from (see [`Kept`]): the engine's loaded documents (an edit of a large document skips
/// parsing it again), serialized blocks answers, and rendered HTML (a 1 MiB document's costs
/// ~40 ms to make). Each is bounded and forgets the entry used least recently. Every write
/// moves an artifact's sequence (another replica's too), so no entry answers for another
/// state; the caches belong to their console, so two consoles in one process (an embedder's,
/// the tests') share nothing.
#[derive(Debug, Default)]
pub(crate) struct DocumentCaches {
    loaded: Mutex<Kept<Document>>,
    answers: Mutex<Kept<Answer>>,
    rendered: Mutex<Kept<doc::SafeHtml>>,
}

/// A kept blocks answer: the reference counts it was made with, and its JSON.
type Answer = (Vec<(String, i64, i64)>, Arc<[u8]>);

/// Entries by artifact id, each with the state it was made for (the artifact's token, its
/// last event and its last edit-log entry) and when it was last used.
#[derive(Debug)]
struct Kept<T> {
    entries: HashMap<ArtifactId, KeptEntry<T>>,
    /// A counter, not a time: what was used least recently has the lowest.
    uses: u64,
    /// The sum of the entries' sizes (as `size` said when each was kept).
    bytes: usize,
}

#[derive(Debug)]
struct KeptEntry<T> {
    state: State,
    used: u64,
    bytes: usize,
    value: T,
}

/// The state an entry is good for: the artifact's token, sequence and last edit-log entry.
type State = (String, i64, i64);

fn state_of(a: &Artifact) -> State {
    (a.token.clone(), a.sequence, a.log_entry)
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            uses: 0,
            bytes: 0,
        }
    }
}

impl<T: Clone> Kept<T> {
    /// The entry for `a` when it was made for `a`'s state.
    fn get(&mut self, a: &Artifact) -> Option<T> {
        self.uses += 1;
        let uses = self.uses;
        let e = self.entries.get_mut(&a.id)?;
        if e.state != state_of(a) {
            return None;
        }
        e.used = uses;
        Some(e.value.clone())
    }

    /// Keeps `value` (of `bytes`) for `a`'s state, forgetting the least recently used entries
    /// until at most `max_entries` and `max_bytes` are kept.
    fn put(&mut self, a: &Artifact, value: T, bytes: usize, max_entries: usize, max_bytes: usize) {
        if bytes > max_bytes {
            return;
        }
        self.uses += 1;
        if let Some(old) = self.entries.remove(&a.id) {
            self.bytes -= old.bytes;
        }
        while self.entries.len() >= max_entries || self.bytes + bytes > max_bytes {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| *k)
            else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= e.bytes;
            }
        }
        self.bytes += bytes;
        self.entries.insert(
            a.id,
            KeptEntry {
                state: state_of(a),
                used: self.uses,
                bytes,
                value,
            },
        );
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DocumentCaches {
    pub(super) fn loaded(&self, a: &Artifact) -> Option<Document> {
        lock(&self.loaded).get(a)
    }

    pub(crate) fn keep_loaded(&self, a: &Artifact, doc: Document) {
        lock(&self.loaded).put(a, doc, 0, LOADED_MAX, usize::MAX);
    }

    pub(super) fn answered(
        &self,
        a: &Artifact,
        counts: &[(String, i64, i64)],
    ) -> Option<Arc<[u8]>> {
        lock(&self.answers)
            .get(a)
            .filter(|(c, _)| c == counts)
            .map(|(_, json)| json)
    }

    pub(super) fn keep_answer(
        &self,
        a: &Artifact,
        counts: Vec<(String, i64, i64)>,
        json: &Arc<[u8]>,
    ) {
        // One answer may take at most a quarter of the budget.
        if json.len() > ANSWERS_BYTES / 4 {
            return;
        }
        lock(&self.answers).put(
            a,
            (counts, json.clone()),
            json.len(),
            usize::MAX,
            ANSWERS_BYTES,
        );
    }

    pub(super) fn html(
        &self,
        a: &Artifact,
        render: impl FnOnce() -> doc::SafeHtml,
    ) -> doc::SafeHtml {
        if let Some(html) = lock(&self.rendered).get(a) {
            return html;
        }
        let html = render();
        lock(&self.rendered).put(a, html.clone(), 0, RENDERED_KEPT, usize::MAX);
        html
    }

    pub(super) fn forget(&self) {
        lock(&self.loaded).clear();
        lock(&self.answers).clear();
        lock(&self.rendered).clear();
    }
}

impl Documents<'_> {
    /// Drops every document this console keeps in memory (what a restart does): the next read
    /// loads from the stored snapshot and edit log. For tests and benchmarks.
    pub fn forget_loaded(&self) {
        self.console.documents.forget();
    }
}
