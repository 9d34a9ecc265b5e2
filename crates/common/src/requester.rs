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
    /// The session's label (`sh`), else the notification session it named, else none.
    pub session: Option<String>,
    /// The machine's host name (`vm`), a pod (`pod <uid>`), or the runtime id as it is.
    pub machine: String,
    /// Whose machine it is (the enrollment's operator); none for a pod.
    pub person: Option<String>,
    /// A pod's slot.
    pub slot: Option<String>,
    /// Whether `machine` is a pod.
    pub pod: bool,
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
        if kind == "pod" {
            return Requester {
                session: session_id,
                machine: format!("pod {runtime_id}"),
                person,
                slot,
                pod: true,
            };
        }
        match helper_runtime(runtime_id) {
            Some((host, label)) => Requester {
                session: label.map(str::to_owned).or(session_id),
                machine: host.to_owned(),
                person,
                slot,
                pod: false,
            },
            None => Requester {
                session: session_id,
                machine: runtime_id.to_owned(),
                person,
                slot,
                pod: false,
            },
        }
    }

    /// One phrase: `the session ‘sh’ on machine vm, logged in as dev@example.com`.
    pub fn phrase(&self) -> String {
        let mut s = match &self.session {
            Some(l) => format!("the session ‘{l}’ on "),
            None => "a session on ".to_owned(),
        };
        if self.pod {
            s.push_str(&self.machine);
        } else {
            s.push_str("machine ");
            s.push_str(&self.machine);
        }
        if let Some(slot) = &self.slot {
            s.push_str(&format!(" (slot {slot})"));
        }
        if let Some(p) = &self.person {
            s.push_str(&format!(", logged in as {p}"));
        }
        s
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
        assert_eq!(r.machine, "vm");
        assert_eq!(
            r.phrase(),
            "the session ‘sh’ on machine vm, logged in as dev@countersign.local"
        );
        // No label: the notification session it named, else none.
        let r = Requester::of("session", "vm/pid-1-2", None, None, Some("claude-42"));
        assert_eq!(r.phrase(), "the session ‘claude-42’ on machine vm");
        let r = Requester::of("session", "vm/pid-1-2", Some(""), None, None);
        assert_eq!(r.phrase(), "a session on machine vm");
    }

    #[test]
    fn other_runtime_ids_and_pods_are_shown_as_they_are() {
        for raw in [
            "laptop-7",
            "vm/pid-x-2/sh",
            "/pid-1-2/sh",
            "vm/pid-1/sh",
            "vm/proc-1-2",
        ] {
            let r = Requester::of("session", raw, Some("ben@example.com"), None, None);
            assert_eq!(r.machine, raw);
            assert_eq!(r.session, None);
        }
        let pod = Requester::of("pod", "1f0e", None, Some("web"), None);
        assert_eq!(pod.phrase(), "a session on pod 1f0e (slot web)");
    }
}
