//! The text the issuer sends and releases: identifiers and literals quoted as PostgreSQL's own
//! `quote_ident` and `quote_literal` do (role statements take no bind parameters), fresh
//! passwords, the SCRAM-SHA-256 verifier sent in their place, and the released URL.

use std::num::NonZeroU32;

use aws_lc_rs::{digest, hmac, pbkdf2, rand};
use base64::Engine;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use zeroize::{Zeroize, Zeroizing};

use crate::config::{MAX_IDENTIFIER, ipv6};

/// Why a text cannot be quoted: PostgreSQL text cannot hold NUL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a NUL character cannot be sent to PostgreSQL")]
pub struct HoldsNul;

/// The system's random source failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the system random source failed")]
pub struct RandFailed;

/// `name` as a quoted identifier: in double quotes, each `"` doubled.
pub fn quote_ident(name: &str) -> Result<String, HoldsNul> {
    if name.contains('\0') {
        return Err(HoldsNul);
    }
    Ok(format!("\"{}\"", name.replace('"', "\"\"")))
}

/// Appends `value` as a string literal: in single quotes, each `'` doubled; with a backslash in
/// it, an escape string (`E'…'`) with each backslash doubled, so that it reads the same whatever
/// `standard_conforming_strings` is. Appends in place, so a secret is never copied elsewhere.
pub fn push_literal(out: &mut String, value: &str) -> Result<(), HoldsNul> {
    if value.contains('\0') {
        return Err(HoldsNul);
    }
    if value.contains('\\') {
        out.push('E');
    }
    out.push('\'');
    for c in value.chars() {
        match c {
            '\'' => out.push_str("''"),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out.push('\'');
    Ok(())
}

/// Whether `name` is a credential name this issuer may touch: under `prefix`, at most 63
/// bytes, lowercase letters, digits and `_` only.
pub fn is_credential_name(prefix: &str, name: &str) -> bool {
    name.len() > prefix.len()
        && name.len() <= MAX_IDENTIFIER
        && name.starts_with(prefix)
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// A fresh password: 32 random bytes, base64url without padding (43 characters a URL carries
/// unescaped).
pub fn new_password() -> Result<Zeroizing<String>, RandFailed> {
    let mut bytes = Zeroizing::new([0u8; 32]);
    rand::fill(&mut bytes[..]).map_err(|_| RandFailed)?;
    let mut out = Zeroizing::new(String::with_capacity(44));
    URL_SAFE_NO_PAD.encode_string(&bytes[..], &mut out);
    Ok(out)
}

/// PostgreSQL's default SCRAM iteration count (`scram_iterations`).
const SCRAM_ITERATIONS: u32 = 4096;

/// The SCRAM-SHA-256 verifier of `password` with a fresh salt, in the form `CREATE ROLE …
/// PASSWORD` accepts as already encrypted (as libpq's `PQencryptPasswordConn` makes it): the
/// server stores it as is, and the password itself never reaches the server, its logs or a
/// failed statement's log line.
pub fn scram_verifier(password: &str) -> Result<Zeroizing<String>, RandFailed> {
    let mut salt = [0u8; 16];
    rand::fill(&mut salt).map_err(|_| RandFailed)?;
    Ok(scram_verifier_with(password, &salt, SCRAM_ITERATIONS))
}

/// The verifier with a given salt and iteration count. `password` is used as its bytes: SASLprep
/// leaves the generated (ASCII) passwords unchanged.
pub(crate) fn scram_verifier_with(
    password: &str,
    salt: &[u8],
    iterations: u32,
) -> Zeroizing<String> {
    let rounds = NonZeroU32::new(iterations).unwrap_or(NonZeroU32::MIN);
    let mut salted = Zeroizing::new([0u8; 32]);
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        rounds,
        salt,
        password.as_bytes(),
        &mut salted[..],
    );
    let key = hmac::Key::new(hmac::HMAC_SHA256, &salted[..]);
    let mut client_key = hmac::sign(&key, b"Client Key").as_ref().to_vec();
    let stored_key = digest::digest(&digest::SHA256, &client_key);
    client_key.zeroize();
    let server_key = hmac::sign(&key, b"Server Key");
    Zeroizing::new(format!(
        "SCRAM-SHA-256${iterations}:{}${}:{}",
        STANDARD.encode(salt),
        STANDARD.encode(stored_key.as_ref()),
        STANDARD.encode(server_key.as_ref()),
    ))
}

/// Everything but RFC 3986's unreserved characters is percent-encoded in a URL part.
const URL_PART: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// `postgres://<user>:<password>@<host>:<port>/<database>`, each part percent-encoded (an IPv6
/// host in brackets).
pub fn release_url(
    user: &str,
    password: &str,
    host: &str,
    port: u16,
    database: &str,
) -> Zeroizing<String> {
    let mut url = Zeroizing::new(String::with_capacity(160));
    url.push_str("postgres://");
    url.extend(utf8_percent_encode(user, URL_PART));
    url.push(':');
    url.extend(utf8_percent_encode(password, URL_PART));
    url.push('@');
    match ipv6(host) {
        Some(addr) => {
            url.push('[');
            url.push_str(&addr.to_string());
            url.push(']');
        }
        None => url.push_str(host),
    }
    url.push(':');
    url.push_str(&port.to_string());
    url.push('/');
    url.extend(utf8_percent_encode(database, URL_PART));
    url
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_with_doubled_quotes() {
        assert_eq!(quote_ident("reader").as_deref(), Ok("\"reader\""));
        assert_eq!(quote_ident("Mixed Case").as_deref(), Ok("\"Mixed Case\""));
        assert_eq!(
            quote_ident("a\"; DROP ROLE x; --").as_deref(),
            Ok("\"a\"\"; DROP ROLE x; --\"")
        );
        assert_eq!(quote_ident("x\0y"), Err(HoldsNul));
    }

    #[test]
    fn literals_double_quotes_and_escape_backslashes() {
        let lit = |v: &str| {
            let mut s = String::new();
            push_literal(&mut s, v).map(|()| s)
        };
        assert_eq!(lit("abc").as_deref(), Ok("'abc'"));
        assert_eq!(lit("it's").as_deref(), Ok("'it''s'"));
        assert_eq!(lit("a\\'b").as_deref(), Ok("E'a\\\\''b'"));
        assert_eq!(lit("").as_deref(), Ok("''"));
        assert_eq!(lit("a\0"), Err(HoldsNul));
    }

    #[test]
    fn credential_names_are_under_the_prefix_and_plain() {
        let name = format!("cs_{}", "0123456789abcdef".repeat(2));
        assert!(is_credential_name("cs_", &name));
        assert!(!is_credential_name("cs_", "cs_"));
        assert!(!is_credential_name("cs_", "cx_abc"));
        assert!(!is_credential_name("cs_", "cs_ABC"));
        assert!(!is_credential_name("cs_", "cs_a\"b"));
        assert!(!is_credential_name(
            "cs_",
            &format!("cs_{}", "a".repeat(61))
        ));
    }

    #[test]
    fn passwords_are_43_url_safe_characters_and_differ() {
        let a = new_password().expect("random");
        let b = new_password().expect("random");
        assert_eq!(a.len(), 43);
        assert!(
            a.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
        );
        assert_ne!(*a, *b);
    }

    /// The expected verifier was computed independently (Python's hashlib and hmac) for the
    /// password `pencil`, the salt of RFC 7677's example and 4096 iterations.
    #[test]
    fn the_scram_verifier_matches_an_independent_computation() {
        let salt = STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").expect("base64");
        let v = scram_verifier_with("pencil", &salt, 4096);
        assert_eq!(
            v.as_str(),
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$\
             WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=:\
             wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU="
        );
        let fresh = scram_verifier("pencil").expect("random");
        assert!(fresh.starts_with("SCRAM-SHA-256$4096:"));
        assert_ne!(fresh.as_str(), v.as_str(), "a fresh salt each time");
    }

    #[test]
    fn the_released_url_encodes_its_parts() {
        let u = release_url("cs_ab", "p-w_d", "db.internal", 5432, "app");
        assert_eq!(u.as_str(), "postgres://cs_ab:p-w_d@db.internal:5432/app");
        let u = release_url("cs_ab", "a/b@c:d", "::1", 6432, "my db/x");
        assert_eq!(
            u.as_str(),
            "postgres://cs_ab:a%2Fb%40c%3Ad@[::1]:6432/my%20db%2Fx"
        );
        let u = release_url("u", "p", "[fe80::1]", 1, "d");
        assert_eq!(u.as_str(), "postgres://u:p@[fe80::1]:1/d");
    }
}
