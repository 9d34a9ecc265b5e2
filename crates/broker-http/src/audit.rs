//! The audit log outside the core: the follower's local state file (the head this replica has
//! verified, kept outside the database so that a writer who rolls the database back cannot
//! roll back this replica's memory too), written durably before an end is answered and at
//! shutdown ([`StateKeeper`]); the check at start; the background follower; the witness route;
//! and what the `audit` subcommands run (`verify`, `export`, `accept-head`). See
//! `docs/audit.md`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use countersign_broker_core::audit::{self, AuditEntry, ChainBreak, HeadKeeper, Walk};
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

/// The state directory when `audit_state_file` is not set: `$STATE_DIRECTORY` (systemd's
/// `StateDirectory=`; the first of its colon-separated list), else
/// `$XDG_STATE_HOME/countersign`, else `$HOME/.local/state/countersign`. Never the working
/// directory: with none of them set it is an error.
pub fn state_dir(var: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<PathBuf> {
    let set = |k: &str| var(k).filter(|v| !v.is_empty());
    if let Some(d) = set("STATE_DIRECTORY") {
        let first = d.split(':').next().unwrap_or_default();
        return Ok(PathBuf::from(first));
    }
    if let Some(d) = set("XDG_STATE_HOME").filter(|d| Path::new(d).is_absolute()) {
        return Ok(Path::new(&d).join("countersign"));
    }
    if let Some(h) = set("HOME") {
        return Ok(Path::new(&h).join(".local/state/countersign"));
    }
    anyhow::bail!(
        "no state directory for the audit state file: set audit_state_file, or STATE_DIRECTORY, XDG_STATE_HOME or HOME"
    )
}

/// What names a database, whatever the URL's form: a SQLite file's absolute path; a
/// PostgreSQL URL without its user, password or options. `None`: an in-memory database (no
/// state file: it is new at every start).
fn database_identity(url: &str) -> Option<String> {
    if let Some(rest) = url.strip_prefix("sqlite:") {
        let path = rest.trim_start_matches("//");
        let path = path.split('?').next().unwrap_or_default();
        if path.is_empty() || path.starts_with(':') {
            return None;
        }
        let p = Path::new(path);
        let abs = std::fs::canonicalize(p)
            .ok()
            .or_else(|| std::env::current_dir().ok().map(|d| d.join(p)))
            .unwrap_or_else(|| p.to_path_buf());
        return Some(format!("sqlite:{}", abs.display()));
    }
    let (scheme, rest) = url.split_once("://")?;
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let rest = rest.rsplit_once('@').map(|(_, r)| r).unwrap_or(rest);
    Some(format!("{scheme}://{rest}"))
}

/// Where this replica keeps its state file: `audit_state_file` if set; else, in the state
/// directory ([`state_dir`]), `broker-audit-<16 hex digits>.json`, named by a hash of the
/// database's identity (a SQLite file's absolute path; a PostgreSQL URL's host, port and
/// database), so that brokers of one user on different databases keep different files. `None`
/// for an in-memory database.
pub fn state_path(config: &Config) -> anyhow::Result<Option<PathBuf>> {
    state_path_with(config, &|k| std::env::var(k).ok())
}

/// As [`state_path`], with the environment given.
pub fn state_path_with(
    config: &Config,
    var: &dyn Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<PathBuf>> {
    if let Some(p) = &config.audit_state_file {
        return Ok(Some(p.clone()));
    }
    let Some(identity) = database_identity(&config.database_url) else {
        return Ok(None);
    };
    let digest = crate::sha256(&identity);
    let name = format!("broker-audit-{}.json", hex16(&digest));
    Ok(Some(state_dir(var)?.join(name)))
}

fn hex16(bytes: &[u8]) -> String {
    bytes.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Where earlier versions kept the state file by default (beside a SQLite database file, else
/// in the working directory): read once at start when the new default does not exist yet.
pub fn legacy_state_path(config: &Config) -> Option<PathBuf> {
    if config.audit_state_file.is_some() {
        return None;
    }
    let sqlite_file = config
        .database_url
        .strip_prefix("sqlite://")
        .map(|rest| rest.split('?').next().unwrap_or_default())
        .filter(|p| !p.is_empty() && !p.starts_with(':'));
    match sqlite_file {
        Some(db) => Some(PathBuf::from(format!("{db}.audit-state.json"))),
        None if config.database_url.starts_with("sqlite:") => None,
        None => Some(PathBuf::from("countersign-audit-state.json")),
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

/// Writes the head to `path` durably: a temporary file beside it, written and `fsync`ed,
/// renamed over it, and the directory `fsync`ed (so the rename itself survives a crash). The
/// directory is created (mode 0700) when missing.
pub fn write_state(path: &Path, head: &Walk) -> anyhow::Result<()> {
    use std::io::Write as _;
    let text = serde_json::to_string(&StateFile {
        position: head.position,
        hash: head.hash.clone(),
    })?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.exists() {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&dir)
            .with_context(|| format!("create {}", dir.display()))?;
    }
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    let tmp = dir.join(name);
    let mut f = std::fs::File::create(&tmp).with_context(|| format!("write {}", tmp.display()))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .with_context(|| format!("write {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path).with_context(|| format!("rename to {}", path.display()))?;
    std::fs::File::open(&dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("fsync {}", dir.display()))?;
    Ok(())
}

/// The replica's state file as the core's [`HeadKeeper`]: heads are written durably
/// ([`write_state`]) and never backwards. Concurrent ends share writes (group commit): one
/// caller writes at a time; the others wait for their turn, and one whose head a write that
/// finished meanwhile already covers returns without writing. A burst of ends costs about two
/// `fsync` rounds however many there are.
#[derive(Debug)]
pub struct StateKeeper {
    path: PathBuf,
    /// The highest head asked for, and the highest written.
    heads: std::sync::Mutex<(Walk, Walk)>,
    turn: tokio::sync::Mutex<()>,
}

impl StateKeeper {
    /// A keeper of `path`, which holds `written` (read at start).
    pub fn new(path: PathBuf, written: Option<Walk>) -> Self {
        let w = written.unwrap_or_default();
        Self {
            path,
            heads: std::sync::Mutex::new((w.clone(), w)),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[async_trait::async_trait]
impl HeadKeeper for StateKeeper {
    async fn keep(&self, head: &Walk) -> Result<(), String> {
        {
            let mut h = self.heads.lock().unwrap_or_else(|p| p.into_inner());
            if head.position <= h.1.position {
                return Ok(());
            }
            if head.position > h.0.position {
                h.0 = head.clone();
            }
        }
        let _turn = self.turn.lock().await;
        let wanted = {
            let h = self.heads.lock().unwrap_or_else(|p| p.into_inner());
            if head.position <= h.1.position {
                return Ok(());
            }
            h.0.clone()
        };
        let (path, w) = (self.path.clone(), wanted.clone());
        tokio::task::spawn_blocking(move || write_state(&path, &w))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("{e:#}"))?;
        let mut h = self.heads.lock().unwrap_or_else(|p| p.into_inner());
        if wanted.position > h.1.position {
            h.1 = wanted;
        }
        Ok(())
    }
}

/// At start: the head this replica remembers (its state file; on first start with the new
/// default, the file earlier versions kept), the keeper over the file, and one round of the
/// follower before serving, so a database behind the state file fails closed before any
/// request is answered. Answers the keeper (none for an in-memory database).
pub async fn start(broker: &Broker, config: &Config) -> anyhow::Result<Option<Arc<StateKeeper>>> {
    let Some(path) = state_path(config)? else {
        tracing::info!("audit state: in memory only (in-memory database)");
        return Ok(None);
    };
    let mut head = read_state(&path)?;
    if head.is_none()
        && let Some(old) = legacy_state_path(config)
        && let Some(h) = read_state(&old)?
    {
        write_state(&path, &h)?;
        tracing::info!(from = %old.display(), to = %path.display(), "audit state file moved to the state directory");
        head = Some(h);
    }
    tracing::info!(
        state_file = %path.display(),
        position = head.as_ref().map(|h| h.position).unwrap_or(0),
        "audit state file"
    );
    let keeper = Arc::new(StateKeeper::new(path, head.clone()));
    let follower = broker.audit_follower();
    if let Some(h) = head {
        follower.reset(h);
    }
    follower.set_keeper(keeper.clone());
    broker
        .follow_audit(false)
        .await
        .map_err(|e| anyhow::anyhow!("audit log: first check: {e}"))?;
    if let Some(b) = follower.broken() {
        tracing::error!(
            position = b.position,
            reason = b.reason.as_str(),
            "audit log: the database is behind what this replica remembers, or its chain is broken: failing closed until an operator runs `countersign-broker audit accept-head`"
        );
    }
    Ok(Some(keeper))
}

/// At graceful shutdown: the head this replica verified is kept.
pub async fn at_shutdown(broker: &Broker) {
    let f = broker.audit_follower();
    let head = f.state().head;
    if let Err(e) = f.keep(&head).await {
        tracing::error!(error = %e, "audit state file not written at shutdown");
    }
}

/// The follower: on each of `ticks` (every second), verifies the entries above the remembered head and advances,
/// keeping the head (the state file) when it moves, and re-verifies the next
/// [`audit::SWEEP_PER_ROUND`] entries below it (round-robin from the start); its first round
/// walks the whole chain. A break makes the broker fail closed (the core's audit gate) until an
/// operator runs `audit accept-head` and restarts it.
pub async fn follow(broker: Arc<Broker>, mut ticks: countersign_common::tick::Ticks) {
    let mut full = true;
    loop {
        let _pass = ticks.next().await;
        match broker.follow_audit(full).await {
            Ok(st) => {
                full = false;
                if let Err(e) = broker.audit_follower().keep(&st.head).await {
                    tracing::warn!(error = %e, "audit state file not written");
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
    let mut tx = storage
        .snapshot()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    audit::verify_all(&mut *tx, sealer)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// What `audit verify` found: every finding, the number of entries and the head walked.
#[derive(Debug)]
pub struct Inspected {
    pub entries: i64,
    pub head: Walk,
    pub findings: Vec<audit::Finding>,
}

/// Checks everything sealed ([`audit::Inspection`]): every entry of the chain; every
/// credential, enrollment, grant (with its record), record (with its passkey countersignature,
/// verified again) and passkey against its seal and the chain's entries; and, given the head a replica remembers, that the chain holds it.
pub async fn inspect(
    storage: &countersign_broker_sql::SqlStorage,
    sealer: &Sealer,
    settings: Option<&countersign_broker_core::passkey::PasskeySettings>,
    remembered: Option<(Walk, String)>,
) -> anyhow::Result<Inspected> {
    let ids = storage.inventory().await.map_err(db)?;
    let mut tx = storage.snapshot().await.map_err(db)?;
    let mut ins = audit::Inspection::new();
    if let Some((head, source)) = remembered {
        ins.remember(head, source);
    }
    let mut after = 0;
    loop {
        let batch = tx.audit_entries(after, 1000).await.map_err(db)?;
        let Some(last) = batch.last() else { break };
        after = last.position;
        for e in &batch {
            ins.entry(sealer, e);
        }
    }
    inspect_machines(&mut *tx, &mut ins, sealer, &ids).await;
    inspect_decisions(&mut *tx, &mut ins, sealer, settings, &ids).await?;
    drop(tx);
    let (entries, head) = (ins.entries(), ins.head().clone());
    Ok(Inspected {
        entries,
        head,
        findings: ins.finish(),
    })
}

/// A storage error as the audit commands report it.
fn db(e: countersign_broker_core::StorageError) -> anyhow::Error {
    anyhow::anyhow!("database: {e}")
}

/// Every launcher credential and enrollment row against its seal and the chain.
async fn inspect_machines(
    tx: &mut dyn countersign_broker_core::storage::Tx,
    ins: &mut audit::Inspection,
    sealer: &Sealer,
    ids: &countersign_broker_sql::Inventory,
) {
    use countersign_broker_core::ids::{CredentialId, EnrollmentId};
    for id in &ids.credentials {
        match CredentialId::parse(id).ok() {
            None => ins.unreadable("credentials", id, "the id does not parse"),
            Some(cid) => match tx.get_credential(cid).await {
                Ok(Some(c)) => ins.credential(sealer, &c),
                Ok(None) => ins.unreadable("credentials", id, "not found by its id"),
                Err(e) => ins.unreadable("credentials", id, &e.to_string()),
            },
        }
    }
    for id in &ids.enrollments {
        match EnrollmentId::parse(id).ok() {
            None => ins.unreadable("enrollments", id, "the id does not parse"),
            Some(eid) => match tx.get_enrollment(eid).await {
                Ok(Some(e)) => ins.enrollment(sealer, &e),
                Ok(None) => ins.unreadable("enrollments", id, "not found by its id"),
                Err(e) => ins.unreadable("enrollments", id, &e.to_string()),
            },
        }
    }
}

/// Every passkey, record (with its countersignature) and grant (with its record) against its
/// seal and the chain.
async fn inspect_decisions(
    tx: &mut dyn countersign_broker_core::storage::Tx,
    ins: &mut audit::Inspection,
    sealer: &Sealer,
    settings: Option<&countersign_broker_core::passkey::PasskeySettings>,
    ids: &countersign_broker_sql::Inventory,
) -> anyhow::Result<()> {
    use countersign_broker_core::ids::{GrantId, RecordId};
    let passkeys: std::collections::HashMap<String, _> = tx
        .list_passkeys()
        .await
        .map_err(db)?
        .into_iter()
        .map(|p| (p.id.clone(), p))
        .collect();
    for p in passkeys.values() {
        ins.passkey(sealer, p);
    }
    for id in &ids.records {
        match RecordId::parse(id).ok() {
            None => ins.unreadable("records", id, "the id does not parse"),
            Some(rid) => match tx.get_record(&rid).await {
                Ok(Some(r)) => {
                    ins.record(sealer, &r);
                    let by = r
                        .decided
                        .as_ref()
                        .and_then(|d| d.countersignature.as_ref())
                        .and_then(|c| passkeys.get(&c.credential));
                    ins.countersignature(settings, &r, by);
                }
                Ok(None) => ins.unreadable("records", id, "not found by its id"),
                Err(e) => ins.unreadable("records", id, &e.to_string()),
            },
        }
    }
    match tx.unsettled_issued(u32::MAX).await {
        Ok(rows) => ins.unsettled_issued(&rows),
        Err(e) => ins.unreadable("issued", "*", &e.to_string()),
    }
    for id in &ids.grants {
        match GrantId::parse(id).ok() {
            None => ins.unreadable("grants", id, "the id does not parse"),
            Some(gid) => match tx.get_grant(gid).await {
                Ok(Some(g)) => {
                    let record = match g.record_id {
                        Some(rid) => tx.get_record(&rid).await.ok().flatten(),
                        None => None,
                    };
                    ins.grant(sealer, &g, record.as_ref());
                }
                Ok(None) => ins.unreadable("grants", id, "not found by its id"),
                Err(e) => ins.unreadable("grants", id, &e.to_string()),
            },
        }
    }
    Ok(())
}

/// `audit accept-head`: verifies the chain as it now is, appends a sealed
/// [`audit::ACCEPT_KIND`] entry that records the acceptance (and the head `remembered` by the
/// state file it replaces), and answers the new head, for the caller to write to the state
/// file. A chain that does not verify is not accepted.
pub async fn accept_head(
    storage: &dyn Storage,
    sealer: &Sealer,
    remembered: Option<&Walk>,
    now: countersign_broker_core::Time,
) -> anyhow::Result<Result<Walk, ChainBreak>> {
    let head = match verify(storage, sealer).await? {
        Ok(h) => h,
        Err(b) => return Ok(Err(b)),
    };
    let body = serde_json::json!({
        "head": { "position": head.position, "hash": head.hash },
        "remembered": remembered.map(|r| serde_json::json!({ "position": r.position, "hash": r.hash })),
    });
    let event = audit::AuditEvent {
        kind: audit::ACCEPT_KIND,
        subject: audit::ACCEPT_SUBJECT.to_owned(),
        body: body.to_string(),
    };
    let mut tx = storage.begin().await.map_err(db)?;
    let now = countersign_broker_core::clock::to_millis(now);
    let appended = audit::append(&mut *tx, sealer, now, std::slice::from_ref(&event))
        .await
        .map_err(db)?;
    tx.commit().await.map_err(db)?;
    let Some((position, hash)) = appended else {
        anyhow::bail!("nothing appended");
    };
    Ok(Ok(Walk { position, hash }))
}

/// `POST /v1/audit/witness` (console token; outside the spec's routes): a witness (the console)
/// presents the head it remembers of this broker's chain and the last accepted position it has
/// seen; the broker checks its chain still holds that head ([`Broker::witness`]) and answers its
/// own verified head for the witness to remember. A chain behind the witness's record fails the
/// broker closed: 503 `DATABASE_UNAVAILABLE`, `audit log: …`.
pub async fn witness_route(
    axum::extract::State(st): axum::extract::State<Arc<crate::AppState>>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> crate::error::ApiResult<axum::response::Response> {
    use axum::response::IntoResponse;
    use countersign_broker_core::ErrorCode;
    crate::extract::console(&st, &headers)?;
    let seen: WitnessBody = countersign_proto::json::from_slice(&body).map_err(|_| {
        countersign_broker_core::Error::with_message(
            ErrorCode::INVALID_REQUEST,
            "body must be {\"position\": integer >= 0, \"hash\": 64 hex digits, \"accepted\": integer >= 0}",
        )
    })?;
    let valid_hash = seen.hash.len() == 64 && seen.hash.bytes().all(|b| b.is_ascii_hexdigit());
    if seen.position < 0 || seen.accepted < 0 || !valid_hash {
        return Err(countersign_broker_core::Error::with_message(
            ErrorCode::INVALID_REQUEST,
            "position and accepted must be >= 0, hash 64 hex digits",
        )
        .into());
    }
    let answer = st
        .broker
        .witness(&audit::Witnessed {
            head: Walk {
                position: seen.position,
                hash: seen.hash.to_ascii_lowercase(),
            },
            accepted: seen.accepted,
        })
        .await?;
    Ok(axum::Json(WitnessBody {
        position: answer.head.position,
        hash: answer.head.hash,
        accepted: answer.accepted,
    })
    .into_response())
}

/// The witness route's body, both ways: the one type the console's witness sends and reads.
pub use countersign_common::wire::WitnessHead as WitnessBody;

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

impl<'a> Line<'a> {
    fn of(e: &'a AuditEntry) -> Self {
        Line {
            position: e.position,
            at: e.at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            kind: &e.kind,
            subject: &e.subject,
            body: serde_json::from_str(&e.body).unwrap_or(serde_json::Value::Null),
            prev_hash: &e.prev_hash,
            hash: &e.hash,
            seal: &e.seal,
        }
    }
}

/// Writes every entry from `since` on as JSON lines, verifying the chain from its start as it
/// goes. Answers the break, if any (entries after it are not written).
pub async fn export(
    storage: &dyn Storage,
    sealer: &Sealer,
    since: Since,
    out: &mut dyn std::io::Write,
) -> anyhow::Result<Option<ChainBreak>> {
    let mut tx = storage
        .snapshot()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
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
                writeln!(out, "{}", serde_json::to_string(&Line::of(e))?)?;
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
            let mut tx = storage
                .snapshot()
                .await
                .map_err(|e| anyhow::anyhow!("{e}"))?;
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
                writeln!(out, "{}", serde_json::to_string(&Line::of(e))?)?;
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
