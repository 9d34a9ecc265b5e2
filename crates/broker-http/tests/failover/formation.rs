//! A pg_auto_failover formation on loopback, started by the test and removed after: a monitor
//! and two nodes (Debian's `postgresql-15-auto-failover`), each a keeper (`pg_autoctl run`) in
//! a process group of its own under one temporary directory, with synchronous replication (the
//! formation's default with two nodes: `synchronous_standby_names = 'ANY 1 (…)'`).
//!
//! pg_autoctl refuses to run as root: run as root (as CI is), every pg_autoctl process runs as
//! the `postgres` user, in a directory that user owns. Connections are trusted and unencrypted
//! (`--auth trust --no-ssl`): loopback only, the quickest sound setup for a test.
//!
//! The monitor's health checks and timeouts are lowered (in its `postgresql.auto.conf`, before
//! it starts) so that a dead primary is noticed in about 3 s and its demote timeout is 3 s
//! instead of 30 s: pg_auto_failover keeps the promoted node read-only until then.
//!
//! [`Formation`]'s drop stops the keepers (SIGTERM to each group, SIGKILL after 15 s) and
//! removes the directory, also when the test fails.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// The PostgreSQL binaries pg_autoctl runs.
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// The monitor's settings that decide how fast a dead node is noticed and its standby promoted
/// (defaults: checks every 5 s, 2 retries 2 s apart, unhealthy after 20 s, demoted after 30 s).
const MONITOR_SETTINGS: &str = "
pgautofailover.health_check_period = 1000
pgautofailover.health_check_timeout = 1000
pgautofailover.health_check_max_retries = 1
pgautofailover.health_check_retry_delay = 500
pgautofailover.node_considered_unhealthy_timeout = 3000
pgautofailover.primary_demote_timeout = 3000
";

/// The database the nodes are created with (the brokers' database); the console gets its own.
pub const DATABASE: &str = "countersign";

/// `pg_autoctl`'s path, or why the test skips.
pub fn autoctl() -> Result<PathBuf, String> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/bin")])
        .map(|d| d.join("pg_autoctl"))
        .find(|p| p.is_file())
        .filter(|_| Path::new(PG_BIN).join("pg_ctl").is_file())
        .ok_or_else(|| {
            format!("no pg_autoctl (and {PG_BIN}/pg_ctl): install postgresql-15-auto-failover")
        })
}

/// A node of the formation: its name, port and data directory.
#[derive(Debug, Clone)]
pub struct Node {
    pub name: String,
    pub port: u16,
    pub pgdata: PathBuf,
}

/// A keeper (`pg_autoctl run`, or `create … --run`): the leader of its process group, which
/// holds its services and its postmaster (the postmaster's children are in groups of their own
/// and end when it does).
struct Keeper {
    pgdata: PathBuf,
    child: Child,
}

pub struct Formation {
    dir: tempfile::TempDir,
    autoctl: PathBuf,
    /// The `postgres` user's uid and gid, when the test runs as root.
    owner: Option<(u32, u32)>,
    monitor: PathBuf,
    monitor_port: u16,
    pub nodes: Vec<Node>,
    keepers: Mutex<Vec<Keeper>>,
}

/// One node as the monitor sees it (`pg_autoctl show state --json`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeState {
    pub name: String,
    pub reported: String,
    pub assigned: String,
}

/// Three distinct loopback ports free now.
fn ports() -> anyhow::Result<[u16; 3]> {
    let l: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<Result<_, _>>()?;
    let p = |i: usize| -> anyhow::Result<u16> { Ok(l[i].local_addr()?.port()) };
    Ok([p(0)?, p(1)?, p(2)?])
}

/// A numeric id of the `postgres` user (`id -u` or `id -g`).
fn id_of(flag: &str) -> anyhow::Result<u32> {
    let out = Command::new("id").args([flag, "postgres"]).output()?;
    if !out.status.success() {
        bail!("no postgres user to run pg_autoctl as (the test runs as root)");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().parse()?)
}

