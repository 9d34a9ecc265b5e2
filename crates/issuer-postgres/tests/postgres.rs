//! The PostgreSQL issuer against a real server: `COUNTERSIGN_TEST_POSTGRES_URL` (a superuser;
//! default `postgres://postgres:postgres@127.0.0.1:5432/postgres`). When it does not answer a
//! test prints a line and passes, unless `COUNTERSIGN_REQUIRE_POSTGRES=1`.
//!
//! Each test makes its own cluster objects with fresh names: an admin role with `CREATEROLE`
//! (not a superuser), granted the roles it hands out `WITH ADMIN OPTION`; a database with a
//! table only the granted role may read; and drops them afterwards, when the test failed too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use countersign_broker_core::clock::Time;
use countersign_broker_core::ids::GrantId;
use countersign_broker_core::issuer::{Issuer, IssuerError, credential_name};
use countersign_issuer_postgres::{PostgresIssuer, PostgresIssuerConfig};
use sqlx::{Connection, Executor, PgConnection};
use zeroize::Zeroizing;

const DEFAULT_URL: &str = "postgres://postgres:postgres@127.0.0.1:5432/postgres";
const ADMIN_PASSWORD: &str = "admin-pw";

/// One test's objects on the server.
struct Cluster {
    /// The superuser URL's parts before the database.
    base: String,
    superuser: String,
    admin: String,
    db: String,
    reader: String,
    heir: String,
    /// What every credential name of the test begins with: `<stem>_` for the issuer under
    /// test, `<stem>x_` for another.
    stem: String,
    prefix: String,
}

impl Cluster {
    async fn new() -> Option<Self> {
        let superuser = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| DEFAULT_URL.to_owned());
        let mut conn = match PgConnection::connect(&superuser).await {
            Ok(c) => c,
            Err(e) => {
                assert!(
                    std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                    "COUNTERSIGN_REQUIRE_POSTGRES=1 but PostgreSQL does not answer: {e}"
                );
                println!("skipped: PostgreSQL at COUNTERSIGN_TEST_POSTGRES_URL does not answer");
                return None;
            }
        };
        let u = &uuid::Uuid::new_v4().simple().to_string()[..12];
        let base = superuser.split('?').next().unwrap_or(&superuser);
        let base = base.rsplit_once('/').map_or(base, |(b, _)| b).to_owned();
        let c = Self {
            base,
            superuser: superuser.clone(),
            admin: format!("ipg_admin_{u}"),
            db: format!("ipg_db_{u}"),
            reader: format!("ipg_reader_{u}"),
            heir: format!("ipg_heir_{u}"),
            stem: format!("t{u}"),
            prefix: format!("t{u}_"),
        };
        let (a, r, h) = (&c.admin, &c.reader, &c.heir);
        for sql in [
            format!("CREATE ROLE {a} LOGIN CREATEROLE PASSWORD '{ADMIN_PASSWORD}'"),
            format!("CREATE ROLE {r} NOLOGIN"),
            format!("CREATE ROLE {h} NOLOGIN"),
            format!("GRANT {r} TO {a} WITH ADMIN OPTION"),
            format!("GRANT {h} TO {a} WITH ADMIN OPTION"),
            format!("CREATE DATABASE {}", c.db),
        ] {
            sql_on(&mut conn, &sql).await;
        }
        let mut db = c.superuser_in_db().await;
        for sql in [
            "CREATE TABLE guarded (x int)".to_owned(),
            "INSERT INTO guarded VALUES (42)".to_owned(),
            format!("GRANT SELECT ON guarded TO {r}"),
            format!("GRANT CREATE ON SCHEMA public TO {r}"),
        ] {
            sql_on(&mut db, &sql).await;
        }
        Some(c)
    }

    fn admin_url(&self) -> Zeroizing<String> {
        let host = self
            .base
            .rsplit_once('@')
            .map_or("127.0.0.1:5432", |(_, h)| h);
        Zeroizing::new(format!(
            "postgres://{}:{ADMIN_PASSWORD}@{host}/{}",
            self.admin, self.db
        ))
    }

    fn config(&self) -> PostgresIssuerConfig {
        let mut c = PostgresIssuerConfig::new(vec![self.reader.clone()]);
        c.prefix = self.prefix.clone();
        c
    }

    fn issuer(&self, config: PostgresIssuerConfig) -> PostgresIssuer {
        PostgresIssuer::new(config, self.admin_url()).expect("issuer")
    }

    fn name(&self) -> String {
        credential_name(&self.prefix, GrantId(uuid::Uuid::new_v4()))
    }

    async fn superuser_in_db(&self) -> PgConnection {
        PgConnection::connect(&format!("{}/{}", self.base, self.db))
            .await
            .expect("superuser connects to the test database")
    }

    async fn role_exists(&self, name: &str) -> bool {
        let mut conn = self.superuser_in_db().await;
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
            .bind(name)
            .fetch_one(&mut conn)
            .await
            .expect("look up a role")
    }

    /// Drops what [`Cluster::new`] made, and every credential the test's issuers made.
    async fn teardown(&self) {
        let Ok(mut conn) = PgConnection::connect(&self.superuser).await else {
            return;
        };
        let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.db))
            .execute(&mut conn)
            .await;
        let left: Vec<String> =
            sqlx::query_scalar("SELECT rolname::text FROM pg_roles WHERE starts_with(rolname, $1)")
                .bind(&self.stem)
                .fetch_all(&mut conn)
                .await
                .unwrap_or_default();
        for role in left.iter().chain([&self.reader, &self.heir, &self.admin]) {
            let _ = sqlx::raw_sql(&format!(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity \
                 WHERE usename = '{role}'; DROP ROLE IF EXISTS \"{role}\""
            ))
            .execute(&mut conn)
            .await;
        }
    }
}

