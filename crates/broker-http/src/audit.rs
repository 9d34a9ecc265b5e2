//! The audit log outside the core: the follower's local state file (the head this replica has
//! verified, kept outside the database so that a writer who rolls the database back cannot
//! roll back this replica's memory too), the background follower, and what the `audit`
//! subcommands run (`verify`, `export`, `accept-head`). See `docs/audit.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use countersign_broker_core::audit::{self, AuditEntry, ChainBreak, Walk};
use countersign_broker_core::seal::Sealer;
use countersign_broker_core::{Broker, Storage};
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// The state file's content.
#[derive(Debug, Serialize, Deserialize)]
struct StateFile {
    position: i64,
    hash: String,
}

/// Where this replica keeps its state file: `audit_state_file` if set; else beside a SQLite
/// database file (`<database>.audit-state.json`); else `countersign-audit-state.json` in the
/// working directory.
pub fn state_path(config: &Config) -> PathBuf {
    if let Some(p) = &config.audit_state_file {
        return p.clone();
    }
    let sqlite_file = config
        .database_url
        .strip_prefix("sqlite://")
        .map(|rest| rest.split('?').next().unwrap_or_default())
        .filter(|p| !p.is_empty() && !p.starts_with(':'));
    match sqlite_file {
        Some(db) => PathBuf::from(format!("{db}.audit-state.json")),
        None => PathBuf::from("countersign-audit-state.json"),
    }
}

/// Reads the head remembered in `path`; `None` when the file does not exist.
pub fn read_state(path: &Path) -> anyhow::Result<Option<Walk>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let s: StateFile =
        serde_json::from_str(&text).with_context(|| format!("parse {}", path.display()))?;
    Ok(Some(Walk {
        position: s.position,
        hash: s.hash,
    }))
}

/// Writes the head to `path` (a temporary file renamed over it).
pub fn write_state(path: &Path, head: &Walk) -> anyhow::Result<()> {
    let text = serde_json::to_string(&StateFile {
        position: head.position,
        hash: head.hash.clone(),
    })?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}

/// The follower: every second, verifies the entries above the remembered head and advances,
/// writing the state file when the head moves, and re-verifies the next
/// [`audit::SWEEP_PER_ROUND`] entries below it (round-robin from the start); at start it walks
/// the whole chain. A break makes the broker fail closed (the core's audit gate) until an operator
/// runs `audit accept-head` and restarts it.
pub async fn follow(broker: Arc<Broker>, state_file: Option<PathBuf>) {
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    let mut written = broker.audit_follower().state().head.position;
    let mut full = true;
    loop {
        tick.tick().await;
        match broker.follow_audit(full).await {
            Ok(st) => {
                full = false;
                if let Some(p) = &state_file
                    && st.head.position != written
                {
                    match write_state(p, &st.head) {
                        Ok(()) => written = st.head.position,
                        Err(e) => tracing::warn!(error = %e, "audit state file not written"),
                    }
                }
            }
            Err(e) => tracing::debug!(code = %e.code, "audit log follow failed"),
        }
    }
}

/// Walks the whole chain. `Ok(Ok(head))` when it verifies, `Ok(Err(break))` where it breaks.
pub async fn verify(
    storage: &dyn Storage,
    sealer: &Sealer,
) -> anyhow::Result<Result<Walk, ChainBreak>> {
    let mut tx = storage.read().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    audit::verify_all(&mut *tx, sealer)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// Where an export starts: a position or an RFC 3339 time.
#[derive(Debug, Clone, Copy)]
pub enum Since {
    Position(i64),
    Time(countersign_broker_core::Time),
}

impl std::str::FromStr for Since {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(p) = s.parse::<i64>() {
            return Ok(Since::Position(p));
        }
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| Since::Time(t.with_timezone(&chrono::Utc)))
            .map_err(|_| format!("{s:?} is neither a position nor an RFC 3339 time"))
    }
}

/// One exported line: the entry as stored, its body parsed (names, never values).
#[derive(Debug, Serialize)]
struct Line<'a> {
    position: i64,
    at: String,
    kind: &'a str,
    subject: &'a str,
    body: serde_json::Value,
    prev_hash: &'a str,
    hash: &'a str,
    seal: &'a str,
}

