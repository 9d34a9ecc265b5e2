//! The writer's failure behaviour on a real SQLite file: a member's own failure costs only
//! that member; a failure that may be another's runs the whole batch again.

use std::sync::Arc;

use sqlx::{AnyPool, Executor, Row};

use super::*;

/// Numbers a batch's members left pending, written into `log` before the COMMIT.
#[derive(Default)]
struct Log(Vec<i64>);

impl Pending for Log {
    type Mark = usize;
    fn mark(&self) -> usize {
        self.0.len()
    }
    fn undo(&mut self, mark: usize) {
        self.0.truncate(mark);
    }
    fn forget(&mut self) {
        self.0.clear();
    }
    fn flush(&mut self, held: &mut Deferred) {
        for n in self.0.drain(..) {
            held.push("INSERT INTO log (n) VALUES ($1)", vec![Arg::Int(n)]);
        }
    }
}

async fn pool(dir: &tempfile::TempDir) -> AnyPool {
    sqlx::any::install_default_drivers();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("w.db").display());
    let pool = match AnyPool::connect(&url).await {
        Ok(p) => p,
        Err(e) => panic!("open {url}: {e}"),
    };
    let made = pool
        .execute("CREATE TABLE t (k TEXT PRIMARY KEY); CREATE TABLE log (n BIGINT)")
        .await;
    assert!(made.is_ok(), "{made:?}");
    pool
}

async fn rows(pool: &AnyPool, table: &str) -> Vec<String> {
    let sql = match table {
        "t" => "SELECT k AS v FROM t ORDER BY k",
        _ => "SELECT CAST(n AS TEXT) AS v FROM log ORDER BY n",
    };
    match sqlx::query(sql).fetch_all(pool).await {
        Ok(rows) => rows
            .iter()
            .map(|r| r.try_get::<String, _>("v").unwrap_or_default())
            .collect(),
        Err(e) => panic!("{sql}: {e}"),
    }
}

/// Inserts `k` as a statement sent now (with what is held back).
async fn insert(slot: &mut Slot<Log>, k: &str) -> Result<(), StorageError> {
    slot.writing();
    let mut args = vec![Arg::from(k)];
    let (conn, combined) = slot.with_held_back("INSERT INTO t (k) VALUES ($1)", &mut args)?;
    let sql = combined.unwrap_or_else(|| "INSERT INTO t (k) VALUES ($1)".to_owned());
    let r = bind_all(sqlx::query(&sql), args).execute(conn).await;
    slot.answered();
    r.map(|_| ()).map_err(|e| {
        slot.failed();
        held_back_failed(e)
    })
}

