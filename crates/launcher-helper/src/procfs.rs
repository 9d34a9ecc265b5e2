//! Processes as `/proc` shows them: a process is named by its pid *and* its start time (clock
//! ticks since boot, field 22 of `/proc/<pid>/stat`), so that a pid reused by a later process is
//! never taken for the one that held it before.
//!
//! [`Procfs::ancestry`] follows parent links from a process to the root (a process whose parent
//! is 0), at most [`MAX_DEPTH`] processes, and says how the walk ended: at the root, at a parent
//! it could not read (or one that started after its child, which is a reused pid, not the real
//! parent), in a loop, or too deep.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The most processes an ancestry walk follows, the caller included; a deeper one is
/// [`WalkEnd::TooDeep`].
pub const MAX_DEPTH: usize = 64;

/// A process: its pid and its start time, which together never name two processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcId {
    pub pid: i32,
    pub start: u64,
}

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub ppid: i32,
    pub start: u64,
    /// The state letter (`R`, `S`, `Z`, ...).
    pub state: char,
}

impl Stat {
    #[must_use]
    pub fn id(&self) -> ProcId {
        ProcId {
            pid: self.pid,
            start: self.start,
        }
    }

    /// Whether it has exited (a zombie, or dead).
    #[must_use]
    pub fn exited(&self) -> bool {
        matches!(self.state, 'Z' | 'X' | 'x')
    }
}

/// How an ancestry walk ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WalkEnd {
    /// At a process whose parent is 0: the whole chain is known.
    Root,
    /// A parent could not be read, or is not the process that started the child.
    Unreadable,
    /// A pid came round again.
    Loop,
    /// More than [`MAX_DEPTH`] processes.
    TooDeep,
}

impl WalkEnd {
    /// Why the walk did not reach the root, for messages.
    #[must_use]
    pub fn why(self) -> &'static str {
        match self {
            WalkEnd::Root => "reached the root",
            WalkEnd::Unreadable => "a parent process cannot be read",
            WalkEnd::Loop => "the parent links loop",
            WalkEnd::TooDeep => "it is deeper than 64 processes",
        }
    }
}

/// A process and its ancestors, nearest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ancestry {
    /// The process itself, then its parent, and so on.
    pub chain: Vec<ProcId>,
    pub end: WalkEnd,
}

/// A view of `/proc` (or of a directory laid out like it, in tests).
#[derive(Debug, Clone)]
pub struct Procfs {
    root: PathBuf,
}

impl Default for Procfs {
    fn default() -> Self {
        Self::new("/proc")
    }
}

impl Procfs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Reads `/proc/<pid>/stat`.
    ///
    /// # Errors
    /// When the process does not exist or its stat cannot be read or parsed.
    pub fn stat(&self, pid: i32) -> std::io::Result<Stat> {
        if pid <= 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no such process",
            ));
        }
        let text = std::fs::read_to_string(self.root.join(pid.to_string()).join("stat"))?;
        parse_stat(&text)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidData, "unparsable stat"))
    }

    /// Whether `id` is still running (same pid, same start time, not exited).
    #[must_use]
    pub fn alive(&self, id: ProcId) -> bool {
        self.stat(id.pid)
            .is_ok_and(|s| s.start == id.start && !s.exited())
    }

    /// `first` and its ancestors.
    #[must_use]
    pub fn ancestry(&self, first: Stat) -> Ancestry {
        let mut chain = vec![first.id()];
        let mut seen = HashSet::from([first.pid]);
        let mut cur = first;
        let end = loop {
            if cur.ppid == 0 {
                break WalkEnd::Root;
            }
            if chain.len() >= MAX_DEPTH {
                break WalkEnd::TooDeep;
            }
            if !seen.insert(cur.ppid) {
                break WalkEnd::Loop;
            }
            let Ok(parent) = self.stat(cur.ppid) else {
                break WalkEnd::Unreadable;
            };
            // A parent always starts before its child; one that started later holds a reused
            // pid and is not this child's parent.
            if parent.start > cur.start {
                break WalkEnd::Unreadable;
            }
            chain.push(parent.id());
            cur = parent;
        };
        Ancestry { chain, end }
    }

    /// Every live process `/proc` shows now, by pid (one read of each `stat`).
    #[must_use]
    pub fn snapshot(&self) -> HashMap<i32, Stat> {
        let Ok(dir) = std::fs::read_dir(&self.root) else {
            return HashMap::new();
        };
        dir.flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()))
            .filter_map(|pid| self.stat(pid).ok())
            .filter(|s| !s.exited())
            .map(|s| (s.pid, s))
            .collect()
    }

    /// The cgroup v2 path of `pid` (`/proc/<pid>/cgroup`, its `0::` line), if it has one.
    #[must_use]
    pub fn cgroup(&self, pid: i32) -> Option<String> {
        let text = std::fs::read_to_string(self.root.join(pid.to_string()).join("cgroup")).ok()?;
        crate::cgroup::parse_proc_cgroup(&text)
    }

    /// The live descendants of `root` (not `root` itself), found by scanning every process.
    #[must_use]
    pub fn descendants(&self, root: ProcId) -> Vec<ProcId> {
        descendants_in(&self.snapshot(), &[root])
    }
}

