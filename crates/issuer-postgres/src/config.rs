//! What an operator declares for one PostgreSQL-issued secret, as the broker's TOML embeds it,
//! and the checks it must pass before an issuer is built from it: a prefix that can only name
//! this issuer's credentials, role names PostgreSQL takes exactly as written, one way to end the
//! objects a credential owns, and a host a URL can carry.

use std::net::Ipv6Addr;

use countersign_broker_core::issuer::max_prefix;
use serde::Deserialize;

/// PostgreSQL's longest identifier (`NAMEDATALEN - 1` bytes); a longer one is silently cut.
pub const MAX_IDENTIFIER: usize = 63;

/// One PostgreSQL-issued secret's issuer. The admin connection URL is not here: the broker
/// reads it from a file or a store and hands it to [`crate::PostgresIssuer::new`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PostgresIssuerConfig {
    /// What every credential (login role) name begins with: lowercase letters, digits and `_`,
    /// a letter first, not `pg_`, at most 31 characters (a name is the prefix and 32 hex
    /// digits, within PostgreSQL's 63). Default `cs_`.
    #[serde(default = "d_prefix")]
    pub prefix: String,
    /// The roles each credential is made a member of (`IN ROLE`), inheriting their privileges.
    /// Names are used exactly as written (quoted: `Reader` is not `reader`).
    pub roles: Vec<String>,
    /// The host the released URL and `PGHOST` name; default the admin URL's.
    #[serde(default)]
    pub release_host: Option<String>,
    /// The port the released URL and `PGPORT` name; default the admin URL's.
    #[serde(default)]
    pub release_port: Option<u16>,
    /// The database the released URL and `PGDATABASE` name; default the admin URL's. Objects a
    /// credential owns are reassigned or dropped in the admin URL's database only, so the two
    /// should be the same database.
    #[serde(default)]
    pub database: Option<String>,
    /// At a credential's end, give the objects it owns to this role (`REASSIGN OWNED`), then
    /// drop its remaining privileges. Excludes `drop_owned = true`.
    #[serde(default)]
    pub reassign_owned_to: Option<String>,
    /// At a credential's end, drop the objects it owns (`DROP OWNED`). The default when
    /// `reassign_owned_to` is not set.
    #[serde(default)]
    pub drop_owned: Option<bool>,
    /// Each credential's `CONNECTION LIMIT`; default none.
    #[serde(default)]
    pub connection_limit: Option<u16>,
    /// How long connecting to PostgreSQL (and waiting for a free connection) may take before
    /// the issuer answers unavailable.
    #[serde(default = "d_connect_timeout")]
    pub connect_timeout_seconds: u64,
    /// Each statement's `statement_timeout` on the admin connection; an operation as a whole
    /// is bounded by this and the connect timeout together.
    #[serde(default = "d_statement_timeout")]
    pub statement_timeout_seconds: u64,
}

fn d_prefix() -> String {
    "cs_".into()
}

fn d_connect_timeout() -> u64 {
    5
}

fn d_statement_timeout() -> u64 {
    30
}

/// What happens at a credential's end to the objects it owns in the admin's database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OnEnd {
    /// `REASSIGN OWNED BY <credential> TO <role>`, then `DROP OWNED` (its privileges).
    ReassignTo(String),
    /// `DROP OWNED BY <credential>`: its objects and privileges.
    Drop,
}

/// A configuration the issuer cannot be built from. The text never holds the admin URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("postgres issuer configuration: {0}")]
pub struct ConfigError(pub String);

fn bad(msg: impl Into<String>) -> ConfigError {
    ConfigError(msg.into())
}

impl PostgresIssuerConfig {
    /// A configuration with the defaults and `roles`.
    pub fn new(roles: Vec<String>) -> Self {
        Self {
            prefix: d_prefix(),
            roles,
            release_host: None,
            release_port: None,
            database: None,
            reassign_owned_to: None,
            drop_owned: None,
            connection_limit: None,
            connect_timeout_seconds: d_connect_timeout(),
            statement_timeout_seconds: d_statement_timeout(),
        }
    }

