//! Offline inspection (`countersign-broker audit verify`): every entry and every sealed row,
//! going on past each break so that every bad one is named.

use super::*;

/// One thing an inspection found: where (a position, or a table and id) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub place: String,
    pub why: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place, self.why)
    }
}

/// What a verified entry says about its subject.
#[derive(Debug, Clone)]
struct Said {
    position: i64,
    kind: String,
    body: serde_json::Value,
}

/// Checks everything sealed in a database, offline: the whole chain (going on past each break,
/// so every bad entry is named), then each sealed row against its seal and against what the
/// chain's entries say about it, and finally the entries that name a row that is not there.
#[derive(Debug, Default)]
pub struct Inspection {
    walk: Walk,
    entries: i64,
    findings: Vec<Finding>,
    /// Verified entries by subject.
    said: std::collections::HashMap<String, Vec<Said>>,
    /// Subjects whose row was inspected.
    rows: std::collections::HashSet<String>,
    /// A head a replica remembers, and where it comes from.
    remembered: Option<(Walk, String)>,
    /// Issued credentials whose destroy is pending (queued, or a mint not yet settled): grant
    /// subject and secret.
    pending_destroys: std::collections::HashSet<(String, String)>,
}

fn at_ms(body: &serde_json::Value) -> Option<i64> {
    body.get("at").and_then(|v| v.as_i64())
}

impl Inspection {
    pub fn new() -> Self {
        Self::default()
    }

    fn find(&mut self, place: impl Into<String>, why: impl Into<String>) {
        self.findings.push(Finding {
            place: place.into(),
            why: why.into(),
        });
    }

    /// The next entry of the chain, in position order.
    pub fn entry(&mut self, sealer: &Sealer, e: &AuditEntry) {
        self.entries += 1;
        let place = format!("position {}", e.position);
        if e.position != self.walk.position + 1 {
            if e.position > self.walk.position + 1 {
                let why = format!(
                    "gap: positions {} to {} are missing",
                    self.walk.position + 1,
                    e.position - 1
                );
                self.find(format!("position {}", self.walk.position + 1), why);
            } else {
                self.find(place.clone(), "gap: out of order");
            }
        }
        let whole = match check_entry(sealer, e) {
            Ok(()) => true,
            Err(BreakReason::Hash) => {
                self.find(
                    place.clone(),
                    "hash: the stored hash is not the hash of the entry's content (edited)",
                );
                false
            }
            Err(_) => {
                self.find(
                    place.clone(),
                    "seal: the seal does not verify over the position and hash (forged or edited)",
                );
                false
            }
        };
        if e.prev_hash != self.walk.hash && e.position == self.walk.position + 1 {
            self.find(
                place.clone(),
                format!(
                    "prev_hash: does not link to position {} (an entry inserted, removed or replaced)",
                    self.walk.position
                ),
            );
        }
        if let Some((head, source)) = &self.remembered
            && head.position == e.position
            && head.hash != e.hash
        {
            let why = format!(
                "rewritten: not the entry {source} remembers at this position ({})",
                head.hash
            );
            self.find(place.clone(), why);
        }
        if whole {
            let body = serde_json::from_str(&e.body).unwrap_or(serde_json::Value::Null);
            self.said.entry(e.subject.clone()).or_default().push(Said {
                position: e.position,
                kind: e.kind.clone(),
                body,
            });
        }
        self.walk = Walk {
            position: e.position,
            hash: e.hash.clone(),
        };
    }

    /// The head of the chain as walked.
    pub fn head(&self) -> &Walk {
        &self.walk
    }

    pub fn entries(&self) -> i64 {
        self.entries
    }

    /// Before the chain: a head a replica remembers (its state file), which the chain must
    /// hold (at its position, with its hash).
    pub fn remember(&mut self, head: Walk, source: impl Into<String>) {
        self.remembered = Some((head, source.into()));
    }

    fn said(&self, subject: &str) -> &[Said] {
        self.said.get(subject).map(|v| v.as_slice()).unwrap_or(&[])
    }

    fn ends_in_log(&self, subject: &str, kinds: &[&str]) -> Option<i64> {
        self.said(subject)
            .iter()
            .find(|s| kinds.contains(&s.kind.as_str()))
            .map(|s| s.position)
    }

