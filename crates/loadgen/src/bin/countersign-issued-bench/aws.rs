//! The AWS IAM issuer's side, against moto's server mode (`moto_server` on `PATH`, a real AWS
//! API emulator started as a child process on a free port): an admin user of the issuer's own
//! with every IAM action, its key written as the broker's `admin_file`; then moto told to check
//! every call's signature and policies (`POST /moto-api/reset-auth` with `0`), so that a minted
//! key works while its user holds it and is refused (`InvalidClientTokenId`) once destroyed.
//! Each minted user may list users (an inline policy): the call that tells a live key from a
//! dead one.
//!
//! moto answers in memory, so its mint cost is the broker's and the SDK's, not IAM's (IAM takes
//! seconds to make a key usable everywhere).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_iam::config::Credentials;
use aws_sdk_iam::error::ProvideErrorMetadata;
use countersign_store_aws::moto::{Moto, moto_binary};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The IAM path the issuer's users are made under.
pub const PATH: &str = "/countersign/";
/// What each minted user may do: list users, nothing else.
pub const LIST_USERS: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:ListUsers","Resource":"*"}]}"#;
/// The issuer's admin: anything IAM.
const ALL_IAM: &str =
    r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:*","Resource":"*"}]}"#;

/// A running moto with the issuer's admin made and checking on.
pub struct AwsSide {
    /// Held: moto runs while this lives, and is killed with it.
    _moto: Moto,
    pub endpoint: String,
    /// The admin's key (id, secret), for listing what is left.
    admin: (String, String),
}

impl AwsSide {
    /// Starts moto, makes the issuer's admin and turns checking on; answers it and the admin
    /// key as credential_process JSON (the broker's `admin_file`).
    pub async fn start() -> anyhow::Result<(Self, String)> {
        let bin = moto_binary().context("moto_server is not on PATH")?;
        let moto = Moto::start(bin).await.map_err(anyhow::Error::msg)?;
        let endpoint = moto.endpoint();
        let boot = iam(&endpoint, "testing", "testing").await;
        boot.create_user()
            .user_name("issuer-admin")
            .path("/admins/")
            .send()
            .await?;
        boot.put_user_policy()
            .user_name("issuer-admin")
            .policy_name("all-iam")
            .policy_document(ALL_IAM)
            .send()
            .await?;
        let ak = boot
            .create_access_key()
            .user_name("issuer-admin")
            .send()
            .await?
            .access_key
            .context("no admin key")?;
        let json = serde_json::json!({
            "AccessKeyId": ak.access_key_id,
            "SecretAccessKey": ak.secret_access_key,
        })
        .to_string();
        check_every_call(&endpoint).await?;
        let side = Self {
            _moto: moto,
            endpoint,
            admin: (ak.access_key_id, ak.secret_access_key),
        };
        Ok((side, json))
    }

    /// The users under the issuer's path whose names begin with `prefix`.
    pub async fn users(&self, prefix: &str) -> anyhow::Result<usize> {
        let c = iam(&self.endpoint, &self.admin.0, &self.admin.1).await;
        let listed = c.list_users().path_prefix(PATH).send().await?;
        Ok(listed
            .users()
            .iter()
            .filter(|u| u.user_name().starts_with(prefix))
            .count())
    }
}

/// An IAM client signed with this key; one attempt per call.
async fn iam(endpoint: &str, id: &str, secret: &str) -> aws_sdk_iam::Client {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(id, secret, None, None, "issued-bench"))
        .retry_config(RetryConfig::standard().with_max_attempts(1))
        .load()
        .await;
    aws_sdk_iam::Client::new(&sdk)
}

/// Tells moto to check every call's signature and policies from now on.
async fn check_every_call(endpoint: &str) -> anyhow::Result<()> {
    let addr = endpoint.trim_start_matches("http://").to_owned();
    let mut s = tokio::net::TcpStream::connect(&addr).await?;
    let req = format!(
        "POST /moto-api/reset-auth HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1\r\n\
         Connection: close\r\n\r\n0"
    );
    s.write_all(req.as_bytes()).await?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).await?;
    if !answer.starts_with("HTTP/1.1 200") {
        bail!(
            "moto's reset-auth answered {}",
            answer.lines().next().unwrap_or("")
        );
    }
    Ok(())
}

/// A released key: its id and secret, from the release's parts.
pub fn key_of(released: &serde_json::Value) -> anyhow::Result<(String, String)> {
    let parts = &released["parts"][crate::broker::SECRET];
    let part = |k: &str| -> anyhow::Result<String> {
        Ok(parts[k]
            .as_str()
            .with_context(|| format!("the release's parts name {k}"))?
            .to_owned())
    };
    Ok((part("AWS_ACCESS_KEY_ID")?, part("AWS_SECRET_ACCESS_KEY")?))
}

/// One `ListUsers` with the key: `Ok`, or IAM's error code.
pub async fn call_with(endpoint: &str, key: &(String, String)) -> Result<(), String> {
    let c = iam(endpoint, &key.0, &key.1).await;
    match c.list_users().max_items(1).send().await {
        Ok(_) => Ok(()),
        Err(e) => Err(code_of(&e)),
    }
}

/// Calls with the key until a call fails: the time from `since`, and IAM's error code.
pub async fn refused_within(
    endpoint: &str,
    key: &(String, String),
    since: Instant,
    timeout: Duration,
) -> (Option<f64>, String) {
    while since.elapsed() < timeout {
        match call_with(endpoint, key).await {
            Ok(()) => tokio::time::sleep(Duration::from_millis(5)).await,
            Err(code) => return (Some(crate::ms(since.elapsed())), code),
        }
    }
    (None, "none".into())
}

/// IAM's error code. moto's authentication refusals wrap the error as EC2 does
/// (`<Errors><Error>`), which the IAM client does not parse: read it from the body then.
fn code_of<E: ProvideErrorMetadata>(e: &aws_sdk_iam::error::SdkError<E>) -> String {
    if let Some(code) = e.code() {
        return code.to_owned();
    }
    let body = e
        .raw_response()
        .and_then(|r| r.body().bytes())
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    body.split_once("<Code>")
        .and_then(|(_, rest)| rest.split_once("</Code>"))
        .map_or_else(|| "no code".to_owned(), |(code, _)| code.to_owned())
}