async fn sql_on(conn: &mut PgConnection, sql: &str) {
    conn.execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Runs `test` with a fresh [`Cluster`], then tears it down whether the test passed or not.
async fn with_cluster<F, Fut>(test: F)
where
    F: FnOnce(Arc<Cluster>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(cluster) = Cluster::new().await else {
        return;
    };
    let cluster = Arc::new(cluster);
    let outcome = tokio::spawn(test(cluster.clone())).await;
    cluster.teardown().await;
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

fn in_an_hour() -> Time {
    let t = chrono::Utc::now() + chrono::Duration::hours(1);
    chrono::DateTime::from_timestamp(t.timestamp(), 0).expect("a time")
}

fn env_of<'a>(m: &'a countersign_broker_core::issuer::Minted, key: &str) -> &'a str {
    m.env
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.expose())
        .unwrap_or_else(|| panic!("{key} is released"))
}

async fn sqlstate(url: &str) -> Option<String> {
    match PgConnection::connect(url).await {
        Ok(_) => None,
        Err(e) => Some(
            e.as_database_error()
                .and_then(|d| d.code().map(|c| c.into_owned()))
                .unwrap_or_else(|| e.to_string()),
        ),
    }
}

#[tokio::test]
async fn a_minted_credential_logs_in_with_the_granted_privileges_until_its_expiry() {
    with_cluster(|c| async move {
        let issuer = c.issuer(c.config());
        assert_eq!(issuer.kind(), "postgres");
        issuer.check().await.expect("the admin is fit");
        let name = c.name();
        let until = in_an_hour();
        let m = issuer.mint(&name, Some(until)).await.expect("mint");
        assert!(m.value.expose().starts_with(&format!("postgres://{name}:")));
        assert!(m.value.expose().ends_with(&format!("/{}", c.db)));
        assert_eq!(env_of(&m, "PGUSER"), name);
        assert_eq!(env_of(&m, "PGDATABASE"), c.db);
        assert_eq!(env_of(&m, "PGPASSWORD").len(), 43);
        assert!(m.value.expose().contains(env_of(&m, "PGPASSWORD")));

        let mut conn = PgConnection::connect(m.value.expose())
            .await
            .expect("log in");
        let (user, x): (String, i32) = sqlx::query_as("SELECT current_user::text, x FROM guarded")
            .fetch_one(&mut conn)
            .await
            .expect("the granted role's privilege applies");
        assert_eq!((user.as_str(), x), (name.as_str(), 42));
        let limit: Option<i64> = sqlx::query_scalar(
            "SELECT extract(epoch FROM rolvaliduntil)::bigint FROM pg_roles WHERE rolname = $1",
        )
        .bind(&name)
        .fetch_one(&mut c.superuser_in_db().await)
        .await
        .expect("read the expiry");
        assert_eq!(limit, Some(until.timestamp()));

        // The same login through the released variables.
        let by_env = format!(
            "postgres://{}:{}@{}:{}/{}",
            env_of(&m, "PGUSER"),
            env_of(&m, "PGPASSWORD"),
            env_of(&m, "PGHOST"),
            env_of(&m, "PGPORT"),
            env_of(&m, "PGDATABASE")
        );
        PgConnection::connect(&by_env).await.expect("log in by env");

        // The statement the server was sent held no password.
        let stored: String =
            sqlx::query_scalar("SELECT rolpassword FROM pg_authid WHERE rolname = $1")
                .bind(&name)
                .fetch_one(&mut c.superuser_in_db().await)
                .await
                .expect("read the stored verifier");
        assert!(stored.starts_with("SCRAM-SHA-256$4096:"));
        assert!(!stored.contains(env_of(&m, "PGPASSWORD")));
        drop(conn);
        issuer.destroy(&name).await.expect("destroy");
    })
    .await;
}

