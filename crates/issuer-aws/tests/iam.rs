//! The IAM issuer against moto's server mode, a real AWS API emulator started by each test as a
//! child process on a free port (killed when the test ends). Fixtures and checks are made with
//! the SDK itself, as the test's own IAM admin.
//!
//! moto checks no signature or policy until told to (`POST /moto-api/reset-auth` with the number
//! of calls still let through, here 0): the test of a key's life makes its admin user first,
//! then turns checking on, so that a minted key is seen to work, to be held to its policy and
//! to be refused once replaced or destroyed.
//!
//! Without `moto_server` on `PATH` each test prints `skipped: moto_server not installed` and
//! passes, unless `COUNTERSIGN_REQUIRE_MOTO=1`, when it fails. The unreachable-IAM test needs no
//! moto.

use std::time::{Duration, Instant};

use aws_config::retry::RetryConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_iam::config::Credentials;
use aws_sdk_iam::error::ProvideErrorMetadata;
use countersign_broker_core::ids::GrantId;
use countersign_broker_core::issuer::{Issuer, IssuerError, credential_name};
use countersign_issuer_aws::{
    AdminCredentials, AwsIamIssuer, AwsIamIssuerConfig, INLINE_POLICY_NAME, UNTIL_TAG,
};
use countersign_store_aws::moto::{Moto, moto_or_skip};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use zeroize::Zeroizing;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// moto's default account.
const ACCOUNT: &str = "123456789012";

/// What the minted users may do in these tests: list users, nothing else.
const LIST_USERS: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:ListUsers","Resource":"*"}]}"#;

/// Anything IAM (the test's admin user, once moto checks).
const ALL_IAM: &str =
    r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:*","Resource":"*"}]}"#;

async fn moto() -> Result<Option<Moto>, String> {
    match moto_or_skip() {
        Some(bin) => Moto::start(bin).await.map(Some),
        None => Ok(None),
    }
}

/// An IAM client signed with this key; one attempt per call.
async fn iam(endpoint: &str, id: &str, secret: &str) -> aws_sdk_iam::Client {
    let sdk = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(id, secret, None, None, "test"))
        .retry_config(RetryConfig::standard().with_max_attempts(1))
        .load()
        .await;
    aws_sdk_iam::Client::new(&sdk)
}

/// The test's admin before moto checks anything.
async fn admin(moto: &Moto) -> aws_sdk_iam::Client {
    iam(&moto.endpoint(), "testing", "testing").await
}

fn config(moto: &Moto, policy_arns: Vec<String>) -> AwsIamIssuerConfig {
    AwsIamIssuerConfig {
        endpoint_url: Some(moto.endpoint()),
        ..AwsIamIssuerConfig::new(policy_arns)
    }
}

fn testing() -> AdminCredentials {
    AdminCredentials::Static {
        access_key_id: "testing".into(),
        secret_access_key: Zeroizing::new("testing".into()),
        session_token: None,
    }
}

/// A new customer-managed policy; its ARN.
async fn policy(admin: &aws_sdk_iam::Client, name: &str, doc: &str) -> Result<String, String> {
    let out = admin
        .create_policy()
        .policy_name(name)
        .policy_document(doc)
        .send()
        .await
        .map_err(|e| format!("CreatePolicy: {:?}", e.code()))?;
    out.policy
        .and_then(|p| p.arn)
        .ok_or_else(|| "no policy ARN".into())
}

fn fresh_name(prefix: &str) -> String {
    credential_name(prefix, GrantId(uuid::Uuid::new_v4()))
}

/// The key pair in a minted value.
fn key_of(m: &countersign_broker_core::issuer::Minted) -> Result<(String, String), String> {
    let v: serde_json::Value =
        serde_json::from_str(m.value.expose()).map_err(|e| format!("value: {e}"))?;
    assert_eq!(v["Version"], 1);
    let id = v["AccessKeyId"].as_str().ok_or("no AccessKeyId")?;
    let secret = v["SecretAccessKey"].as_str().ok_or("no SecretAccessKey")?;
    let env: Vec<_> = m
        .env
        .iter()
        .map(|(k, v)| (k.as_str(), v.expose()))
        .collect();
    assert_eq!(
        env,
        [("AWS_ACCESS_KEY_ID", id), ("AWS_SECRET_ACCESS_KEY", secret)]
    );
    Ok((id.to_owned(), secret.to_owned()))
}

