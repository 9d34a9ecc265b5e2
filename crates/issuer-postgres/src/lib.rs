//! The PostgreSQL issuer of dynamic secrets (issue 49): for each grant, a login role of its
//! own, made at the grant's first release with a fresh password and the configured roles'
//! privileges, and dropped at the grant's end with its sessions and what it owns. It implements
//! the core's [`Issuer`] (kind `postgres`) over an admin connection (sqlx, a small lazy pool).
//!
//! # What it does
//!
//! - [`Issuer::mint`], in one transaction: `CREATE ROLE "<name>" WITH LOGIN INHERIT PASSWORD
//!   '<verifier>' VALID UNTIL '<until>' IN ROLE "<r1>", …` (with `CONNECTION LIMIT` when
//!   configured). When the role exists already (a mint interrupted before the core recorded
//!   it), `ALTER ROLE` gives it the new password and expiry, and its memberships are made
//!   exactly the configured roles. The password is 32 random bytes, base64url; the server is
//!   sent only its SCRAM-SHA-256 verifier (as `psql`'s `\password` does), so no server log, not
//!   even a failed statement's, ever holds the password. The secret released is
//!   `postgres://<name>:<password>@<host>:<port>/<database>`, and `PGHOST`, `PGPORT`,
//!   `PGDATABASE`, `PGUSER` and `PGPASSWORD` for tools that read them.
//! - [`Issuer::destroy`], in two transactions. The first: `ALTER ROLE … NOLOGIN`, revoke every
//!   role it is a member of, and make the admin a member of it (which is what lets the admin
//!   end its sessions and its objects); once that commits, no new login gets in. The second:
//!   `pg_terminate_backend` each of its sessions (waiting up to 5 s, or half the statement
//!   timeout, for each to end; one that does not end answers `Unavailable`), `REASSIGN OWNED
//!   BY … TO <reassign_owned_to>` when configured, `DROP OWNED BY …`, `DROP ROLE`. A missing
//!   role is success, so destroying twice or racing another replica both end `Ok`: each step
//!   holds a transaction-scoped advisory lock on the name, and a failure after which the role
//!   is gone counts as done.
//! - [`Issuer::list`]: the roles whose names begin with the prefix (`starts_with`, literal).
//!
//! `VALID UNTIL` bounds password logins only; the core's destroy at the grant's end is what
//! ends a credential and its sessions. It is enforced only where `pg_hba.conf` authenticates the
//! credential by password (`scram-sha-256`, `md5` or `password`), which is also the only way a
//! released URL logs in.
//!
//! # The admin role: least privileges
//!
//! PostgreSQL 14 or later (`pg_terminate_backend` with a timeout); tested on 15. The admin URL
//! names a role that is not a superuser and has:
//!
//! - `LOGIN` and `CREATEROLE` (`CREATE ROLE cs_admin LOGIN CREATEROLE PASSWORD '…'`);
//! - on PostgreSQL 16 and later, `ADMIN OPTION` on each role in `roles`
//!   (`GRANT app_reader TO cs_admin WITH ADMIN OPTION`); on 15 and earlier `CREATEROLE` may
//!   grant any role that is not a superuser's, but granting the admin option anyway keeps a
//!   later upgrade working;
//! - with `reassign_owned_to`, membership in that role (`GRANT app_owner TO cs_admin`):
//!   `REASSIGN OWNED` needs the privileges of the role it gives objects to;
//! - nothing for ending sessions or dropping objects: at destroy the admin grants itself the
//!   credential (`GRANT "<name>" TO CURRENT_USER`, which `CREATEROLE` allows on 15 and the
//!   creator's automatic `ADMIN OPTION` allows on 16+), which is what `pg_terminate_backend`
//!   (`pg_signal_backend` is not needed), `REASSIGN OWNED` and `DROP OWNED` ask for;
//! - `CONNECT` on the database of its URL, where `REASSIGN OWNED` and `DROP OWNED` run. Objects a
//!   credential made in another database block its `DROP ROLE` (SQLSTATE 2BP01, `Refused`): do
//!   not give the configured roles `CREATE` in other databases.
//!
//! # Errors
//!
//! No connection, a timeout, and SQLSTATE classes 08 and 53, 57P0x, 57014, 55P03, 40001 and
//! 40P01 are [`IssuerError::Unavailable`]; anything else (42501 insufficient privilege, 42704 a
//! configured role that does not exist, 28P01 a bad admin login, …) is
//! [`IssuerError::Refused`], its text naming the step, the SQLSTATE and PostgreSQL's message.
//! Statements are never logged (sqlx's statement logging is off on the admin connection).
//! A down server answers within `connect_timeout_seconds`; every operation is bounded by the
//! connect timeout and twice the statement timeout.