/// Waits until `n` write transactions wait for their turn.
async fn queued(w: &Writer<Log>, n: usize) {
    for _ in 0..500 {
        if w.waiting() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("no writer queued");
}

/// `first` runs and commits while `second` waits for its turn, so both are in one batch; the
/// answers of both, and what the table and the log hold after.
async fn batch_of_two<F, Fut>(
    second: F,
) -> (
    Result<(), StorageError>,
    Result<(), StorageError>,
    Vec<String>,
    Vec<String>,
)
where
    F: FnOnce(Slot<Log>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), StorageError>> + Send,
{
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    let pool = pool(&dir).await;
    let w: Arc<Writer<Log>> = Writer::start(pool.clone(), true);
    let mut a = match w.begin().await {
        Ok(s) => s,
        Err(e) => panic!("begin: {e}"),
    };
    assert!(insert(&mut a, "a").await.is_ok());
    a.pending_mut().0.push(1);
    let wb = w.clone();
    let b = tokio::spawn(async move {
        match wb.begin().await {
            Ok(slot) => second(slot).await,
            Err(e) => Err(e),
        }
    });
    queued(&w, 1).await;
    let first = a.commit().await;
    let second = match b.await {
        Ok(r) => r,
        Err(e) => panic!("second: {e}"),
    };
    // Anything left open ends now.
    w.release().await;
    drop(w);
    let t = rows(&pool, "t").await;
    let log = rows(&pool, "log").await;
    (first, second, t, log)
}

#[tokio::test]
async fn a_batch_commits_its_members_together() {
    let (a, b, t, log) = batch_of_two(|mut s| async move {
        insert(&mut s, "b").await?;
        s.pending_mut().0.push(2);
        s.commit().await
    })
    .await;
    assert_eq!((a, b), (Ok(()), Ok(())));
    assert_eq!(
        (t, log),
        (vec!["a".into(), "b".into()], vec!["1".into(), "2".into()])
    );
}

#[tokio::test]
async fn a_member_dropped_after_writing_is_undone_alone() {
    let (a, b, t, log) = batch_of_two(|mut s| async move {
        insert(&mut s, "b").await?;
        insert(&mut s, "b2").await?;
        s.pending_mut().0.push(2);
        s.abandon();
        Ok(())
    })
    .await;
    assert_eq!((a, b), (Ok(()), Ok(())));
    assert_eq!((t, log), (vec!["a".into()], vec!["1".into()]));
}

#[tokio::test]
async fn a_members_own_failed_statement_costs_only_it() {
    let (a, b, t, log) = batch_of_two(|mut s| async move {
        insert(&mut s, "b").await?;
        s.pending_mut().0.push(2);
        // Its own statement, after its savepoint was answered: a unique violation.
        assert_eq!(insert(&mut s, "a").await, Err(StorageError::Conflict));
        s.commit().await
    })
    .await;
    assert_eq!((a, b), (Ok(()), Err(StorageError::Conflict)));
    assert_eq!((t, log), (vec!["a".into()], vec!["1".into()]));
}

#[tokio::test]
async fn a_member_that_sent_nothing_forgets_what_it_held_back() {
    let (a, b, t, log) = batch_of_two(|mut s| async move {
        s.defer("INSERT INTO t (k) VALUES ($1)", vec![Arg::from("b")]);
        s.pending_mut().0.push(2);
        s.abandon();
        Ok(())
    })
    .await;
    assert_eq!((a, b), (Ok(()), Ok(())));
    assert_eq!((t, log), (vec!["a".into()], vec!["1".into()]));
}

#[tokio::test]
async fn a_failure_that_may_be_anothers_runs_the_whole_batch_again() {
    let dir = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => panic!("tempdir: {e}"),
    };
    let pool = pool(&dir).await;
    let w: Arc<Writer<Log>> = Writer::start(pool.clone(), true);
    let mut a = match w.begin().await {
        Ok(s) => s,
        Err(e) => panic!("begin: {e}"),
    };
    assert!(insert(&mut a, "a").await.is_ok());
    // Held back, to travel with the next member's first statement: it will fail there.
    a.defer("INSERT INTO t (k) VALUES ($1)", vec![Arg::from("a")]);
    let wb = w.clone();
    let b = tokio::spawn(async move {
        let mut s = wb.begin().await?;
        insert(&mut s, "b").await?;
        s.commit().await
    });
    queued(&w, 1).await;
    let first = a.commit().await;
    let second = match b.await {
        Ok(r) => r,
        Err(e) => panic!("second: {e}"),
    };
    assert_eq!(
        (first, second),
        (Err(StorageError::Conflict), Err(StorageError::Conflict))
    );
    w.release().await;
    drop(w);
    assert!(rows(&pool, "t").await.is_empty());
    // The writer goes on: the next batch commits.
    let w: Arc<Writer<Log>> = Writer::start(pool.clone(), true);
    let mut c = match w.begin().await {
        Ok(s) => s,
        Err(e) => panic!("begin: {e}"),
    };
    assert!(insert(&mut c, "c").await.is_ok());
    assert_eq!(c.commit().await, Ok(()));
    assert_eq!(rows(&pool, "t").await, vec!["c".to_owned()]);
}