    /// Checks every field; answers what happens to a credential's objects at its end.
    pub fn validate(&self) -> Result<OnEnd, ConfigError> {
        check_prefix(&self.prefix)?;
        for (i, role) in self.roles.iter().enumerate() {
            self.check_role("roles", role)?;
            if self.roles[..i].contains(role) {
                return Err(bad(format!("roles: {role:?} is listed twice")));
            }
        }
        if let Some(host) = &self.release_host {
            check_host(host)?;
        }
        if self.release_port == Some(0) {
            return Err(bad("release_port: 0 is no port"));
        }
        if let Some(db) = &self.database {
            check_identifier("database", db)?;
        }
        if self.connection_limit == Some(0) {
            return Err(bad(
                "connection_limit: 0 would refuse every login; leave it out for no limit",
            ));
        }
        if self.connect_timeout_seconds == 0 || self.statement_timeout_seconds == 0 {
            return Err(bad(
                "connect_timeout_seconds and statement_timeout_seconds must be ≥ 1",
            ));
        }
        match (&self.reassign_owned_to, self.drop_owned) {
            (Some(_), Some(true)) => Err(bad(
                "reassign_owned_to and drop_owned = true exclude each other: choose one",
            )),
            (Some(role), _) => {
                self.check_role("reassign_owned_to", role)?;
                Ok(OnEnd::ReassignTo(role.clone()))
            }
            (None, Some(false)) => Err(bad(
                "drop_owned = false needs reassign_owned_to: a credential's objects must go \
                 somewhere",
            )),
            (None, _) => Ok(OnEnd::Drop),
        }
    }

    fn check_role(&self, field: &str, role: &str) -> Result<(), ConfigError> {
        check_identifier(field, role)?;
        if role.starts_with(&self.prefix) {
            return Err(bad(format!(
                "{field}: {role:?} begins with the prefix {:?}, which names only credentials",
                self.prefix
            )));
        }
        Ok(())
    }
}

/// A credential prefix: lowercase letters, digits and `_`, a letter first, not PostgreSQL's
/// reserved `pg_`, short enough for a 32-digit suffix within 63 characters.
pub fn check_prefix(prefix: &str) -> Result<(), ConfigError> {
    let limit = max_prefix(MAX_IDENTIFIER);
    let first_ok = prefix
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase());
    let rest_ok = prefix
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !first_ok || !rest_ok {
        return Err(bad(format!(
            "prefix {prefix:?}: lowercase letters, digits and `_`, a letter first"
        )));
    }
    if prefix.len() > limit {
        return Err(bad(format!(
            "prefix {prefix:?}: at most {limit} characters"
        )));
    }
    if prefix.starts_with("pg_") {
        return Err(bad(format!(
            "prefix {prefix:?}: `pg_` names are reserved by PostgreSQL"
        )));
    }
    Ok(())
}

/// A name PostgreSQL takes exactly as written once quoted: 1 to 63 bytes, no control
/// characters (so no NUL).
pub fn check_identifier(field: &str, name: &str) -> Result<(), ConfigError> {
    if name.is_empty() || name.len() > MAX_IDENTIFIER {
        return Err(bad(format!(
            "{field}: {name:?} must be 1 to {MAX_IDENTIFIER} bytes"
        )));
    }
    if name.chars().any(char::is_control) {
        return Err(bad(format!("{field}: {name:?} holds a control character")));
    }
    Ok(())
}

/// A host a URL carries without escaping: a DNS name or IPv4 address (letters, digits, `.`,
/// `-`, `_`), or an IPv6 address, bare or in brackets.
pub fn check_host(host: &str) -> Result<(), ConfigError> {
    if ipv6(host).is_some() {
        return Ok(());
    }
    let ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(bad(format!(
            "release_host {host:?}: a DNS name or an IP address"
        )))
    }
}

