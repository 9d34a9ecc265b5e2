//! How long a mint and a destroy take against a real PostgreSQL: `ITERATIONS` credentials
//! minted, then destroyed (half of them with a session open, which the destroy ends), each
//! timed; prints p50 and p99 (nearest rank). The admin is a `CREATEROLE` role, as deployed.
//!
//! `cargo run --release -p countersign-issuer-postgres --example measure`
//! (server: `COUNTERSIGN_TEST_POSTGRES_URL`, a superuser; default the local test server).

use std::time::{Duration, Instant};

use countersign_broker_core::ids::GrantId;
use countersign_broker_core::issuer::{Issuer, credential_name};
use countersign_issuer_postgres::{PostgresIssuer, PostgresIssuerConfig};
use sqlx::{Connection, Executor, PgConnection};
use zeroize::Zeroizing;

const ITERATIONS: usize = 50;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let superuser = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1:5432/postgres".into());
    let base = superuser
        .rsplit_once('/')
        .map_or(superuser.as_str(), |(b, _)| b);
    let host = base.rsplit_once('@').map_or("127.0.0.1:5432", |(_, h)| h);
    let u = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let (admin, reader, db) = (
        format!("ipg_m_admin_{u}"),
        format!("ipg_m_reader_{u}"),
        format!("ipg_m_db_{u}"),
    );
    let mut su = PgConnection::connect(&superuser).await?;
    for sql in [
        format!("CREATE ROLE {admin} LOGIN CREATEROLE PASSWORD 'pw'"),
        format!("CREATE ROLE {reader} NOLOGIN"),
        format!("GRANT {reader} TO {admin} WITH ADMIN OPTION"),
        format!("CREATE DATABASE {db}"),
    ] {
        su.execute(sql.as_str()).await?;
    }
    let mut config = PostgresIssuerConfig::new(vec![reader.clone()]);
    config.prefix = format!("m{u}_");
    let url = Zeroizing::new(format!("postgres://{admin}:pw@{host}/{db}"));
    let issuer = PostgresIssuer::new(config, url)?;
    let outcome = measure(&issuer).await;
    for sql in [
        format!("DROP DATABASE {db} WITH (FORCE)"),
        format!("DROP ROLE {reader}"),
        format!("DROP ROLE {admin}"),
    ] {
        su.execute(sql.as_str()).await?;
    }
    outcome
}

async fn measure(issuer: &PostgresIssuer) -> Result<(), Box<dyn std::error::Error>> {
    let names: Vec<String> = (0..ITERATIONS)
        .map(|_| credential_name(issuer.prefix(), GrantId(uuid::Uuid::new_v4())))
        .collect();
    // One warm-up, so the pool's first connection is not counted.
    let _ = issuer.list().await?;
    let (mut mint, mut destroy, mut destroy_open) = (vec![], vec![], vec![]);
    let mut urls = vec![];
    for name in &names {
        let t = Instant::now();
        let m = issuer.mint(name, None).await?;
        mint.push(t.elapsed());
        urls.push(m.value.expose().to_owned());
    }
    for (i, name) in names.iter().enumerate() {
        let open = if i % 2 == 0 {
            Some(PgConnection::connect(&urls[i]).await?)
        } else {
            None
        };
        let t = Instant::now();
        issuer.destroy(name).await?;
        let took = t.elapsed();
        if open.is_some() {
            destroy_open.push(took);
        } else {
            destroy.push(took);
        }
    }
    report("mint", &mut mint);
    report("destroy (no session)", &mut destroy);
    report("destroy (one open session)", &mut destroy_open);
    Ok(())
}

fn report(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let rank = |p: f64| {
        let i = (p * samples.len() as f64).ceil() as usize;
        samples[i.clamp(1, samples.len()) - 1]
    };
    println!(
        "{what}: n={} p50={:.1} ms p99={:.1} ms",
        samples.len(),
        rank(0.50).as_secs_f64() * 1e3,
        rank(0.99).as_secs_f64() * 1e3
    );
}
