//! [`HttpBroker`]: the core's [`BrokerClient`] over the broker's HTTP API with the console
//! token, a thin adapter over `countersign-broker-client` (the one broker client, which sends
//! the requests and reads the refusals).
//!
//! Ids taken from a caller are checked against the characters broker ids use before they go
//! into a path (and are percent-encoded as path segments), so that no input can steer the
//! console's request to another broker route. A broker refusal keeps its code, status and
//! message; the broker refusing the console's own token (UI_INVALID) is a configuration fault,
//! answered BROKER_UNAVAILABLE so that it never reads as the person's sign-in failing.

use std::time::Duration;

use async_trait::async_trait;
use countersign_broker_client::{Auth, BrokerError, Failure};
use countersign_common::wire::{
    GrantList, MachineLoginList, PasskeyList, PendingList, Settings, StateAnswer,
};
use countersign_console_core::broker::{
    Approval, ApprovalStatement, BrokerClient, Countersignature, CredentialRecord, GrantItem,
    IssuedSecret, MachineLogin, PasskeyItem, PasskeyOffer, PasskeyRegistration, PendingItem,
};
use countersign_console_core::{Error, ErrorCode, Login};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use zeroize::Zeroizing;

/// The user agent of the console's calls to the broker.
const USER_AGENT: &str = concat!("countersign-console/", env!("CARGO_PKG_VERSION"));

/// The shared broker client the console calls the broker with: the console's user agent, its
/// calls carrying the W3C trace context of the span they are made in.
pub fn client(
    base: &str,
    timeout: Duration,
) -> anyhow::Result<countersign_broker_client::BrokerClient> {
    Ok(
        countersign_broker_client::BrokerClient::new(base, timeout, USER_AGENT)?
            .with_trace_context(countersign_common::telemetry::inject_current),
    )
}

/// The broker over HTTP.
pub struct HttpBroker {
    client: countersign_broker_client::BrokerClient,
    token: Zeroizing<String>,
}

impl std::fmt::Debug for HttpBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBroker")
            .field("base", &self.client.base_url())
            .finish_non_exhaustive()
    }
}

impl HttpBroker {
    pub fn new(base: &str, token: Zeroizing<String>, timeout: Duration) -> anyhow::Result<Self> {
        Ok(Self {
            client: client(base, timeout)?,
            token,
        })
    }

    fn url(&self, segments: &[&str]) -> url::Url {
        self.client.url_of(segments)
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        url: url::Url,
        body: Option<Value>,
    ) -> Result<T, Error> {
        // The call's client span (method only: paths carry ids), whose W3C trace context the
        // broker's request span continues (`docs/metrics.md`, "Traces").
        let span = tracing::info_span!(
            "broker call",
            method = %method,
            otel.name = format!("console → broker {method}"),
            otel.kind = "client",
        );
        let bytes = body.map(|b| b.to_string().into_bytes());
        let sent = self.client.send(
            method,
            url.as_str(),
            bytes.as_deref(),
            Auth::Bearer(self.token.as_str()),
        );
        tracing::Instrument::instrument(sent, span)
            .await
            .and_then(|a| a.json())
            .map_err(refused)
    }

    async fn get<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        approver: Option<&Login>,
    ) -> Result<T, Error> {
        let mut url = self.url(segments);
        if let Some(a) = approver {
            url.query_pairs_mut().append_pair("approver", a.as_str());
        }
        self.call("GET", url, None).await
    }

    /// `POST /v1/credential-requests/{record}/approve`, with the countersignature when given.
    async fn approve_as(
        &self,
        id: &str,
        approver: &Login,
        code: Option<&str>,
        countersignature: Option<&Countersignature>,
    ) -> Result<Approval, Error> {
        let mut body = json!({ "approver": approver.as_str(), "code": code });
        if let Some(c) = countersignature {
            body["countersignature"] = json!(c);
        }
        self.post(
            &["v1", "credential-requests", record_id(id)?, "approve"],
            body,
        )
        .await
    }

    async fn post<T: DeserializeOwned>(&self, segments: &[&str], body: Value) -> Result<T, Error> {
        self.call("POST", self.url(segments), Some(body)).await
    }
}

