//! The IAM calls the issuer makes, one function each, and what their failures mean: every
//! failure is an [`IssuerError`] whose text names the operation, the user (or policy) and IAM's
//! error code, with the IAM error code kept beside it so that the flows in `lib.rs` can tell
//! "already gone" (`NoSuchEntity`) and "already there" (`EntityAlreadyExists`) apart.
//!
//! Error texts never hold a secret: IAM's error messages name entities, not keys, and the `Debug`
//! of an SDK error (which holds the raw response) is never formatted.

use aws_sdk_iam::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_iam::types::{AccessKey, Tag, User};
use countersign_broker_core::clock::Time;
use countersign_broker_core::issuer::IssuerError;

use countersign_store_aws::sources;

use crate::AwsIamIssuer;

pub(crate) const NO_SUCH_ENTITY: &str = "NoSuchEntity";
pub(crate) const ENTITY_ALREADY_EXISTS: &str = "EntityAlreadyExists";
pub(crate) const DELETE_CONFLICT: &str = "DeleteConflict";

/// The tag a user carries with its grant's end, when the grant has one.
pub(crate) const UNTIL_TAG: &str = "countersign:grant-until";

/// A failed IAM call: what it means for the core, and IAM's error code when IAM answered one.
#[derive(Debug)]
pub(crate) struct CallError {
    pub code: Option<String>,
    pub error: IssuerError,
}

impl CallError {
    pub fn is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }
}

impl From<CallError> for IssuerError {
    fn from(e: CallError) -> Self {
        e.error
    }
}

/// IAM's codes for "not now": worth trying again.
const TRANSIENT: [&str; 8] = [
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "ServiceFailure",
    "ServiceUnavailable",
    "InternalFailure",
    "InternalError",
    "ConcurrentModification",
];

/// What the failure of `op` on `subject` means.
pub(crate) fn classify<E>(op: &str, subject: &str, err: SdkError<E>) -> CallError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let unavailable = |m: String| CallError {
        code: None,
        error: IssuerError::Unavailable(format!("{op} {subject}: {m}")),
    };
    match &err {
        SdkError::TimeoutError(_) => unavailable("no answer within the call's budget".into()),
        SdkError::DispatchFailure(_) => unavailable(format!("not reached: {}", sources(&err))),
        // The parse error could quote the body (a key, for CreateAccessKey): say only that.
        SdkError::ResponseError(_) => unavailable("unreadable answer".into()),
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            let code = s.err().code().unwrap_or("unknown").to_owned();
            let text = format!(
                "{op} {subject}: {code} (HTTP {status}): {}",
                s.err().message().unwrap_or_default()
            );
            let error = if TRANSIENT.contains(&code.as_str()) || status >= 500 || status == 429 {
                IssuerError::Unavailable(text)
            } else {
                IssuerError::Refused(text)
            };
            CallError {
                code: Some(code),
                error,
            }
        }
        // Not sent: no credentials, a bad request built here.
        _ => CallError {
            code: None,
            error: IssuerError::Refused(format!(
                "{op} {subject}: request not made: {}",
                sources(&err)
            )),
        },
    }
}

fn until_tag(until: Time) -> Result<Tag, CallError> {
    Tag::builder()
        .key(UNTIL_TAG)
        .value(crate::seconds(&until))
        .build()
        .map_err(|e| CallError {
            code: None,
            error: IssuerError::Refused(format!("tag {UNTIL_TAG}: {e}")),
        })
}

impl AwsIamIssuer {
    /// `CreateUser` under the path, with the boundary and the until tag.
    pub(crate) async fn create_user(
        &self,
        name: &str,
        until: Option<Time>,
    ) -> Result<(), CallError> {
        let mut req = self
            .client
            .create_user()
            .user_name(name)
            .path(&self.config.path)
            .set_permissions_boundary(self.config.permissions_boundary.clone());
        if let Some(t) = until {
            req = req.tags(until_tag(t)?);
        }
        req.send()
            .await
            .map(|_| ())
            .map_err(|e| classify("CreateUser", name, e))
    }

    /// `GetUser`; `None` when there is no such user.
    pub(crate) async fn get_user(&self, name: &str) -> Result<Option<User>, CallError> {
        match self.client.get_user().user_name(name).send().await {
            Ok(out) => Ok(out.user),
            Err(e) => {
                let e = classify("GetUser", name, e);
                if e.is(NO_SUCH_ENTITY) {
                    Ok(None)
                } else {
                    Err(e)
                }
            }
        }
    }

