//! The disk sync of SQLite's group commit, outside the writer's turn.
//!
//! With `synchronous = FULL`, SQLite syncs the write-ahead log inside every `COMMIT`, and the
//! writer's turn is held for it: the next batch's statements wait a whole fsync before they
//! can start, so at a steady rate the writer spends most of its time waiting for the disk and
//! batches stay small. Instead, the broker's connections run `synchronous = NORMAL` (in WAL
//! mode: `COMMIT` writes the log without syncing it; checkpoints still sync the log before they
//! copy it and the database after) and [`Durable`] syncs the log itself after each batch's
//! `COMMIT`, with the writer's turn already given to the next batch. A batch's members hear
//! "committed" only once a sync that began after their `COMMIT` has finished, so what a caller
//! is told is committed is on disk, as with `FULL`; and the next batch's statements run while
//! the disk works.
//!
//! What `FULL` also gave: nothing another connection could read was ever short of the disk.
//! [`Durable::settled`] keeps that for every read that reaches the database: it waits until
//! the batches committed when it is called are synced (at once when none is pending).
//!
//! Each sync opens the log by path (a kept descriptor could outlive a log SQLite deleted and
//! made again) and syncs it; the first also syncs the directory, which holds the log's name.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use countersign_broker_core::storage::StorageError;
use tokio::sync::watch;

/// The write-ahead log's syncs: which batches have begun their `COMMIT` and which are on disk.
pub(crate) struct Durable {
    /// The database file's write-ahead log (`<file>-wal`).
    wal: PathBuf,
    /// Batches that have begun their `COMMIT`, counted from the start. Counted before the
    /// `COMMIT` runs, so that a read which could see a batch's rows finds it counted.
    committing: AtomicU64,
    /// How far the log is known on disk, or that a sync failed.
    synced: watch::Sender<Synced>,
    /// Whether the directory has been synced once.
    dir_synced: AtomicBool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Synced {
    /// Every batch up to this number is on disk (or never committed).
    upto: u64,
    /// A sync failed: after that the kernel's pages cannot be trusted to reach the disk, so
    /// the storage answers as unavailable until the process restarts.
    broken: bool,
}

fn broken() -> StorageError {
    StorageError::Unavailable("syncing the SQLite log failed earlier: restart the broker".into())
}

impl Durable {
    /// For the database file at `file`.
    pub(crate) fn new(file: PathBuf) -> Self {
        let mut wal = file.into_os_string();
        wal.push("-wal");
        Self {
            wal: wal.into(),
            committing: AtomicU64::new(0),
            synced: watch::Sender::new(Synced::default()),
            dir_synced: AtomicBool::new(false),
        }
    }

    /// Counts a batch about to run its `COMMIT`; its number, for [`Durable::sync`] once the
    /// `COMMIT` returned, or [`Durable::failed`] when it did not commit.
    pub(crate) fn committing(&self) -> u64 {
        self.committing.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Syncs the log after batch `n`'s `COMMIT` returned, which puts it and every batch before
    /// it on disk. Batches commit one at a time and the flusher syncs each before it commits
    /// the next, so nothing after `n` is in flight.
    pub(crate) async fn sync(&self, n: u64) -> Result<(), StorageError> {
        let now = *self.synced.borrow();
        if now.broken {
            return Err(broken());
        }
        if now.upto >= n {
            return Ok(());
        }
        let wal = self.wal.clone();
        let dir = (!self.dir_synced.load(Ordering::Acquire))
            .then(|| wal.parent().map(PathBuf::from))
            .flatten();
        let done = tokio::task::spawn_blocking(move || sync_files(&wal, dir.as_deref()))
            .await
            .map_err(std::io::Error::other)
            .and_then(|r| r);
        if let Err(e) = done {
            tracing::error!(error = %e, "syncing the SQLite log failed: the storage is unavailable until a restart");
            self.synced.send_modify(|s| s.broken = true);
            return Err(StorageError::Unavailable(format!(
                "syncing the SQLite log failed: {e}"
            )));
        }
        self.dir_synced.store(true, Ordering::Release);
        self.advance(n);
        Ok(())
    }

    /// Batch `n` did not commit: nothing of it is visible, nothing to sync.
    pub(crate) fn failed(&self, n: u64) {
        self.advance(n);
    }

    fn advance(&self, n: u64) {
        self.synced.send_if_modified(|s| {
            let moved = n > s.upto;
            s.upto = s.upto.max(n);
            moved
        });
    }

    /// Waits until every batch that had begun its `COMMIT` when this is called is on disk (at
    /// once when none is pending). Called after a read's statement, it keeps that read from
    /// answering with rows a crash of the machine could take back.
    pub(crate) async fn settled(&self) -> Result<(), StorageError> {
        let target = self.committing.load(Ordering::Acquire);
        let mut rx = self.synced.subscribe();
        match rx.wait_for(|s| s.broken || s.upto >= target).await {
            Ok(s) if !s.broken => Ok(()),
            _ => Err(broken()),
        }
    }
}

fn sync_files(wal: &std::path::Path, dir: Option<&std::path::Path>) -> std::io::Result<()> {
    std::fs::File::open(wal)?.sync_data()?;
    if let Some(dir) = dir {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_read_waits_for_the_sync_of_what_it_could_see() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("db-wal"), b"log").expect("a log");
        let d = std::sync::Arc::new(Durable::new(dir.path().join("db")));
        let settled = std::time::Duration::from_secs(5);
        // Nothing committed yet: settled at once.
        tokio::time::timeout(settled, d.settled())
            .await
            .expect("in time")
            .expect("settled");
        let a = d.committing();
        let reader = tokio::spawn({
            let d = d.clone();
            async move { d.settled().await }
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(
            !reader.is_finished(),
            "a read settled before the batch it could see"
        );
        d.sync(a).await.expect("synced");
        tokio::time::timeout(settled, reader)
            .await
            .expect("in time")
            .expect("the reader ran")
            .expect("settled");
        assert_eq!(d.synced.borrow().upto, a);
        // A batch that failed to commit holds no read back.
        let b = d.committing();
        d.failed(b);
        tokio::time::timeout(settled, d.settled())
            .await
            .expect("in time")
            .expect("settled");
        // A sync already done costs nothing.
        d.sync(a).await.expect("synced");
    }

    #[tokio::test]
    async fn a_log_that_cannot_be_synced_is_an_outage_until_a_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = Durable::new(dir.path().join("missing"));
        let n = d.committing();
        assert!(matches!(d.sync(n).await, Err(StorageError::Unavailable(_))));
        assert!(d.synced.borrow().broken);
        assert!(matches!(
            d.settled().await,
            Err(StorageError::Unavailable(_))
        ));
        std::fs::write(dir.path().join("missing-wal"), b"log").expect("a log");
        let m = d.committing();
        assert!(matches!(d.sync(m).await, Err(StorageError::Unavailable(_))));
    }
}
