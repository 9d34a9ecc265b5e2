//! The broker front: the console asks the broker, naming the signed-in person.

use super::*;
use crate::work::{SearchKind, SearchPage, SearchRow};

impl Console {
    // ----- the broker front -----

    /// Credential requests the person may decide, newest first: those naming them, and those
    /// anyone signed in decides. `None` without a configured broker.
    pub async fn inbox(&self, human: &Human) -> Result<Option<Vec<CredentialRecord>>, Error> {
        let Some(broker) = &self.parts.broker else {
            return Ok(None);
        };
        let pending = broker.pending(&human.login).await?;
        let mut out = Vec::with_capacity(pending.len());
        for p in pending {
            let cached = self
                .records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&p.record_id)
                .cloned();
            let rec = match cached {
                Some(r) => r,
                None => {
                    let r = match broker.record(&p.record_id).await {
                        Ok(r) => r,
                        // Decided or gone between the two calls: no longer in the inbox.
                        Err(e) if e.status() == 404 => continue,
                        Err(e) => return Err(e),
                    };
                    if r.state != "pending" {
                        continue;
                    }
                    let mut cache = self.records.lock().unwrap_or_else(|e| e.into_inner());
                    if cache.len() >= RECORD_CACHE {
                        cache.clear();
                    }
                    cache.insert(r.record_id.clone(), r.clone());
                    r
                }
            };
            out.push(rec);
        }
        Ok(Some(out))
    }

    /// One record's facts, as the broker has them now.
    pub async fn record(&self, _human: &Human, id: &str) -> Result<CredentialRecord, Error> {
        self.broker()?.record(id).await
    }

    /// A pending machine login by the confirmation code its machine shows.
    pub async fn lookup_machine_login(
        &self,
        _human: &Human,
        code: &str,
    ) -> Result<CredentialRecord, Error> {
        self.broker()?.lookup(code.trim()).await
    }

    /// Approves as the person; a machine login takes its code typed again. Where policy asks
    /// for a passkey, `countersignature` is the person's assertion over the statement
    /// ([`Console::statement`]); the broker verifies it.
    pub async fn approve(
        &self,
        human: &Human,
        id: &str,
        code: Option<&str>,
        countersignature: Option<&Countersignature>,
    ) -> Result<Approval, Error> {
        let code = code.map(str::trim).filter(|c| !c.is_empty());
        let broker = self.broker()?;
        let id = &self.record_id_of(id).await?;
        let a = match countersignature {
            Some(c) => {
                broker
                    .approve_countersigned(id, &human.login, code, c)
                    .await?
            }
            None => broker.approve(id, &human.login, code).await?,
        };
        tracing::info!(approver = %human.login, record_id = id, "approved");
        self.remember_decision(human, id, "approved").await;
        Ok(a)
    }

    /// The statement the person countersigns to approve `id`, with a fresh nonce.
    pub async fn statement(&self, human: &Human, id: &str) -> Result<ApprovalStatement, Error> {
        let id = self.record_id_of(id).await?;
        self.broker()?.statement(&id, &human.login).await
    }

    /// The record id of `id`: a request id (what its agent was given, issue 48) is the record
    /// of that request, asked of the broker; anything else is taken as a record id.
    async fn record_id_of(&self, id: &str) -> Result<String, Error> {
        if countersign_common::ids::parse_uuid(id).is_some() {
            Ok(self.broker()?.record(id).await?.record_id)
        } else {
            Ok(id.to_owned())
        }
    }

    /// The person's passkeys.
    pub async fn passkeys(&self, human: &Human) -> Result<Vec<PasskeyItem>, Error> {
        self.broker()?.passkeys(&human.login).await
    }

    /// What the person's browser needs to create a passkey.
    pub async fn passkey_offer(&self, human: &Human) -> Result<PasskeyOffer, Error> {
        self.broker()?.passkey_offer(&human.login).await
    }

    /// Registers the person's new passkey (the broker checks it and what allows it).
    pub async fn register_passkey(
        &self,
        human: &Human,
        r: &PasskeyRegistration,
    ) -> Result<PasskeyItem, Error> {
        let p = self.broker()?.register_passkey(&human.login, r).await?;
        tracing::info!(person = %human.login, passkey = %p.id, "passkey registered");
        Ok(p)
    }

    pub async fn rename_passkey(
        &self,
        human: &Human,
        id: &str,
        name: &str,
    ) -> Result<PasskeyItem, Error> {
        self.broker()?.rename_passkey(id, &human.login, name).await
    }

    pub async fn remove_passkey(&self, human: &Human, id: &str) -> Result<String, Error> {
        let s = self.broker()?.remove_passkey(id, &human.login).await?;
        tracing::info!(person = %human.login, passkey = id, "passkey removed");
        Ok(s)
    }

    /// Denies as the person.
    pub async fn deny(&self, human: &Human, id: &str, code: Option<&str>) -> Result<String, Error> {
        let code = code.map(str::trim).filter(|c| !c.is_empty());
        let id = &self.record_id_of(id).await?;
        let s = self.broker()?.deny(id, &human.login, code).await?;
        tracing::info!(approver = %human.login, record_id = id, "denied");
        self.remember_decision(human, id, "denied").await;
        Ok(s)
    }

    /// Records a decision the broker accepted, for the history page. The broker has decided
    /// already, so a failure here is logged, not the person's refusal.
    async fn remember_decision(&self, human: &Human, record_id: &str, event: &str) {
        let d = Decision {
            login: human.login.clone(),
            record_id: record_id.to_owned(),
            event: event.to_owned(),
            at: self.now(),
        };
        if let Err(e) = self.parts.storage.record_decision(&d).await {
            tracing::warn!(error = %e, record_id, "the decision was not recorded for the history");
        }
    }

    /// The person's decisions through the console, newest first, at most `limit`.
    pub async fn decisions(&self, human: &Human, limit: u32) -> Result<Vec<Decision>, Error> {
        Ok(self.parts.storage.decisions_of(&human.login, limit).await?)
    }

    /// Who decided a record through the console, if anyone did.
    pub async fn decision_on(&self, record_id: &str) -> Result<Option<Decision>, Error> {
        Ok(self.parts.storage.decision_on(record_id).await?)
    }

    /// Live grants the person may revoke.
    pub async fn grants(&self, human: &Human) -> Result<Vec<GrantItem>, Error> {
        self.broker()?.grants(&human.login).await
    }

    /// The secrets an issuer makes per grant (issue 49), which a request page says so of.
    pub async fn issued_secrets(&self) -> Result<Vec<crate::broker::IssuedSecret>, Error> {
        self.broker()?.issued_secrets().await
    }

    pub async fn revoke_grant(&self, human: &Human, id: &str) -> Result<String, Error> {
        let s = self.broker()?.revoke_grant(id, &human.login).await?;
        tracing::info!(approver = %human.login, grant_id = id, "grant revoked");
        Ok(s)
    }

    /// Machine logins the person may revoke that can still reach a secret.
    pub async fn machine_logins(&self, human: &Human) -> Result<Vec<MachineLogin>, Error> {
        self.broker()?.machine_logins(&human.login).await
    }

    pub async fn revoke_machine_login(&self, human: &Human, id: &str) -> Result<String, Error> {
        let s = self
            .broker()?
            .revoke_machine_login(id, &human.login)
            .await?;
        tracing::info!(approver = %human.login, credential_id = id, "machine login revoked");
        Ok(s)
    }
}

