//! Sessions: where a caller stands ([`Helper::membership`], the one place that is decided),
//! registering a session (its key, its cgroup where one can be made, its enrollment at the
//! broker), ending it (unregister, root exit, shutdown) and its enrolled key.

use super::*;

/// The session-id rule the broker and the console use too (`countersign_common::ids`).
pub(super) fn valid_session_id(s: &str) -> bool {
    countersign_common::ids::is_session_id(s)
}

/// A session label reduced to `[A-Za-z0-9._-]`, at most 40 characters.
pub(super) fn clean_label(l: &str) -> String {
    l.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(40)
        .collect()
}

impl Helper {
    /// Where `caller` stands: the session it is in, a leftover of an ended session, outside,
    /// or unknown. The one place this is decided. In order: its cgroup (a live session's, or
    /// any session cgroup: a leftover); then its ancestry, nearest first, against the sessions'
    /// roots and every process remembered inside a session. Before answering outside or
    /// unknown, the remembered processes are refreshed from `/proc` and the question asked
    /// again. A caller found inside a live session is remembered (sticky) from then on.
    #[must_use]
    pub fn membership(&self, caller: &Caller) -> Membership {
        match self.decide(caller) {
            m @ (Membership::Session(_) | Membership::Former) => m,
            Membership::Outside | Membership::Unknown(_) => {
                self.refresh_members();
                self.decide(caller)
            }
        }
    }

    pub(super) fn decide(&self, caller: &Caller) -> Membership {
        let mut st = self.st();
        if let (Some(cg), Some(cgroups)) = (&caller.cgroup, &self.cgroups) {
            if let Some(root) = st.sessions.values().find_map(|s| {
                s.cgroup
                    .as_deref()
                    .filter(|c| Cgroups::within(cg, c))
                    .map(|_| s.root)
            }) {
                st.members.insert(caller.id, Owner::Session(root));
                return Membership::Session(root);
            }
            if cgroups.in_any_session(cg) {
                st.members.insert(caller.id, Owner::Former);
                return Membership::Former;
            }
        }
        for (i, p) in caller.ancestry.chain.iter().enumerate() {
            let found = if st.sessions.contains_key(p) {
                Membership::Session(*p)
            } else {
                match st.members.get(*p) {
                    Some(Owner::Session(root)) if st.sessions.contains_key(&root) => {
                        Membership::Session(root)
                    }
                    Some(_) => Membership::Former,
                    None => continue,
                }
            };
            let owner = match found {
                Membership::Session(root) => Owner::Session(root),
                _ => Owner::Former,
            };
            // What lies between the caller and the member found is inside too.
            for q in caller.ancestry.chain.iter().take(i + 1) {
                st.members.insert(*q, owner);
            }
            return found;
        }
        match caller.ancestry.end {
            WalkEnd::Root => Membership::Outside,
            other => Membership::Unknown(other),
        }
    }

    /// Refreshes the processes remembered inside sessions from a snapshot of `/proc`.
    pub(super) fn refresh_members(&self) {
        let snapshot = self.procfs.snapshot();
        self.st()
            .members
            .refresh(&snapshot, |p| self.procfs.alive(p));
    }

    pub(super) fn require_outside(m: Membership, what: &str) -> Result<(), HelperError> {
        let why = match m {
            Membership::Outside => return Ok(()),
            Membership::Session(_) => "the caller is inside a registered session's process tree",
            Membership::Former => "the caller was started inside a session that has since ended",
            Membership::Unknown(end) => {
                return Err(err(
                    HelperCode::InSession,
                    format!(
                        "{what} is refused: the caller's ancestry cannot be followed to the root ({}), so it may be inside a session",
                        end.why()
                    ),
                ));
            }
        };
        Err(err(
            HelperCode::InSession,
            format!("{what} is refused: {why}"),
        ))
    }

    pub(super) fn require_session(m: Membership) -> Result<ProcId, HelperError> {
        match m {
            Membership::Session(root) => Ok(root),
            Membership::Former => Err(err(
                HelperCode::NotASession,
                "the caller's session has ended",
            )),
            Membership::Outside | Membership::Unknown(_) => Err(err(
                HelperCode::NotASession,
                "the caller descends from no registered session",
            )),
        }
    }

