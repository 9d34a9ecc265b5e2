//! How long a mint and a destroy take against moto's server mode: `ITERATIONS` of each, one
//! after the other, with p50 and p99 printed. A figure for comparing changes on one machine,
//! not for AWS itself (IAM answers in tens of milliseconds per call, moto in a few).
//!
//! `cargo run -p countersign-issuer-aws --example iam_timings [iterations]`

use std::time::{Duration, Instant};

use countersign_broker_core::ids::GrantId;
use countersign_broker_core::issuer::{Issuer, credential_name};
use countersign_issuer_aws::{AdminCredentials, AwsIamIssuer, AwsIamIssuerConfig};
use countersign_store_aws::moto::{Moto, moto_or_skip};
use zeroize::Zeroizing;

const ITERATIONS: usize = 50;

const LIST_USERS: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"iam:ListUsers","Resource":"*"}]}"#;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    println!(
        "{what}: n={} p50={:.1} ms p99={:.1} ms max={:.1} ms",
        times.len(),
        percentile(&times, 0.50).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
        times.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n = match std::env::args().nth(1) {
        Some(a) => a.parse()?,
        None => ITERATIONS,
    };
    let Some(bin) = moto_or_skip() else {
        return Ok(());
    };
    let moto = Moto::start(bin).await?;
    let admin = AdminCredentials::Static {
        access_key_id: "testing".into(),
        secret_access_key: Zeroizing::new("testing".into()),
        session_token: None,
    };
    // One managed policy and one inline policy: a mint of four calls, a destroy of eight.
    let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
        .region(aws_config::Region::new("us-east-1"))
        .endpoint_url(moto.endpoint())
        .credentials_provider(aws_sdk_iam::config::Credentials::new(
            "testing", "testing", None, None, "timings",
        ))
        .load()
        .await;
    let policy = aws_sdk_iam::Client::new(&sdk)
        .create_policy()
        .policy_name("app-read")
        .policy_document(LIST_USERS)
        .send()
        .await?
        .policy
        .and_then(|p| p.arn)
        .ok_or("no policy ARN")?;
    let config = AwsIamIssuerConfig {
        endpoint_url: Some(moto.endpoint()),
        inline_policy: Some(LIST_USERS.into()),
        ..AwsIamIssuerConfig::new(vec![policy])
    };
    let issuer = AwsIamIssuer::new(config, admin).await?;
    let (mut mints, mut destroys) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        let name = credential_name("countersign-", GrantId(uuid::Uuid::new_v4()));
        let t = Instant::now();
        issuer.mint(&name, None).await?;
        mints.push(t.elapsed());
        let t = Instant::now();
        issuer.destroy(&name).await?;
        destroys.push(t.elapsed());
    }
    report("mint", mints);
    report("destroy", destroys);
    Ok(())
}
