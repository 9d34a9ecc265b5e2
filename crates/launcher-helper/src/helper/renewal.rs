//! Background work, timed by the injected clock: ending sessions whose root exited, renewing
//! leases at half of what is left, refreshing a service's login at two thirds of its life,
//! and ending every session at shutdown.

use super::*;

/// When to renew a lease that has `left` to run: halfway, at least a second from now.
pub(super) fn renew_after(left: Option<Duration>) -> Duration {
    (left.unwrap_or(Duration::from_secs(60)) / 2).max(Duration::from_secs(1))
}

/// When to log a service in again: at two thirds of the credential's remaining life (`left`),
/// at least ten seconds from now.
pub(super) fn refresh_after(left: Option<Duration>) -> Duration {
    let left = left.unwrap_or(Duration::from_secs(300));
    (left * 2 / 3).max(Duration::from_secs(10))
}

impl Helper {
    /// One round of background work: sessions whose root exited end (and are unenrolled),
    /// leases due are renewed, leftovers of ended sessions that exited are forgotten, and a
    /// service login due is refreshed. Work that calls the broker runs in its own task.
    pub fn tick(self: &Arc<Self>) {
        let now = self.now();
        let mut gone = Vec::new();
        let mut due = Vec::new();
        let mut refresh = None;
        // An idle helper (no session, nothing remembered) reads no /proc.
        let idle = {
            let st = self.st();
            st.sessions.is_empty() && st.members.is_empty()
        };
        let snapshot = if idle {
            std::collections::HashMap::new()
        } else {
            self.procfs.snapshot()
        };
        {
            let mut st = self.st();
            // First what the sessions run now (while their roots' children still have them
            // as parent), then the roots that exited.
            st.members.refresh(&snapshot, |p| self.procfs.alive(p));
            let ended: Vec<ProcId> = st
                .sessions
                .keys()
                .filter(|root| {
                    !snapshot
                        .get(&root.pid)
                        .is_some_and(|s| s.start == root.start && !s.exited())
                        && !self.procfs.alive(**root)
                })
                .copied()
                .collect();
            for root in ended {
                tracing::info!(pid = root.pid, "session root exited; ending the session");
                if let Some(id) = Self::end_session(&mut st, root)
                    .as_ref()
                    .and_then(Session::enrollment_id)
                {
                    gone.push(id.to_owned());
                }
            }
            if let Some(cgroups) = &self.cgroups {
                st.former_cgroups.retain(|cg| !cgroups.remove_if_empty(cg));
            }
            for s in st.sessions.values_mut() {
                if let (Some(id), Some(at)) = (s.enrollment_id(), s.next_renewal)
                    && at <= now
                    && !s.renewing
                {
                    due.push((s.root, s.serial, s.key.clone(), id.to_owned()));
                    s.renewing = true;
                }
            }
            if let Some(h) = st.credential.as_mut()
                && h.token.is_some()
                && !h.refreshing
                && h.next_refresh.is_some_and(|at| at <= now)
            {
                h.refreshing = true;
                refresh = Some(h.clone());
            }
        }
        for id in gone {
            let me = self.clone();
            tokio::spawn(async move {
                let _ = me.unenroll(&id).await;
            });
        }
        for (root, serial, key, id) in due {
            let me = self.clone();
            tokio::spawn(async move { me.renew(root, serial, key, id).await });
        }
        if let Some(h) = refresh {
            let me = self.clone();
            tokio::spawn(async move { me.refresh(h).await });
        }
    }

    pub(super) async fn renew(&self, root: ProcId, serial: u64, key: Arc<SigningKey>, id: String) {
        let path = format!("/v1/enrollments/{id}/renew");
        let result = match self
            .proved_call(&key, claims::TYP_SESSION_PROOF, &id, "POST", &path, None)
            .await
        {
            Ok(answer) => answer.and_then(|a| a.json::<wire::Renewed>()),
            Err(e) => Err(BrokerError::no_answer(e.error)),
        };
        let mut st = self.st();
        let Some(s) = st.sessions.get_mut(&root).filter(|s| s.serial == serial) else {
            return;
        };
        s.renewing = false;
        match result {
            Ok(r) => {
                let lease = rfc3339(r.lease_expires_at);
                s.next_renewal = Some(self.after(renew_after(self.remaining(&lease))));
                s.state = SState::Enrolled {
                    enrollment_id: id,
                    lease_expires_at: lease,
                };
            }
            Err(e) if e.is_terminal_renewal() => {
                tracing::warn!(enrollment_id = %id, error = %e, "lease renewal refused for good; the session's enrollment has ended");
                s.next_renewal = None;
                s.state = SState::Ended {
                    enrollment_id: id,
                    error: e.to_string(),
                    broker_code: e.code.clone(),
                };
            }
            Err(e) => {
                tracing::warn!(enrollment_id = %id, error = %e, "lease renewal failed; trying again");
                s.next_renewal = Some(self.after(Duration::from_secs(5)));
            }
        }
    }

    pub(super) async fn refresh(&self, h: Held) {
        let (Some(service), Some(source)) = (h.service.clone(), h.token.clone()) else {
            return;
        };
        let result = self.token_login_call(&h.key, &service, &source).await;
        let updated = {
            let mut st = self.st();
            let Some(cur) = st.credential.as_mut().filter(|c| c.id == h.id) else {
                return;
            };
            cur.refreshing = false;
            match result {
                Ok(a) => {
                    let expires_at = rfc3339(a.expires_at);
                    cur.next_refresh = Some(self.after(refresh_after(self.remaining(&expires_at))));
                    cur.expires_at = Some(expires_at);
                    if a.credential_id != cur.id {
                        cur.id = a.credential_id;
                    }
                    Some(cur.clone())
                }
                Err(e) => {
                    tracing::warn!(error = %e.error, "service login refresh failed; trying again in 30 s");
                    cur.next_refresh = Some(self.after(Duration::from_secs(30)));
                    None
                }
            }
        };
        if let Some(h) = updated
            && let Err(e) = self.save(&h)
        {
            tracing::warn!(error = %e, "storing the refreshed credential failed");
        }
    }