/// The user's path, managed policy ARNs, inline policy names and key ids; `None` when gone.
async fn holdings(
    admin: &aws_sdk_iam::Client,
    name: &str,
) -> Result<Option<(String, Vec<String>, Vec<String>, Vec<String>)>, String> {
    let user = match admin.get_user().user_name(name).send().await {
        Ok(out) => out.user.ok_or("no user in the answer")?,
        Err(e) if e.code() == Some("NoSuchEntity") => return Ok(None),
        Err(e) => return Err(format!("GetUser: {:?}", e.code())),
    };
    let attached = admin
        .list_attached_user_policies()
        .user_name(name)
        .send()
        .await
        .map_err(|e| format!("ListAttachedUserPolicies: {:?}", e.code()))?;
    let inline = admin
        .list_user_policies()
        .user_name(name)
        .send()
        .await
        .map_err(|e| format!("ListUserPolicies: {:?}", e.code()))?;
    let keys = admin
        .list_access_keys()
        .user_name(name)
        .send()
        .await
        .map_err(|e| format!("ListAccessKeys: {:?}", e.code()))?;
    Ok(Some((
        user.path,
        attached
            .attached_policies()
            .iter()
            .filter_map(|p| p.policy_arn().map(str::to_owned))
            .collect(),
        inline.policy_names().to_vec(),
        keys.access_key_metadata()
            .iter()
            .filter_map(|k| k.access_key_id().map(str::to_owned))
            .collect(),
    )))
}

/// Tells moto to check every call's signature and policies from now on.
async fn check_every_call(moto: &Moto) -> TestResult {
    let addr = moto.endpoint().trim_start_matches("http://").to_owned();
    let mut s = tokio::net::TcpStream::connect(&addr).await?;
    let req = format!(
        "POST /moto-api/reset-auth HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1\r\n\
         Connection: close\r\n\r\n0"
    );
    s.write_all(req.as_bytes()).await?;
    let mut answer = String::new();
    s.read_to_string(&mut answer).await?;
    assert!(answer.starts_with("HTTP/1.1 200"), "reset-auth: {answer}");
    Ok(())
}

