//! Who is calling: the kernel's word (SO_PEERCRED) for the connecting process, pinned to that
//! process's start time, and re-checked around every identification.
//!
//! At accept, the helper reads the peer's pid and uid from the socket and the start time of
//! that pid. For each request it then reads the start time again (before), walks the ancestry,
//! and reads the process once more (after). If the pid is gone, now names a process that
//! started at another time, or changed parent during the walk, the caller changed while being
//! identified: `PEER_UNIDENTIFIED`. (The caller's cgroup is read between the two checks too.)
//! So a connection handed to, or inherited by, another process
//! after its opener exits (and its pid is reused) is never taken for that other process.

use std::os::fd::AsFd;

use countersign_launcher_proto::{HelperCode, HelperError};
use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};

use crate::procfs::{Ancestry, ProcId, Procfs};

fn unidentified(msg: &str) -> HelperError {
    HelperError::new(HelperCode::PeerUnidentified, msg)
}

/// The process at the other end of a connection, as the kernel named it at connect time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub pid: i32,
    pub uid: u32,
    /// The start time of `pid` when the connection was accepted.
    pub start: u64,
}

/// A caller identified for one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub id: ProcId,
    pub ancestry: Ancestry,
    /// Its cgroup v2 path, read while it was identified (none where there is no cgroup v2).
    pub cgroup: Option<String>,
}

impl Peer {
    /// Reads the peer's credentials from a connected Unix socket. Only a process of the
    /// helper's own user is served.
    ///
    /// # Errors
    /// `PEER_UNIDENTIFIED` when the kernel gives no credentials, names another user or no
    /// process (a peer in another PID namespace), or the process is already gone.
    pub fn from_socket(
        fd: &impl AsFd,
        procfs: &Procfs,
        helper_uid: u32,
    ) -> Result<Peer, HelperError> {
        let cred = getsockopt(fd, PeerCredentials)
            .map_err(|_| unidentified("the kernel gave no credentials for the caller"))?;
        Self::from_credentials(cred.pid(), cred.uid(), procfs, helper_uid)
    }

    /// As [`Peer::from_socket`], from credentials already read.
    ///
    /// # Errors
    /// As [`Peer::from_socket`].
    pub fn from_credentials(
        pid: i32,
        uid: u32,
        procfs: &Procfs,
        helper_uid: u32,
    ) -> Result<Peer, HelperError> {
        if uid != helper_uid {
            return Err(unidentified(
                "the caller runs as another user; this helper serves only its own",
            ));
        }
        if pid <= 0 {
            return Err(unidentified(
                "the kernel named no process for the caller (another PID namespace?)",
            ));
        }
        let stat = procfs
            .stat(pid)
            .map_err(|_| unidentified("the caller's process is gone"))?;
        if stat.exited() {
            return Err(unidentified("the caller's process has exited"));
        }
        Ok(Peer {
            pid,
            uid,
            start: stat.start,
        })
    }

    /// Identifies the caller for one request: the process (still the one that connected) and
    /// its ancestry, read between two checks that it did not change.
    ///
    /// # Errors
    /// `PEER_UNIDENTIFIED` when the process is gone, is not the one that connected, or changed
    /// while being identified.
    pub fn identify(&self, procfs: &Procfs) -> Result<Caller, HelperError> {
        let before = procfs
            .stat(self.pid)
            .map_err(|_| unidentified("the caller's process is gone"))?;
        if before.start != self.start || before.exited() {
            return Err(unidentified(
                "the caller's process is not the one that connected (it exited, and its pid may name another process)",
            ));
        }
        let ancestry = procfs.ancestry(before);
        let cgroup = procfs.cgroup(self.pid);
        let after = procfs
            .stat(self.pid)
            .map_err(|_| unidentified("the caller's process exited while being identified"))?;
        if after.start != before.start || after.ppid != before.ppid || after.exited() {
            return Err(unidentified("the caller changed while being identified"));
        }
        Ok(Caller {
            id: before.id(),
            ancestry,
            cgroup,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::WalkEnd;
    use crate::procfs::tests::FakeProc;

    fn code(r: Result<impl std::fmt::Debug, HelperError>) -> Option<HelperCode> {
        r.err().map(|e| e.code)
    }

    #[test]
    fn identifies_and_rechecks() {
        let f = FakeProc::new("peer");
        let p = f.procfs();
        f.put(1, 0, 1);
        f.put(50, 1, 10);
        let peer = Peer::from_credentials(50, 7, &p, 7);
        assert_eq!(
            peer.as_ref().ok(),
            Some(&Peer {
                pid: 50,
                uid: 7,
                start: 10
            })
        );
        let Ok(peer) = peer else { return };
        let caller = peer.identify(&p);
        assert!(
            caller
                .as_ref()
                .is_ok_and(|c| c.ancestry.end == WalkEnd::Root && c.ancestry.chain.len() == 2)
        );

        // The pid now names a later process: not the caller that connected.
        f.put(50, 1, 11);
        assert_eq!(code(peer.identify(&p)), Some(HelperCode::PeerUnidentified));
        // Gone altogether.
        let _ = std::fs::remove_dir_all(f.0.join("50"));
        assert_eq!(code(peer.identify(&p)), Some(HelperCode::PeerUnidentified));
    }

    #[test]
    fn refuses_other_users_and_no_process() {
        let f = FakeProc::new("peer2");
        let p = f.procfs();
        f.put(50, 0, 10);
        assert_eq!(
            code(Peer::from_credentials(50, 8, &p, 7)),
            Some(HelperCode::PeerUnidentified)
        );
        assert_eq!(
            code(Peer::from_credentials(0, 7, &p, 7)),
            Some(HelperCode::PeerUnidentified)
        );
        assert_eq!(
            code(Peer::from_credentials(51, 7, &p, 7)),
            Some(HelperCode::PeerUnidentified)
        );
    }

    #[test]
    fn real_socket_pair() {
        let (a, _b) = match std::os::unix::net::UnixStream::pair() {
            Ok(p) => p,
            Err(e) => panic!("socketpair: {e}"),
        };
        let me = nix::unistd::geteuid().as_raw();
        let peer = Peer::from_socket(&a, &Procfs::default(), me);
        assert_eq!(peer.map(|p| p.pid).ok(), Some(std::process::id() as i32));
    }
}