#[tokio::test]
async fn minting_again_replaces_the_password_the_expiry_and_the_memberships() {
    with_cluster(|c| async move {
        let issuer = c.issuer(c.config());
        let name = c.name();
        let first = issuer.mint(&name, Some(in_an_hour())).await.expect("mint");
        let mut su = c.superuser_in_db().await;
        // What an interrupted mint, or someone else, may have left changed.
        sql_on(&mut su, &format!("REVOKE {} FROM {name}", c.reader)).await;
        sql_on(&mut su, &format!("GRANT {} TO {name}", c.heir)).await;
        sql_on(&mut su, &format!("ALTER ROLE {name} NOLOGIN")).await;

        let second = issuer.mint(&name, None).await.expect("mint again");
        assert_ne!(first.value.expose(), second.value.expose());
        assert_eq!(
            sqlstate(first.value.expose()).await.as_deref(),
            Some("28P01")
        );
        let mut conn = PgConnection::connect(second.value.expose())
            .await
            .expect("the new password logs in");
        sqlx::query("SELECT x FROM guarded")
            .fetch_one(&mut conn)
            .await
            .expect("the configured role is granted again");
        let (limit, heir): (Option<String>, bool) = sqlx::query_as(
            "SELECT rolvaliduntil::text, pg_has_role(rolname, $2, 'MEMBER') FROM pg_roles \
             WHERE rolname = $1",
        )
        .bind(&name)
        .bind(&c.heir)
        .fetch_one(&mut su)
        .await
        .expect("read the role");
        assert_eq!(
            limit.as_deref(),
            Some("infinity"),
            "no expiry now, as asked"
        );
        assert!(!heir, "a role not configured is revoked");
        drop(conn);
        issuer.destroy(&name).await.expect("destroy");
    })
    .await;
}