/// A failed call as the console core's error: the broker's refusal keeps its code, status and
/// message; everything else is BROKER_UNAVAILABLE, the detail logged.
fn refused(e: BrokerError) -> Error {
    let unavailable = |message: String| Error::with_message(ErrorCode::BROKER_UNAVAILABLE, message);
    match (e.kind, e.code, e.status) {
        (Failure::NoAnswer, ..) => {
            tracing::warn!(error = %e.message, "broker call failed");
            unavailable("the broker could not be reached".into())
        }
        (Failure::CutShort, ..) => unavailable("the broker's answer was cut short".into()),
        (Failure::Unexpected, ..) => {
            tracing::warn!(error = %e.message, "broker answer did not parse");
            unavailable("the broker's answer did not parse".into())
        }
        (Failure::Refused, Some(code), _) if code == "UI_INVALID" => {
            tracing::error!(
                "the broker refused the console token: check the broker's console_token_file"
            );
            unavailable("the broker refused this console's token".into())
        }
        (Failure::Refused, Some(code), status) => {
            Error::broker(code, status.unwrap_or_default(), e.message)
        }
        (Failure::Refused, None, status) => unavailable(format!(
            "the broker answered {}",
            status.unwrap_or_default()
        )),
    }
}

/// Broker ids (UUIDs, hex hashes) use these characters; anything else is refused with the code
/// the broker gives for a malformed id of that kind, without asking it.
fn checked<'a>(id: &'a str, code: &str, message: &str) -> Result<&'a str, Error> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(id)
    } else {
        Err(Error::broker(code, 400, message))
    }
}

fn record_id(id: &str) -> Result<&str, Error> {
    checked(
        id,
        "RECORD_ID_INPUT",
        "record ids are lowercase-hex sha256 hashes",
    )
}

/// A passkey's credential id: base64url, as the broker lists it.
fn passkey_id(id: &str) -> Result<&str, Error> {
    checked(id, "NOT_FOUND", "no such passkey")
        .map_err(|_| Error::broker("NOT_FOUND", 404, "no such passkey"))
}

#[async_trait]
impl BrokerClient for HttpBroker {
    async fn pending(&self, approver: &Login) -> Result<Vec<PendingItem>, Error> {
        let a: PendingList = self.get(&["v1", "pending"], Some(approver)).await?;
        Ok(a.pending)
    }

    async fn record(&self, id: &str) -> Result<CredentialRecord, Error> {
        self.get(&["v1", "credential-requests", record_id(id)?], None)
            .await
    }

    async fn approve(
        &self,
        id: &str,
        approver: &Login,
        code: Option<&str>,
    ) -> Result<Approval, Error> {
        self.approve_as(id, approver, code, None).await
    }

    async fn deny(&self, id: &str, approver: &Login, code: Option<&str>) -> Result<String, Error> {
        let a: StateAnswer = self
            .post(
                &["v1", "credential-requests", record_id(id)?, "deny"],
                json!({ "approver": approver.as_str(), "code": code }),
            )
            .await?;
        Ok(a.state)
    }

    async fn lookup(&self, code: &str) -> Result<CredentialRecord, Error> {
        self.post(&["v1", "machine-logins", "lookup"], json!({ "code": code }))
            .await
    }

    async fn machine_logins(&self, approver: &Login) -> Result<Vec<MachineLogin>, Error> {
        let a: MachineLoginList = self
            .get(&["v1", "launcher-credentials"], Some(approver))
            .await?;
        Ok(a.credentials)
    }

