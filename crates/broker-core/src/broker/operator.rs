//! The operator routes: a person, from one of their own machines (a launcher proof), lists and
//! ends their machines' logins and their sessions' grants. A service's credential has no
//! operator (SERVICE_CREDENTIAL).

use super::approver::GrantListItem;
use super::{Broker, Fail, transact};
use crate::error::{Error, ErrorCode};
use crate::ids::{CredentialId, GrantId, Login};
use crate::model::LauncherCredential;

impl Broker {
    fn operator_of(caller: &LauncherCredential) -> Result<&Login, Error> {
        match (&caller.service, &caller.operator) {
            (None, Some(op)) => Ok(op),
            _ => Err(ErrorCode::SERVICE_CREDENTIAL.into()),
        }
    }

    /// The operator's own machines' logins (no service logins), newest first.
    pub async fn operator_machines(
        &self,
        caller: &LauncherCredential,
    ) -> Result<Vec<LauncherCredential>, Error> {
        let op = Self::operator_of(caller)?.clone();
        self.list_credentials(move |c| c.service.is_none() && c.operator.as_ref() == Some(&op))
            .await
    }

    /// Ends one of the operator's machines' logins and every session it enrolled.
    pub async fn operator_revoke_machine(
        &self,
        caller: &LauncherCredential,
        id: CredentialId,
    ) -> Result<&'static str, Error> {
        let op = Self::operator_of(caller)?;
        let now = self.now();
        let by = format!("launcher:{}", caller.id);
        transact!(self, "revoke machine login", |tx| {
            let c = tx
                .get_credential(id)
                .await?
                .filter(|c| c.service.is_none())
                .ok_or_else(|| {
                    Error::with_message(ErrorCode::NOT_FOUND, "no such machine login")
                })?;
            if c.operator.as_ref() != Some(op) {
                return Err(Error::with_message(
                    ErrorCode::NOT_APPROVER,
                    "only the machine's own operator may revoke its login",
                )
                .into());
            }
            self.revoke_credential(tx, c, &by, now).await?;
            Ok::<_, Fail>("revoked")
        })
    }

    /// Live grants of the operator's sessions and those the operator approved.
    pub async fn operator_grants(
        &self,
        caller: &LauncherCredential,
    ) -> Result<Vec<GrantListItem>, Error> {
        let op = Self::operator_of(caller)?;
        self.grants_for(op).await
    }

    /// Ends a grant as the operator, withholding an automatic grant's secrets from its session.
    pub async fn operator_revoke_grant(
        &self,
        caller: &LauncherCredential,
        id: GrantId,
    ) -> Result<&'static str, Error> {
        let op = Self::operator_of(caller)?;
        self.revoke_grant_as(op, id, true).await
    }
}
