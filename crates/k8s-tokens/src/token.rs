//! A ServiceAccount token as protocol.md §7 reads it: a compact JWS signed RS256 or ES256 whose
//! claims are those of a Kubernetes projected token.
//!
//! [`parse`] splits and decodes without trusting anything; [`check_claims`] applies the rules to
//! claims whose signature has verified, in this order (the first that fails answers):
//!
//! 1. `iss` is the configured issuer; `exp` and `iat` are present, `exp` after `iat`;
//! 2. `exp` has not passed (`TOKEN_EXPIRED`);
//! 3. `exp - iat` is at most an hour (`TOKEN_TOO_LONG_LIVED`): before the audience, so that a
//!    default-mounted token (a year long, audience the API server's) is told what is wrong
//!    with it;
//! 4. `aud` (a string or an array) holds the configured audience;
//! 5. `nbf` and `iat` are not in the future (60 s of clock skew allowed);
//! 6. `sub` is `system:serviceaccount:<ns>:<name>`, agreeing with the `kubernetes.io` claim
//!    (`namespace`, `serviceaccount {name, uid}`, optional `pod {name, uid}`), with Kubernetes
//!    name syntax.
//!
//! Every other failure is `TOKEN_INVALID`, with a fixed detail that never quotes the token.

use chrono::DateTime;
use countersign_broker_core::clock::Time;
use countersign_broker_core::identity::ServiceAccountToken;
use countersign_broker_core::{Error, ErrorCode};
use countersign_proto::b64;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

use crate::jwks::Alg;

/// The longest token accepted (projected tokens are about a kilobyte).
pub const MAX_TOKEN_LEN: usize = 16 * 1024;
/// A token may live at most this long from its issue (protocol.md §7).
pub const MAX_LIFETIME_SECONDS: i64 = 3600;
/// Clock skew allowed on `nbf` and `iat`.
pub const SKEW_SECONDS: i64 = 60;

/// TOKEN_INVALID with a fixed detail.
pub(crate) fn invalid(detail: &'static str) -> Error {
    Error::with_message(
        ErrorCode::TOKEN_INVALID,
        format!("{}: {detail}", ErrorCode::TOKEN_INVALID.message()),
    )
}

/// A token split and decoded, its signature not yet checked.
#[derive(Debug)]
pub struct Parsed {
    pub alg: Alg,
    pub kid: Option<String>,
    pub signing_input: Vec<u8>,
    pub signature: Vec<u8>,
    pub payload: Vec<u8>,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    #[serde(default)]
    kid: Option<String>,
    /// Extensions this verifier does not understand: refused when present.
    #[serde(default)]
    crit: Option<IgnoredAny>,
    #[serde(default)]
    b64: Option<IgnoredAny>,
}

/// Splits a compact JWS and decodes its header; refuses any `alg` but RS256 and ES256.
pub fn parse(token: &str) -> Result<Parsed, Error> {
    let token = token.trim();
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(invalid("not a compact JWS of acceptable length"));
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("not three dot-separated parts"));
    };
    let header: Header = b64::decode(h)
        .ok()
        .and_then(|bytes| countersign_proto::json::from_slice(&bytes).ok())
        .ok_or_else(|| invalid("header is not a JSON object"))?;
    let alg = Alg::parse(&header.alg).ok_or_else(|| invalid("alg must be RS256 or ES256"))?;
    if header.crit.is_some() || header.b64.is_some() {
        return Err(invalid("unsupported header extension"));
    }
    let payload = b64::decode(p).map_err(|_| invalid("payload is not base64url"))?;
    let signature = b64::decode(s).map_err(|_| invalid("signature is not base64url"))?;
    if signature.is_empty() {
        return Err(invalid("unsigned"));
    }
    let signing_input = token
        .get(..h.len() + 1 + p.len())
        .ok_or_else(|| invalid("not three dot-separated parts"))?;
    Ok(Parsed {
        alg,
        kid: header.kid.filter(|k| !k.is_empty()),
        signing_input: signing_input.as_bytes().to_vec(),
        signature,
        payload,
    })
}

/// A NumericDate (RFC 7519): seconds, possibly fractional; truncated to whole seconds.
fn numeric_date<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    let n = Option::<serde_json::Number>::deserialize(d)?;
    n.map(|n| {
        n.as_i64()
            .or_else(|| {
                n.as_f64()
                    .filter(|f| f.is_finite() && f.abs() < 1e15)
                    .map(|f| f.floor() as i64)
            })
            .ok_or_else(|| serde::de::Error::custom("NumericDate out of range"))
    })
    .transpose()
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
}

impl Audience {
    fn contains(&self, aud: &str) -> bool {
        match self {
            Self::One(a) => a == aud,
            Self::Many(v) => v.iter().any(|a| a == aud),
        }
    }
}