/// The shortest prefix of a request's (or record's) id that search looks up.
const REQUEST_PREFIX_MIN: usize = 8;

impl Console {
    /// Issue 48: the credential request `q` names, as a search row, so that search finds a
    /// request by the id its agent printed. `q` is a request id (a UUID, what `countersign
    /// request`, `run` and MCP print) or a record id (64 hex digits), whole, which the broker
    /// is asked for; or a prefix of at least 8 characters of one of them, matched (when it
    /// names exactly one) among the pending requests this console's inboxes have shown. Any
    /// other `q`, no broker, or a broker that does not know it: none.
    pub async fn request_named(&self, q: &str) -> Option<SearchRow> {
        let q = q.trim().to_ascii_lowercase();
        let broker = self.parts.broker.as_ref()?;
        let whole = countersign_common::ids::parse_uuid(&q).is_some()
            || (q.len() == 64 && q.bytes().all(|b| b.is_ascii_hexdigit()));
        let id = if whole {
            q
        } else if q.len() >= REQUEST_PREFIX_MIN
            && q.len() < 64
            && q.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
        {
            let cache = self.records.lock().unwrap_or_else(|e| e.into_inner());
            let mut found = cache.values().filter(|r| {
                r.record_id.starts_with(&q)
                    || r.request_id.as_deref().is_some_and(|n| n.starts_with(&q))
            });
            match (found.next(), found.next()) {
                (Some(one), None) => one.record_id.clone(),
                _ => return None,
            }
        } else {
            return None;
        };
        let rec = broker.record(&id).await.ok()?;
        Some(request_row(&rec))
    }

    /// A page of search results that is the one request `row` ([`Console::request_named`]).
    pub fn request_search_page(row: SearchRow, limit: u32, offset: u32) -> SearchPage {
        SearchPage {
            rows: if offset == 0 { vec![row] } else { Vec::new() },
            total: 1,
            more: false,
            reachable: 1,
            limit,
            offset,
        }
    }
}

/// A credential request as a search row: its secrets (or the machine logging in), its state,
/// who asks and why, linked to its page by the name its agent was given.
fn request_row(rec: &CredentialRecord) -> SearchRow {
    let name = rec.name().to_owned();
    let title = if rec.is_machine_login() {
        format!(
            "Machine login for {}",
            rec.identifiers.first().map(String::as_str).unwrap_or("?")
        )
    } else {
        rec.identifiers.join(", ")
    };
    let mut snippet = rec.state.clone();
    if let Some(who) = rec.requester() {
        snippet.push_str(&format!(" · asked by {}", who.phrase()));
    }
    if !rec.reason.is_empty() {
        snippet.push_str(&format!(" · “{}”", rec.reason));
    }
    SearchRow {
        kind: SearchKind::Request,
        reference: crate::console::work::console_ref(SearchKind::Request, &name),
        page: format!("/requests/{name}"),
        id: name,
        title,
        snippet,
        project: None,
        at: rec.requested_at,
        issue: None,
        artifact: None,
        title_marks: Vec::new(),
        snippet_marks: Vec::new(),
        broadcast: None,
    }
}
