//! Multi-host PostgreSQL URLs as libpq reads them, over sqlx (which reads one host only).
//!
//! A URL lists its hosts either in the authority (`postgres://u:pw@h1:p1,h2:p2/db?…`) or in the
//! query (`postgres://u:pw@/db?host=h1,h2&port=p1,p2`, one port for all or one per host), and
//! may say what the session must be (`target_session_attrs`: `any`, `read-write`, `read-only`,
//! `primary`, `standby`, `prefer-standby`, as libpq defines them) and how long each host may take
//! to answer (`connect_timeout`, seconds, per host; [`DEFAULT_CONNECT_TIMEOUT`] when absent, no
//! limit when `0`, at least 2 s as libpq). Every other query parameter (`sslmode`, …) is passed
//! on to each host's single-host URL. A URL with one host (or none) and no
//! `target_session_attrs` other than `any` is not ours: [`connect`] hands it to sqlx unchanged.
//!
//! ## Following a failover
//!
//! [`connect`] tries the hosts in order (each within its connect timeout), checks each against
//! `target_session_attrs` (`SELECT pg_is_in_recovery(), current_setting('transaction_read_only')`,
//! one round trip; `prefer-standby`: a standby first, else any host), and builds the pool on
//! the first that fits. Then:
//!
//! - every new connection is checked against the attributes (`after_connect`, one round trip
//!   per connection opened, none per checkout): one that lands on a server that no longer fits
//!   (a demoted primary) is refused, as an I/O error the storage answers 503;
//! - a task per pool runs the search again when something suggests the host no longer fits: a
//!   refused connection, or any driver error mapped to [`StorageError::Unavailable`]
//!   ([`suspect_all`], called by [`crate::sql::db_err`]: a 25006 read-only write, a broken
//!   connection, a pool timeout). One search at a time per pool, at most one per
//!   [`REDISCOVER_GAP`], and every [`RECHECK`] while no host fits;
//! - when the search finds another host, the pool's future connections go there
//!   (`Pool::set_connect_options`), and when it finds that no host fits, or another one does,
//!   it records the time: each checkout (`before_acquire`, an atomic load) drops a connection
//!   opened before it, so the pool fills again from the host that fits.
//!
//! [`writable`] is the readiness check: whether the pool reaches a server that takes writes.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{AnyConnection, AnyPool, Connection, Executor, Row};
use tokio::sync::Notify;

use crate::sql::Backend;
use crate::storage::StorageError;

/// The per-host connect timeout when the URL gives none.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest gap between two searches for a fitting host, per pool.
pub const REDISCOVER_GAP: Duration = Duration::from_millis(500);
/// How often the search runs again while no host fits.
pub const RECHECK: Duration = Duration::from_secs(1);

/// What the session must be (libpq's `target_session_attrs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionAttrs {
    /// Any server.
    Any,
    /// A server whose sessions take writes by default (`transaction_read_only` off).
    ReadWrite,
    /// A server whose sessions are read-only by default.
    ReadOnly,
    /// A server not in recovery (not a standby).
    Primary,
    /// A server in recovery (a hot standby).
    Standby,
    /// A standby if one of the hosts is, else any.
    PreferStandby,
}

