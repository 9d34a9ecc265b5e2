//! [`HttpBroker`]: the core's [`BrokerClient`] over the broker's HTTP API with the console token.
//!
//! Ids taken from a caller are checked against the characters broker ids use before they go
//! into a path (and are percent-encoded as path segments), so that no input can steer the
//! console's request to another broker route. A broker refusal keeps its code, status and
//! message; the broker refusing the console's own token (UI_INVALID) is a configuration fault,
//! answered BROKER_UNAVAILABLE so that it never reads as the person's sign-in failing.

use std::time::Duration;

use async_trait::async_trait;
use countersign_console_core::broker::{
    Approval, ApprovalStatement, BrokerClient, Countersignature, CredentialRecord, GrantItem,
    MachineLogin, PasskeyItem, PasskeyOffer, PasskeyRegistration, PendingItem,
};
use countersign_console_core::{Error, ErrorCode, Login};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use zeroize::Zeroizing;

/// The broker over HTTP.
pub struct HttpBroker {
    http: reqwest::Client,
    base: url::Url,
    token: Zeroizing<String>,
}

impl std::fmt::Debug for HttpBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpBroker")
            .field("base", &self.base.as_str())
            .finish_non_exhaustive()
    }
}

impl HttpBroker {
    pub fn new(base: &str, token: Zeroizing<String>, timeout: Duration) -> anyhow::Result<Self> {
        let base = url::Url::parse(base)?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            anyhow::bail!("the broker URL must be an http:// or https:// URL");
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { http, base, token })
    }

    fn url(&self, segments: &[&str]) -> url::Url {
        let mut u = self.base.clone();
        if let Ok(mut p) = u.path_segments_mut() {
            p.pop_if_empty().extend(segments);
        }
        u
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
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
        tracing::Instrument::instrument(self.call_in_span(method, url, body), span).await
    }

    async fn call_in_span<T: DeserializeOwned>(
        &self,
        method: reqwest::Method,
        url: url::Url,
        body: Option<Value>,
    ) -> Result<T, Error> {
        let mut req = self
            .http
            .request(method, url)
            .bearer_auth(self.token.as_str());
        for (name, value) in countersign_common::telemetry::inject_current() {
            req = req.header(name, value);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.map_err(|e| {
            tracing::warn!(error = %e, "broker call failed");
            Error::with_message(
                ErrorCode::BROKER_UNAVAILABLE,
                "the broker could not be reached",
            )
        })?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|_| {
            Error::with_message(
                ErrorCode::BROKER_UNAVAILABLE,
                "the broker's answer was cut short",
            )
        })?;
        if status.is_success() {
            return serde_json::from_slice(&bytes).map_err(|e| {
                tracing::warn!(error = %e, "broker answer did not parse");
                Error::with_message(
                    ErrorCode::BROKER_UNAVAILABLE,
                    "the broker's answer did not parse",
                )
            });
        }
        #[derive(serde::Deserialize)]
        struct Refusal {
            code: String,
            #[serde(default)]
            error: String,
        }
        match serde_json::from_slice::<Refusal>(&bytes) {
            Ok(r) if r.code == "UI_INVALID" => {
                tracing::error!(
                    "the broker refused the console token: check the broker's console_token_file"
                );
                Err(Error::with_message(
                    ErrorCode::BROKER_UNAVAILABLE,
                    "the broker refused this console's token",
                ))
            }
            Ok(r) => Err(Error::broker(r.code, status.as_u16(), r.error)),
            Err(_) => Err(Error::with_message(
                ErrorCode::BROKER_UNAVAILABLE,
                format!("the broker answered {}", status.as_u16()),
            )),
        }
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
        self.call(reqwest::Method::GET, url, None).await
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
        self.call(reqwest::Method::POST, self.url(segments), Some(body))
            .await
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

#[derive(serde::Deserialize)]
struct StateAnswer {
    state: String,
}

#[async_trait]
impl BrokerClient for HttpBroker {
    async fn pending(&self, approver: &Login) -> Result<Vec<PendingItem>, Error> {
        #[derive(serde::Deserialize)]
        struct A {
            pending: Vec<PendingItem>,
        }
        let a: A = self.get(&["v1", "pending"], Some(approver)).await?;
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
        #[derive(serde::Deserialize)]
        struct A {
            credentials: Vec<MachineLogin>,
        }
        let a: A = self
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
        #[derive(serde::Deserialize)]
        struct A {
            passkeys: Vec<PasskeyItem>,
        }
        let a: A = self.get(&["v1", "passkeys"], Some(approver)).await?;
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
            reqwest::Method::PATCH,
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
        #[derive(serde::Deserialize)]
        struct A {
            grants: Vec<GrantItem>,
        }
        let a: A = self.get(&["v1", "grants"], Some(approver)).await?;
        Ok(a.grants)
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