    pub(super) async fn register(
        self: &Arc<Self>,
        caller: &Caller,
        m: Membership,
        a: Register,
    ) -> Result<SessionInfo, HelperError> {
        if let Some(s) = &a.session_id
            && !valid_session_id(s)
        {
            return Err(bad(
                "session_id must be 1 to 128 characters with no whitespace, control character, /, ?, #, or any of <>\"'`[]\\|",
            ));
        }
        Self::require_outside(m, "registering a session")?;
        let held = self.held()?;
        let key = self.generate("session")?;
        let root = caller.id;
        let (cgroup, descendants) = self.enclose(root);
        let mut runtime_id = format!("{}/pid-{}-{}", self.cfg.host, root.pid, root.start);
        if let Some(l) = a
            .label
            .as_deref()
            .map(clean_label)
            .filter(|l| !l.is_empty())
        {
            runtime_id.push('/');
            runtime_id.push_str(&l);
        }
        let serial = {
            let mut st = self.st();
            st.serial += 1;
            let serial = st.serial;
            st.members.insert(root, Owner::Session(root));
            for d in descendants {
                st.members.insert(d, Owner::Session(root));
            }
            st.sessions.insert(
                root,
                Session {
                    root,
                    cgroup,
                    serial,
                    key: Arc::new(key),
                    runtime_id,
                    session_id: a.session_id,
                    state: SState::Enrolling,
                    next_renewal: None,
                    renewing: false,
                },
            );
            serial
        };
        tracing::info!(pid = root.pid, "session registered; enrolling its key");
        if !a.wait {
            let me = self.clone();
            tokio::spawn(async move {
                let _ = me.enroll(root, serial, &held).await;
            });
            return self.session_info(root);
        }
        match self.enroll(root, serial, &held).await {
            Ok(info) => Ok(info),
            Err(e) => {
                let mut st = self.st();
                if st.sessions.get(&root).is_some_and(|s| s.serial == serial) {
                    Self::end_session(&mut st, root);
                }
                Err(e)
            }
        }
    }

    /// Puts a new session's root, and what it already runs, in a cgroup of the session's own
    /// where the helper can make one. Answers the cgroup, if made, and the root's descendants.
    pub(super) fn enclose(&self, root: ProcId) -> (Option<String>, Vec<ProcId>) {
        let descendants = self.procfs.descendants(root);
        let Some(cgroups) = &self.cgroups else {
            return (None, descendants);
        };
        let name = cgroups.name(root.pid, root.start);
        let others: Vec<i32> = descendants.iter().map(|d| d.pid).collect();
        match cgroups.create(&name, root.pid, &others) {
            // The root must still be the process registering (not a reused pid).
            Ok(cg) if self.procfs.alive(root) => (Some(cg), descendants),
            Ok(cg) => {
                let _ = cgroups.remove_if_empty(&cg);
                (None, descendants)
            }
            Err(e) => {
                tracing::warn!(pid = root.pid, error = %e, "could not put the session in a cgroup of its own; following it by process snapshots only");
                (None, descendants)
            }
        }
    }

    /// Ends the session rooted at `root` in the helper: what it runs becomes leftovers of an
    /// ended session, never outside. Answers the session.
    pub(super) fn end_session(st: &mut State, root: ProcId) -> Option<Session> {
        let s = st.sessions.remove(&root)?;
        st.members.end_session(root);
        if let Some(cg) = &s.cgroup {
            st.former_cgroups.push(cg.clone());
        }
        Some(s)
    }

    pub(super) fn session_info(&self, root: ProcId) -> Result<SessionInfo, HelperError> {
        self.st()
            .sessions
            .get(&root)
            .map(Session::info)
            .ok_or_else(|| err(HelperCode::NotASession, "the session has ended"))
    }