/// The IPv6 address `host` is, with or without brackets.
pub(crate) fn ipv6(host: &str) -> Option<Ipv6Addr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Result<PostgresIssuerConfig, toml::de::Error> {
        toml::from_str(toml_text)
    }

    #[test]
    fn the_defaults_are_cs_prefix_and_drop_owned() {
        let c = parse("roles = [\"app_reader\"]").expect("parses");
        assert_eq!(c, PostgresIssuerConfig::new(vec!["app_reader".into()]));
        assert_eq!(c.prefix, "cs_");
        assert_eq!(c.validate(), Ok(OnEnd::Drop));
    }

    #[test]
    fn every_field_parses_and_unknown_ones_are_refused() {
        let c = parse(
            "prefix = \"cred_\"\nroles = [\"r1\", \"R 2\"]\nrelease_host = \"db.internal\"\n\
             release_port = 6432\ndatabase = \"app\"\nreassign_owned_to = \"app_owner\"\n\
             connection_limit = 4\nconnect_timeout_seconds = 2\nstatement_timeout_seconds = 9\n",
        )
        .expect("parses");
        assert_eq!(c.validate(), Ok(OnEnd::ReassignTo("app_owner".into())));
        assert_eq!(c.release_port, Some(6432));
        assert!(parse("roles = []\nadmin_url = \"postgres://x\"").is_err());
        assert!(parse("prefix = \"cs_\"").is_err(), "roles is required");
    }

    #[test]
    fn on_end_is_exactly_one_choice() {
        let mut c = PostgresIssuerConfig::new(vec![]);
        c.drop_owned = Some(true);
        assert_eq!(c.validate(), Ok(OnEnd::Drop));
        c.reassign_owned_to = Some("heir".into());
        assert!(c.validate().is_err());
        c.drop_owned = Some(false);
        assert_eq!(c.validate(), Ok(OnEnd::ReassignTo("heir".into())));
        c.reassign_owned_to = None;
        assert!(c.validate().is_err());
    }

    #[test]
    fn prefixes_are_checked() {
        for ok in ["cs_", "a", "app_db_2_", &"a".repeat(31)] {
            assert_eq!(check_prefix(ok), Ok(()), "{ok}");
        }
        for no in [
            "",
            "_cs",
            "1cs",
            "Cs_",
            "cs-",
            "cs ",
            "pg_cs",
            "é",
            &"a".repeat(32),
        ] {
            assert!(check_prefix(no).is_err(), "{no}");
        }
    }

    #[test]
    fn roles_must_be_identifiers_outside_the_prefix_and_listed_once() {
        let with = |roles: &[&str]| {
            PostgresIssuerConfig::new(roles.iter().map(|r| r.to_string()).collect()).validate()
        };
        assert!(with(&["reader", "Mixed \"Case\""]).is_ok());
        assert!(with(&[""]).is_err());
        assert!(with(&[&"r".repeat(64)]).is_err());
        assert!(with(&["a\0b"]).is_err());
        assert!(with(&["a\nb"]).is_err());
        assert!(with(&["cs_reader"]).is_err(), "under the prefix");
        assert!(with(&["reader", "reader"]).is_err());
        let mut c = PostgresIssuerConfig::new(vec![]);
        c.reassign_owned_to = Some("cs_heir".into());
        assert!(c.validate().is_err());
    }

    #[test]
    fn hosts_ports_limits_and_timeouts_are_checked() {
        for ok in ["db.example.com", "10.0.0.1", "::1", "[fe80::1]", "db_1"] {
            assert_eq!(check_host(ok), Ok(()), "{ok}");
        }
        for no in [
            "",
            "a/b",
            "user@db",
            "db:5432",
            "db?x",
            "d b",
            "/var/run/postgresql",
        ] {
            assert!(check_host(no).is_err(), "{no}");
        }
        let mut c = PostgresIssuerConfig::new(vec![]);
        c.release_port = Some(0);
        assert!(c.validate().is_err());
        let mut c = PostgresIssuerConfig::new(vec![]);
        c.connection_limit = Some(0);
        assert!(c.validate().is_err());
        let mut c = PostgresIssuerConfig::new(vec![]);
        c.connect_timeout_seconds = 0;
        assert!(c.validate().is_err());
        let mut c = PostgresIssuerConfig::new(vec![]);
        c.database = Some(String::new());
        assert!(c.validate().is_err());
    }
}