/// Runs `cmd` to its end: its stdout, or an error with its stderr.
fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what}: {}\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Sends `signal` to process group `pgid` (a keeper's).
fn signal_group(signal: &str, pgid: u32) {
    let _ = Command::new("kill")
        .args([signal, "--", &format!("-{pgid}")])
        .stderr(Stdio::null())
        .status();
}

/// The postmaster of `pgdata`, if one runs: the pid its `postmaster.pid` names, when that
/// process is a postgres of that directory (not a pid reused since).
fn postmaster_of(pgdata: &Path) -> Option<u32> {
    let text = std::fs::read_to_string(pgdata.join("postmaster.pid")).ok()?;
    let pid: u32 = text.lines().next()?.trim().parse().ok()?;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let cmdline = String::from_utf8_lossy(&cmdline);
    cmdline.contains(&*pgdata.to_string_lossy()).then_some(pid)
}

impl Formation {
    /// Creates the directory, the monitor and the two nodes, and waits until node1 is the
    /// primary and node2 its synchronous standby.
    pub fn start(autoctl: PathBuf) -> anyhow::Result<Formation> {
        let dir = tempfile::Builder::new()
            .prefix("countersign-failover-")
            .tempdir()?;
        let root = std::fs::metadata("/proc/self")?.uid() == 0;
        let owner = if root {
            Some((id_of("-u")?, id_of("-g")?))
        } else {
            None
        };
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let [monitor_port, p1, p2] = ports()?;
        let node = |name: &str, port| Node {
            name: name.into(),
            port,
            pgdata: dir.path().join(name),
        };
        let f = Formation {
            monitor: dir.path().join("monitor"),
            nodes: vec![node("node1", p1), node("node2", p2)],
            dir,
            autoctl,
            owner,
            monitor_port,
            keepers: Mutex::new(Vec::new()),
        };
        f.start_monitor()?;
        f.start_node(0)?;
        f.wait_states(&[("node1", "single")], Duration::from_secs(60))?;
        // The standby's base backup starts with a checkpoint, spread over minutes by default:
        // one now leaves it nothing to write (creating the database dirtied its pages).
        f.psql(&f.nodes[0], "CHECKPOINT")?;
        f.start_node(1)?;
        f.wait_states(
            &[("node1", "primary"), ("node2", "secondary")],
            Duration::from_secs(90),
        )?;
        Ok(f)
    }

    /// `pg_autoctl args…` as the formation's user, in its directory, with an environment of its
    /// own (its configuration and state files under the directory).
    fn command(&self, args: &[&str]) -> Command {
        let d = self.dir.path();
        let mut cmd = Command::new(&self.autoctl);
        cmd.args(args)
            .env_clear()
            .env("PATH", format!("{PG_BIN}:/usr/bin:/bin"))
            .env("HOME", d)
            .env("XDG_CONFIG_HOME", d.join("config"))
            .env("XDG_DATA_HOME", d.join("data"))
            .env("XDG_RUNTIME_DIR", d.join("run"))
            .env("LANG", "C.UTF-8")
            .current_dir(d)
            .stdin(Stdio::null());
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    /// Runs `pg_autoctl args…` to its end: its stdout.
    pub fn autoctl(&self, args: &[&str]) -> anyhow::Result<String> {
        run(
            &mut self.command(args),
            &format!("pg_autoctl {}", args.join(" ")),
        )
    }

    /// Starts `pg_autoctl args…` as a keeper, its output in `<name>.log`.
    fn spawn_keeper(&self, pgdata: &Path, args: &[&str]) -> anyhow::Result<()> {
        let name = pgdata.file_name().unwrap_or_default().to_string_lossy();
        let log = std::fs::File::create(self.dir.path().join(format!("{name}.log")))?;
        let child = self
            .command(args)
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .context("start a pg_autoctl keeper")?;
        let mut keepers = self.keepers.lock().unwrap_or_else(|e| e.into_inner());
        keepers.push(Keeper {
            pgdata: pgdata.to_owned(),
            child,
        });
        Ok(())
    }

    fn start_monitor(&self) -> anyhow::Result<()> {
        let pgdata = self.monitor.to_string_lossy().into_owned();
        let port = self.monitor_port.to_string();
        let pg_ctl = format!("{PG_BIN}/pg_ctl");
        self.autoctl(&[
            "create",
            "monitor",
            "--pgdata",
            &pgdata,
            "--pgport",
            &port,
            "--pgctl",
            &pg_ctl,
            "--hostname",
            "127.0.0.1",
            "--auth",
            "trust",
            "--no-ssl",
        ])?;
        // The monitor listens on loopback only (pg_autoctl's default is every address).
        self.autoctl(&[
            "config",
            "set",
            "--pgdata",
            &pgdata,
            "postgresql.listen_addresses",
            "127.0.0.1",
        ])?;
        let auto_conf = self.monitor.join("postgresql.auto.conf");
        let mut conf = std::fs::read_to_string(&auto_conf).unwrap_or_default();
        conf.push_str(MONITOR_SETTINGS);
        std::fs::write(&auto_conf, conf)?;
        self.spawn_keeper(&self.monitor, &["run", "--pgdata", &pgdata])?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.state().is_err() {
            if Instant::now() > deadline {
                bail!("the monitor did not start; log:\n{}", self.log("monitor"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    fn start_node(&self, i: usize) -> anyhow::Result<()> {
        let n = &self.nodes[i];
        let pgdata = n.pgdata.to_string_lossy().into_owned();
        let port = n.port.to_string();
        let monitor = format!(
            "postgres://autoctl_node@127.0.0.1:{}/pg_auto_failover?sslmode=disable",
            self.monitor_port
        );
        let pg_ctl = format!("{PG_BIN}/pg_ctl");
        self.spawn_keeper(
            &n.pgdata,
            &[
                "create",
                "postgres",
                "--pgdata",
                &pgdata,
                "--pgport",
                &port,
                "--pgctl",
                &pg_ctl,
                "--listen",
                "127.0.0.1",
                "--hostname",
                "127.0.0.1",
                "--name",
                &n.name,
                "--dbname",
                DATABASE,
                "--monitor",
                &monitor,
                "--auth",
                "trust",
                "--no-ssl",
                "--run",
            ],
        )
    }

    /// What a keeper logged (`monitor`, `node1`, `node2`).
    pub fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{name}.log"))).unwrap_or_default()
    }

    /// The nodes as the monitor sees them.
    pub fn state(&self) -> anyhow::Result<Vec<NodeState>> {
        let pgdata = self.monitor.to_string_lossy().into_owned();
        let out = self.autoctl(&["show", "state", "--json", "--pgdata", &pgdata])?;
        let v: Value = serde_json::from_str(&out).context("pg_autoctl show state --json")?;
        let s = |n: &Value, f: &str| n[f].as_str().unwrap_or_default().to_owned();
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .map(|n| NodeState {
                        name: s(n, "nodename"),
                        reported: s(n, "current_group_state"),
                        assigned: s(n, "assigned_group_state"),
                    })
                    .collect()
            })
            .unwrap_or_default())
    }

    /// Waits until each named node has reported the state it is assigned, for at most
    /// `within`.
    pub fn wait_states(&self, want: &[(&str, &str)], within: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            if let Ok(s) = self.state() {
                let reached = want.iter().all(|(name, state)| {
                    s.iter()
                        .any(|n| n.name == *name && n.reported == *state && n.assigned == *state)
                });
                if reached {
                    return Ok(());
                }
                seen = s;
            }
            if Instant::now() > deadline {
                bail!(
                    "the formation did not reach {want:?} within {within:?}: {seen:?}\nlogs:\n{}\n{}\n{}",
                    self.log("monitor"),
                    self.log("node1"),
                    self.log("node2")
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// `pg_autoctl show uri --formation default`: the multi-host URL
    /// (`postgres://127.0.0.1:p1,127.0.0.1:p2/countersign?target_session_attrs=read-write&…`),
    /// with the user `postgres` added (the formation's URL names none).
    pub fn url(&self) -> anyhow::Result<String> {
        let pgdata = self.monitor.to_string_lossy().into_owned();
        let out = self.autoctl(&["show", "uri", "--formation", "default", "--pgdata", &pgdata])?;
        let uri = out.trim();
        let Some(rest) = uri.strip_prefix("postgres://") else {
            bail!("pg_autoctl show uri: {uri}");
        };
        Ok(format!("postgres://postgres@{rest}"))
    }

    /// `psql -c sql` on node `n` (as the superuser, over TCP): its output.
    pub fn psql(&self, n: &Node, sql: &str) -> anyhow::Result<String> {
        let out = run(
            Command::new(format!("{PG_BIN}/psql"))
                .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
                .args(["-U", "postgres", "-d", DATABASE, "-p", &n.port.to_string()])
                .args(["-c", sql])
                .env("PGCONNECT_TIMEOUT", "2")
                .stdin(Stdio::null()),
            &format!("psql on {}", n.name),
        )?;
        Ok(out.trim().to_owned())
    }

    /// Whether node `n` takes writes now (reachable, not in recovery, not read-only).
    pub fn writable(&self, n: &Node) -> bool {
        let sql = "SELECT pg_is_in_recovery() OR current_setting('transaction_read_only')::bool";
        self.psql(n, sql).is_ok_and(|v| v == "f")
    }

    /// The node the monitor has as primary (reported and assigned).
    pub fn primary(&self) -> anyhow::Result<Node> {
        let s = self.state()?;
        let name = s
            .iter()
            .find(|n| n.reported == "primary" && n.assigned == "primary")
            .map(|n| n.name.clone())
            .with_context(|| format!("no primary: {s:?}"))?;
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .cloned()
            .with_context(|| format!("no node {name}"))
    }

    /// `pg_autoctl perform failover` against the monitor (it waits for the new primary).
    pub fn perform_failover(&self) -> anyhow::Result<()> {
        let pgdata = self.monitor.to_string_lossy().into_owned();
        self.autoctl(&["perform", "failover", "--pgdata", &pgdata])
            .map(|_| ())
    }

    /// Kills node `n` with SIGKILL: its keeper's process group (the keeper, its services and
    /// its postmaster) and its postmaster by the pid in `postmaster.pid`.
    pub fn kill(&self, n: &Node) -> anyhow::Result<()> {
        let mut keepers = self.keepers.lock().unwrap_or_else(|e| e.into_inner());
        let k = keepers
            .iter_mut()
            .find(|k| k.pgdata == n.pgdata)
            .with_context(|| format!("no keeper of {}", n.name))?;
        let postmaster = postmaster_of(&n.pgdata);
        signal_group("-KILL", k.child.id());
        if let Some(pid) = postmaster {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        k.child.wait()?;
        Ok(())
    }
}

impl Drop for Formation {
    /// Stops the keepers, the nodes before the monitor: SIGTERM to each group (a keeper stops
    /// its postgres), SIGKILL to what is left after 15 s; the directory goes with `dir`.
    fn drop(&mut self) {
        let keepers = self.keepers.get_mut().unwrap_or_else(|e| e.into_inner());
        for k in keepers.iter_mut().rev() {
            if matches!(k.child.try_wait(), Ok(Some(_))) {
                continue;
            }
            let pgid = k.child.id();
            signal_group("-TERM", pgid);
            let deadline = Instant::now() + Duration::from_secs(15);
            while matches!(k.child.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            signal_group("-KILL", pgid);
            let _ = k.child.wait();
        }
        // A postmaster left behind (its keeper killed before it stopped it) ends too.
        for k in keepers.iter() {
            if let Some(pid) = postmaster_of(&k.pgdata) {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}