    async fn revoke_machine_login(&self, id: &str, approver: &Login) -> Result<String, Error> {
        let id = checked(
            id,
            "CREDENTIAL_ID_INPUT",
            "launcher credential ids are UUIDs",
        )?;
        let a: StateAnswer = self
            .post(
                &["v1", "launcher-credentials", id, "revoke-by-approver"],
                json!({ "approver": approver.as_str() }),
            )
            .await?;
        Ok(a.state)
    }

    async fn approve_countersigned(
        &self,
        id: &str,
        approver: &Login,
        code: Option<&str>,
        countersignature: &Countersignature,
    ) -> Result<Approval, Error> {
        self.approve_as(id, approver, code, Some(countersignature))
            .await
    }

    async fn statement(&self, id: &str, approver: &Login) -> Result<ApprovalStatement, Error> {
        self.post(
            &["v1", "credential-requests", record_id(id)?, "statement"],
            json!({ "approver": approver.as_str() }),
        )
        .await
    }

    async fn passkeys(&self, approver: &Login) -> Result<Vec<PasskeyItem>, Error> {
        let a: PasskeyList = self.get(&["v1", "passkeys"], Some(approver)).await?;
        Ok(a.passkeys)
    }

    async fn passkey_offer(&self, approver: &Login) -> Result<PasskeyOffer, Error> {
        self.post(
            &["v1", "passkeys", "challenge"],
            json!({ "approver": approver.as_str() }),
        )
        .await
    }

    async fn register_passkey(
        &self,
        approver: &Login,
        r: &PasskeyRegistration,
    ) -> Result<PasskeyItem, Error> {
        let mut body = serde_json::to_value(r).unwrap_or_default();
        body["approver"] = json!(approver.as_str());
        self.post(&["v1", "passkeys"], body).await
    }

    async fn rename_passkey(
        &self,
        id: &str,
        approver: &Login,
        name: &str,
    ) -> Result<PasskeyItem, Error> {
        let id = passkey_id(id)?;
        self.call(
            "PATCH",
            self.url(&["v1", "passkeys", id]),
            Some(json!({ "approver": approver.as_str(), "name": name })),
        )
        .await
    }

    async fn remove_passkey(&self, id: &str, approver: &Login) -> Result<String, Error> {
        let id = passkey_id(id)?;
        let a: StateAnswer = self
            .post(
                &["v1", "passkeys", id, "remove"],
                json!({ "approver": approver.as_str() }),
            )
            .await?;
        Ok(a.state)
    }

    async fn grants(&self, approver: &Login) -> Result<Vec<GrantItem>, Error> {
        let a: GrantList = self.get(&["v1", "grants"], Some(approver)).await?;
        Ok(a.grants)
    }

    async fn issued_secrets(&self) -> Result<Vec<IssuedSecret>, Error> {
        // An older broker's settings have no `issued`: none.
        let a: Settings = self.get(&["v1", "settings"], None).await?;
        Ok(a.issued)
    }

    async fn revoke_grant(&self, id: &str, approver: &Login) -> Result<String, Error> {
        let id = checked(id, "GRANT_ID_INPUT", "grant ids are UUIDs")?;
        let a: StateAnswer = self
            .post(
                &["v1", "grants", id, "revoke-by-approver"],
                json!({ "approver": approver.as_str() }),
            )
            .await?;
        Ok(a.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_steer_the_path() {
        assert!(record_id("../../v1/grants").is_err());
        assert!(record_id("a%2Fb").is_err());
        assert!(record_id("").is_err());
        assert!(record_id(&"ab".repeat(32)).is_ok());
        let b = HttpBroker::new(
            "http://127.0.0.1:9/base/",
            Zeroizing::new("t".into()),
            Duration::from_secs(1),
        )
        .expect("client");
        assert_eq!(
            b.url(&["v1", "credential-requests", "x y"]).as_str(),
            "http://127.0.0.1:9/base/v1/credential-requests/x%20y"
        );
    }
}