    /// Ends every enrolled session at the broker (the helper is stopping and its keys die
    /// with it), each bounded by `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        let ids: Vec<String> = {
            let mut st = self.st();
            let roots: Vec<ProcId> = st.sessions.keys().copied().collect();
            let ids = roots
                .into_iter()
                .filter_map(|root| Self::end_session(&mut st, root))
                .filter_map(|s| s.enrollment_id().map(str::to_owned))
                .collect();
            if let Some(cgroups) = &self.cgroups {
                st.former_cgroups.retain(|cg| !cgroups.remove_if_empty(cg));
            }
            ids
        };
        for id in ids {
            let _ = tokio::time::timeout(grace, self.unenroll(&id)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn t0() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default()
    }

    /// A helper on a manual clock, whose broker does not answer.
    fn helper(clock: &Arc<ManualClock>) -> Arc<Helper> {
        let dir = std::env::temp_dir().join(format!("countersign-renewal-{}", std::process::id()));
        let mut cfg = HelperConfig::new("http://127.0.0.1:9", dir);
        cfg.no_store = true;
        cfg.session_cgroups = crate::helper::SessionCgroups::Off;
        match Helper::new(cfg) {
            Ok(h) => Arc::new(h.with_clock(clock.clone())),
            Err(e) => panic!("helper: {e}"),
        }
    }

    /// Waits for the helper's background task (a broker call that is refused at once).
    async fn settled(h: &Helper, root: ProcId) {
        for _ in 0..500 {
            if h.st().sessions.get(&root).is_some_and(|s| !s.renewing) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the renewal never finished");
    }

    #[tokio::test]
    async fn a_lease_is_renewed_at_half_of_what_is_left_and_retried_after_five_seconds() {
        let clock = Arc::new(ManualClock::new(t0()));
        let h = helper(&clock);
        // The session's root is this test process, so the tick keeps it.
        let me = std::process::id() as i32;
        let Ok(stat) = h.procfs.stat(me) else {
            panic!("no stat for this process")
        };
        let root = stat.id();
        let lease = "2030-01-01T00:01:00Z";
        let key = match SigningKey::generate() {
            Ok(k) => Arc::new(k),
            Err(e) => panic!("keygen: {e}"),
        };
        h.st().sessions.insert(
            root,
            Session {
                root,
                cgroup: None,
                serial: 1,
                key,
                runtime_id: "r".into(),
                session_id: None,
                state: SState::Enrolled {
                    enrollment_id: "0f8fad5b-d9cb-469f-a165-70867728950e".into(),
                    lease_expires_at: lease.into(),
                },
                // As enrolling sets it: half of the 60 s left.
                next_renewal: Some(h.after(renew_after(h.remaining(lease)))),
                renewing: false,
            },
        );
        let next = |h: &Helper| h.st().sessions.get(&root).and_then(|s| s.next_renewal);
        assert_eq!(next(&h), Some(later(t0(), Duration::from_secs(30))));

        clock.advance(chrono::TimeDelta::seconds(29));
        h.tick();
        assert!(h.st().sessions.get(&root).is_some_and(|s| !s.renewing));

        clock.advance(chrono::TimeDelta::seconds(1));
        h.tick();
        assert!(h.st().sessions.get(&root).is_some_and(|s| s.renewing));
        settled(&h, root).await;
        // The broker could not be asked: tried again 5 s later, the session still enrolled.
        assert_eq!(next(&h), Some(later(t0(), Duration::from_secs(35))));
        assert!(
            h.st()
                .sessions
                .get(&root)
                .is_some_and(|s| matches!(s.state, SState::Enrolled { .. }))
        );
        clock.advance(chrono::TimeDelta::seconds(4));
        h.tick();
        assert!(h.st().sessions.get(&root).is_some_and(|s| !s.renewing));
    }

    #[test]
    fn due_times_and_expiry_follow_the_clock() {
        assert_eq!(
            renew_after(Some(Duration::from_secs(60))),
            Duration::from_secs(30)
        );
        assert_eq!(renew_after(Some(Duration::ZERO)), Duration::from_secs(1));
        assert_eq!(renew_after(None), Duration::from_secs(30));
        assert_eq!(
            refresh_after(Some(Duration::from_secs(3600))),
            Duration::from_secs(2400)
        );
        assert_eq!(
            refresh_after(Some(Duration::from_secs(3))),
            Duration::from_secs(10)
        );
        assert_eq!(refresh_after(None), Duration::from_secs(200));

        let clock = Arc::new(ManualClock::new(t0()));
        let h = helper(&clock);
        let key = match SigningKey::generate() {
            Ok(k) => Arc::new(k),
            Err(e) => panic!("keygen: {e}"),
        };
        let held = Held {
            id: "c".into(),
            key,
            kind: CredentialKind::Person,
            host: "h".into(),
            login: None,
            service: None,
            expires_at: Some("2030-01-01T00:00:10Z".into()),
            token: None,
            next_refresh: None,
            refreshing: false,
        };
        assert!(!held.info(h.now()).expired);
        clock.advance(chrono::TimeDelta::seconds(10));
        assert!(held.info(h.now()).expired);
        // Proofs are stamped with the helper's clock.
        assert_eq!(h.now_unix(), t0().timestamp() + 10);
    }
}
