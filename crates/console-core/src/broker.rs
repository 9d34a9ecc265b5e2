//! The broker as the console sees it: its console-token routes (spec `broker-http-api.md`), each
//! naming the person acting as `approver`. The answers' shapes are the broker's own types
//! (`countersign_common::wire`, which the broker answers with); unknown fields are ignored so
//! that a newer broker does not break the console.
//!
//! A client answers a broker refusal as [`crate::Error::broker`] (the broker's code, status and
//! message) and an unreachable broker as `BROKER_UNAVAILABLE`.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::ids::Login;

pub use countersign_common::requester::Requester;
pub use countersign_common::wire::{
    Approval, ApprovalStatement, Countersignature, CredentialRecord, Decided, EnrollmentSummary,
    GrantItem, IssuedCredential, IssuedSecret, MachineLogin, PasskeyItem, PasskeyOffer,
    PendingItem, SessionIds,
};

/// An issuer's kind in people's words: `PostgreSQL`, `AWS IAM`, else the kind as it is.
pub fn issuer_words(kind: &str) -> &str {
    match kind {
        "postgres" => "PostgreSQL",
        "aws-iam" => "AWS IAM",
        other => other,
    }
}

/// A registration as the browser answered it, allowed by an enrollment code or an endorsement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyRegistration {
    pub name: String,
    pub nonce: String,
    pub client_data: String,
    pub attestation_object: String,
    #[serde(default)]
    pub enroll_code: Option<String>,
    #[serde(default)]
    pub endorsement: Option<Countersignature>,
}

fn passkeys_off() -> Error {
    Error::broker(
        "PASSKEYS_OFF",
        404,
        "this broker has no [passkeys] settings: no passkey is registered or required",
    )
}

/// The broker's console-token routes. `approver` is always the signed-in person.
#[async_trait]
pub trait BrokerClient: Send + Sync + std::fmt::Debug {
    /// `GET /v1/pending?approver=`
    async fn pending(&self, approver: &Login) -> Result<Vec<PendingItem>, Error>;
    /// `GET /v1/credential-requests/{record}`
    async fn record(&self, record_id: &str) -> Result<CredentialRecord, Error>;
    /// `POST /v1/credential-requests/{record}/approve`
    async fn approve(
        &self,
        record_id: &str,
        approver: &Login,
        code: Option<&str>,
    ) -> Result<Approval, Error>;
    /// `POST /v1/credential-requests/{record}/deny`; answers the state.
    async fn deny(
        &self,
        record_id: &str,
        approver: &Login,
        code: Option<&str>,
    ) -> Result<String, Error>;
    /// `POST /v1/machine-logins/lookup`
    async fn lookup(&self, code: &str) -> Result<CredentialRecord, Error>;
    /// `GET /v1/launcher-credentials?approver=`
    async fn machine_logins(&self, approver: &Login) -> Result<Vec<MachineLogin>, Error>;
    /// `POST /v1/launcher-credentials/{id}/revoke-by-approver`; answers the state.
    async fn revoke_machine_login(
        &self,
        credential_id: &str,
        approver: &Login,
    ) -> Result<String, Error>;
    /// `GET /v1/grants?approver=`
    async fn grants(&self, approver: &Login) -> Result<Vec<GrantItem>, Error>;
    /// `POST /v1/grants/{id}/revoke-by-approver`; answers the state.
    async fn revoke_grant(&self, grant_id: &str, approver: &Login) -> Result<String, Error>;
    /// `GET /v1/settings`, its `issued` list: the secrets an issuer makes per grant. A broker
    /// client that knows none (or a broker older than issue 49) answers none.
    async fn issued_secrets(&self) -> Result<Vec<IssuedSecret>, Error> {
        Ok(Vec::new())
    }

    // Passkeys (docs/passkeys.md). A broker client without them answers PASSKEYS_OFF.

    /// `POST /v1/credential-requests/{record}/approve` with the approver's countersignature.
    async fn approve_countersigned(
        &self,
        _record_id: &str,
        _approver: &Login,
        _code: Option<&str>,
        _countersignature: &Countersignature,
    ) -> Result<Approval, Error> {
        Err(passkeys_off())
    }
    /// `POST /v1/credential-requests/{record}/statement`
    async fn statement(
        &self,
        _record_id: &str,
        _approver: &Login,
    ) -> Result<ApprovalStatement, Error> {
        Err(passkeys_off())
    }
    /// `GET /v1/passkeys?approver=`
    async fn passkeys(&self, _approver: &Login) -> Result<Vec<PasskeyItem>, Error> {
        Err(passkeys_off())
    }
    /// `POST /v1/passkeys/challenge`
    async fn passkey_offer(&self, _approver: &Login) -> Result<PasskeyOffer, Error> {
        Err(passkeys_off())
    }
    /// `POST /v1/passkeys`
    async fn register_passkey(
        &self,
        _approver: &Login,
        _registration: &PasskeyRegistration,
    ) -> Result<PasskeyItem, Error> {
        Err(passkeys_off())
    }
    /// `PATCH /v1/passkeys/{id}`
    async fn rename_passkey(
        &self,
        _id: &str,
        _approver: &Login,
        _name: &str,
    ) -> Result<PasskeyItem, Error> {
        Err(passkeys_off())
    }
    /// `POST /v1/passkeys/{id}/remove`; answers the state.
    async fn remove_passkey(&self, _id: &str, _approver: &Login) -> Result<String, Error> {
        Err(passkeys_off())
    }
}