/// What a call with this key answers: `Ok` or IAM's error code.
async fn list_users_with(endpoint: &str, key: &(String, String)) -> Result<(), String> {
    let c = iam(endpoint, &key.0, &key.1).await;
    match c.list_users().send().await {
        Ok(_) => Ok(()),
        Err(e) => Err(code_of(&e)),
    }
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

fn refused(r: Result<impl std::fmt::Debug, IssuerError>, words: &[&str]) {
    match r {
        Err(IssuerError::Refused(m)) => {
            for w in words {
                assert!(m.contains(w), "{m:?} should say {w:?}");
            }
        }
        other => panic!("expected Refused({words:?}), got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn mint_makes_a_user_under_the_path_with_its_policies_and_a_key() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let admin = admin(&moto).await;
    let arn = policy(&admin, "app-read", LIST_USERS).await?;
    let issuer = AwsIamIssuer::new(
        AwsIamIssuerConfig {
            inline_policy: Some(LIST_USERS.into()),
            ..config(&moto, vec![arn.clone()])
        },
        testing(),
    )
    .await?;
    assert_eq!(issuer.kind(), "aws-iam");
    assert_eq!(issuer.prefix(), "countersign-");

    let name = fresh_name("countersign-");
    let until = chrono::Utc::now() + chrono::Duration::hours(1);
    let minted = issuer.mint(&name, Some(until)).await?;
    let key = key_of(&minted)?;
    let v: serde_json::Value = serde_json::from_str(minted.value.expose())?;
    let expiration = until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    assert_eq!(v["Expiration"], expiration.as_str());

    let (path, attached, inline, keys) = holdings(&admin, &name).await?.ok_or("no user")?;
    assert_eq!(path, "/countersign/");
    assert_eq!(attached, [arn]);
    assert_eq!(inline, [INLINE_POLICY_NAME]);
    assert_eq!(keys, [key.0.as_str()]);
    let tags = admin.list_user_tags().user_name(&name).send().await?;
    let tag = tags.tags().iter().find(|t| t.key() == UNTIL_TAG);
    assert_eq!(tag.map(|t| t.value()), Some(expiration.as_str()));

    // The key is the user's: moto's GetUser without a name answers the key's owner.
    let own = iam(&moto.endpoint(), &key.0, &key.1).await;
    let me = own.get_user().send().await?;
    assert_eq!(me.user.map(|u| u.user_name), Some(name.clone()));

    // No end: no Expiration.
    let other = fresh_name("countersign-");
    let minted = issuer.mint(&other, None).await?;
    let v: serde_json::Value = serde_json::from_str(minted.value.expose())?;
    assert!(v.get("Expiration").is_none(), "{v}");
    Ok(())
}

/// The key's whole life with moto checking signatures and policies: it works within its
/// policy only, a second mint of the name ends the first key, and destroy ends the second.
#[tokio::test]
async fn a_key_works_until_replaced_or_destroyed() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let endpoint = moto.endpoint();
    let boot = admin(&moto).await;
    let arn = policy(&boot, "app-list", LIST_USERS).await?;
    // The issuer's own admin: a user of its own, since moto will check it too.
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
        .ok_or("no admin key")?;
    let admin_key = (ak.access_key_id.clone(), ak.secret_access_key.clone());
    let issuer = AwsIamIssuer::new(
        config(&moto, vec![arn]),
        AdminCredentials::Static {
            access_key_id: ak.access_key_id,
            secret_access_key: Zeroizing::new(ak.secret_access_key),
            session_token: None,
        },
    )
    .await?;

    check_every_call(&moto).await?;
    // Checking is on: the unknown key the fixtures used is refused now.
    assert_eq!(
        list_users_with(&endpoint, &("testing".into(), "testing".into())).await,
        Err("InvalidClientTokenId".into())
    );
    let admin = iam(&endpoint, &admin_key.0, &admin_key.1).await;

    let name = fresh_name("countersign-");
    let first = key_of(&issuer.mint(&name, None).await?)?;
    assert_eq!(list_users_with(&endpoint, &first).await, Ok(()));
    // Held to its policy: listing users only.
    let own = iam(&endpoint, &first.0, &first.1).await;
    let denied = own.create_user().user_name("escalate").send().await;
    assert_eq!(
        denied.err().map(|e| code_of(&e)).as_deref(),
        Some("AccessDenied")
    );

    // Minting the name again (an interrupted mint retried) ends the first key.
    let second = key_of(&issuer.mint(&name, None).await?)?;
    assert_ne!(first.0, second.0);
    assert_eq!(
        list_users_with(&endpoint, &first).await,
        Err("InvalidClientTokenId".into())
    );
    assert_eq!(list_users_with(&endpoint, &second).await, Ok(()));
    let (_, _, _, keys) = holdings(&admin, &name).await?.ok_or("no user")?;
    assert_eq!(keys, [second.0.as_str()]);

    issuer.destroy(&name).await?;
    assert_eq!(
        list_users_with(&endpoint, &second).await,
        Err("InvalidClientTokenId".into())
    );
    assert_eq!(holdings(&admin, &name).await?, None);
    assert_eq!(issuer.list().await?, Vec::<String>::new());
    Ok(())
}

#[tokio::test]
async fn destroy_removes_the_user_and_all_it_holds() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let admin = admin(&moto).await;
    let arn = policy(&admin, "app-read", LIST_USERS).await?;
    let issuer = AwsIamIssuer::new(
        AwsIamIssuerConfig {
            inline_policy: Some(LIST_USERS.into()),
            ..config(&moto, vec![arn.clone()])
        },
        testing(),
    )
    .await?;
    let name = fresh_name("countersign-");
    issuer
        .mint(&name, Some(chrono::Utc::now() + chrono::Duration::hours(1)))
        .await?;
    // What someone may have added by hand: another policy and a console password.
    let extra = policy(&admin, "extra", LIST_USERS).await?;
    admin
        .attach_user_policy()
        .user_name(&name)
        .policy_arn(&extra)
        .send()
        .await?;
    admin
        .create_login_profile()
        .user_name(&name)
        .password("Pa55word!Pa55word!")
        .send()
        .await?;

    issuer.destroy(&name).await?;
    assert_eq!(holdings(&admin, &name).await?, None);
    assert_eq!(issuer.list().await?, Vec::<String>::new());
    // The policies themselves stay: they are the operator's.
    admin.get_policy().policy_arn(&arn).send().await?;

    // Destroying again, or a name never made, is no error.
    issuer.destroy(&name).await?;
    issuer.destroy(&fresh_name("countersign-")).await?;
    Ok(())
}

#[tokio::test]
async fn destroys_racing_each_other_both_succeed() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let admin = admin(&moto).await;
    let arn = policy(&admin, "app-read", LIST_USERS).await?;
    let cfg = AwsIamIssuerConfig {
        inline_policy: Some(LIST_USERS.into()),
        ..config(&moto, vec![arn])
    };
    // Two replicas: two issuers, two clients.
    let a = AwsIamIssuer::new(cfg.clone(), testing()).await?;
    let b = AwsIamIssuer::new(cfg, testing()).await?;
    for _ in 0..5 {
        let name = fresh_name("countersign-");
        a.mint(&name, None).await?;
        let (ra, rb) = tokio::join!(a.destroy(&name), b.destroy(&name));
        assert_eq!((ra, rb), (Ok(()), Ok(())));
        assert_eq!(holdings(&admin, &name).await?, None);
    }
    Ok(())
}