impl SessionAttrs {
    fn parse(value: &str) -> Option<SessionAttrs> {
        Some(match value {
            "any" => SessionAttrs::Any,
            "read-write" => SessionAttrs::ReadWrite,
            "read-only" => SessionAttrs::ReadOnly,
            "primary" => SessionAttrs::Primary,
            "standby" => SessionAttrs::Standby,
            "prefer-standby" => SessionAttrs::PreferStandby,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SessionAttrs::Any => "any",
            SessionAttrs::ReadWrite => "read-write",
            SessionAttrs::ReadOnly => "read-only",
            SessionAttrs::Primary => "primary",
            SessionAttrs::Standby => "standby",
            SessionAttrs::PreferStandby => "prefer-standby",
        }
    }

    /// Whether a server in this state fits (`prefer-standby`: any server, once no standby is
    /// found).
    pub fn fits(self, server: ServerState) -> bool {
        match self {
            SessionAttrs::Any | SessionAttrs::PreferStandby => true,
            SessionAttrs::ReadWrite => !server.read_only,
            SessionAttrs::ReadOnly => server.read_only,
            SessionAttrs::Primary => !server.in_recovery,
            SessionAttrs::Standby => server.in_recovery,
        }
    }

    /// Whether a new connection is checked before the pool hands it out.
    fn checks_connections(self) -> bool {
        !matches!(self, SessionAttrs::Any | SessionAttrs::PreferStandby)
    }
}

impl fmt::Display for SessionAttrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a server says of itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerState {
    /// `pg_is_in_recovery()`: a standby.
    pub in_recovery: bool,
    /// `transaction_read_only` of a new transaction: a standby, or a server whose
    /// `default_transaction_read_only` is on (a primary being demoted).
    pub read_only: bool,
}

impl ServerState {
    /// Whether the server takes writes.
    pub fn writable(self) -> bool {
        !self.in_recovery && !self.read_only
    }
}

/// A multi-host URL, parsed: its hosts in order and a single-host URL for each.
#[derive(Clone, PartialEq, Eq)]
pub struct HostList {
    /// `host:port` of each, for logs (no user, no password).
    pub hosts: Vec<String>,
    pub attrs: SessionAttrs,
    /// `None`: no limit (`connect_timeout=0`).
    pub connect_timeout: Option<Duration>,
    /// Each host's URL as sqlx reads it, with the credentials: never shown.
    urls: Vec<String>,
}

impl fmt::Debug for HostList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostList")
            .field("hosts", &self.hosts)
            .field("attrs", &self.attrs)
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

impl HostList {
    /// Parses a `postgres://` or `postgresql://` URL. `Ok(None)`: a URL sqlx reads as it is
    /// (one host or none, `target_session_attrs` absent or `any`). A malformed one is refused
    /// with the problem named, never with a value from the URL (it may be a password).
    pub fn parse(url: &str) -> Result<Option<HostList>, StorageError> {
        let bad = |what: &str| StorageError::Other(format!("database URL: {what}"));
        let (scheme, rest) = url
            .split_once("://")
            .filter(|(s, _)| Backend::of_url(&format!("{s}:")) == Some(Backend::Postgres))
            .ok_or_else(|| bad("not a postgres:// or postgresql:// URL"))?;
        let (before_query, query) = rest.split_once('?').unwrap_or((rest, ""));
        let authority_end = before_query.find('/').unwrap_or(before_query.len());
        let (authority, path) = before_query.split_at(authority_end);
        let (userinfo, host_part) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        if is_plain(host_part, query) {
            return Ok(None);
        }
        let params = Params::parse(query).map_err(|e| bad(&e))?;
        let entries = host_entries(host_part, params.host).map_err(|e| bad(&e))?;
        let ports = ports_for(&entries, params.port).map_err(|e| bad(&e))?;
        let connect_timeout = params.connect_timeout;
        let user = userinfo.map(|u| format!("{u}@")).unwrap_or_default();
        let kept = if params.kept.is_empty() {
            String::new()
        } else {
            format!("?{}", params.kept.join("&"))
        };
        let mut hosts = Vec::with_capacity(entries.len());
        let mut urls = Vec::with_capacity(entries.len());
        for ((name, _), port) in entries.iter().zip(&ports) {
            hosts.push(format!("{name}:{port}"));
            urls.push(format!("{scheme}://{user}{name}:{port}{path}{kept}"));
        }
        if hosts.is_empty() {
            // `target_session_attrs` on a URL with no host: the default host, as sqlx picks it.
            hosts.push("(default host)".into());
            urls.push(format!("{scheme}://{authority}{path}{kept}"));
        }
        Ok(Some(HostList {
            hosts,
            attrs: params.attrs,
            connect_timeout,
            urls,
        }))
    }

    /// Each host's single-host URL, in order (they hold the password: never log them).
    pub fn urls(&self) -> &[String] {
        &self.urls
    }
}

/// Whether a URL is one sqlx reads as it is: one host (or none) and no `target_session_attrs`
/// but `any`. Such a URL is not checked here at all, so that it behaves as it always did.
fn is_plain(authority_hosts: &str, query: &str) -> bool {
    let listed = authority_hosts.contains(',')
        || query.split('&').any(|pair| {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            (key == "host" && value.contains(','))
                || (key == "target_session_attrs" && value != "any")
        });
    !listed
}

/// The query parameters that are ours, and the others, kept as they were.
struct Params<'a> {
    host: Option<&'a str>,
    port: Option<&'a str>,
    attrs: SessionAttrs,
    connect_timeout: Option<Duration>,
    kept: Vec<&'a str>,
}