#[derive(Deserialize)]
struct Named {
    name: String,
    uid: String,
}

#[derive(Deserialize)]
struct Kubernetes {
    namespace: String,
    serviceaccount: Named,
    #[serde(default)]
    pod: Option<Named>,
}

#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    iss: Option<String>,
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    aud: Option<Audience>,
    #[serde(default, deserialize_with = "numeric_date")]
    exp: Option<i64>,
    #[serde(default, deserialize_with = "numeric_date")]
    iat: Option<i64>,
    #[serde(default, deserialize_with = "numeric_date")]
    nbf: Option<i64>,
    #[serde(default, rename = "kubernetes.io")]
    kubernetes: Option<Kubernetes>,
}

/// What the checks compare against.
#[derive(Debug, Clone)]
pub struct Expect<'a> {
    pub issuer: &'a str,
    pub audience: &'a str,
}

/// Applies the claim rules (see the module doc) to a verified payload at `now`.
pub fn check_claims(
    payload: &[u8],
    expect: &Expect<'_>,
    now: Time,
) -> Result<ServiceAccountToken, Error> {
    let c: Claims = countersign_proto::json::from_slice(payload)
        .map_err(|_| invalid("claims are not a JSON object of the expected shape"))?;
    if c.iss.as_deref() != Some(expect.issuer) {
        return Err(invalid("issuer is not the trusted one"));
    }
    let (Some(exp), Some(iat)) = (c.exp, c.iat) else {
        return Err(invalid("exp and iat are required"));
    };
    if exp <= iat {
        return Err(invalid("exp is not after iat"));
    }
    let expires_at = DateTime::from_timestamp(exp, 0).ok_or_else(|| invalid("exp out of range"))?;
    let now_s = now.timestamp();
    if now_s >= exp {
        return Err(ErrorCode::TOKEN_EXPIRED.into());
    }
    if exp.saturating_sub(iat) > MAX_LIFETIME_SECONDS {
        return Err(ErrorCode::TOKEN_TOO_LONG_LIVED.into());
    }
    if !c.aud.as_ref().is_some_and(|a| a.contains(expect.audience)) {
        return Err(invalid("audience is not this broker's"));
    }
    let not_before = c.nbf.unwrap_or(iat).max(iat);
    if not_before > now_s.saturating_add(SKEW_SECONDS) {
        return Err(invalid("not valid yet"));
    }
    let k = c
        .kubernetes
        .ok_or_else(|| invalid("kubernetes.io claim missing"))?;
    let sub = c.sub.ok_or_else(|| invalid("sub missing"))?;
    let (namespace, name) = sub
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .ok_or_else(|| invalid("sub is not system:serviceaccount:<namespace>:<name>"))?;
    if !is_dns_label(namespace) || !is_dns_subdomain(name) {
        return Err(invalid("sub does not name a namespace and ServiceAccount"));
    }
    if k.namespace != namespace || k.serviceaccount.name != name {
        return Err(invalid("sub and the kubernetes.io claim disagree"));
    }
    if !is_uid(&k.serviceaccount.uid) {
        return Err(invalid("serviceaccount uid is not valid"));
    }
    let pod_uid = match k.pod {
        None => None,
        Some(p) if is_dns_subdomain(&p.name) && is_uid(&p.uid) => Some(p.uid),
        Some(_) => return Err(invalid("pod name or uid is not valid")),
    };
    Ok(ServiceAccountToken {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        subject: sub.clone(),
        expires_at,
        pod_uid,
    })
}