    /// A launcher credential row.
    pub fn credential(&mut self, sealer: &Sealer, c: &LauncherCredential) {
        let place = format!("credentials {}", c.id);
        let subject = format!("credential:{}", c.id);
        self.rows.insert(subject.clone());
        if c.seal.is_empty() {
            self.find(
                place.clone(),
                "unsealed (written before seals, or inserted)",
            );
        } else if !sealer.verify_credential(c) {
            self.find(
                place.clone(),
                "seal: does not verify (key, operator, service, record, approver or expiry edited, or the row inserted)",
            );
        }
        let logged = self.ends_in_log(&subject, &["machine_login_end"]);
        match (c.revoked_at, logged) {
            (None, Some(p)) => self.find(
                place,
                format!("revoked at position {p} of the audit log, but the row is not revoked (its end was cleared)"),
            ),
            (Some(_), None) => self.find(
                place,
                "revoked, but no machine_login_end entry in the audit log records it",
            ),
            _ => {}
        }
    }

    /// An enrollment row.
    pub fn enrollment(&mut self, sealer: &Sealer, e: &Enrollment) {
        let place = format!("enrollments {}", e.id);
        let subject = format!("enrollment:{}", e.id);
        self.rows.insert(subject.clone());
        if e.seal.is_empty() {
            self.find(
                place.clone(),
                "unsealed (written before seals, or inserted)",
            );
        } else if !sealer.verify_enrollment(e) {
            self.find(
                place.clone(),
                "seal: does not verify (key, credential, kind, runtime id or operator edited, or the row inserted)",
            );
        }
        let logged = self.ends_in_log(&subject, &["session_end"]);
        match (&e.ended, logged) {
            (None, Some(p)) => self.find(
                place.clone(),
                format!("ended at position {p} of the audit log, but the row is live (its end was cleared)"),
            ),
            (Some(_), None) => self.find(
                place.clone(),
                "ended, but no session_end entry in the audit log records it",
            ),
            _ => {}
        }
        let mut withheld = std::collections::BTreeSet::new();
        for s in self
            .said(&subject)
            .iter()
            .filter(|s| s.kind == "withholding")
        {
            if let Some(names) = s.body.get("names").and_then(|n| n.as_array()) {
                withheld.extend(names.iter().filter_map(|n| n.as_str()).map(str::to_owned));
            }
        }
        let row: std::collections::BTreeSet<String> =
            e.withheld.iter().map(|n| n.as_str().to_owned()).collect();
        if let Some(n) = withheld.difference(&row).next() {
            self.find(
                place.clone(),
                format!("{n} is withheld in the audit log, but not in the row (cleared)"),
            );
        }
        if let Some(n) = row.difference(&withheld).next() {
            self.find(
                place,
                format!("{n} is withheld in the row, but no withholding entry records it"),
            );
        }
    }

    /// A record (a request for approval) and its decision.
    pub fn record(&mut self, sealer: &Sealer, r: &Record) {
        let place = format!("records {}", r.id);
        let subject = format!("record:{}", r.id);
        self.rows.insert(subject.clone());
        if !r.text_verifies() {
            self.find(
                place.clone(),
                "text: the stored text does not hash to the record's id (edited)",
            );
        }
        let logged: Vec<Said> = self
            .said(&subject)
            .iter()
            .filter(|s| s.kind == "decision")
            .cloned()
            .collect();
        match (&r.decided, logged.first()) {
            (Some(d), entry) => {
                if !sealer.verify_decision(
                    &r.id,
                    d.event,
                    &d.by,
                    d.at,
                    d.countersignature.as_ref(),
                    &d.seal,
                ) {
                    self.find(
                        place.clone(),
                        "decision seal: does not verify (decision, who or when edited, or inserted)",
                    );
                }
                if d.event != r.state {
                    self.find(
                        place.clone(),
                        format!(
                            "state {} is not its decision's {}",
                            r.state.as_str(),
                            d.event.as_str()
                        ),
                    );
                }
                match entry {
                    None => self.find(
                        place,
                        "decided, but no decision entry in the audit log records it",
                    ),
                    Some(s) => {
                        let countersigned = d
                            .countersignature
                            .as_ref()
                            .and_then(|c| serde_json::to_value(c).ok());
                        let same = s.body.get("event").and_then(|v| v.as_str())
                            == Some(d.event.as_str())
                            && s.body.get("by").and_then(|v| v.as_str()) == Some(d.by.as_str())
                            && at_ms(&s.body) == Some(d.at.timestamp_millis())
                            && s.body.get("countersignature") == countersigned.as_ref();
                        if !same {
                            self.find(
                                place,
                                format!(
                                    "its decision is not the one the audit log records at position {}",
                                    s.position
                                ),
                            );
                        }
                    }
                }
            }
            (None, Some(s)) => self.find(
                place,
                format!(
                    "decided at position {} of the audit log, but the row is undecided (cleared)",
                    s.position
                ),
            ),
            (None, None) => {}
        }
    }