mod config;
mod error;
mod sql;

use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use countersign_broker_core::clock::Time;
use countersign_broker_core::issuer::{Issuer, IssuerError, Minted};
use countersign_broker_core::secrets::SecretValue;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Executor, PgConnection, PgPool};
use zeroize::Zeroizing;

pub use config::{ConfigError, OnEnd, PostgresIssuerConfig};

use error::classify;
use sql::{is_credential_name, push_literal, quote_ident, release_url};

/// The most connections the admin pool opens: an issuer's calls are few and short.
const POOL_SIZE: u32 = 4;
/// How long `pg_terminate_backend` waits for each session to end, in milliseconds (at most half
/// the statement timeout).
const TERMINATE_WAIT_MS: u64 = 5000;

/// The PostgreSQL issuer of one declared dynamic secret.
pub struct PostgresIssuer {
    prefix: String,
    roles: Vec<String>,
    on_end: OnEnd,
    connection_limit: Option<u16>,
    release: Release,
    pool: PgPool,
    deadline: Duration,
    terminate_wait_ms: u64,
}

/// Where a released credential connects.
#[derive(Debug)]
struct Release {
    host: String,
    port: u16,
    database: String,
}

impl std::fmt::Debug for PostgresIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresIssuer")
            .field("prefix", &self.prefix)
            .field("roles", &self.roles)
            .field("on_end", &self.on_end)
            .field("release", &self.release)
            .finish_non_exhaustive()
    }
}

