//! The AWS IAM issuer (issue 49): for each grant of a secret declared as issued by `aws-iam`, an
//! IAM user of its own, holding the declared policies, and one access key; the user and all it
//! holds are deleted when the grant ends. It implements the core's [`Issuer`] through the
//! official SDK (`aws-sdk-iam`, with its default HTTPS client).
//!
//! # What a mint makes
//!
//! 1. `CreateUser`: the credential's name (`<prefix><grant id>`), under the configured path, with
//!    the configured permissions boundary and a tag `countersign:grant-until=<RFC 3339>` when the
//!    grant has an end.
//! 2. `AttachUserPolicy` for each of `policy_arns`; `PutUserPolicy` of `inline_policy` as the
//!    inline policy `countersign`.
//! 3. `CreateAccessKey`.
//!
//! The secret's value is the key pair as AWS's `credential_process` JSON,
//! `{"Version":1,"AccessKeyId":…,"SecretAccessKey":…,"Expiration":…}` (`Expiration`, the grant's
//! end, only when it has one), and its parts are `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
//!
//! IAM access keys have no expiry of their own: the `Expiration` tells a client when to ask
//! again, but the key works until the core's destroy at the grant's end deletes it (the core
//! queues that destroy and retries it until it succeeds; its orphan sweep, through
//! [`Issuer::list`], ends any user it lost track of). IAM is eventually consistent: a new key
//! can take a few seconds before AWS accepts it everywhere, so a client should retry its first
//! call for a short while.
//!
//! When a user of that name exists already (a mint interrupted before the core recorded it),
//! it is reused: it must be under this issuer's path (a user elsewhere is refused, never
//! touched); one made under another permissions boundary is deleted and made again; otherwise
//! its keys, policies and login profile are removed and it is equipped afresh, so whatever key
//! it had stops working. When any step after the user exists fails, the issuer deletes the
//! user with all it holds (best effort, logged) and answers the step's error.
//!
//! # What a destroy removes
//!
//! A name that does not begin with the prefix is refused, as is a user of that name outside
//! the path. Otherwise: `GetUser` (none: done), then the access keys (first, so the secret stops
//! working first), the attached managed policies, the inline policies and the login profile,
//! then `DeleteUser`. `NoSuchEntity` at any step is no error (another replica destroying the same
//! name, or nothing of that kind there), so two destroys of one name racing both answer `Ok`.
//! IAM's `DeleteConflict` (something still attached) is retried once from the top; a user
//! someone has given an MFA device, a signing certificate, an SSH key, a service-specific
//! credential or a group stays refused with IAM's text until an operator removes that.
//!
//! # Failures
//!
//! Every call has the configured budget (connect, read, each attempt and the whole call with
//! its retries: standard mode, 3 attempts, short backoff). A timeout, a connection failure, an
//! unreadable answer, throttling, `ConcurrentModification` or an IAM server error is
//! [`IssuerError::Unavailable`]; every other refusal (`AccessDenied`, `MalformedPolicyDocument`,
//! `NoSuchEntity` for a policy ARN, `LimitExceeded`, `EntityAlreadyExists` where a user cannot
//! be reused, a name outside the prefix, …) is [`IssuerError::Refused`]. The text names the IAM
//! operation, the user and IAM's code and message; it never holds a key.
//!
//! # The admin's privileges
//!
//! The issuer signs in with its own admin credential ([`AdminCredentials`]): the SDK's default
//! chain or a static access key the broker reads from a file or a store. It needs these
//! privileges and no others, for the default path `/countersign/` (replace the account, the
//! boundary's ARN and the declared policies' ARNs):
//!
//! ```json
//! {
//!   "Version": "2012-10-17",
//!   "Statement": [
//!     {
//!       "Sid": "CreateOnlyBounded",
//!       "Effect": "Allow",
//!       "Action": ["iam:CreateUser"],
//!       "Resource": "arn:aws:iam::*:user/countersign/*",
//!       "Condition": {
//!         "StringEquals": {
//!           "iam:PermissionsBoundary": "arn:aws:iam::111122223333:policy/countersign-boundary"
//!         }
//!       }
//!     },
//!     {
//!       "Sid": "AttachOnlyTheDeclaredPolicies",
//!       "Effect": "Allow",
//!       "Action": ["iam:AttachUserPolicy"],
//!       "Resource": "arn:aws:iam::*:user/countersign/*",
//!       "Condition": {
//!         "ArnEquals": { "iam:PolicyARN": ["arn:aws:iam::111122223333:policy/app-read"] }
//!       }
//!     },
//!     {
//!       "Sid": "ManageItsUsers",
//!       "Effect": "Allow",
//!       "Action": [
//!         "iam:GetUser", "iam:DeleteUser", "iam:ListUsers", "iam:TagUser",
//!         "iam:CreateAccessKey", "iam:DeleteAccessKey", "iam:ListAccessKeys",
//!         "iam:DetachUserPolicy", "iam:ListAttachedUserPolicies",
//!         "iam:PutUserPolicy", "iam:DeleteUserPolicy", "iam:ListUserPolicies",
//!         "iam:DeleteLoginProfile"
//!       ],
//!       "Resource": "arn:aws:iam::*:user/countersign/*"
//!     }
//!   ]
//! }
//! ```
//!
//! - Every statement is scoped to the users under the path, so the admin can neither make nor
//!   touch a user elsewhere. `ListUsers` is always called with the configured path as its
//!   `PathPrefix`, and is granted here on the path's user ARNs as the other calls are. This
//!   policy has not been checked against AWS itself (the tests run on moto, which checks
//!   actions but not resources or conditions): should `ListUsers` be refused so scoped, grant
//!   it alone on `arn:aws:iam::*:user/*` (it reveals names and paths, nothing more).
//! - The `iam:PermissionsBoundary` condition lets the admin create only users bounded by the
//!   boundary; with no boundary configured, drop the condition (and then the inline policy the
//!   admin may put is the only limit: prefer a boundary). The admin holds neither
//!   `iam:PutUserPermissionsBoundary` nor `iam:DeleteUserPermissionsBoundary`, so it cannot lift
//!   a boundary; that is why a reused user made under another boundary is made again instead.
//! - `iam:TagUser` is needed because `CreateUser` carries a tag. The `iam:PolicyARN` condition
//!   limits attachments to the declared policies; detaching is left unconditioned (it only
//!   takes privileges away, and a destroy detaches whatever it finds).
//! - `iam:DeleteLoginProfile` is only for users someone gave a console password; the issuer
//!   never makes one.

