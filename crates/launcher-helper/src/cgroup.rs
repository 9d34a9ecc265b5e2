//! A cgroup v2 directory per session, where the machine lets the helper make one.
//!
//! A process's cgroup is inherited by everything it forks and is changed neither by its
//! parent's death, re-parenting, double forks nor `setsid`; only a process allowed to write
//! the `cgroup.procs` of a common ancestor can move it out. So when the helper can create a
//! directory under a cgroup v2 hierarchy (as root, or in a subtree delegated to its user), it
//! makes `countersign-<helper pid>-<n>-<pid>-<start>` at `register` (`<helper pid>-<n>` names
//! this helper, so that helpers never take each other's cgroups for their own), moves the
//! session's root (and the descendants it already has) into it, and treats any process found in
//! it, or below it, as inside that session. A process in one of this helper's session cgroups
//! whose session is over is a leftover of an ended session. A cgroup is removed once empty.
//!
//! Where no directory can be made, [`Cgroups::detect`] answers `None` and the helper relies on
//! its process snapshots alone (`tracker`).

use std::path::{Path, PathBuf};

/// The prefix of every session cgroup's directory name.
pub const PREFIX: &str = "countersign-";

/// Where session cgroups are made: a directory of a cgroup v2 hierarchy the helper can write.
#[derive(Debug, Clone)]
pub struct Cgroups {
    /// The directory (under the mount point) new session cgroups go into.
    dir: PathBuf,
    /// The same directory as `/proc/<pid>/cgroup` names it (`/a/b`, `/` for the root).
    rel: String,
    /// The start of this helper's session cgroups' names.
    tag: String,
}

/// The cgroup v2 mount point and the path of its root as `/proc/<pid>/cgroup` shows it, from
/// `mountinfo` text.
fn cgroup2_mount(mountinfo: &str) -> Option<(PathBuf, String)> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        let f: Vec<&str> = left.split_whitespace().collect();
        Some((PathBuf::from(f.get(4)?), (*f.get(3)?).to_owned()))
    })
}

/// The cgroup v2 path in a `/proc/<pid>/cgroup` text (its `0::` line).
#[must_use]
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim_end().to_owned())
        .filter(|p| p.starts_with('/'))
}

fn join_rel(base: &str, rest: &str) -> String {
    let base = base.trim_end_matches('/');
    let rest = rest.trim_matches('/');
    match (base.is_empty(), rest.is_empty()) {
        (_, true) if base.is_empty() => "/".to_owned(),
        (_, true) => base.to_owned(),
        (true, false) => format!("/{rest}"),
        (false, false) => format!("{base}/{rest}"),
    }
}

impl Cgroups {
    /// Finds where session cgroups can be made: `dir` if given, else the helper's own cgroup v2
    /// directory, and proves it by making and removing a probe directory. `None` when there is
    /// no cgroup v2 hierarchy, or the helper may not write there.
    #[must_use]
    pub fn detect(procfs: &Path, dir: Option<&Path>) -> Option<Cgroups> {
        let mountinfo = std::fs::read_to_string(procfs.join("self/mountinfo")).ok()?;
        let (mount, mount_root) = cgroup2_mount(&mountinfo)?;
        let dir = match dir {
            Some(d) => d.to_path_buf(),
            None => {
                let own =
                    parse_proc_cgroup(&std::fs::read_to_string(procfs.join("self/cgroup")).ok()?)?;
                let under = own.strip_prefix(mount_root.trim_end_matches('/'))?;
                mount.join(under.trim_start_matches('/'))
            }
        };
        let under = dir.strip_prefix(&mount).ok()?;
        let rel = join_rel(&mount_root, &under.to_string_lossy());
        static HELPERS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = HELPERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // A probe of its own: two detections at once in one process (tests on threads) must not
        // take each other's directory for a refusal.
        let probe = dir.join(format!("countersign-probe-{}-{n}", std::process::id()));
        std::fs::create_dir(&probe).ok()?;
        let _ = std::fs::remove_dir(&probe);
        let tag = format!("{PREFIX}{}-{n}-", std::process::id());
        let c = Cgroups { dir, rel, tag };
        c.sweep(procfs);
        Some(c)
    }

    /// Removes the empty session cgroups that helpers no longer running left behind (a helper
    /// removes its own once empty, but one that stops while its sessions' processes live on
    /// cannot), nested ones first (a helper started from inside a session makes its sessions'
    /// cgroups within that session's). A cgroup still holding processes stays: its processes
    /// are no helper's now.
    fn sweep(&self, procfs: &Path) {
        sweep_dir(&self.dir, procfs, 0);
    }

    /// The name of the session cgroup for the root `pid` started at `start`.
    #[must_use]
    pub fn name(&self, pid: i32, start: u64) -> String {
        format!("{}{pid}-{start}", self.tag)
    }