    /// Enrolls a registered session's key under the launcher credential.
    pub(super) async fn enroll(
        self: &Arc<Self>,
        root: ProcId,
        serial: u64,
        held: &Held,
    ) -> Result<SessionInfo, HelperError> {
        let body = {
            let st = self.st();
            let s = st
                .sessions
                .get(&root)
                .filter(|s| s.serial == serial)
                .ok_or_else(|| {
                    err(
                        HelperCode::EnrollFailed,
                        "the session ended before enrolling",
                    )
                })?;
            json!({
                "kind": "session",
                "runtime_id": s.runtime_id,
                "thumbprint": s.key.thumbprint(),
                "jwk": s.key.public_jwk(),
                "session_id": s.session_id,
            })
        };
        let result = self.enroll_call(held, &body).await;
        let mut st = self.st();
        let Some(s) = st.sessions.get_mut(&root).filter(|s| s.serial == serial) else {
            // The root exited while enrolling: end the enrollment just made.
            drop(st);
            if let Ok(e) = result {
                let me = self.clone();
                tokio::spawn(async move {
                    let _ = me.unenroll(&e.enrollment_id).await;
                });
            }
            return Err(err(
                HelperCode::EnrollFailed,
                "the session ended while enrolling",
            ));
        };
        match result {
            Ok(e) => {
                let lease = rfc3339(e.lease_expires_at);
                s.next_renewal = Some(self.after(renew_after(self.remaining(&lease))));
                s.state = SState::Enrolled {
                    enrollment_id: e.enrollment_id,
                    lease_expires_at: lease,
                };
                tracing::info!(
                    pid = root.pid,
                    enrollment_id = s.enrollment_id().unwrap_or_default(),
                    "session enrolled"
                );
                Ok(s.info())
            }
            Err(e) => {
                s.state = SState::Failed {
                    error: e.error.clone(),
                    broker_code: e.broker_code.clone(),
                };
                tracing::warn!(pid = root.pid, error = %e.error, "session enrollment failed");
                Err(e)
            }
        }
    }

    pub(super) async fn enroll_call(
        &self,
        held: &Held,
        body: &serde_json::Value,
    ) -> Result<wire::Enrolled, HelperError> {
        let path = "/v1/enrollments";
        let bytes = serde_json::to_vec(body).map_err(|_| {
            err(
                HelperCode::EnrollFailed,
                "could not build the enrollment body",
            )
        })?;
        let answer = self
            .proved_call(
                &held.key,
                claims::TYP_LAUNCHER_PROOF,
                &held.id,
                "POST",
                path,
                Some(&bytes),
            )
            .await?
            .map_err(|e| from_broker(HelperCode::EnrollFailed, "enrollment", &e))?;
        answer
            .json()
            .map_err(|e| from_broker(HelperCode::EnrollFailed, "enrollment", &e))
    }

    /// Ends an enrollment at the broker (DELETE /v1/enrollments/{id}).
    pub(super) async fn unenroll(&self, enrollment_id: &str) -> Result<(), HelperError> {
        let held = self.st().credential.clone().ok_or_else(|| {
            err(
                HelperCode::UnenrollFailed,
                "no launcher credential to unenroll with; the enrollment ends when its lease lapses",
            )
        })?;
        let path = format!("/v1/enrollments/{enrollment_id}");
        match self
            .proved_call(
                &held.key,
                claims::TYP_LAUNCHER_PROOF,
                &held.id,
                "DELETE",
                &path,
                None,
            )
            .await?
        {
            Ok(_) => {
                tracing::info!(enrollment_id, "session unenrolled");
                Ok(())
            }
            // Already gone at the broker: what unenrolling wanted.
            Err(e) if e.is("NOT_FOUND") => Ok(()),
            Err(e) => {
                tracing::warn!(enrollment_id, error = %e, "unenroll failed");
                Err(from_broker(
                    HelperCode::UnenrollFailed,
                    "unenrolling (the enrollment ends when its lease lapses)",
                    &e,
                ))
            }
        }
    }

    pub(super) async fn unregister(&self, m: Membership) -> Result<Unregistered, HelperError> {
        let root = Self::require_session(m)?;
        // What the session started and left running stays out of launcher signing.
        self.refresh_members();
        let removed = Self::end_session(&mut self.st(), root);
        let enrollment_id = removed
            .as_ref()
            .and_then(|s| s.enrollment_id().map(str::to_owned));
        tracing::info!(pid = root.pid, "session unregistered");
        if let Some(id) = &enrollment_id {
            self.unenroll(id).await?;
        }
        Ok(Unregistered { enrollment_id })
    }

