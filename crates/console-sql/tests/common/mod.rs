//! What the storage contract suites share.

#![allow(dead_code)]

use sqlx::Connection;

/// A fresh PostgreSQL database on the test server, so a suite never meets a schema another
/// suite (or another checkout) left in a shared one; `None` when no server is named
/// (`COUNTERSIGN_REQUIRE_POSTGRES=1` makes that a failure).
pub async fn fresh_postgres() -> Option<String> {
    let Ok(url) = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is unset"
        );
        println!("skipped: COUNTERSIGN_TEST_POSTGRES_URL is not set");
        return None;
    };
    let name = format!("cs_sql_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&url)
        .await
        .expect("connect to the test server");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create a test database");
    let base = url.split('?').next().unwrap_or(&url);
    let base = base.rsplit_once('/').map(|(b, _)| b).unwrap_or(base);
    Some(format!("{base}/{name}"))
}

/// Drops a database [`fresh_postgres`] made, with what still holds connections to it; called
/// at the end of a suite that passed (one that failed leaves its database for inspection).
pub async fn drop_postgres(db_url: &str) {
    let (Ok(admin), Some((_, name))) = (
        std::env::var("COUNTERSIGN_TEST_POSTGRES_URL"),
        db_url.rsplit_once('/'),
    ) else {
        return;
    };
    if !name.starts_with("cs_sql_") {
        return;
    }
    if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await;
    }
}