/// Writes every entry from `since` on as JSON lines, verifying the chain from its start as it
/// goes. Answers the break, if any (entries after it are not written).
pub async fn export(
    storage: &dyn Storage,
    sealer: &Sealer,
    since: Since,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<Option<ChainBreak>> {
    let mut tx = storage.read().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut walk = Walk::default();
    loop {
        let batch: Vec<AuditEntry> = tx
            .audit_entries(walk.position, 1000)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        if batch.is_empty() {
            return Ok(None);
        }
        for e in &batch {
            if let Err(b) = walk.step(sealer, e) {
                return Ok(Some(b));
            }
            let wanted = match since {
                Since::Position(p) => e.position >= p,
                Since::Time(t) => e.at >= t,
            };
            if wanted {
                let line = Line {
                    position: e.position,
                    at: e.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                    kind: &e.kind,
                    subject: &e.subject,
                    body: serde_json::from_str(&e.body).unwrap_or(serde_json::Value::Null),
                    prev_hash: &e.prev_hash,
                    hash: &e.hash,
                    seal: &e.seal,
                };
                writeln!(out, "{}", serde_json::to_string(&line)?)?;
            }
        }
    }
}

/// Where `audit export --follow` has got to: the last entry it wrote, by position and hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub position: i64,
    pub hash: String,
}

/// Reads an export cursor; `None` when the file does not exist.
pub fn read_cursor(path: &Path) -> anyhow::Result<Option<Cursor>> {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t)
            .map(Some)
            .with_context(|| format!("parse {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("read {}", path.display())),
    }
}

/// Writes an export cursor: a temporary file, synced, renamed over the old one.
fn write_cursor(path: &Path, c: &Cursor) -> anyhow::Result<()> {
    use std::io::Write as _;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("write {}", tmp.display()))?;
    f.write_all(serde_json::to_string(c)?.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    Ok(())
}

/// `audit export --follow`: as [`export`], then waits for new entries (polling every
/// `interval`) and writes them as they are appended, until `stop` completes. With a cursor
/// file it resumes after the entry the file names (whose hash must still be the chain's: a
/// log rewritten or rolled back below the cursor is an error, not a silent gap), and writes the
/// file after each batch it has written and flushed: delivery is at least once (a shipper
/// that dies between the two sees the batch again; `position` tells the repeat).
pub async fn export_follow(
    storage: &dyn Storage,
    sealer: &Sealer,
    since: Since,
    cursor_file: Option<&Path>,
    interval: Duration,
    out: &mut dyn std::io::Write,
    stop: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Option<ChainBreak>> {
    let resume = match cursor_file {
        Some(p) => read_cursor(p)?,
        None => None,
    };
    let mut walk = Walk::default();
    let mut written: Option<i64> = None;
    tokio::pin!(stop);
    loop {
        let batch: Vec<AuditEntry> = {
            let mut tx = storage.read().await.map_err(|e| anyhow::anyhow!("{e}"))?;
            tx.audit_entries(walk.position, 1000)
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?
        };
        if batch.is_empty() {
            if let Some(c) = &resume
                && walk.position < c.position
            {
                anyhow::bail!(
                    "the audit log ends at position {} but the cursor is at {}: the log was rolled back",
                    walk.position,
                    c.position
                );
            }
            tokio::select! {
                _ = &mut stop => return Ok(None),
                _ = tokio::time::sleep(interval) => continue,
            }
        }
        let mut last = None;
        for e in &batch {
            if let Err(b) = walk.step(sealer, e) {
                return Ok(Some(b));
            }
            let wanted = match &resume {
                Some(c) if e.position == c.position && e.hash != c.hash => anyhow::bail!(
                    "the entry at the cursor's position {} has another hash: the log was rewritten",
                    c.position
                ),
                Some(c) => e.position > c.position,
                None => match since {
                    Since::Position(p) => e.position >= p,
                    Since::Time(t) => e.at >= t,
                },
            };
            if wanted {
                let line = Line {
                    position: e.position,
                    at: e.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                    kind: &e.kind,
                    subject: &e.subject,
                    body: serde_json::from_str(&e.body).unwrap_or(serde_json::Value::Null),
                    prev_hash: &e.prev_hash,
                    hash: &e.hash,
                    seal: &e.seal,
                };
                writeln!(out, "{}", serde_json::to_string(&line)?)?;
                last = Some(Cursor {
                    position: e.position,
                    hash: e.hash.clone(),
                });
            }
        }
        out.flush()?;
        if let (Some(p), Some(c)) = (cursor_file, last)
            && written != Some(c.position)
        {
            write_cursor(p, &c)?;
            written = Some(c.position);
        }
    }
}