impl PostgresIssuer {
    /// An issuer from its configuration and the admin connection URL (read by the broker from a
    /// file or a store; dropped, zeroized, once parsed). No connection is opened until the
    /// first call. Must be called within a Tokio runtime (the pool's upkeep runs on it).
    pub fn new(
        config: PostgresIssuerConfig,
        admin_url: Zeroizing<String>,
    ) -> Result<Self, ConfigError> {
        let on_end = config.validate()?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(ConfigError(
                "the issuer must be built within a Tokio runtime".into(),
            ));
        }
        let admin = PgConnectOptions::from_str(&admin_url).map_err(|_| {
            ConfigError("the admin URL is not a valid PostgreSQL connection URL".into())
        })?;
        drop(admin_url);
        let release = release_of(&config, &admin)?;
        let connect = Duration::from_secs(config.connect_timeout_seconds);
        let statement_ms = config.statement_timeout_seconds.saturating_mul(1000);
        let admin = admin
            .application_name("countersign-issuer-postgres")
            .options([
                ("statement_timeout", statement_ms.to_string()),
                (
                    "idle_in_transaction_session_timeout",
                    statement_ms.saturating_mul(2).to_string(),
                ),
            ])
            .disable_statement_logging();
        let pool = PgPoolOptions::new()
            .max_connections(POOL_SIZE)
            .min_connections(0)
            .acquire_timeout(connect)
            .idle_timeout(Some(Duration::from_secs(60)))
            .max_lifetime(Some(Duration::from_secs(30 * 60)))
            .connect_lazy_with(admin);
        let statement = Duration::from_secs(config.statement_timeout_seconds);
        Ok(Self {
            prefix: config.prefix,
            roles: config.roles,
            on_end,
            connection_limit: config.connection_limit,
            release,
            pool,
            deadline: connect + statement * 2,
            terminate_wait_ms: TERMINATE_WAIT_MS.min(statement_ms / 2),
        })
    }

    /// Checks what a mint and a destroy will need, for the broker's start: the admin logs in,
    /// may create roles, and every configured role exists.
    pub async fn check(&self) -> Result<(), IssuerError> {
        self.bounded("check", self.check_admin()).await
    }

    async fn check_admin(&self) -> Result<(), IssuerError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| classify(e, "check: connect"))?;
        let can: bool = sqlx::query_scalar(
            "SELECT rolcreaterole OR rolsuper FROM pg_roles WHERE rolname = current_user",
        )
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| classify(e, "check: the admin's attributes"))?;
        if !can {
            return Err(IssuerError::Refused(
                "check: the admin role lacks CREATEROLE".into(),
            ));
        }
        let wanted: Vec<String> = self.roles.iter().chain(self.heir()).cloned().collect();
        let found: Vec<String> =
            sqlx::query_scalar("SELECT rolname::text FROM pg_roles WHERE rolname = ANY($1)")
                .bind(&wanted)
                .fetch_all(&mut *conn)
                .await
                .map_err(|e| classify(e, "check: the configured roles"))?;
        match wanted.iter().find(|r| !found.contains(r)) {
            Some(missing) => Err(IssuerError::Refused(format!(
                "check: the configured role {missing:?} does not exist"
            ))),
            None => Ok(()),
        }
    }

    fn heir(&self) -> Option<&String> {
        match &self.on_end {
            OnEnd::ReassignTo(role) => Some(role),
            OnEnd::Drop => None,
        }
    }

    /// `op`, answered `Unavailable` when it takes longer than the connect and statement
    /// timeouts allow.
    async fn bounded<T>(
        &self,
        what: &str,
        op: impl Future<Output = Result<T, IssuerError>>,
    ) -> Result<T, IssuerError> {
        tokio::time::timeout(self.deadline, op)
            .await
            .unwrap_or_else(|_| {
                Err(IssuerError::Unavailable(format!(
                    "{what}: no answer from PostgreSQL within {} s",
                    self.deadline.as_secs()
                )))
            })
    }

    fn check_name(&self, name: &str) -> Result<(), IssuerError> {
        if is_credential_name(&self.prefix, name) {
            Ok(())
        } else {
            Err(IssuerError::Refused(format!(
                "{name:?} is not a credential name under the prefix {:?}",
                self.prefix
            )))
        }
    }

    async fn mint_role(&self, name: &str, until: Option<Time>) -> Result<Minted, IssuerError> {
        self.check_name(name)?;
        let unavailable = |_| IssuerError::Unavailable("mint: no random bytes".into());
        let password = sql::new_password().map_err(unavailable)?;
        let verifier = sql::scram_verifier(&password).map_err(unavailable)?;
        let mut tx = self.locked("mint", name).await?;
        let exists = role_exists(&mut tx, name)
            .await
            .map_err(|e| classify(e, &at("mint", name, "look up")))?;
        let statement = self.role_statement(name, exists, &verifier, until)?;
        let step = if exists { "ALTER ROLE" } else { "CREATE ROLE" };
        tx.execute(statement.as_str())
            .await
            .map_err(|e| classify(e, &at("mint", name, step)))?;
        if exists {
            self.set_memberships(&mut tx, name).await?;
        }
        tx.commit()
            .await
            .map_err(|e| classify(e, &at("mint", name, "commit")))?;
        tracing::info!(
            credential = name,
            replaced = exists,
            "postgres credential minted"
        );
        Ok(self.minted(name, &password))
    }

    /// `CREATE ROLE` for a new credential, `ALTER ROLE` for one that exists, with the password
    /// verifier as a literal (role statements take no bind parameters).
    fn role_statement(
        &self,
        name: &str,
        exists: bool,
        verifier: &str,
        until: Option<Time>,
    ) -> Result<Zeroizing<String>, IssuerError> {
        let quoted = |n: &str| quote_ident(n).map_err(|e| IssuerError::Refused(e.to_string()));
        let role = quoted(name)?;
        let roles_len: usize = self.roles.iter().map(|r| 2 * r.len() + 4).sum();
        // Room for everything, so that pushing never moves the verifier to a new allocation.
        let mut s = Zeroizing::new(String::with_capacity(256 + verifier.len() * 2 + roles_len));
        let verb = if exists { "ALTER" } else { "CREATE" };
        s.push_str(verb);
        s.push_str(" ROLE ");
        s.push_str(&role);
        s.push_str(" WITH LOGIN INHERIT");
        match (self.connection_limit, exists) {
            (Some(n), _) => s.push_str(&format!(" CONNECTION LIMIT {n}")),
            (None, true) => s.push_str(" CONNECTION LIMIT -1"),
            (None, false) => {}
        }
        s.push_str(" PASSWORD ");
        push_literal(&mut s, verifier).map_err(|e| IssuerError::Refused(e.to_string()))?;
        match until {
            Some(t) => {
                s.push_str(" VALID UNTIL '");
                s.push_str(&t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true));
                s.push('\'');
            }
            None if exists => s.push_str(" VALID UNTIL 'infinity'"),
            None => {}
        }
        if !exists && !self.roles.is_empty() {
            let granted: Result<Vec<String>, _> = self.roles.iter().map(|r| quoted(r)).collect();
            s.push_str(" IN ROLE ");
            s.push_str(&granted?.join(", "));
        }
        Ok(s)
    }

    /// Makes the memberships of an existing credential exactly the configured roles.
    async fn set_memberships(
        &self,
        conn: &mut PgConnection,
        name: &str,
    ) -> Result<(), IssuerError> {
        let current = memberships(conn, name)
            .await
            .map_err(|e| classify(e, &at("mint", name, "memberships")))?;
        let role = quote(name)?;
        let extra: Vec<&String> = current.iter().filter(|r| !self.roles.contains(r)).collect();
        let missing: Vec<&String> = self.roles.iter().filter(|r| !current.contains(r)).collect();
        for extra in extra {
            let sql = format!("REVOKE {} FROM {role}", quote(extra)?);
            conn.execute(sql.as_str())
                .await
                .map_err(|e| classify(e, &at("mint", name, &format!("REVOKE {extra:?}"))))?;
        }
        for missing in missing {
            let sql = format!("GRANT {} TO {role}", quote(missing)?);
            conn.execute(sql.as_str())
                .await
                .map_err(|e| classify(e, &at("mint", name, &format!("GRANT {missing:?}"))))?;
        }
        Ok(())
    }

    fn minted(&self, name: &str, password: &Zeroizing<String>) -> Minted {
        let r = &self.release;
        let url = release_url(name, password, &r.host, r.port, &r.database);
        let plain = |s: String| SecretValue::new(Zeroizing::new(s));
        let host = config::ipv6(&r.host).map_or_else(|| r.host.clone(), |a| a.to_string());
        Minted {
            value: SecretValue::new(url),
            env: vec![
                ("PGHOST".into(), plain(host)),
                ("PGPORT".into(), plain(r.port.to_string())),
                ("PGDATABASE".into(), plain(r.database.clone())),
                ("PGUSER".into(), plain(name.to_owned())),
                ("PGPASSWORD".into(), SecretValue::new(password.clone())),
            ],
            public: ["PGHOST", "PGPORT", "PGDATABASE", "PGUSER"]
                .map(String::from)
                .to_vec(),
        }
    }

    async fn destroy_role(&self, name: &str) -> Result<(), IssuerError> {
        self.check_name(name)?;
        let ended = match self.disable(name).await {
            Ok(false) => return Ok(()),
            Ok(true) => self.remove(name).await,
            Err(e) => Err(e),
        };
        match ended {
            Ok(()) => {
                tracing::info!(credential = name, "postgres credential destroyed");
                Ok(())
            }
            // Another replica's destroy (or an operator) got there first.
            Err(e) => match self.exists(name).await {
                Ok(false) => Ok(()),
                _ => Err(e),
            },
        }
    }

    /// A transaction holding the name's advisory lock (racing mints and destroys of one name
    /// take turns), for `op` (`mint`, `destroy`).
    async fn locked(
        &self,
        op: &str,
        name: &str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, IssuerError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(|e| classify(e, &at(op, name, "connect")))?;
        lock(&mut tx, name)
            .await
            .map_err(|e| classify(e, &at(op, name, "lock")))?;
        Ok(tx)
    }

    /// The first step of a destroy: no new logins, no granted privileges, and the admin a
    /// member of the credential. `false` when there is no such role.
    async fn disable(&self, name: &str) -> Result<bool, IssuerError> {
        let mut tx = self.locked("destroy", name).await?;
        let admin_has: Option<bool> = sqlx::query_scalar(
            "SELECT pg_has_role(current_user, oid, 'USAGE') FROM pg_roles WHERE rolname = $1",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| classify(e, &at("destroy", name, "look up")))?;
        let Some(admin_has) = admin_has else {
            return Ok(false);
        };
        let role = quote(name)?;
        run(
            &mut tx,
            &format!("ALTER ROLE {role} NOLOGIN"),
            &at("destroy", name, "NOLOGIN"),
        )
        .await?;
        let current = memberships(&mut tx, name)
            .await
            .map_err(|e| classify(e, &at("destroy", name, "memberships")))?;
        for granted in &current {
            let sql = format!("REVOKE {} FROM {role}", quote(granted)?);
            run(
                &mut tx,
                &sql,
                &at("destroy", name, &format!("REVOKE {granted:?}")),
            )
            .await?;
        }
        if !admin_has {
            let sql = format!("GRANT {role} TO CURRENT_USER");
            run(&mut tx, &sql, &at("destroy", name, "GRANT to the admin")).await?;
        }
        tx.commit()
            .await
            .map_err(|e| classify(e, &at("destroy", name, "commit")))?;
        Ok(true)
    }

    /// The second step of a destroy, once no login can get in: its sessions, its objects, the
    /// role.
    async fn remove(&self, name: &str) -> Result<(), IssuerError> {
        let mut tx = self.locked("destroy", name).await?;
        if !role_exists(&mut tx, name)
            .await
            .map_err(|e| classify(e, &at("destroy", name, "look up")))?
        {
            return Ok(());
        }
        end_sessions(&mut tx, name, self.terminate_wait_ms).await?;
        let role = quote(name)?;
        if let OnEnd::ReassignTo(heir) = &self.on_end {
            let sql = format!("REASSIGN OWNED BY {role} TO {}", quote(heir)?);
            run(&mut tx, &sql, &at("destroy", name, "REASSIGN OWNED")).await?;
        }
        run(
            &mut tx,
            &format!("DROP OWNED BY {role}"),
            &at("destroy", name, "DROP OWNED"),
        )
        .await?;
        run(
            &mut tx,
            &format!("DROP ROLE {role}"),
            &at("destroy", name, "DROP ROLE"),
        )
        .await?;
        tx.commit()
            .await
            .map_err(|e| classify(e, &at("destroy", name, "commit")))
    }

    async fn exists(&self, name: &str) -> Result<bool, IssuerError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| classify(e, "look up: connect"))?;
        role_exists(&mut conn, name)
            .await
            .map_err(|e| classify(e, "look up"))
    }

    async fn list_roles(&self) -> Result<Vec<String>, IssuerError> {
        sqlx::query_scalar(
            "SELECT rolname::text FROM pg_roles WHERE starts_with(rolname, $1) ORDER BY 1",
        )
        .bind(&self.prefix)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| classify(e, "list"))
    }
}