    /// `TagUser` with the until tag (replacing an older one).
    pub(crate) async fn tag_until(&self, name: &str, until: Time) -> Result<(), CallError> {
        self.client
            .tag_user()
            .user_name(name)
            .tags(until_tag(until)?)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("TagUser", name, e))
    }

    /// Deletes every access key of the user. `NoSuchEntity` from the listing means the user is
    /// gone and is answered as such; a key deleted meanwhile by another replica is no error.
    pub(crate) async fn delete_keys(&self, name: &str) -> Result<(), CallError> {
        let mut ids = Vec::new();
        let mut pages = self
            .client
            .list_access_keys()
            .user_name(name)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| classify("ListAccessKeys", name, e))?;
            ids.extend(
                page.access_key_metadata()
                    .iter()
                    .filter_map(|k| k.access_key_id().map(str::to_owned)),
            );
        }
        for id in ids {
            let done = self
                .client
                .delete_access_key()
                .user_name(name)
                .access_key_id(&id)
                .send()
                .await;
            ignore_missing(
                done.map(|_| ())
                    .map_err(|e| classify("DeleteAccessKey", name, e)),
            )?;
        }
        Ok(())
    }

    /// Detaches every managed policy attached to the user.
    pub(crate) async fn detach_all(&self, name: &str) -> Result<(), CallError> {
        let mut arns = Vec::new();
        let mut pages = self
            .client
            .list_attached_user_policies()
            .user_name(name)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| classify("ListAttachedUserPolicies", name, e))?;
            arns.extend(
                page.attached_policies()
                    .iter()
                    .filter_map(|p| p.policy_arn().map(str::to_owned)),
            );
        }
        for arn in arns {
            let done = self
                .client
                .detach_user_policy()
                .user_name(name)
                .policy_arn(&arn)
                .send()
                .await;
            ignore_missing(
                done.map(|_| ())
                    .map_err(|e| classify("DetachUserPolicy", name, e)),
            )?;
        }
        Ok(())
    }

    /// Deletes every inline policy of the user.
    pub(crate) async fn delete_inline_all(&self, name: &str) -> Result<(), CallError> {
        let mut names = Vec::new();
        let mut pages = self
            .client
            .list_user_policies()
            .user_name(name)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| classify("ListUserPolicies", name, e))?;
            names.extend(page.policy_names().iter().cloned());
        }
        for policy in names {
            let done = self
                .client
                .delete_user_policy()
                .user_name(name)
                .policy_name(&policy)
                .send()
                .await;
            ignore_missing(
                done.map(|_| ())
                    .map_err(|e| classify("DeleteUserPolicy", name, e)),
            )?;
        }
        Ok(())
    }

    /// `DeleteLoginProfile`; none there (or no user) is no error.
    pub(crate) async fn delete_login_profile(&self, name: &str) -> Result<(), CallError> {
        let done = self
            .client
            .delete_login_profile()
            .user_name(name)
            .send()
            .await;
        ignore_missing(
            done.map(|_| ())
                .map_err(|e| classify("DeleteLoginProfile", name, e)),
        )
    }

    /// `DeleteUser`.
    pub(crate) async fn delete_user(&self, name: &str) -> Result<(), CallError> {
        self.client
            .delete_user()
            .user_name(name)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| classify("DeleteUser", name, e))
    }

    /// Attaches the configured managed policies and puts the configured inline policy.
    pub(crate) async fn grant_policies(&self, name: &str) -> Result<(), CallError> {
        for arn in &self.config.policy_arns {
            self.client
                .attach_user_policy()
                .user_name(name)
                .policy_arn(arn)
                .send()
                .await
                .map_err(|e| classify("AttachUserPolicy", &format!("{name} {arn}"), e))?;
        }
        if let Some(doc) = &self.config.inline_policy {
            self.client
                .put_user_policy()
                .user_name(name)
                .policy_name(crate::config::INLINE_POLICY_NAME)
                .policy_document(doc)
                .send()
                .await
                .map_err(|e| classify("PutUserPolicy", name, e))?;
        }
        Ok(())
    }

    /// `CreateAccessKey`: the key pair, its secret moved out of the answer.
    pub(crate) async fn create_key(&self, name: &str) -> Result<AccessKey, CallError> {
        let out = self
            .client
            .create_access_key()
            .user_name(name)
            .send()
            .await
            .map_err(|e| classify("CreateAccessKey", name, e))?;
        out.access_key.ok_or_else(|| CallError {
            code: None,
            error: IssuerError::Unavailable(format!(
                "CreateAccessKey {name}: no key in the answer"
            )),
        })
    }

    /// Every user under the path whose name begins with the prefix.
    pub(crate) async fn list_names(&self) -> Result<Vec<String>, CallError> {
        let mut names = Vec::new();
        let mut pages = self
            .client
            .list_users()
            .path_prefix(&self.config.path)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| classify("ListUsers", &self.config.path, e))?;
            names.extend(
                page.users()
                    .iter()
                    // A path prefix matches deeper paths too: only this path is ours.
                    .filter(|u| u.path == self.config.path)
                    .filter(|u| u.user_name.starts_with(&self.config.prefix))
                    .map(|u| u.user_name.clone()),
            );
        }
        Ok(names)
    }
}

/// `NoSuchEntity` is no error: what was to be removed is gone already.
fn ignore_missing(r: Result<(), CallError>) -> Result<(), CallError> {
    match r {
        Err(e) if e.is(NO_SUCH_ENTITY) => Ok(()),
        other => other,
    }
}