impl<'a> Params<'a> {
    fn parse(query: &'a str) -> Result<Params<'a>, String> {
        let mut p = Params {
            host: None,
            port: None,
            attrs: SessionAttrs::Any,
            connect_timeout: Some(DEFAULT_CONNECT_TIMEOUT),
            kept: Vec::new(),
        };
        let mut seen: Vec<&str> = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let ours = [
                "host",
                "port",
                "target_session_attrs",
                "connect_timeout",
                "load_balance_hosts",
            ];
            if ours.contains(&key) {
                if seen.contains(&key) {
                    return Err(format!("{key} is given twice"));
                }
                seen.push(key);
            }
            match key {
                "host" => p.host = Some(value),
                "port" => p.port = Some(value),
                "target_session_attrs" => {
                    p.attrs = SessionAttrs::parse(value).ok_or(
                        "target_session_attrs must be any, read-write, read-only, primary, \
                         standby or prefer-standby",
                    )?;
                }
                "connect_timeout" => {
                    let secs: u64 = value
                        .parse()
                        .map_err(|_| "connect_timeout must be a whole number of seconds")?;
                    // libpq: 0 waits forever; less than 2 s counts as 2 s.
                    p.connect_timeout =
                        (secs > 0).then(|| Duration::from_secs(secs.clamp(2, 24 * 3600)));
                }
                "load_balance_hosts" if value == "disable" => {}
                "load_balance_hosts" => {
                    return Err("load_balance_hosts=random is not supported (use disable)".into());
                }
                "hostaddr" if value.contains(',') || value.to_ascii_lowercase().contains("%2c") => {
                    return Err("a list of hostaddr is not supported (list the hosts)".into());
                }
                _ => p.kept.push(pair),
            }
        }
        Ok(p)
    }
}

/// The hosts, each with the port its authority entry names (`None`: none given), from the
/// authority or from `?host=`, not both.
fn host_entries(
    authority_hosts: &str,
    query_hosts: Option<&str>,
) -> Result<Vec<(String, Option<String>)>, String> {
    let mut out = Vec::new();
    match query_hosts {
        Some(_) if !authority_hosts.is_empty() => {
            return Err("hosts are given both in the URL and in ?host=".into());
        }
        Some(list) => {
            for (i, name) in list.split(',').enumerate() {
                if name.is_empty() {
                    return Err(format!("host {} of ?host= is empty", i + 1));
                }
                out.push((host_name(name), None));
            }
        }
        None if authority_hosts.is_empty() => {}
        None => {
            for (i, entry) in split_hosts(authority_hosts).into_iter().enumerate() {
                let n = i + 1;
                let (name, port) = if let Some(rest) = entry.strip_prefix('[') {
                    let (addr, after) = rest
                        .split_once(']')
                        .ok_or_else(|| format!("host {n} has a '[' with no ']'"))?;
                    match after {
                        "" => (format!("[{addr}]"), None),
                        p if p.starts_with(':') => (format!("[{addr}]"), Some(p[1..].to_owned())),
                        _ => return Err(format!("host {n} has text after its ']'")),
                    }
                } else {
                    match entry.rsplit_once(':') {
                        Some((h, p)) => (h.to_owned(), Some(p.to_owned())),
                        None => (entry.to_owned(), None),
                    }
                };
                if name.is_empty() {
                    return Err(format!("host {n} of the URL is empty"));
                }
                out.push((name, port.filter(|p| !p.is_empty())));
            }
        }
    }
    Ok(out)
}

/// Splits `h1:p1,[::1]:p2,h3` at the commas outside brackets.
fn split_hosts(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0u32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out
}

/// A `?host=` entry as an authority host: a Unix socket directory percent-encoded, an IPv6
/// address in brackets.
fn host_name(name: &str) -> String {
    if name.starts_with('/') {
        name.replace('/', "%2F")
    } else if name.contains(':') && !name.starts_with('[') {
        format!("[{name}]")
    } else {
        name.to_owned()
    }
}

