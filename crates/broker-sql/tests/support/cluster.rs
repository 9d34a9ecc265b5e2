//! A throwaway PostgreSQL cluster beside the test server, for failover tests (also included by
//! console-sql's tests): created with Debian's `pg_createcluster` on a fixed name and port
//! (one left behind by a failed run is dropped first), its `postgres` user given the test
//! server's password, dropped again when the value is.
//!
//! Needs root (as CI runs) and the `postgresql-common` tools. Without them the tests that use
//! it skip, unless `COUNTERSIGN_REQUIRE_POSTGRES=1`.

#![allow(dead_code)]

use std::process::Command;

use sqlx::{AnyConnection, Connection, Executor};
use std::time::{Duration, Instant};

/// The test server's URL, or `None` (after saying so) when the PostgreSQL tests skip.
pub fn test_server() -> Option<String> {
    match std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is not set"
            );
            println!("skipped: COUNTERSIGN_TEST_POSTGRES_URL not set");
            None
        }
    }
}

/// `postgres://user:pw@` of a URL (empty when it names no user).
pub fn credentials(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = &rest[..rest.find('/').unwrap_or(rest.len())];
    match authority.rsplit_once('@') {
        Some((userinfo, _)) => format!("{userinfo}@"),
        None => String::new(),
    }
}

/// `host:port` of a single-host URL.
pub fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = &rest[..rest.find(['/', '?']).unwrap_or(rest.len())];
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:5432")
    }
}

/// A loopback port nothing listens on.
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("addr").port();
    drop(l);
    port
}

pub struct Cluster {
    version: String,
    name: &'static str,
    pub port: u16,
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?}: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Cluster {
    /// Creates and starts cluster `name` on `port`, its user `postgres` with `password`.
    /// `None` (after saying so) when the tools are missing and PostgreSQL is not required.
    pub fn create(name: &'static str, port: u16, password: &str) -> Option<Cluster> {
        let listed = run(Command::new("pg_lsclusters").arg("-h"));
        let version = match listed {
            Ok(out) => out.split_whitespace().next().unwrap_or("15").to_owned(),
            Err(e) => {
                assert!(
                    std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                    "COUNTERSIGN_REQUIRE_POSTGRES=1 but pg_lsclusters failed: {e}"
                );
                println!("skipped: no pg_lsclusters ({e})");
                return None;
            }
        };
        let c = Cluster {
            version,
            name,
            port,
        };
        c.drop_cluster();
        run(Command::new("pg_createcluster").args([
            &c.version,
            name,
            "--port",
            &port.to_string(),
            "--start",
        ]))
        .expect("pg_createcluster");
        c.wait_ready();
        c.psql(&format!("ALTER USER postgres PASSWORD '{password}'"));
        Some(c)
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while run(Command::new("pg_isready").args([
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
        ]))
        .is_err()
        {
            assert!(
                Instant::now() < deadline,
                "cluster {} never got ready",
                self.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Runs `sql` as the superuser over the cluster's socket; answers its output.
    pub fn psql(&self, sql: &str) -> String {
        run(Command::new("runuser").args([
            "-u",
            "postgres",
            "--",
            "psql",
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-p",
            &self.port.to_string(),
            "-c",
            sql,
        ]))
        .unwrap_or_else(|e| panic!("psql on {}: {e}", self.name))
    }

    /// Makes every new transaction read-only (a primary being demoted), or takes writes
    /// again, at runtime: `ALTER SYSTEM` and a configuration reload.
    pub fn set_read_only(&self, on: bool) {
        if on {
            self.psql("ALTER SYSTEM SET default_transaction_read_only = on");
        } else {
            self.psql("ALTER SYSTEM RESET default_transaction_read_only");
        }
        self.psql("SELECT pg_reload_conf()");
    }

    fn drop_cluster(&self) {
        let _ = run(Command::new("pg_dropcluster").args([&self.version, self.name, "--stop"]));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.drop_cluster();
    }
}

/// Creates database `name` on the server `server_url` names.
pub async fn create_database(server_url: &str, name: &str) {
    sqlx::any::install_default_drivers();
    let mut admin = AnyConnection::connect(server_url)
        .await
        .expect("connect to the admin URL");
    admin
        .execute(format!("CREATE DATABASE {name}").as_str())
        .await
        .expect("create database");
    let _ = admin.close().await;
}

/// Drops database `name` (its sessions ended) on the server `server_url` names, if it exists.
pub async fn drop_database(server_url: &str, name: &str) {
    if let Ok(mut admin) = AnyConnection::connect(server_url).await {
        let _ = admin
            .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
            .await;
        let _ = admin.close().await;
    }
}