#[tokio::test]
async fn destroy_refuses_new_logins_and_ends_open_sessions() {
    with_cluster(|c| async move {
        let issuer = c.issuer(c.config());
        let name = c.name();
        let m = issuer.mint(&name, Some(in_an_hour())).await.expect("mint");
        let mut open = PgConnection::connect(m.value.expose())
            .await
            .expect("log in");
        let mut other_db = PgConnection::connect(&format!(
            "postgres://{name}:{}@{}/postgres",
            env_of(&m, "PGPASSWORD"),
            c.base.rsplit_once('@').map_or("", |(_, h)| h)
        ))
        .await
        .expect("log in to another database");
        sqlx::query("SELECT 1")
            .execute(&mut open)
            .await
            .expect("open");

        issuer.destroy(&name).await.expect("destroy");
        assert!(!c.role_exists(&name).await);
        assert!(
            sqlx::query("SELECT 1").execute(&mut open).await.is_err(),
            "the open session was ended"
        );
        assert!(
            sqlx::query("SELECT 1")
                .execute(&mut other_db)
                .await
                .is_err(),
            "the session in another database was ended"
        );
        assert_eq!(sqlstate(m.value.expose()).await.as_deref(), Some("28P01"));
    })
    .await;
}

#[tokio::test]
async fn destroying_a_missing_name_is_ok_and_a_name_outside_the_prefix_is_refused() {
    with_cluster(|c| async move {
        let issuer = c.issuer(c.config());
        issuer.destroy(&c.name()).await.expect("nothing to destroy");
        let name = c.name();
        issuer.mint(&name, None).await.expect("mint");
        issuer.destroy(&name).await.expect("destroy");
        issuer.destroy(&name).await.expect("destroy again");
        for outside in [c.reader.as_str(), "postgres", &c.prefix, "T_X"] {
            assert!(
                matches!(issuer.destroy(outside).await, Err(IssuerError::Refused(_))),
                "{outside}"
            );
            assert!(matches!(
                issuer.mint(outside, None).await,
                Err(IssuerError::Refused(_))
            ));
        }
        assert!(c.role_exists(&c.reader).await, "left alone");
    })
    .await;
}

#[tokio::test]
async fn two_replicas_destroying_at_once_both_succeed() {
    with_cluster(|c| async move {
        let (one, two) = (c.issuer(c.config()), c.issuer(c.config()));
        for _ in 0..5 {
            let name = c.name();
            let m = one.mint(&name, None).await.expect("mint");
            let _open = PgConnection::connect(m.value.expose())
                .await
                .expect("log in");
            let (a, b) = tokio::join!(one.destroy(&name), two.destroy(&name));
            assert_eq!((a, b), (Ok(()), Ok(())));
            assert!(!c.role_exists(&name).await);
        }
    })
    .await;
}

#[tokio::test]
async fn list_answers_the_names_under_the_prefix_only() {
    with_cluster(|c| async move {
        let issuer = c.issuer(c.config());
        let mut other = c.config();
        other.prefix = format!("{}x_", c.stem);
        let other = c.issuer(other);
        assert_eq!(issuer.list().await, Ok(vec![]));
        let mut names = vec![c.name(), c.name()];
        for n in &names {
            issuer.mint(n, None).await.expect("mint");
        }
        let elsewhere = credential_name(other.prefix(), GrantId(uuid::Uuid::new_v4()));
        other
            .mint(&elsewhere, None)
            .await
            .expect("mint under another prefix");
        names.sort();
        assert_eq!(issuer.list().await, Ok(names.clone()));
        assert_eq!(other.list().await, Ok(vec![elsewhere.clone()]));
        issuer.destroy(&names[0]).await.expect("destroy");
        assert_eq!(issuer.list().await, Ok(vec![names[1].clone()]));
    })
    .await;
}

/// Mints a credential that creates a table, destroys it, and answers the table's owner.
async fn owner_after_destroy(c: &Cluster, issuer: &PostgresIssuer) -> Option<String> {
    let name = c.name();
    let m = issuer.mint(&name, None).await.expect("mint");
    let mut conn = PgConnection::connect(m.value.expose())
        .await
        .expect("log in");
    sql_on(&mut conn, &format!("CREATE TABLE made_by_{name} (y int)")).await;
    drop(conn);
    issuer.destroy(&name).await.expect("destroy");
    assert!(!c.role_exists(&name).await);
    sqlx::query_scalar("SELECT tableowner::text FROM pg_tables WHERE tablename = $1")
        .bind(format!("made_by_{name}"))
        .fetch_optional(&mut c.superuser_in_db().await)
        .await
        .expect("look up the table")
}