/// The port of each host: its own, or `?port=` (one for all, or one per host), or 5432.
fn ports_for(
    entries: &[(String, Option<String>)],
    query_ports: Option<&str>,
) -> Result<Vec<u16>, String> {
    let listed: Vec<&str> = match query_ports {
        Some(_) if entries.iter().any(|(_, p)| p.is_some()) => {
            return Err("ports are given both in the URL and in ?port=".into());
        }
        Some(list) => list.split(',').collect(),
        None => Vec::new(),
    };
    if !listed.is_empty() && listed.len() != 1 && listed.len() != entries.len() {
        return Err(format!(
            "?port= lists {} ports for {} hosts (give one, or one per host)",
            listed.len(),
            entries.len()
        ));
    }
    let port = |i: usize, text: &str| -> Result<u16, String> {
        if text.is_empty() {
            return Ok(5432);
        }
        match text.parse::<u16>() {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(format!(
                "the port of host {} is not a number from 1 to 65535",
                i + 1
            )),
        }
    };
    entries
        .iter()
        .enumerate()
        .map(|(i, (_, own))| match (own, listed.len()) {
            (Some(p), _) => port(i, p),
            (None, 0) => Ok(5432),
            (None, 1) => port(i, listed[0]),
            (None, _) => port(i, listed[i]),
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// Following the hosts
// ---------------------------------------------------------------------------------------------

/// Bumped by [`suspect_all`]; each watcher compares it with the value it last searched at.
static SUSPECTED: AtomicU64 = AtomicU64::new(0);
/// Wakes the watchers; set once the first one starts (until then nobody listens).
static WAKE: OnceLock<Notify> = OnceLock::new();

/// Asks every multi-host pool of the process to check that its host still fits: called when a
/// storage meets an outage ([`crate::sql::db_err`] on [`StorageError::Unavailable`]). Cheap
/// (an atomic add; a wake-up only when a multi-host pool exists); the searches it starts are
/// rate-limited per pool.
pub fn suspect_all() {
    SUSPECTED.fetch_add(1, Ordering::Relaxed);
    if let Some(wake) = WAKE.get() {
        wake.notify_waiters();
    }
}

/// What a pool's hooks share with its watcher (no pool inside: the pool holds the hooks).
#[derive(Debug)]
struct Shared {
    attrs: SessionAttrs,
    base: Instant,
    /// Nanoseconds after `base` of the last detected failover (0: none).
    failover_at: AtomicU64,
    /// Failovers detected so far.
    generation: AtomicU64,
    /// Wakes this pool's watcher (a refused connection).
    wake: Notify,
}

impl Shared {
    /// Whether a connection `age` old was opened before the last detected failover.
    fn opened_before_failover(&self, age: Duration) -> bool {
        match self.failover_at.load(Ordering::Acquire) {
            0 => false,
            at => {
                let since = self.base.elapsed().saturating_sub(Duration::from_nanos(at));
                age >= since
            }
        }
    }

    fn mark_failover(&self) {
        let now = u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.failover_at.store(now.max(1), Ordering::Release);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// The multi-host side of a pool [`connect`] built: which host it is on, and when it last
/// moved. Cloning shares it.
#[derive(Clone)]
pub struct Failover(Arc<Watched>);

struct Watched {
    pool: AnyPool,
    hosts: HostList,
    options: Vec<AnyConnectOptions>,
    current: AtomicUsize,
    shared: Arc<Shared>,
}

impl fmt::Debug for Failover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failover")
            .field("hosts", &self.0.hosts)
            .field("current", &self.current_host())
            .field("generation", &self.generation())
            .finish()
    }
}

impl Failover {
    /// `host:port` of the host new connections go to.
    pub fn current_host(&self) -> &str {
        &self.0.hosts.hosts[self.0.current.load(Ordering::Acquire)]
    }

    /// How many failovers were detected (the host changed, or no host fitted): a connection
    /// kept outside the pool since an earlier generation should be handed back.
    pub fn generation(&self) -> u64 {
        self.0.shared.generation.load(Ordering::Acquire)
    }

    /// How long ago the last failover was detected, if one was.
    pub fn since_failover(&self) -> Option<Duration> {
        match self.0.shared.failover_at.load(Ordering::Acquire) {
            0 => None,
            at => Some(
                self.0
                    .shared
                    .base
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(at)),
            ),
        }
    }

    /// Asks this pool's watcher to check its host now (rate-limited).
    pub fn suspect(&self) {
        self.0.shared.wake.notify_one();
    }
}

/// Opens `options`' pool on `url`. A URL [`HostList::parse`] leaves to sqlx (and SQLite's) is
/// opened exactly as `options.connect(url)` would, with no [`Failover`]; a multi-host one (or
/// one with `target_session_attrs`) on the first host that fits, with this module's
/// `after_connect` and `before_acquire` (replacing any the caller set: callers set theirs on
/// SQLite only) and a watcher task that lives until the pool is closed. `map` maps sqlx's
/// errors (the caller's choice of [`crate::sql::db_err`] or [`crate::sql::begin_err`]).
pub async fn connect(
    options: AnyPoolOptions,
    url: &str,
    map: fn(sqlx::Error) -> StorageError,
) -> Result<(AnyPool, Option<Failover>), StorageError> {
    sqlx::any::install_default_drivers();
    let hosts = match Backend::of_url(url) {
        Some(Backend::Postgres) => HostList::parse(url)?,
        _ => None,
    };
    let Some(hosts) = hosts else {
        return Ok((options.connect(url).await.map_err(map)?, None));
    };
    let mut parsed = Vec::with_capacity(hosts.urls.len());
    for (i, u) in hosts.urls.iter().enumerate() {
        // sqlx's parse errors name the problem, not the URL.
        let o = u
            .parse::<AnyConnectOptions>()
            .map_err(|e| StorageError::Other(format!("database URL: host {}: {e}", i + 1)))?;
        parsed.push(o);
    }
    let chosen = find(&hosts, &parsed).await.ok_or_else(|| {
        StorageError::Unavailable(format!(
            "no database host fits target_session_attrs={} (tried {})",
            hosts.attrs,
            hosts.hosts.join(", ")
        ))
    })?;
    let shared = Arc::new(Shared {
        attrs: hosts.attrs,
        base: Instant::now(),
        failover_at: AtomicU64::new(0),
        generation: AtomicU64::new(0),
        wake: Notify::new(),
    });
    let pool = hooked(options, &shared)
        .connect_with(parsed[chosen].clone())
        .await
        .map_err(map)?;
    tracing::info!(host = %hosts.hosts[chosen], attrs = %hosts.attrs, "database host chosen");
    let failover = Failover(Arc::new(Watched {
        pool: pool.clone(),
        hosts,
        options: parsed,
        current: AtomicUsize::new(chosen),
        shared,
    }));
    tokio::spawn(watch(failover.clone()));
    Ok((pool, Some(failover)))
}

/// `options` with the check of each new connection and the drop of connections older than the
/// last failover.
fn hooked(options: AnyPoolOptions, shared: &Arc<Shared>) -> AnyPoolOptions {
    let fresh = shared.clone();
    let options = options.before_acquire(move |_conn, meta| {
        let keep = !fresh.opened_before_failover(meta.age);
        Box::pin(std::future::ready(Ok(keep)))
    });
    if !shared.attrs.checks_connections() {
        return options;
    }
    let check = shared.clone();
    options.after_connect(move |conn, _meta| {
        let shared = check.clone();
        Box::pin(async move {
            let state = server_state(conn).await?;
            if shared.attrs.fits(state) {
                return Ok(());
            }
            shared.wake.notify_one();
            Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                format!(
                    "the database server does not fit target_session_attrs={} \
                     (in recovery: {}, read-only: {})",
                    shared.attrs, state.in_recovery, state.read_only
                ),
            )))
        })
    })
}