mod calls;
mod config;

use async_trait::async_trait;
use aws_sdk_iam::Client;
use aws_sdk_iam::config::Credentials;
use aws_sdk_iam::types::AccessKey;
use countersign_broker_core::clock::Time;
use countersign_broker_core::issuer::{Issuer, IssuerError, Minted};
use countersign_broker_core::secrets::SecretValue;
use serde::Serialize;
use zeroize::Zeroizing;

use crate::calls::{CallError, DELETE_CONFLICT, ENTITY_ALREADY_EXISTS, NO_SUCH_ENTITY};
pub use crate::config::{
    AdminCredentials, AwsIamIssuerConfig, ConfigError, INLINE_POLICY_NAME, MAX_USER_NAME,
};

/// The issuer's kind, as routes and pages show it.
pub const KIND: &str = "aws-iam";

/// The tag a user carries with its grant's end (RFC 3339), when the grant has one.
pub const UNTIL_TAG: &str = calls::UNTIL_TAG;

/// AWS IAM as an [`Issuer`]: a user and an access key per grant.
#[derive(Clone)]
pub struct AwsIamIssuer {
    client: Client,
    config: AwsIamIssuerConfig,
}

impl std::fmt::Debug for AwsIamIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsIamIssuer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AwsIamIssuer {
    /// Checks the configuration and builds the IAM client signed with `admin`. Makes no call:
    /// an unreachable IAM or a bad credential shows on the first mint, destroy or list.
    pub async fn new(
        config: AwsIamIssuerConfig,
        admin: AdminCredentials,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let mut loader = countersign_store_aws::sdk_loader(
            &config.region,
            config.endpoint_url.as_deref(),
            config.timeout(),
        );
        if let AdminCredentials::Static {
            access_key_id,
            secret_access_key,
            session_token,
        } = &admin
        {
            loader = loader.credentials_provider(Credentials::new(
                access_key_id.clone(),
                secret_access_key.to_string(),
                session_token.as_ref().map(|s| s.to_string()),
                None,
                "countersign-issuer-admin",
            ));
        }
        let sdk = loader.load().await;
        Ok(Self {
            client: Client::new(&sdk),
            config,
        })
    }

