//! Sticky session membership from snapshots of `/proc`.
//!
//! An ancestry walk alone loses a process the moment its chain to the session's root breaks:
//! the root exits or is killed, or a parent dies and the process is re-parented to init or to a
//! subreaper. So the helper remembers, for every live session, the processes it has seen inside
//! it (pid and start time), and what it remembers is sticky: a process once seen inside stays a
//! member, whatever its parent later becomes, until it exits. [`Members::refresh`] drops members
//! that exited and adds every process whose parent is a member (so what they fork joins too);
//! the helper runs it on every tick, at `register`, and synchronously before it would treat any
//! caller as outside. When a session ends, its members become leftovers of an ended session
//! ([`Owner::Former`]), still never outside.
//!
//! What a snapshot cannot see: a process that forked and whose whole chain up to a member died
//! between two refreshes (it was never seen with its ancestry intact); processes `/proc` hides
//! (another user's under `hidepid`). Session cgroups (`cgroup`) close the first gap where the
//! machine allows them.

use std::collections::HashMap;

use crate::procfs::{ProcId, Stat, descendants_in};

/// Whose a remembered process is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// The live session with this root.
    Session(ProcId),
    /// A session that has ended.
    Former,
}

/// The processes seen inside sessions, live or ended.
#[derive(Debug, Default)]
pub struct Members {
    map: HashMap<ProcId, Owner>,
}

impl Members {
    /// Whose `p` is, if it was ever seen inside a session.
    #[must_use]
    pub fn get(&self, p: ProcId) -> Option<Owner> {
        self.map.get(&p).copied()
    }

    /// Remembers `p` as `owner`'s. Sticky: a process already remembered keeps its owner.
    pub fn insert(&mut self, p: ProcId, owner: Owner) {
        self.map.entry(p).or_insert(owner);
    }

    /// The session with `root` has ended: its members become leftovers.
    pub fn end_session(&mut self, root: ProcId) {
        for o in self.map.values_mut() {
            if *o == Owner::Session(root) {
                *o = Owner::Former;
            }
        }
    }

    /// How many processes are remembered.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether none is.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Brings the set up to date with `snapshot` (every live process): members no longer in it
    /// (exited, or their pid now names another process) are forgotten, unless `alive` says they
    /// run now (one that started, or joined, after the snapshot was read), and every descendant
    /// of a member joins its nearest member's owner.
    pub fn refresh(&mut self, snapshot: &HashMap<i32, Stat>, alive: impl Fn(ProcId) -> bool) {
        self.map.retain(|p, _| {
            snapshot
                .get(&p.pid)
                .is_some_and(|s| s.start == p.start && !s.exited())
                || alive(*p)
        });
        let members: Vec<(ProcId, Owner)> = self.map.iter().map(|(p, o)| (*p, *o)).collect();
        for (p, owner) in members {
            for d in descendants_in(snapshot, &[p]) {
                self.insert(d, owner);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, ppid: i32, start: u64) -> (i32, Stat) {
        (
            pid,
            Stat {
                pid,
                ppid,
                start,
                state: 'S',
            },
        )
    }

    fn id(pid: i32, start: u64) -> ProcId {
        ProcId { pid, start }
    }

    #[test]
    fn membership_is_sticky_until_exit() {
        let root = id(10, 5);
        let mut m = Members::default();
        m.insert(root, Owner::Session(root));
        // 10 <- 11 <- 12; 20 is elsewhere.
        let snap: HashMap<_, _> = [
            stat(1, 0, 1),
            stat(10, 1, 5),
            stat(11, 10, 6),
            stat(12, 11, 7),
            stat(20, 1, 8),
        ]
        .into();
        m.refresh(&snap, |_| false);
        assert_eq!(m.get(id(12, 7)), Some(Owner::Session(root)));
        assert_eq!(m.get(id(20, 8)), None);
        // The root and 11 die; 12 is re-parented to init and forks 13: all still the session's.
        let snap: HashMap<_, _> = [
            stat(1, 0, 1),
            stat(12, 1, 7),
            stat(13, 12, 9),
            stat(20, 1, 8),
        ]
        .into();
        m.refresh(&snap, |_| false);
        assert_eq!(m.get(id(12, 7)), Some(Owner::Session(root)));
        assert_eq!(m.get(id(13, 9)), Some(Owner::Session(root)));
        assert_eq!(m.get(root), None);
        m.end_session(root);
        assert_eq!(m.get(id(13, 9)), Some(Owner::Former));
        // A reused pid is another process.
        let snap: HashMap<_, _> = [stat(1, 0, 1), stat(12, 1, 30), stat(13, 12, 9)].into();
        m.refresh(&snap, |_| false);
        assert_eq!(m.get(id(12, 30)), None);
        assert_eq!(m.get(id(13, 9)), Some(Owner::Former));
        assert_eq!(m.len(), 1);
        // One missing from an older snapshot that runs now is kept.
        m.insert(id(40, 50), Owner::Former);
        m.refresh(&snap, |p| p == id(40, 50));
        assert_eq!(m.get(id(40, 50)), Some(Owner::Former));
        m.refresh(&snap, |_| false);
        assert_eq!(m.get(id(40, 50)), None);
    }
}