/// An RFC 1123 label: a Kubernetes namespace.
fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// An RFC 1123 subdomain: a ServiceAccount or pod name.
fn is_dns_subdomain(s: &str) -> bool {
    (1..=253).contains(&s.len())
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

/// A Kubernetes UID (a UUID in practice): printable, no whitespace, at most 128 bytes.
fn is_uid(s: &str) -> bool {
    (1..=128).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use serde_json::{Value, json};

    fn now() -> Time {
        chrono::Utc
            .with_ymd_and_hms(2031, 3, 4, 5, 6, 7)
            .single()
            .unwrap_or_default()
    }

    fn claims() -> Value {
        let t = now().timestamp();
        json!({
            "aud": ["countersign"],
            "exp": t + 600,
            "iat": t - 10,
            "nbf": t - 10,
            "iss": "https://issuer.example",
            "jti": "9b6e0f0e-5f6a-4f0c-9e43-1a2b3c4d5e6f",
            "kubernetes.io": {
                "namespace": "payments",
                "node": { "name": "node-1", "uid": "3f1c" },
                "pod": { "name": "api-7d9f-x2", "uid": "0d7b8c44-1111-2222-3333-444455556666" },
                "serviceaccount": { "name": "api", "uid": "5e3c1a7b-aaaa-bbbb-cccc-ddddeeeeffff" }
            },
            "sub": "system:serviceaccount:payments:api"
        })
    }

    fn check(c: &Value) -> Result<ServiceAccountToken, Error> {
        let expect = Expect {
            issuer: "https://issuer.example",
            audience: "countersign",
        };
        check_claims(&serde_json::to_vec(c).unwrap_or_default(), &expect, now())
    }

    fn code(c: &Value) -> ErrorCode {
        match check(c) {
            Ok(_) => ErrorCode::INTERNAL,
            Err(e) => e.code,
        }
    }

    #[test]
    fn a_projected_token_names_its_account_and_pod() {
        let sa = check(&claims()).ok();
        let sa = sa.as_ref();
        assert_eq!(sa.map(|s| s.account()), Some("payments/api".into()));
        assert_eq!(
            sa.map(|s| s.subject.as_str()),
            Some("system:serviceaccount:payments:api")
        );
        assert_eq!(
            sa.and_then(|s| s.pod_uid.as_deref()),
            Some("0d7b8c44-1111-2222-3333-444455556666")
        );
        let mut c = claims();
        c["aud"] = json!("countersign");
        c["kubernetes.io"].as_object_mut().map(|o| o.remove("pod"));
        assert_eq!(check(&c).ok().and_then(|s| s.pod_uid), None);
        // Fractional NumericDates are accepted.
        c["exp"] = json!(now().timestamp() as f64 + 600.5);
        assert!(check(&c).is_ok());
    }

    #[test]
    fn each_rule_answers_its_code() {
        let t = now().timestamp();
        let with = |f: &dyn Fn(&mut Value)| {
            let mut c = claims();
            f(&mut c);
            code(&c)
        };
        use ErrorCode::*;
        assert_eq!(with(&|c| c["exp"] = json!(t)), TOKEN_EXPIRED);
        assert_eq!(with(&|c| c["exp"] = json!(t - 1)), TOKEN_EXPIRED);
        // A default-mounted token: a year long, the API server's audience.
        assert_eq!(
            with(&|c| {
                c["exp"] = json!(t + 365 * 86400);
                c["aud"] = json!(["https://kubernetes.default.svc.cluster.local"]);
            }),
            TOKEN_TOO_LONG_LIVED
        );
        assert_eq!(
            with(&|c| c["exp"] = json!(t - 10 + 3601)),
            TOKEN_TOO_LONG_LIVED
        );
        assert_eq!(
            with(&|c| c["exp"] = json!(t - 10 + 3600)),
            INTERNAL,
            "exactly an hour is fine"
        );
        for (what, f) in [
            (
                "aud",
                &(|c: &mut Value| c["aud"] = json!(["other"])) as &dyn Fn(&mut Value),
            ),
            ("aud number", &|c| c["aud"] = json!(7)),
            ("no aud", &|c| {
                c.as_object_mut().map(|o| o.remove("aud"));
            }),
            ("iss", &|c| c["iss"] = json!("https://issuer.example/")),
            ("no exp", &|c| {
                c.as_object_mut().map(|o| o.remove("exp"));
            }),
            ("no iat", &|c| {
                c.as_object_mut().map(|o| o.remove("iat"));
            }),
            ("exp before iat", &|c| c["iat"] = json!(t + 700)),
            ("nbf future", &|c| c["nbf"] = json!(t + 120)),
            ("iat future", &|c| {
                c["iat"] = json!(t + 120);
                c["nbf"] = json!(t + 120);
            }),
            ("exp string", &|c| c["exp"] = json!("soon")),
            ("sub", &|c| {
                c["sub"] = json!("system:serviceaccount:payments")
            }),
            ("sub user", &|c| c["sub"] = json!("admin")),
            ("sub other", &|c| {
                c["sub"] = json!("system:serviceaccount:payments:web")
            }),
            ("namespace", &|c| {
                c["kubernetes.io"]["namespace"] = json!("other")
            }),
            ("bad ns", &|c| {
                c["sub"] = json!("system:serviceaccount:Pay/ments:api");
                c["kubernetes.io"]["namespace"] = json!("Pay/ments");
            }),
            ("sa uid", &|c| {
                c["kubernetes.io"]["serviceaccount"]["uid"] = json!("")
            }),
            ("pod uid", &|c| {
                c["kubernetes.io"]["pod"]["uid"] = json!("a b")
            }),
            ("no k8s", &|c| {
                c.as_object_mut().map(|o| o.remove("kubernetes.io"));
            }),
            ("k8s shape", &|c| c["kubernetes.io"] = json!("x")),
        ] {
            assert_eq!(with(f), TOKEN_INVALID, "{what}");
        }
        // Within the skew, nbf and iat slightly ahead are fine.
        assert_eq!(with(&|c| c["nbf"] = json!(t + 30)), INTERNAL);
    }

    #[test]
    fn parse_refuses_other_algorithms_and_shapes() {
        let enc = |v: &Value| b64::encode(&serde_json::to_vec(v).unwrap_or_default());
        let body = enc(&claims());
        for alg in ["none", "HS256", "RS512", "PS256", "ES384", ""] {
            let t = format!("{}.{body}.AAAA", enc(&json!({ "alg": alg })));
            assert_eq!(
                parse(&t).map(|_| ()).map_err(|e| e.code),
                Err(ErrorCode::TOKEN_INVALID),
                "{alg}"
            );
        }
        for t in [
            String::new(),
            "a.b".into(),
            "a.b.c.d".into(),
            format!("{}.{body}.", enc(&json!({ "alg": "RS256" }))),
            format!(
                "{}.{body}.AAAA",
                enc(&json!({ "alg": "RS256", "crit": ["x"] }))
            ),
            format!("{}.{body}.AAAA", enc(&json!({ "alg": "RS256", "kid": 7 }))),
            format!("{}.{body}.AA==", enc(&json!({ "alg": "RS256" }))),
            "x".repeat(MAX_TOKEN_LEN + 1),
        ] {
            assert!(parse(&t).is_err());
        }
        let t = format!(
            "{}.{body}.AAAA",
            enc(&json!({ "alg": "ES256", "kid": "k1", "typ": "JWT" }))
        );
        let p = parse(&t).ok();
        assert_eq!(p.as_ref().map(|p| p.alg), Some(Alg::Es256));
        assert_eq!(p.as_ref().and_then(|p| p.kid.as_deref()), Some("k1"));
    }

    proptest::proptest! {
        /// No input makes parsing or the claim checks panic.
        #[test]
        fn arbitrary_input_never_panics(
            text in "\\PC{0,300}",
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            exp in proptest::prelude::any::<i64>(),
            iat in proptest::prelude::any::<i64>(),
            nbf in proptest::prelude::any::<f64>(),
        ) {
            let _ = parse(&text);
            let _ = parse(&format!("{text}.{text}.{text}"));
            let expect = Expect { issuer: "https://issuer.example", audience: "countersign" };
            let _ = check_claims(&bytes, &expect, now());
            let _ = crate::jwks::KeySet::parse(&bytes);
            let mut c = claims();
            c["exp"] = json!(exp);
            c["iat"] = json!(iat);
            c["nbf"] = json!(nbf);
            let _ = check(&c);
        }
    }

    #[test]
    fn duplicate_claims_are_refused() {
        let t = now().timestamp();
        let text = format!(
            r#"{{"iss":"https://issuer.example","iss":"https://issuer.example","exp":{},"iat":{}}}"#,
            t + 60,
            t
        );
        let expect = Expect {
            issuer: "https://issuer.example",
            audience: "countersign",
        };
        assert_eq!(
            check_claims(text.as_bytes(), &expect, now())
                .map_err(|e| e.code)
                .err(),
            Some(ErrorCode::TOKEN_INVALID)
        );
    }

    #[test]
    fn repeated_members_the_claims_do_not_name_are_refused_too() {
        let expect = Expect {
            issuer: "https://issuer.example",
            audience: "countersign",
        };
        let mut ok = claims();
        ok["kubernetes.io"]["extra"] = json!(1);
        assert!(check_claims(ok.to_string().as_bytes(), &expect, now()).is_ok());
        // The same, with "extra" twice: a derive alone would ignore the repeat.
        let text = ok
            .to_string()
            .replace(r#""extra":1"#, r#""extra":1,"extra":2"#);
        assert!(text.contains(r#""extra":1,"extra":2"#));
        assert_eq!(
            check_claims(text.as_bytes(), &expect, now())
                .map_err(|e| e.code)
                .err(),
            Some(ErrorCode::TOKEN_INVALID)
        );
    }

    #[test]
    fn extreme_times_are_refused_not_overflowed() {
        let extremes = [
            json!(i64::MAX),
            json!(i64::MIN),
            json!(u64::MAX),
            json!(1e300),
            json!(-1e300),
            json!(-5),
            json!(0.5),
            json!("1700000000"),
            json!(null),
        ];
        for field in ["iat", "exp", "nbf"] {
            for v in &extremes {
                let mut c = claims();
                c[field] = v.clone();
                let got = check(&c);
                // An nbf at or before iat is harmless (only checked not to panic); an extreme
                // iat or exp is always refused.
                if field != "nbf" {
                    assert!(got.is_err(), "{field}={v}");
                }
            }
        }
        // A minimal lifetime that would wrap if computed as exp - iat without care.
        let mut c = claims();
        c["iat"] = json!(i64::MIN);
        c["exp"] = json!(i64::MAX);
        assert!(check(&c).is_err());
    }
}