#[tokio::test]
async fn objects_a_credential_made_are_reassigned_when_configured() {
    with_cluster(|c| async move {
        let mut config = c.config();
        config.reassign_owned_to = Some(c.heir.clone());
        let issuer = c.issuer(config);
        assert_eq!(owner_after_destroy(&c, &issuer).await, Some(c.heir.clone()));
    })
    .await;
}

#[tokio::test]
async fn objects_a_credential_made_are_dropped_by_default() {
    with_cluster(|c| async move {
        let issuer = c.issuer(c.config());
        assert_eq!(owner_after_destroy(&c, &issuer).await, None);
    })
    .await;
}

#[tokio::test]
async fn a_refused_mint_says_why_and_leaves_no_role() {
    with_cluster(|c| async move {
        let mut config = c.config();
        config.roles.push(format!("{}_missing", c.reader));
        let issuer = c.issuer(config);
        let name = c.name();
        let refused = issuer.mint(&name, None).await;
        let Err(IssuerError::Refused(why)) = refused else {
            panic!("refused, not {refused:?}");
        };
        assert!(
            why.contains("42704") && why.contains("CREATE ROLE"),
            "{why}"
        );
        assert!(!why.contains("SCRAM"), "{why}");
        assert!(!c.role_exists(&name).await);
        assert!(matches!(issuer.check().await, Err(IssuerError::Refused(_))));

        // An admin without CREATEROLE.
        sql_on(
            &mut c.superuser_in_db().await,
            &format!("ALTER ROLE {} NOCREATEROLE", c.admin),
        )
        .await;
        let issuer = c.issuer(c.config());
        let refused = issuer.mint(&name, None).await;
        let Err(IssuerError::Refused(why)) = refused else {
            panic!("refused, not {refused:?}");
        };
        assert!(why.contains("42501"), "{why}");
        assert!(!c.role_exists(&name).await);
    })
    .await;
}

#[tokio::test]
async fn a_down_server_answers_unavailable_quickly() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    let mut config = PostgresIssuerConfig::new(vec!["reader".into()]);
    config.connect_timeout_seconds = 1;
    let url = Zeroizing::new(format!("postgres://admin:secret-pw@127.0.0.1:{port}/app"));
    let issuer = PostgresIssuer::new(config, url).expect("issuer");
    let name = credential_name("cs_", GrantId(uuid::Uuid::new_v4()));
    for op in ["mint", "destroy", "list"] {
        let started = Instant::now();
        let answer = match op {
            "mint" => issuer.mint(&name, None).await.map(|_| ()),
            "destroy" => issuer.destroy(&name).await,
            _ => issuer.list().await.map(|_| ()),
        };
        let took = started.elapsed();
        let Err(IssuerError::Unavailable(why)) = answer else {
            panic!("{op}: unavailable, not {answer:?}");
        };
        assert!(!why.contains("secret-pw"), "{why}");
        // One connect timeout; a destroy's second look for the role takes another.
        assert!(took < Duration::from_secs(3), "{op} took {took:?}");
    }
    assert!(!format!("{issuer:?}").contains("secret-pw"));
}

#[tokio::test]
async fn an_issuer_cannot_be_built_from_a_bad_admin_url_and_never_shows_it() {
    let config = || PostgresIssuerConfig::new(vec![]);
    for url in [
        "not a url",
        "postgres://u:secret-pw@h:5432",
        "postgres://u:secret-pw@h:5432/db?host=/var/run/postgresql",
    ] {
        let e = PostgresIssuer::new(config(), Zeroizing::new(url.into()))
            .expect_err(url)
            .to_string();
        assert!(!e.contains("secret-pw"), "{e}");
    }
    let mut with_db = config();
    with_db.database = Some("app".into());
    with_db.release_host = Some("db.example.com".into());
    PostgresIssuer::new(
        with_db,
        Zeroizing::new("postgres://u:p@[::1]:5432?host=/var/run/postgresql".into()),
    )
    .expect("host and database from the configuration");
}