#[async_trait]
impl Issuer for PostgresIssuer {
    fn kind(&self) -> &'static str {
        "postgres"
    }

    fn prefix(&self) -> &str {
        &self.prefix
    }

    async fn mint(&self, name: &str, until: Option<Time>) -> Result<Minted, IssuerError> {
        self.bounded("mint", self.mint_role(name, until)).await
    }

    async fn destroy(&self, name: &str) -> Result<(), IssuerError> {
        self.bounded("destroy", self.destroy_role(name)).await
    }

    async fn list(&self) -> Result<Vec<String>, IssuerError> {
        self.bounded("list", self.list_roles()).await
    }
}

/// Where released credentials connect: the configuration's choice, else the admin URL's.
fn release_of(
    config: &PostgresIssuerConfig,
    admin: &PgConnectOptions,
) -> Result<Release, ConfigError> {
    let host = match &config.release_host {
        Some(h) => h.clone(),
        None if admin.get_socket().is_some() => {
            return Err(ConfigError(
                "the admin URL connects by a Unix socket: set release_host".into(),
            ));
        }
        None => {
            let h = admin.get_host();
            config::check_host(h)?;
            h.to_owned()
        }
    };
    let admin_db = admin.get_database();
    let database = match (&config.database, admin_db) {
        (Some(d), _) => d.clone(),
        (None, Some(d)) => d.to_owned(),
        (None, None) => {
            return Err(ConfigError(
                "the admin URL names no database: set database".into(),
            ));
        }
    };
    if admin_db.is_some_and(|d| d != database) {
        tracing::warn!(
            released = %database,
            "postgres issuer: the released database is not the admin's; objects credentials \
             own there are not reassigned or dropped at their end"
        );
    }
    Ok(Release {
        host,
        port: config.release_port.unwrap_or(admin.get_port()),
        database,
    })
}

