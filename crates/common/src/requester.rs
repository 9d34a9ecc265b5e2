//! A requesting session named as people name it (issue 48): its machine and its label, not the
//! ids the broker keys it by.
//!
//! The launcher helper names a session it registers `<host>/pid-<pid>-<start>[/<label>]`
//! (its enrollment's `runtime_id`, spec "Enrollment": "whatever names the session on its
//! machine"), where `<host>` is the machine's host name and `<label>` what the session was
//! started as (`sh`, `claude`), cleaned to letters, digits, `.`, `_` and `-`. A pod's runtime
//! id is its UID. Any other runtime id is some launcher's own: it is shown as it is.
//!
//! The broker's approval statement (`countersign_broker_core::passkey`) and the console's
//! pages both name a requester with [`Requester::of`], so the sentence a passkey countersigns
//! and the page around it say the same thing.

/// A requester in people's words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requester {
    /// What names the session: its label (`sh`) or the notification session it stated (a
    /// launcher helper's session), the runtime id itself (another launcher's), none.
    pub session: Option<String>,
    /// The machine's host name (`vm`), `pod <uid>` for a pod; none when the runtime id does
    /// not say.
    pub machine: Option<String>,
    /// Whose machine it is (the enrollment's operator); none for a pod.
    pub person: Option<String>,
    /// A pod's slot.
    pub slot: Option<String>,
}

/// The parts of a launcher helper's runtime id: `(host, label)`, or none when it is not one.
pub fn helper_runtime(runtime_id: &str) -> Option<(&str, Option<&str>)> {
    let mut parts = runtime_id.splitn(3, '/');
    let host = parts.next().filter(|h| !h.is_empty())?;
    let instance = parts.next()?.strip_prefix("pid-")?;
    let (pid, start) = instance.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(pid) || !digits(start) {
        return None;
    }
    let label = parts.next().filter(|l| !l.is_empty());
    Some((host, label))
}

impl Requester {
    /// The requester of an enrollment of `kind` (`session` or `pod`) at `runtime_id`, run by
    /// `operator`, in `slot`, that stated the notification session `session_id`.
    pub fn of(
        kind: &str,
        runtime_id: &str,
        operator: Option<&str>,
        slot: Option<&str>,
        session_id: Option<&str>,
    ) -> Self {
        let person = operator.filter(|o| !o.is_empty()).map(str::to_owned);
        let slot = slot.filter(|s| !s.is_empty()).map(str::to_owned);
        let session_id = session_id.filter(|s| !s.is_empty()).map(str::to_owned);
        let (session, machine) = if kind == "pod" {
            (session_id, Some(format!("pod {runtime_id}")))
        } else {
            match helper_runtime(runtime_id) {
                Some((host, label)) => (
                    label.map(str::to_owned).or(session_id),
                    Some(host.to_owned()),
                ),
                // Another launcher's runtime id names the session on its machine.
                None => (Some(runtime_id.to_owned()).filter(|r| !r.is_empty()), None),
            }
        };
        Requester {
            session,
            machine,
            person,
            slot,
        }
    }

    /// One phrase: `the session ‘sh’ on machine vm, logged in as dev@example.com`; `the
    /// session ‘rt-1’ on dev@example.com's machine`; `the session ‘build’ on pod 7c1d (slot
    /// web)`.
    pub fn phrase(&self) -> String {
        let mut s = match &self.session {
            Some(l) => format!("the session ‘{l}’"),
            None => "a session".to_owned(),
        };
        match (&self.machine, &self.person) {
            (Some(m), _) if m.starts_with("pod ") => s.push_str(&format!(" on {m}")),
            (Some(m), Some(p)) => s.push_str(&format!(" on machine {m}, logged in as {p}")),
            (Some(m), None) => s.push_str(&format!(" on machine {m}")),
            (None, Some(p)) => s.push_str(&format!(" on {p}'s machine")),
            (None, None) => {}
        }
        if let Some(slot) = &self.slot {
            s.push_str(&format!(" (slot {slot})"));
        }
        s
    }

    /// Whether [`Requester::phrase`] ends in an apposition (`…, logged in as …`) that a
    /// sentence going on closes with a comma.
    pub fn open_apposition(&self) -> bool {
        self.slot.is_none()
            && self.person.is_some()
            && self
                .machine
                .as_ref()
                .is_some_and(|m| !m.starts_with("pod "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_helper_session_is_named_by_its_host_and_label() {
        let r = Requester::of(
            "session",
            "vm/pid-17541-225829/sh",
            Some("dev@countersign.local"),
            None,
            Some("claude-42"),
        );
        assert_eq!(r.session.as_deref(), Some("sh"));
        assert_eq!(r.machine.as_deref(), Some("vm"));
        assert_eq!(
            r.phrase(),
            "the session ‘sh’ on machine vm, logged in as dev@countersign.local"
        );
        assert!(r.open_apposition());
        // No label: the notification session it named, else none.
        let r = Requester::of("session", "vm/pid-1-2", None, None, Some("claude-42"));
        assert_eq!(r.phrase(), "the session ‘claude-42’ on machine vm");
        assert!(!r.open_apposition());
        let r = Requester::of("session", "vm/pid-1-2", Some(""), None, None);
        assert_eq!(r.phrase(), "a session on machine vm");
    }

    #[test]
    fn other_runtime_ids_name_the_session_and_pods_are_pods() {
        for raw in [
            "laptop-7",
            "vm/pid-x-2/sh",
            "/pid-1-2/sh",
            "vm/pid-1/sh",
            "vm/proc-1-2",
        ] {
            let r = Requester::of("session", raw, Some("ben@example.com"), None, Some("n"));
            assert_eq!(r.machine, None, "{raw}");
            assert_eq!(r.session.as_deref(), Some(raw));
            assert_eq!(
                r.phrase(),
                format!("the session ‘{raw}’ on ben@example.com's machine")
            );
            assert!(!r.open_apposition());
        }
        let pod = Requester::of("pod", "1f0e", None, Some("web"), None);
        assert_eq!(pod.phrase(), "a session on pod 1f0e (slot web)");
        let pod = Requester::of("pod", "1f0e", Some(""), None, Some("build-3"));
        assert_eq!(pod.phrase(), "the session ‘build-3’ on pod 1f0e");
    }
}