    /// The directory session cgroups are made in.
    #[must_use]
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Makes the session cgroup `name` and moves `pids` into it (the first one, the root,
    /// must move; the others may have exited). Answers its path as `/proc/<pid>/cgroup` shows
    /// it.
    ///
    /// # Errors
    /// When the directory cannot be made or the root cannot be moved into it (then nothing is
    /// left behind).
    pub fn create(&self, name: &str, root: i32, others: &[i32]) -> std::io::Result<String> {
        let path = self.dir.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let procs = path.join("cgroup.procs");
        if let Err(e) = std::fs::write(&procs, root.to_string()) {
            let _ = std::fs::remove_dir(&path);
            return Err(e);
        }
        for pid in others {
            let _ = std::fs::write(&procs, pid.to_string());
        }
        Ok(join_rel(&self.rel, name))
    }

    /// Whether `proc_cgroup` (a process's path) is the cgroup `rel` or below it.
    #[must_use]
    pub fn within(proc_cgroup: &str, rel: &str) -> bool {
        proc_cgroup == rel
            || proc_cgroup
                .strip_prefix(rel)
                .is_some_and(|rest| rest.starts_with('/'))
    }

    /// Whether `proc_cgroup` lies in any session cgroup of this helper (a live session's or an
    /// ended one's).
    #[must_use]
    pub fn in_any_session(&self, proc_cgroup: &str) -> bool {
        let base = self.rel.trim_end_matches('/');
        proc_cgroup
            .strip_prefix(base)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|rest| rest.starts_with(&self.tag))
    }

    fn path_of(&self, rel: &str) -> Option<PathBuf> {
        let base = self.rel.trim_end_matches('/');
        let rest = rel.strip_prefix(base)?.strip_prefix('/')?;
        (rest.starts_with(&self.tag) && !rest.contains('/') && !rest.contains(".."))
            .then(|| self.dir.join(rest))
    }

    /// Removes the session cgroup `rel` if no process is left in it. Answers whether it is gone.
    #[must_use]
    pub fn remove_if_empty(&self, rel: &str) -> bool {
        let Some(path) = self.path_of(rel) else {
            return true;
        };
        if !path.exists() {
            return true;
        }
        std::fs::remove_dir(&path).is_ok()
    }
}

/// [`Cgroups::sweep`] in `dir`, at most 16 levels deep.
fn sweep_dir(dir: &Path, procfs: &Path, depth: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let Ok(name) = e.file_name().into_string() else {
            continue;
        };
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        if depth < 16 {
            sweep_dir(&e.path(), procfs, depth + 1);
        }
        let helper_pid = rest.split('-').next().and_then(|p| p.parse::<i32>().ok());
        if let Some(pid) = helper_pid
            && !procfs.join(pid.to_string()).exists()
        {
            let _ = std::fs::remove_dir(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_mountinfo_and_proc_cgroup() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mi),
            Some((PathBuf::from("/sys/fs/cgroup/unified"), "/".to_owned()))
        );
        assert_eq!(cgroup2_mount("garbage\n"), None);
        assert_eq!(
            parse_proc_cgroup("4:memory:/x\n0::/user.slice/a.scope\n"),
            Some("/user.slice/a.scope".to_owned())
        );
        assert_eq!(parse_proc_cgroup("4:memory:/x\n"), None);
        assert_eq!(join_rel("/", "countersign-7-0-1-2"), "/countersign-7-0-1-2");
        assert_eq!(join_rel("/a/", "b"), "/a/b");
        assert_eq!(join_rel("/", ""), "/");
    }

    #[test]
    fn within_and_in_any_session() {
        let c = Cgroups {
            dir: PathBuf::from("/sys/fs/cgroup/a"),
            rel: "/a".to_owned(),
            tag: "countersign-7-0-".to_owned(),
        };
        assert_eq!(c.name(1, 2), "countersign-7-0-1-2");
        assert!(Cgroups::within(
            "/a/countersign-7-0-1-2",
            "/a/countersign-7-0-1-2"
        ));
        assert!(Cgroups::within(
            "/a/countersign-7-0-1-2/x",
            "/a/countersign-7-0-1-2"
        ));
        assert!(!Cgroups::within(
            "/a/countersign-7-0-1-23",
            "/a/countersign-7-0-1-2"
        ));
        assert!(c.in_any_session("/a/countersign-7-0-9-9/sub"));
        assert!(!c.in_any_session("/a/other"));
        // Another helper's.
        assert!(!c.in_any_session("/a/countersign-8-0-9-9"));
        assert!(!c.in_any_session("/b/countersign-7-0-9-9"));
        assert_eq!(c.path_of("/a/../x"), None);
        assert_eq!(
            c.path_of("/a/countersign-7-0-1-2"),
            Some(PathBuf::from("/sys/fs/cgroup/a/countersign-7-0-1-2"))
        );
    }
}