/// What failed, for an error's text: `mint cs_…: CREATE ROLE`.
fn at(op: &str, name: &str, step: &str) -> String {
    format!("{op} {name}: {step}")
}

fn quote(name: &str) -> Result<String, IssuerError> {
    quote_ident(name).map_err(|e| IssuerError::Refused(e.to_string()))
}

/// Runs one statement without parameters (role statements take none), by the simple query
/// protocol: nothing is prepared or cached. Through `Executor::execute`, whose boxed future is
/// `Send` as is; `sqlx::raw_sql`'s is not provably so inside async_trait's box.
async fn run(conn: &mut PgConnection, sql: &str, what: &str) -> Result<(), IssuerError> {
    conn.execute(sql)
        .await
        .map(|_| ())
        .map_err(|e| classify(e, what))
}

/// Serializes mints and destroys of one name (within the admin's database) until the
/// transaction ends; concurrent role changes would otherwise fail with "tuple concurrently
/// updated".
async fn lock(conn: &mut PgConnection, name: &str) -> Result<(), sqlx::Error> {
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtext('countersign-issuer-postgres'), hashtext($1))",
    )
    .bind(name)
    .execute(conn)
    .await
    .map(|_| ())
}

async fn role_exists(conn: &mut PgConnection, name: &str) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)")
        .bind(name)
        .fetch_one(conn)
        .await
}