    /// The caller's enrolled session: its key and enrollment id.
    pub(super) fn enrolled(&self, m: Membership) -> Result<(Arc<SigningKey>, String), HelperError> {
        let root = Self::require_session(m)?;
        let st = self.st();
        let s = st
            .sessions
            .get(&root)
            .ok_or_else(|| err(HelperCode::NotASession, "the session has ended"))?;
        match &s.state {
            SState::Enrolled { enrollment_id, .. } => Ok((s.key.clone(), enrollment_id.clone())),
            SState::Enrolling => Err(err(
                HelperCode::NotEnrolled,
                "the session's enrollment has not succeeded yet",
            )),
            SState::Failed { error, broker_code } => Err(err(
                HelperCode::NotEnrolled,
                format!("the session's enrollment failed: {error}"),
            )
            .with_broker_code(broker_code.clone())),
            SState::Ended {
                error, broker_code, ..
            } => Err(err(
                HelperCode::NotEnrolled,
                format!("the session's enrollment has ended: {error}"),
            )
            .with_broker_code(broker_code.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::Ancestry;
    use crate::procfs::tests::FakeProc;

    fn id(pid: i32, start: u64) -> ProcId {
        ProcId { pid, start }
    }

    /// The caller `pid` as the fake /proc shows it now.
    fn caller(h: &Helper, pid: i32) -> Caller {
        let Ok(stat) = h.procfs.stat(pid) else {
            panic!("no process {pid}")
        };
        let ancestry: Ancestry = h.procfs.ancestry(stat);
        Caller {
            id: stat.id(),
            ancestry,
            cgroup: None,
        }
    }

    /// Membership is sticky: a process seen inside stays inside when its ancestry breaks, and
    /// a refresh before an "outside" answer brings in what the session forked meanwhile.
    #[tokio::test]
    async fn a_process_seen_inside_stays_inside_when_its_ancestry_breaks() {
        let f = FakeProc::new("sticky");
        // init 1; the session's root 100 <- 101 <- 102; 110 under the root; 200 elsewhere.
        f.put(1, 0, 1);
        f.put(100, 1, 5);
        f.put(101, 100, 6);
        f.put(102, 101, 7);
        f.put(110, 100, 8);
        f.put(200, 1, 9);
        let dir = std::env::temp_dir().join(format!("countersign-sticky-{}", std::process::id()));
        let mut cfg = HelperConfig::new("http://127.0.0.1:9", dir);
        cfg.no_store = true;
        cfg.procfs = f.0.clone();
        cfg.session_cgroups = SessionCgroups::Off;
        let h = match Helper::new(cfg) {
            Ok(h) => Arc::new(h),
            Err(e) => panic!("helper: {e}"),
        };
        let root = id(100, 5);
        let key = match SigningKey::generate() {
            Ok(k) => Arc::new(k),
            Err(e) => panic!("keygen: {e}"),
        };
        h.st().members.insert(root, Owner::Session(root));
        h.st().sessions.insert(
            root,
            Session {
                root,
                cgroup: None,
                serial: 1,
                key,
                runtime_id: "r".into(),
                session_id: None,
                state: SState::Enrolling,
                next_renewal: None,
                renewing: false,
            },
        );
        assert_eq!(h.membership(&caller(&h, 102)), Membership::Session(root));
        // Someone outside asks: the refresh before answering "outside" takes in 110 too.
        assert_eq!(h.membership(&caller(&h, 200)), Membership::Outside);

        // 101 dies and 102 is re-parented to init; 110 is re-parented too.
        let _ = std::fs::remove_dir_all(f.0.join("101"));
        f.put(102, 1, 7);
        f.put(110, 1, 8);
        assert_eq!(caller(&h, 102).ancestry.chain, vec![id(102, 7), id(1, 1)]);
        assert_eq!(h.membership(&caller(&h, 102)), Membership::Session(root));
        assert_eq!(h.membership(&caller(&h, 110)), Membership::Session(root));
        // What 102 forks now joins its session.
        f.put(103, 102, 10);
        assert_eq!(h.membership(&caller(&h, 103)), Membership::Session(root));

        // The root exits: the session ends; what it ran is a leftover, never outside.
        let _ = std::fs::remove_dir_all(f.0.join("100"));
        h.tick();
        assert!(h.st().sessions.is_empty());
        for pid in [102, 103, 110] {
            assert_eq!(h.membership(&caller(&h, pid)), Membership::Former, "{pid}");
        }
        // And what a leftover forks after the session ended.
        f.put(104, 103, 11);
        assert_eq!(h.membership(&caller(&h, 104)), Membership::Former);
        assert_eq!(h.membership(&caller(&h, 200)), Membership::Outside);
        // A leftover that exits is forgotten; a later process with its pid is not its heir.
        let _ = std::fs::remove_dir_all(f.0.join("104"));
        h.tick();
        f.put(104, 1, 12);
        assert_eq!(h.membership(&caller(&h, 104)), Membership::Outside);
    }
}