    /// A grant, with its record when it names one: the grant's seal, its chain (the record's
    /// sealed decision, or policy's sealed automatic decision), and the log's entries for it.
    /// The issued credentials not yet destroyed (`Tx::unsettled_issued`), read before the
    /// grants: an ended grant's credential with a destroy pending is not reported.
    pub fn unsettled_issued(&mut self, rows: &[crate::issuer::Issued]) {
        for c in rows {
            self.pending_destroys
                .insert((format!("grant:{}", c.grant_id), c.secret.to_string()));
        }
    }

    /// An ended grant: each credential minted for it (a `credential_mint` entry) needs a
    /// `credential_destroy` entry or a destroy still pending.
    fn issued_ended(&mut self, subject: &str, place: &str) {
        let said = self.said(subject).to_vec();
        let secret = |s: &Said| {
            s.body
                .get("secret")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        for mint in said.iter().filter(|s| s.kind == "credential_mint") {
            let Some(name) = secret(mint) else { continue };
            let destroyed = said
                .iter()
                .any(|s| s.kind == "credential_destroy" && secret(s).as_deref() == Some(&name));
            let pending = self
                .pending_destroys
                .contains(&(subject.to_string(), name.clone()));
            if !destroyed && !pending {
                self.find(
                    place.to_string(),
                    format!(
                        "ended, but the credential issued for {name} (minted at position {}) has no destroy entry and no pending destroy",
                        mint.position
                    ),
                );
            }
        }
    }

    pub fn grant(&mut self, sealer: &Sealer, g: &Grant, record: Option<&Record>) {
        let place = format!("grants {}", g.id);
        let subject = format!("grant:{}", g.id);
        self.rows.insert(subject.clone());
        if !sealer.verify_grant(g) {
            self.find(
                place.clone(),
                "seal: does not verify (secrets, session, record, approver or lifetime edited, or inserted)",
            );
        } else if !crate::broker::grant_chain_verifies(sealer, g, record) {
            self.find(
                place.clone(),
                "chain: its record's decision or policy's automatic decision does not verify for it",
            );
        }
        let said = self.said(&subject).to_vec();
        match said.iter().find(|s| s.kind == "grant") {
            None => self.find(place.clone(), "no grant entry in the audit log records it"),
            Some(s) => {
                let names: Vec<&str> = g.names.iter().map(|n| n.as_str()).collect();
                let logged: Vec<&str> = s
                    .body
                    .get("names")
                    .and_then(|n| n.as_array())
                    .map(|a| a.iter().filter_map(|n| n.as_str()).collect())
                    .unwrap_or_default();
                let same = logged == names
                    && s.body.get("enrollment").and_then(|v| v.as_str())
                        == Some(g.enrollment_id.to_string().as_str())
                    && s.body.get("expires_at").and_then(|v| v.as_i64())
                        == g.expires_at.map(|t| t.timestamp_millis())
                    && s.body.get("approver").and_then(|v| v.as_str())
                        == g.approver.as_ref().map(|a| a.as_str());
                if !same {
                    self.find(
                        place.clone(),
                        format!(
                            "not the grant the audit log records at position {}",
                            s.position
                        ),
                    );
                }
            }
        }
        let logged = said
            .iter()
            .find(|s| ["revocation", "expiry", "end"].contains(&s.kind.as_str()));
        if g.end.is_some() || logged.is_some() {
            self.issued_ended(&subject, &place);
        }
        match (g.end, logged) {
            (None, Some(s)) => self.find(
                place,
                format!(
                    "ended ({}) at position {} of the audit log, but the row is live (its end was cleared)",
                    s.kind, s.position
                ),
            ),
            (Some((end, _)), None) => self.find(
                place,
                format!(
                    "{}, but no entry in the audit log records its end",
                    match end {
                        crate::model::GrantEnd::Revoked => "revoked",
                        crate::model::GrantEnd::Expired => "expired",
                        crate::model::GrantEnd::Ended => "ended",
                    }
                ),
            ),
            _ => {}
        }
    }

    /// A registered passkey: its seal, and the chain's record of its registration (the same
    /// person and key) and removal.
    pub fn passkey(&mut self, sealer: &Sealer, p: &crate::model::Passkey) {
        let place = format!("passkeys {}", p.id);
        let subject = format!("passkey:{}", p.id);
        self.rows.insert(subject.clone());
        if !sealer.verify_passkey(p) {
            self.find(
                place.clone(),
                "seal: does not verify (key, person or flags edited, or the row inserted)",
            );
        }
        let said = self.said(&subject).to_vec();
        match said.iter().find(|s| s.kind == "passkey_registered") {
            None => self.find(
                place.clone(),
                "no passkey_registered entry in the audit log records it",
            ),
            Some(s) => {
                let same = s.body.get("key").and_then(|v| v.as_str()) == Some(p.key.as_str())
                    && s.body.get("person").and_then(|v| v.as_str()) == Some(p.person.as_str());
                if !same {
                    self.find(
                        place.clone(),
                        format!(
                            "its key or person is not what the audit log records at position {}",
                            s.position
                        ),
                    );
                }
            }
        }
        let removed = said.iter().find(|s| s.kind == "passkey_removed");
        match (p.removed_at, removed) {
            (None, Some(s)) => self.find(
                place,
                format!(
                    "removed at position {} of the audit log, but the row is live (cleared)",
                    s.position
                ),
            ),
            (Some(_), None) => self.find(
                place,
                "removed, but no entry in the audit log records its removal",
            ),
            _ => {}
        }
    }

    /// A decision's passkey countersignature verified again, offline, with the key the audit
    /// chain recorded for its passkey (the row's, when the chain has none: that is reported by
    /// [`Inspection::passkey`]).
    pub fn countersignature(
        &mut self,
        settings: Option<&crate::passkey::PasskeySettings>,
        r: &Record,
        passkey: Option<&crate::model::Passkey>,
    ) {
        let Some((d, c)) = r
            .decided
            .as_ref()
            .and_then(|d| d.countersignature.as_ref().map(|c| (d, c)))
        else {
            return;
        };
        let place = format!("records {}", r.id);
        let Some(settings) = settings else {
            self.find(
                place,
                "countersigned, but no [passkeys] settings were given to check it with",
            );
            return;
        };
        let Some(p) = passkey else {
            self.find(
                place,
                format!(
                    "countersigned by passkey {}, which has no row",
                    c.credential
                ),
            );
            return;
        };
        let mut p = p.clone();
        if let Some(key) = self
            .said(&format!("passkey:{}", p.id))
            .iter()
            .find(|s| s.kind == "passkey_registered")
            .and_then(|s| s.body.get("key").and_then(|k| k.as_str()))
        {
            p.key = key.to_owned();
        }
        let statement =
            crate::passkey::Statement::of(r, crate::passkey::Decision::Approve, &d.by, &c.nonce);
        if let Err(e) =
            crate::passkey::verify_countersignature(settings, &p, &statement, c, 0, None)
        {
            self.find(
                place,
                format!(
                    "countersignature: does not verify against its passkey's recorded key ({e})"
                ),
            );
        }
    }

    /// A row that could not be read at all.
    pub fn unreadable(&mut self, table: &str, id: &str, why: &str) {
        self.find(format!("{table} {id}"), format!("unreadable: {why}"));
    }

    /// After every row: entries that name a credential, enrollment, grant or record with no row
    /// (deleted). Answers every finding, in the order found.
    pub fn finish(mut self) -> Vec<Finding> {
        if let Some((head, source)) = self.remembered.take()
            && head.position > self.walk.position
        {
            let why = format!(
                "the database is behind {source}: its chain ends at position {}, {source} remembers position {} ({})",
                self.walk.position, head.position, head.hash
            );
            self.find(format!("position {}", head.position), why);
        }
        let mut missing = self
            .said
            .iter()
            .filter(|(subject, _)| {
                [
                    "credential:",
                    "enrollment:",
                    "grant:",
                    "record:",
                    "passkey:",
                ]
                .iter()
                .any(|p| subject.starts_with(p))
                    && !self.rows.contains(*subject)
            })
            // A grant known only by the orphan sweep's destroys: made for a grant this
            // database never had (restored from before it), and destroyed.
            .filter(|(_, said)| {
                !said.iter().all(|s| {
                    s.kind == "credential_destroy"
                        && s.body.get("orphan").and_then(|v| v.as_bool()) == Some(true)
                })
            })
            .filter_map(|(subject, said)| {
                let mint = said.iter().any(|s| s.kind == "credential_mint");
                said.first().map(|s| (s.position, subject.clone(), mint))
            })
            .collect::<Vec<_>>();
        missing.sort();
        for (position, subject, mint) in missing {
            let why = if mint {
                format!(
                    "a credential mint names {subject}, which has no row: a mint without a grant"
                )
            } else {
                format!("names {subject}, which has no row (deleted)")
            };
            self.find(format!("position {position}"), why);
        }
        self.findings
    }
}