/// The processes of `snapshot` that descend from one of `roots` (not the roots themselves): a
/// child counts only if it started no earlier than its parent (else its ppid is a reused pid).
#[must_use]
pub fn descendants_in(snapshot: &HashMap<i32, Stat>, roots: &[ProcId]) -> Vec<ProcId> {
    let mut children: HashMap<i32, Vec<&Stat>> = HashMap::new();
    for s in snapshot.values() {
        children.entry(s.ppid).or_default().push(s);
    }
    let mut out = Vec::new();
    let mut todo: Vec<ProcId> = roots.to_vec();
    let mut seen: HashSet<i32> = roots.iter().map(|r| r.pid).collect();
    while let Some(parent) = todo.pop() {
        for c in children.get(&parent.pid).into_iter().flatten() {
            if c.start >= parent.start && seen.insert(c.pid) {
                out.push(c.id());
                todo.push(c.id());
            }
        }
    }
    out
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) is in parentheses and may
/// itself hold spaces and parentheses, so fields are counted from the last `)`.
#[must_use]
pub fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text.get(..open)?.trim().parse().ok()?;
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // rest[0] is field 3 (state), rest[1] field 4 (ppid), rest[19] field 22 (starttime).
    let state = rest.first()?.chars().next()?;
    let ppid = rest.get(1)?.parse().ok()?;
    let start = rest.get(19)?.parse().ok()?;
    Some(Stat {
        pid,
        ppid,
        start,
        state,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fake /proc: writes `<root>/<pid>/stat` lines.
    pub(crate) struct FakeProc(pub PathBuf);

    impl FakeProc {
        pub(crate) fn new(name: &str) -> Self {
            let p = std::env::temp_dir().join(format!(
                "countersign-fakeproc-{name}-{}",
                std::process::id()
            ));
            let _ = std::fs::remove_dir_all(&p);
            let _ = std::fs::create_dir_all(&p);
            Self(p)
        }

        pub(crate) fn put(&self, pid: i32, ppid: i32, start: u64) {
            let d = self.0.join(pid.to_string());
            let _ = std::fs::create_dir_all(&d);
            let line = format!(
                "{pid} (we (i)rd) S {ppid} 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 {start} 1000 10 18446744073709551615\n"
            );
            let _ = std::fs::write(d.join("stat"), line);
        }

        pub(crate) fn procfs(&self) -> Procfs {
            Procfs::new(&self.0)
        }
    }

    impl Drop for FakeProc {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn parses_real_and_odd_names() {
        let s = parse_stat(
            "42 (a) b) c) Z 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10\n",
        );
        assert_eq!(
            s,
            Some(Stat {
                pid: 42,
                ppid: 7,
                start: 123456,
                state: 'Z'
            })
        );
        assert!(s.is_some_and(|s| s.exited()));
        assert_eq!(parse_stat("garbage"), None);
        let me = Procfs::default().stat(std::process::id() as i32);
        assert!(me.is_ok_and(|s| s.pid == std::process::id() as i32 && s.start > 0));
    }

    #[test]
    fn real_ancestry_reaches_the_root() {
        let p = Procfs::default();
        let me = p.stat(std::process::id() as i32);
        assert!(me.is_ok());
        if let Ok(me) = me {
            let a = p.ancestry(me);
            assert_eq!(a.end, WalkEnd::Root, "{a:?}");
            assert_eq!(a.chain.first().map(|c| c.pid), Some(me.pid));
        }
    }

    #[test]
    fn walks_end_as_they_should() {
        let f = FakeProc::new("walks");
        // 1 <- 10 <- 11
        f.put(1, 0, 1);
        f.put(10, 1, 5);
        f.put(11, 10, 6);
        let p = f.procfs();
        let stat = |pid| {
            p.stat(pid).unwrap_or(Stat {
                pid,
                ppid: 0,
                start: 0,
                state: '?',
            })
        };
        let a = p.ancestry(stat(11));
        assert_eq!(a.end, WalkEnd::Root);
        assert_eq!(
            a.chain.iter().map(|c| c.pid).collect::<Vec<_>>(),
            vec![11, 10, 1]
        );

        // A loop: 20 <- 21 <- 20.
        f.put(20, 21, 3);
        f.put(21, 20, 3);
        assert_eq!(p.ancestry(stat(20)).end, WalkEnd::Loop);

        // A parent that is gone.
        f.put(30, 999, 3);
        assert_eq!(p.ancestry(stat(30)).end, WalkEnd::Unreadable);

        // A parent that started after its child: a reused pid.
        f.put(40, 41, 3);
        f.put(41, 1, 9);
        assert_eq!(p.ancestry(stat(40)).end, WalkEnd::Unreadable);

        // 64 processes reach the root; 65 are too deep.
        f.put(1000, 0, 1);
        for i in 1..64 {
            f.put(1000 + i, 1000 + i - 1, 1 + i as u64);
        }
        let top = stat(1063);
        let a = p.ancestry(top);
        assert_eq!((a.end, a.chain.len()), (WalkEnd::Root, 64));
        f.put(1064, 1063, 100);
        let a = p.ancestry(stat(1064));
        assert_eq!((a.end, a.chain.len()), (WalkEnd::TooDeep, 64));
    }

    #[test]
    fn finds_descendants() {
        let f = FakeProc::new("desc");
        f.put(1, 0, 1);
        f.put(10, 1, 5);
        f.put(11, 10, 6);
        f.put(12, 11, 7);
        f.put(13, 1, 8);
        // A pid reused by a process older than its "parent": not a descendant.
        f.put(14, 10, 2);
        let p = f.procfs();
        let mut d: Vec<i32> = p
            .descendants(ProcId { pid: 10, start: 5 })
            .iter()
            .map(|c| c.pid)
            .collect();
        d.sort_unstable();
        assert_eq!(d, vec![11, 12]);
        assert!(p.alive(ProcId { pid: 10, start: 5 }));
        assert!(!p.alive(ProcId { pid: 10, start: 6 }));
        assert!(!p.alive(ProcId { pid: 77, start: 6 }));
    }
}