/// A user of the name left by an interrupted mint, holding more than the issuer gives: a mint
/// takes it over with only the declared policies and a new key.
#[tokio::test]
async fn a_mint_takes_over_a_user_an_interrupted_mint_left() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let admin = admin(&moto).await;
    let arn = policy(&admin, "app-read", LIST_USERS).await?;
    let stray = policy(&admin, "stray", LIST_USERS).await?;
    let issuer = AwsIamIssuer::new(config(&moto, vec![arn.clone()]), testing()).await?;
    let name = fresh_name("countersign-");
    admin
        .create_user()
        .user_name(&name)
        .path("/countersign/")
        .send()
        .await?;
    admin
        .attach_user_policy()
        .user_name(&name)
        .policy_arn(&stray)
        .send()
        .await?;
    admin
        .put_user_policy()
        .user_name(&name)
        .policy_name("old")
        .policy_document(LIST_USERS)
        .send()
        .await?;
    let old = admin
        .create_access_key()
        .user_name(&name)
        .send()
        .await?
        .access_key
        .ok_or("no key")?;

    let key = key_of(&issuer.mint(&name, None).await?)?;
    let (path, attached, inline, keys) = holdings(&admin, &name).await?.ok_or("no user")?;
    assert_eq!(path, "/countersign/");
    assert_eq!(attached, [arn]);
    assert_eq!(inline, Vec::<String>::new());
    assert_eq!(keys, [key.0.as_str()]);
    assert_ne!(old.access_key_id, key.0);
    Ok(())
}

/// With a permissions boundary a user left behind is made again (moto reports no boundary, as
/// a user made before the boundary was configured would show none).
#[tokio::test]
async fn a_user_made_under_another_boundary_is_made_again() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let admin = admin(&moto).await;
    let arn = policy(&admin, "app-read", LIST_USERS).await?;
    let boundary = policy(&admin, "boundary", LIST_USERS).await?;
    let issuer = AwsIamIssuer::new(
        AwsIamIssuerConfig {
            permissions_boundary: Some(boundary),
            ..config(&moto, vec![arn.clone()])
        },
        testing(),
    )
    .await?;
    let name = fresh_name("countersign-");
    let first = key_of(&issuer.mint(&name, None).await?)?;
    let second = key_of(&issuer.mint(&name, None).await?)?;
    let (_, attached, _, keys) = holdings(&admin, &name).await?.ok_or("no user")?;
    assert_eq!(attached, [arn]);
    assert_eq!(keys, [second.0.as_str()]);
    assert_ne!(first.0, second.0);
    Ok(())
}

#[tokio::test]
async fn list_sees_only_its_prefix_under_its_path() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let admin = admin(&moto).await;
    let arn = policy(&admin, "app-read", LIST_USERS).await?;
    let issuer = AwsIamIssuer::new(config(&moto, vec![arn]), testing()).await?;
    for (user, path) in [
        (fresh_name("countersign-"), "/elsewhere/"),
        (fresh_name("countersign-"), "/countersign/deeper/"),
        (fresh_name("someone-"), "/countersign/"),
        ("countersign".to_owned(), "/countersign/"),
    ] {
        admin
            .create_user()
            .user_name(user)
            .path(path)
            .send()
            .await?;
    }
    assert_eq!(issuer.list().await?, Vec::<String>::new());
    let mut made = vec![fresh_name("countersign-"), fresh_name("countersign-")];
    for n in &made {
        issuer.mint(n, None).await?;
    }
    let mut listed = issuer.list().await?;
    listed.sort();
    made.sort();
    assert_eq!(listed, made);
    Ok(())
}