/// The roles `name` is a member of.
async fn memberships(conn: &mut PgConnection, name: &str) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT DISTINCT g.rolname::text FROM pg_auth_members m \
         JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member \
         WHERE u.rolname = $1",
    )
    .bind(name)
    .fetch_all(conn)
    .await
}

/// Terminates every session of `name` (the function in the select list, so it runs only for
/// the rows the `WHERE` keeps) and checks that none is left.
async fn end_sessions(
    conn: &mut PgConnection,
    name: &str,
    wait_ms: u64,
) -> Result<(), IssuerError> {
    let what = format!("destroy {name}: end sessions");
    sqlx::query_scalar::<_, bool>(
        "SELECT pg_terminate_backend(pid, $2) FROM pg_stat_activity WHERE usename = $1",
    )
    .bind(name)
    .bind(i64::try_from(wait_ms).unwrap_or(i64::MAX))
    .fetch_all(&mut *conn)
    .await
    .map_err(|e| classify(e, &what))?;
    // pg_stat_activity is a snapshot per transaction: take a new one.
    run(conn, "SELECT pg_stat_clear_snapshot()", &what).await?;
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE usename = $1")
        .bind(name)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| classify(e, &what))?;
    if left > 0 {
        return Err(IssuerError::Unavailable(format!(
            "{what}: {left} session(s) did not end within {wait_ms} ms"
        )));
    }
    Ok(())
}