/// What the server at the other end of `conn` is, in one round trip.
pub async fn server_state(conn: &mut AnyConnection) -> Result<ServerState, sqlx::Error> {
    let row = sqlx::query(
        "SELECT pg_is_in_recovery() AS r, current_setting('transaction_read_only') AS ro",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(ServerState {
        in_recovery: row.try_get("r")?,
        read_only: row.try_get::<String, _>("ro")? == "on",
    })
}

/// Connects to one host within the timeout and asks what it is; `None` when it does not
/// answer in time.
async fn probe(options: &AnyConnectOptions, within: Option<Duration>) -> Option<ServerState> {
    let ask = async {
        let mut conn = AnyConnection::connect_with(options).await?;
        let state = server_state(&mut conn).await;
        let _ = conn.close().await;
        state
    };
    let answer = match within {
        Some(t) => tokio::time::timeout(t, ask).await.ok()?,
        None => ask.await,
    };
    match answer {
        Ok(state) => Some(state),
        Err(e) => {
            tracing::debug!(error = %e, "a database host did not answer");
            None
        }
    }
}

/// The first host that fits, in order (`prefer-standby`: the first standby, else the first
/// that answers).
async fn find(hosts: &HostList, options: &[AnyConnectOptions]) -> Option<usize> {
    let mut first_answering = None;
    for (i, o) in options.iter().enumerate() {
        let Some(state) = probe(o, hosts.connect_timeout).await else {
            tracing::debug!(host = %hosts.hosts[i], "database host unreachable");
            continue;
        };
        match hosts.attrs {
            SessionAttrs::PreferStandby if state.in_recovery => return Some(i),
            SessionAttrs::PreferStandby => {
                first_answering.get_or_insert(i);
            }
            attrs if attrs.fits(state) => return Some(i),
            _ => tracing::debug!(
                host = %hosts.hosts[i],
                attrs = %hosts.attrs,
                in_recovery = state.in_recovery,
                read_only = state.read_only,
                "database host does not fit"
            ),
        }
    }
    first_answering
}

/// The watcher: searches again when woken, one search at a time, at most one per
/// [`REDISCOVER_GAP`], every [`RECHECK`] while no host fits; ends when the pool closes.
async fn watch(failover: Failover) {
    let w = &failover.0;
    let wake = WAKE.get_or_init(Notify::new);
    let closed = w.pool.close_event();
    tokio::pin!(closed);
    let mut seen = SUSPECTED.load(Ordering::Relaxed);
    let mut fitting = true;
    loop {
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        if SUSPECTED.load(Ordering::Relaxed) == seen {
            let idle = if fitting { Duration::MAX } else { RECHECK };
            tokio::select! {
                _ = &mut closed => return,
                _ = &mut woken => {}
                _ = w.shared.wake.notified() => {}
                _ = sleep_for(idle) => {}
            }
        }
        seen = SUSPECTED.load(Ordering::Relaxed);
        fitting = search(w).await;
        tokio::select! {
            _ = &mut closed => return,
            _ = tokio::time::sleep(REDISCOVER_GAP) => {}
        }
    }
}

async fn sleep_for(d: Duration) {
    if d == Duration::MAX {
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(d).await;
}

/// One search: moves the pool to the host that fits, or marks a failover when none does.
/// Answers whether a host fits.
async fn search(w: &Watched) -> bool {
    let current = w.current.load(Ordering::Acquire);
    match find(&w.hosts, &w.options).await {
        Some(i) if i == current => true,
        Some(i) => {
            w.pool.set_connect_options(w.options[i].clone());
            w.current.store(i, Ordering::Release);
            w.shared.mark_failover();
            tracing::warn!(
                from = %w.hosts.hosts[current],
                to = %w.hosts.hosts[i],
                attrs = %w.hosts.attrs,
                "database host changed: connections to the old host are dropped"
            );
            true
        }
        None => {
            w.shared.mark_failover();
            tracing::warn!(
                hosts = %w.hosts.hosts.join(", "),
                attrs = %w.hosts.attrs,
                "no database host fits: retrying every second"
            );
            false
        }
    }
}

/// The readiness check: whether the pool reaches a server that takes writes (PostgreSQL: not
/// in recovery, `transaction_read_only` off; SQLite: `SELECT 1` answers), within `within`.
/// A read-only or unreachable server wakes the multi-host watchers.
pub async fn writable(
    pool: &AnyPool,
    backend: Backend,
    within: Duration,
) -> Result<(), StorageError> {
    let check = async {
        let mut conn = pool.acquire().await?;
        match backend {
            Backend::Sqlite => conn.execute("SELECT 1").await.map(|_| true),
            Backend::Postgres => server_state(&mut conn).await.map(ServerState::writable),
        }
    };
    let outcome = match tokio::time::timeout(within, check).await {
        Ok(Ok(true)) => return Ok(()),
        Ok(Ok(false)) => StorageError::Unavailable(
            "the database server is read-only (a standby, or a demoted primary): no primary \
             takes writes"
                .into(),
        ),
        Ok(Err(e)) => StorageError::Unavailable(e.to_string()),
        Err(_) => {
            StorageError::Unavailable(format!("no answer from the database within {within:?}"))
        }
    };
    suspect_all();
    Err(outcome)
}

#[cfg(test)]
#[path = "pg_hosts/tests.rs"]
mod tests;