#[tokio::test]
async fn names_and_users_not_its_own_are_refused_and_untouched() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let admin = admin(&moto).await;
    let arn = policy(&admin, "app-read", LIST_USERS).await?;
    let issuer = AwsIamIssuer::new(config(&moto, vec![arn]), testing()).await?;
    refused(issuer.mint("someone-else", None).await, &["prefix"]);
    refused(issuer.destroy("someone-else").await, &["prefix"]);
    refused(issuer.destroy("countersign-").await, &["prefix"]);
    refused(
        issuer
            .mint(&format!("countersign-{}", "a".repeat(60)), None)
            .await,
        &["prefix"],
    );
    refused(issuer.mint("countersign-a/b", None).await, &["prefix"]);

    // A user of a name under the prefix but outside the path is someone else's.
    let name = fresh_name("countersign-");
    admin
        .create_user()
        .user_name(&name)
        .path("/elsewhere/")
        .send()
        .await?;
    let key = admin.create_access_key().user_name(&name).send().await?;
    let key = key.access_key.ok_or("no key")?.access_key_id;
    refused(
        issuer.mint(&name, None).await,
        &["/elsewhere/", "not this issuer's"],
    );
    refused(
        issuer.destroy(&name).await,
        &["/elsewhere/", "not this issuer's"],
    );
    let (path, attached, _, keys) = holdings(&admin, &name).await?.ok_or("user deleted")?;
    assert_eq!(
        (path.as_str(), attached.len(), keys),
        ("/elsewhere/", 0, vec![key])
    );
    Ok(())
}

#[tokio::test]
async fn a_refused_mint_answers_why_and_leaves_no_user() -> TestResult {
    let Some(moto) = moto().await? else {
        return Ok(());
    };
    let admin = admin(&moto).await;
    let missing = format!("arn:aws:iam::{ACCOUNT}:policy/no-such-policy");
    let issuer = AwsIamIssuer::new(config(&moto, vec![missing.clone()]), testing()).await?;
    let name = fresh_name("countersign-");
    refused(
        issuer.mint(&name, None).await,
        &["AttachUserPolicy", &name, &missing, "NoSuchEntity"],
    );
    assert_eq!(holdings(&admin, &name).await?, None);
    assert_eq!(issuer.list().await?, Vec::<String>::new());

    // A policy document IAM will not take: refused at PutUserPolicy, after the user existed.
    let arn = policy(&admin, "app-read", LIST_USERS).await?;
    let issuer = AwsIamIssuer::new(
        AwsIamIssuerConfig {
            inline_policy: Some(r#"{"Version":"2012-10-17"}"#.into()),
            ..config(&moto, vec![arn])
        },
        testing(),
    )
    .await?;
    refused(
        issuer.mint(&name, None).await,
        &["PutUserPolicy", "MalformedPolicyDocument"],
    );
    assert_eq!(holdings(&admin, &name).await?, None);
    Ok(())
}

/// A port nothing listens on, and a server that accepts and never answers: both are
/// `Unavailable`, within the configured budget.
#[tokio::test]
async fn an_unreachable_iam_is_unavailable_quickly() -> TestResult {
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0")?;
        l.local_addr()?
    };
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let silent_addr = silent.local_addr()?;
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    for addr in [closed, silent_addr] {
        let cfg = AwsIamIssuerConfig {
            endpoint_url: Some(format!("http://{addr}")),
            timeout_seconds: 1,
            ..AwsIamIssuerConfig::new(vec![format!("arn:aws:iam::{ACCOUNT}:policy/p")])
        };
        let issuer = AwsIamIssuer::new(cfg, testing()).await?;
        let name = fresh_name("countersign-");
        let started = Instant::now();
        let r = issuer.mint(&name, None).await;
        assert!(
            matches!(r, Err(IssuerError::Unavailable(ref m)) if m.contains("CreateUser")),
            "{r:?}"
        );
        let r = issuer.destroy(&name).await;
        assert!(
            matches!(r, Err(IssuerError::Unavailable(ref m)) if m.contains("GetUser")),
            "{r:?}"
        );
        let r = issuer.list().await;
        assert!(
            matches!(r, Err(IssuerError::Unavailable(ref m)) if m.contains("ListUsers")),
            "{r:?}"
        );
        // Three calls of a 1 s budget each.
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{:?}",
            started.elapsed()
        );
    }
    hold.abort();
    Ok(())
}

#[tokio::test]
async fn a_bad_config_is_refused_before_any_call() {
    let cfg = AwsIamIssuerConfig {
        prefix: "bad prefix".into(),
        ..AwsIamIssuerConfig::new(vec![format!("arn:aws:iam::{ACCOUNT}:policy/p")])
    };
    let r = AwsIamIssuer::new(cfg, AdminCredentials::DefaultChain).await;
    assert!(r.is_err_and(|e| e.to_string().contains("prefix")));
}