    /// The configuration the issuer was built with.
    pub fn config(&self) -> &AwsIamIssuerConfig {
        &self.config
    }

    /// Refuses a name this issuer may not make or destroy.
    fn check_name(&self, name: &str) -> Result<(), IssuerError> {
        let ours = name.len() > self.config.prefix.len()
            && name.starts_with(&self.config.prefix)
            && name.len() <= MAX_USER_NAME
            && name.bytes().all(config::user_name_byte);
        if ours {
            Ok(())
        } else {
            Err(IssuerError::Refused(format!(
                "{name:?} is not an IAM user name under the prefix {:?}",
                self.config.prefix
            )))
        }
    }

    fn not_ours(&self, name: &str, path: &str) -> IssuerError {
        IssuerError::Refused(format!(
            "user {name} exists under the path {path}, not {}: not this issuer's",
            self.config.path
        ))
    }

    /// Makes the user, or finds one of that name to equip afresh: `true` when it is reused.
    async fn make_user(&self, name: &str, until: Option<Time>) -> Result<bool, IssuerError> {
        match self.create_user(name, until).await {
            Ok(()) => return Ok(false),
            Err(e) if !e.is(ENTITY_ALREADY_EXISTS) => return Err(e.error),
            Err(_) => {}
        }
        let Some(user) = self.get_user(name).await? else {
            // Deleted since: make it.
            self.create_user(name, until).await?;
            return Ok(false);
        };
        if user.path != self.config.path {
            return Err(self.not_ours(name, &user.path));
        }
        let boundary = user
            .permissions_boundary()
            .and_then(|b| b.permissions_boundary_arn());
        if boundary != self.config.permissions_boundary.as_deref() {
            // The admin may not change a boundary: make the user again under this one.
            self.remove(name).await?;
            self.create_user(name, until).await?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Gives the user its policies and a new key; a reused user loses what it held first.
    async fn equip(
        &self,
        name: &str,
        until: Option<Time>,
        reused: bool,
    ) -> Result<AccessKey, CallError> {
        if reused {
            self.strip(name).await?;
            if let Some(t) = until {
                self.tag_until(name, t).await?;
            }
        }
        self.grant_policies(name).await?;
        self.create_key(name).await
    }

    /// Removes what IAM wants gone before `DeleteUser`: keys first, so that the secret stops
    /// working first, then managed and inline policies and the login profile.
    async fn strip(&self, name: &str) -> Result<(), CallError> {
        self.delete_keys(name).await?;
        self.detach_all(name).await?;
        self.delete_inline_all(name).await?;
        self.delete_login_profile(name).await
    }

    /// Strips and deletes the user; `Ok` as soon as it is found gone.
    async fn remove(&self, name: &str) -> Result<(), IssuerError> {
        let mut conflicts = 0;
        loop {
            let r = match self.strip(name).await {
                Ok(()) => self.delete_user(name).await,
                Err(e) => Err(e),
            };
            match r {
                Ok(()) => return Ok(()),
                Err(e) if e.is(NO_SUCH_ENTITY) => return Ok(()),
                // Something was attached meanwhile, or IAM had not caught up: once more.
                Err(e) if e.is(DELETE_CONFLICT) && conflicts == 0 => conflicts += 1,
                Err(e) => return Err(e.error),
            }
        }
    }
}

/// AWS's `credential_process` answer.
#[derive(Serialize)]
#[serde(rename_all = "PascalCase")]
struct CredentialProcess<'a> {
    version: u8,
    access_key_id: &'a str,
    secret_access_key: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    expiration: Option<String>,
}

/// RFC 3339 to the second, as `credential_process` and tags show times.
pub(crate) fn seconds(t: &Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The minted secret: the `credential_process` JSON and the two environment variables.
fn minted(key: AccessKey, until: Option<Time>) -> Result<Minted, IssuerError> {
    let AccessKey {
        access_key_id,
        secret_access_key,
        ..
    } = key;
    let secret = Zeroizing::new(secret_access_key);
    let doc = CredentialProcess {
        version: 1,
        access_key_id: &access_key_id,
        secret_access_key: &secret,
        expiration: until.as_ref().map(seconds),
    };
    // Written into a buffer large enough never to grow, then moved: no copy left unzeroed.
    let mut buf = Zeroizing::new(Vec::with_capacity(512));
    serde_json::to_writer(&mut *buf, &doc)
        .map_err(|_| IssuerError::Refused("the credential_process JSON did not write".into()))?;
    let value = String::from_utf8(std::mem::take(&mut *buf))
        .map_err(|_| IssuerError::Refused("the credential_process JSON is not UTF-8".into()))?;
    Ok(Minted {
        value: SecretValue::new(Zeroizing::new(value)),
        env: vec![
            (
                "AWS_ACCESS_KEY_ID".into(),
                SecretValue::new(Zeroizing::new(access_key_id)),
            ),
            ("AWS_SECRET_ACCESS_KEY".into(), SecretValue::new(secret)),
        ],
        // The key id names the key without opening it, but it is masked all the same: it
        // says whose the key is.
        public: Vec::new(),
    })
}

#[async_trait]
impl Issuer for AwsIamIssuer {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn prefix(&self) -> &str {
        &self.config.prefix
    }

    async fn mint(&self, name: &str, until: Option<Time>) -> Result<Minted, IssuerError> {
        self.check_name(name)?;
        let reused = self.make_user(name, until).await?;
        match self.equip(name, until, reused).await {
            Ok(key) => {
                tracing::info!(user = name, reused, "minted an IAM user and access key");
                minted(key, until)
            }
            Err(e) => {
                if let Err(c) = self.remove(name).await {
                    tracing::warn!(user = name, error = %c, "a failed mint's user was not removed");
                }
                Err(e.error)
            }
        }
    }

    async fn destroy(&self, name: &str) -> Result<(), IssuerError> {
        self.check_name(name)?;
        match self.get_user(name).await? {
            None => return Ok(()),
            Some(u) if u.path != self.config.path => return Err(self.not_ours(name, &u.path)),
            Some(_) => {}
        }
        self.remove(name).await?;
        tracing::info!(user = name, "destroyed an IAM user");
        Ok(())
    }

    async fn list(&self) -> Result<Vec<String>, IssuerError> {
        Ok(self.list_names().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn key() -> AccessKey {
        AccessKey::builder()
            .user_name("countersign-x")
            .access_key_id("AKIAEXAMPLE")
            .secret_access_key("s3cr3t/with+chars")
            .status(aws_sdk_iam::types::StatusType::Active)
            .build()
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_value_is_credential_process_json() {
        let m = minted(key(), None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            m.value.expose(),
            r#"{"Version":1,"AccessKeyId":"AKIAEXAMPLE","SecretAccessKey":"s3cr3t/with+chars"}"#
        );
        let env: Vec<_> = m
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(
            env,
            [
                ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"),
                ("AWS_SECRET_ACCESS_KEY", "s3cr3t/with+chars")
            ]
        );
        let until = chrono::Utc
            .with_ymd_and_hms(2030, 1, 2, 3, 4, 5)
            .single()
            .unwrap_or_else(|| panic!("a time"))
            + chrono::Duration::milliseconds(678);
        let m = minted(key(), Some(until)).unwrap_or_else(|e| panic!("{e}"));
        let v: serde_json::Value =
            serde_json::from_str(m.value.expose()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["Expiration"], "2030-01-02T03:04:05Z");
        assert!(!format!("{m:?}").contains("s3cr3t"));
    }
}
