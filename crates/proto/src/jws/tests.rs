//! Tests for [`crate::jws`] with real ES256 keys and hand-built hostile tokens.

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::claims::{self, ProofClaims, TYP_SESSION_PROOF};

/// The P-256 group order, big-endian.
const N: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// RFC 9449 Figure 2 (§5): a DPoP proof for a token request, with its key in the `jwk` header.
const RFC9449_TOKEN_PROOF: &str = concat!(
    "eyJ0eXAiOiJkcG9wK2p3dCIsImFsZyI6IkVTMjU2IiwiandrIjp7Imt0eSI6IkVDIiwieCI6Imw4dEZyaHgtMzR0Vj",
    "NoUklDUkRZOXpDa0RscEJoRjQyVVFVZldWQVdCRnMiLCJ5IjoiOVZFNGpmX09rX282NHpiVFRsY3VOSmFqSG10NnY5",
    "VERWclUwQ2R2R1JEQSIsImNydiI6IlAtMjU2In19.",
    "eyJqdGkiOiItQndDM0VTYzZhY2MybFRjIiwiaHRtIjoiUE9TVCIsImh0dSI6Imh0dHBzOi8vc2VydmVyLmV4YW1wbG",
    "UuY29tL3Rva2VuIiwiaWF0IjoxNTYyMjYyNjE2fQ.",
    "2-GxA6T8lP4vfrg8v-FdWP0A0zdrj8igiMLvqRMUvwnQg4PtFLbdLXiOSsX0x7NVY-FNyJK70nfbV37xRZT3Lg",
);

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn proof_claims() -> ProofClaims {
    ProofClaims {
        htm: "POST".into(),
        htu: claims::htu("https://broker.example/", "/v1/requests"),
        iat: 1_700_000_000,
        jti: "jti-1".into(),
        bh: Some(claims::body_hash(b"{}")),
    }
}

/// A valid session proof and the key that signed it.
fn signed() -> Result<(SigningKey, String), JwsError> {
    let key = SigningKey::generate()?;
    let token = sign(
        &key,
        &Header::with_kid(TYP_SESSION_PROOF, "enr-1"),
        &proof_claims(),
    )?;
    Ok((key, token))
}

/// Splits a token into its three parts.
fn parts(token: &str) -> (String, String, String) {
    let v: Vec<&str> = token.split('.').collect();
    assert_eq!(v.len(), 3);
    (v[0].to_owned(), v[1].to_owned(), v[2].to_owned())
}

/// The raw signature of a token.
fn raw_signature(token: &str) -> Result<[u8; 64], JwsError> {
    b64::decode(&parts(token).2)?
        .try_into()
        .map_err(|_| JwsError::Malformed("test"))
}

/// The token with its signature part replaced.
fn with_signature(token: &str, sig: &[u8]) -> String {
    let (h, p, _) = parts(token);
    format!("{h}.{p}.{}", b64::encode(sig))
}

/// A token with an arbitrary header and payload and a well-formed (but wrong) signature.
fn forge(header: &Value, payload: &Value) -> String {
    format!(
        "{}.{}.{}",
        b64::encode(header.to_string().as_bytes()),
        b64::encode(payload.to_string().as_bytes()),
        b64::encode(&[0x11; 64])
    )
}

fn payload() -> Value {
    json!({"htm": "GET", "htu": "https://b/x", "iat": 1, "jti": "j"})
}

/// `a - b` for 32-byte big-endian integers, `a >= b`.
fn sub(a: &[u8; 32], b: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = i16::from(a[i]) - i16::from(b[i]) - borrow;
        borrow = i16::from(d < 0);
        out[i] = d.rem_euclid(256) as u8;
    }
    out
}

/// DER-encodes a raw `R || S` signature (RFC 3279 Ecdsa-Sig-Value).
fn der(sig: &[u8; 64]) -> Vec<u8> {
    let int = |b: &[u8]| {
        let trimmed: Vec<u8> = b.iter().copied().skip_while(|&x| x == 0).collect();
        let mut v = Vec::new();
        if trimmed.first().is_some_and(|&x| x & 0x80 != 0) {
            v.push(0);
        }
        v.extend(trimmed);
        let mut out = vec![0x02, v.len() as u8];
        out.extend(v);
        out
    };
    let body = [int(&sig[..32]), int(&sig[32..])].concat();
    let mut out = vec![0x30, body.len() as u8];
    out.extend(body);
    out
}

#[test]
fn round_trip_with_kid() -> TestResult {
    let (key, token) = signed()?;
    let unverified = parse(&token)?;
    assert_eq!(unverified.typ(), TYP_SESSION_PROOF);
    assert_eq!(unverified.kid(), Some("enr-1"));
    assert!(unverified.jwk().is_none());
    unverified.expect_typ(TYP_SESSION_PROOF)?;
    assert_eq!(
        unverified.expect_typ(claims::TYP_LAUNCHER_PROOF),
        Err(JwsError::Unsupported("unexpected typ"))
    );
    let verified = unverified.verify(key.verifying_key())?;
    assert_eq!(
        verified.header,
        Header::with_kid(TYP_SESSION_PROOF, "enr-1")
    );
    assert_eq!(verified.claims::<ProofClaims>()?, proof_claims());
    assert!(matches!(
        verified.claims::<claims::SecretRequestClaims>(),
        Err(JwsError::Malformed(_))
    ));
    Ok(())
}

#[test]
fn round_trip_with_embedded_jwk() -> TestResult {
    let key = SigningKey::generate()?;
    let header = Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk());
    let login = claims::MachineLoginClaims {
        iat: 1,
        exp: 301,
        jti: claims::new_jti()?,
        login_hint: "a@example.com".into(),
        host: "laptop".into(),
        authorization_details: None,
    };
    let token = sign(&key, &header, &login)?;
    let (verified, jwk) = parse(&token)?.verify_with_embedded_jwk()?;
    assert_eq!(jwk, key.public_jwk());
    assert_eq!(jwk.thumbprint(), key.thumbprint());
    assert_eq!(verified.claims::<claims::MachineLoginClaims>()?, login);

    // A token without a jwk header cannot be verified this way.
    let (_, kid_token) = signed()?;
    assert_eq!(
        parse(&kid_token)?.verify_with_embedded_jwk().err(),
        Some(JwsError::Malformed("no jwk header"))
    );
    Ok(())
}

#[test]
fn rfc9449_example_verifies() -> TestResult {
    // Also shows high-S signatures are accepted (protocol.md §1).
    let unverified = parse(RFC9449_TOKEN_PROOF)?;
    assert_eq!(unverified.typ(), "dpop+jwt");
    let (verified, jwk) = unverified.verify_with_embedded_jwk()?;
    assert_eq!(
        jwk.thumbprint(),
        "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"
    );
    let c: ProofClaims = verified.claims()?;
    assert_eq!(
        (c.htm.as_str(), c.htu.as_str(), c.iat, c.jti.as_str(), c.bh),
        (
            "POST",
            "https://server.example.com/token",
            1_562_262_616,
            "-BwC3ESc6acc2lTc",
            None
        )
    );
    Ok(())
}

#[test]
fn tampering_fails() -> TestResult {
    let (key, token) = signed()?;
    let (h, _, s) = parts(&token);
    let mut other = proof_claims();
    other.htm = "DELETE".into();
    let forged = format!("{h}.{}.{s}", b64::encode(&serde_json::to_vec(&other)?));
    assert_eq!(
        parse(&forged)?.verify(key.verifying_key()).err(),
        Some(JwsError::BadSignature)
    );

    let (_, p, s) = parts(&token);
    let header = Header::with_kid(TYP_SESSION_PROOF, "enr-2");
    let forged = format!("{}.{p}.{s}", b64::encode(&serde_json::to_vec(&header)?));
    assert_eq!(
        parse(&forged)?.verify(key.verifying_key()).err(),
        Some(JwsError::BadSignature)
    );
    Ok(())
}

#[test]
fn wrong_key_fails() -> TestResult {
    let (_, token) = signed()?;
    let other = SigningKey::generate()?;
    assert_eq!(
        parse(&token)?.verify(other.verifying_key()).err(),
        Some(JwsError::BadSignature)
    );

    // An embedded jwk that did not sign the token.
    let key = SigningKey::generate()?;
    let header = Header::with_jwk(claims::TYP_TOKEN_LOGIN, other.public_jwk());
    let token = sign(&key, &header, &payload())?;
    assert_eq!(
        parse(&token)?.verify_with_embedded_jwk().err(),
        Some(JwsError::BadSignature)
    );
    Ok(())
}

#[test]
fn alg_refused() -> TestResult {
    let (_, token) = signed()?;
    let (_, p, s) = parts(&token);
    for alg in ["none", "HS256", "ES384", "RS256", "es256", "EdDSA"] {
        let h = b64::encode(
            json!({"alg": alg, "typ": TYP_SESSION_PROOF, "kid": "k"})
                .to_string()
                .as_bytes(),
        );
        for t in [format!("{h}.{p}.{s}"), format!("{h}.{p}.")] {
            assert_eq!(
                parse(&t).err(),
                Some(JwsError::Unsupported("alg must be ES256")),
                "{alg}"
            );
        }
    }
    for alg in [json!(null), json!(["ES256"]), json!(256)] {
        let t = forge(&json!({"alg": alg, "typ": "t", "kid": "k"}), &payload());
        assert!(matches!(parse(&t), Err(JwsError::Malformed(_))));
    }
    let t = forge(&json!({"typ": "t", "kid": "k"}), &payload());
    assert!(matches!(parse(&t), Err(JwsError::Malformed(_))));

    let mut header = Header::with_kid("t", "k");
    header.alg = "HS256".into();
    let key = SigningKey::generate()?;
    assert!(matches!(
        sign(&key, &header, &payload()),
        Err(JwsError::Unsupported(_))
    ));
    Ok(())
}

#[test]
fn crit_and_b64_refused() {
    for extra in [
        json!({"crit": ["exp"]}),
        json!({"crit": []}),
        json!({"b64": false}),
        json!({"b64": true}),
    ] {
        let mut h = json!({"alg": "ES256", "typ": "t", "kid": "k"});
        if let (Some(h), Some(extra)) = (h.as_object_mut(), extra.as_object()) {
            h.extend(extra.clone());
        }
        assert!(
            matches!(parse(&forge(&h, &payload())), Err(JwsError::Unsupported(_))),
            "{extra}"
        );
    }
}

#[test]
fn key_headers_checked() -> TestResult {
    let key = SigningKey::generate()?;
    let jwk = serde_json::to_value(key.public_jwk())?;

    let both = json!({"alg": "ES256", "typ": "t", "kid": "k", "jwk": jwk});
    assert_eq!(
        parse(&forge(&both, &payload())).err(),
        Some(JwsError::Malformed("header has both jwk and kid"))
    );
    let mut header = Header::with_kid("t", "k");
    header.jwk = Some(key.public_jwk());
    assert!(matches!(
        sign(&key, &header, &payload()),
        Err(JwsError::Malformed(_))
    ));

    let mut private = jwk.clone();
    private["d"] = json!(b64::encode(&[1u8; 32]));
    let with_d = json!({"alg": "ES256", "typ": "t", "jwk": private});
    assert_eq!(
        parse(&forge(&with_d, &payload())).err(),
        Some(JwsError::BadKey("jwk holds a private key"))
    );

    let mut off_curve = jwk.clone();
    off_curve["y"] = json!(b64::encode(&[1u8; 32]));
    let h = json!({"alg": "ES256", "typ": "t", "jwk": off_curve});
    assert_eq!(
        parse(&forge(&h, &payload())).err(),
        Some(JwsError::BadKey("point is not on P-256"))
    );

    for kid in [json!(""), json!(7), json!(null)] {
        let h = json!({"alg": "ES256", "typ": "t", "kid": kid});
        assert!(matches!(
            parse(&forge(&h, &payload())),
            Err(JwsError::Malformed(_))
        ));
    }
    // Neither jwk nor kid parses; the caller must then refuse to pick a key.
    let h = json!({"alg": "ES256", "typ": "t"});
    let u = parse(&forge(&h, &payload()))?;
    assert!(u.kid().is_none() && u.jwk().is_none());
    Ok(())
}

#[test]
fn typ_required() {
    for typ in [None, Some(json!(1)), Some(json!("")), Some(json!(null))] {
        let mut h = json!({"alg": "ES256", "kid": "k"});
        if let Some(typ) = typ {
            h["typ"] = typ;
        }
        assert!(matches!(
            parse(&forge(&h, &payload())),
            Err(JwsError::Malformed(_))
        ));
    }
}

#[test]
fn signature_encoding_refused() -> TestResult {
    let (key, token) = signed()?;
    let sig = raw_signature(&token)?;
    assert!(
        parse(&with_signature(&token, &sig))?
            .verify(key.verifying_key())
            .is_ok()
    );

    let der_sig = der(&sig);
    let mut long = sig.to_vec();
    long.push(0);
    for bad in [der_sig.as_slice(), &sig[..63], &long, &[], &[0u8; 128]] {
        assert_eq!(
            parse(&with_signature(&token, bad)).err(),
            Some(JwsError::Malformed("signature must be 64 bytes")),
            "len {}",
            bad.len()
        );
        assert!(key.verifying_key().verify(b"x", bad).is_err());
    }
    Ok(())
}

#[test]
fn out_of_range_scalars_refused() -> TestResult {
    let (key, token) = signed()?;
    let sig = raw_signature(&token)?;
    let (r, s) = sig.split_at(32);
    let zero = [0u8; 32];
    let cases: [(&str, &[u8], &[u8]); 6] = [
        ("r = 0", &zero, s),
        ("s = 0", r, &zero),
        ("r = n", &N, s),
        ("s = n", r, &N),
        ("r = s = 0", &zero, &zero),
        ("r = 2^256 - 1", &[0xff; 32], s),
    ];
    for (what, r, s) in cases {
        let forged = with_signature(&token, &[r, s].concat());
        assert_eq!(
            parse(&forged)?.verify(key.verifying_key()).err(),
            Some(JwsError::BadSignature),
            "{what}"
        );
    }

    // The malleated twin (r, n - s) still verifies: replay protection must key on jti.
    let twin = [r, sub(&N, s).as_slice()].concat();
    assert!(
        parse(&with_signature(&token, &twin))?
            .verify(key.verifying_key())
            .is_ok()
    );
    Ok(())
}

#[test]
fn structure_refused() -> TestResult {
    let (_, token) = signed()?;
    let (h, p, s) = parts(&token);
    let malformed = |t: &str| matches!(parse(t), Err(JwsError::Malformed(_)));

    assert!(malformed(""));
    assert!(malformed(&format!("{h}.{p}")));
    assert!(malformed(&format!("{h}.{p}.{s}.")));
    assert!(malformed(&format!("{h}.{p}.{s}.{s}")));
    assert!(malformed(&format!("{h}.{p}=.{s}")));
    assert!(malformed(&format!(" {h}.{p}.{s}")));
    assert!(malformed(&format!("{h}.{p}.{s}\n")));
    assert!(malformed(&format!("{h}..{s}")));

    // Header and payload must each be a single JSON object without duplicate members.
    let enc = |v: &str| b64::encode(v.as_bytes());
    let dup_header = enc(r#"{"alg":"ES256","typ":"t","kid":"a","kid":"b"}"#);
    assert!(malformed(&format!("{dup_header}.{p}.{s}")));
    let dup_payload = enc(r#"{"jti":"a","jti":"b"}"#);
    assert!(malformed(&format!("{h}.{dup_payload}.{s}")));
    for not_object in ["[]", "\"x\"", "1", "null", "{}{}", "{", ""] {
        assert!(
            malformed(&format!("{}.{p}.{s}", enc(not_object))),
            "{not_object}"
        );
        assert!(
            malformed(&format!("{h}.{}.{s}", enc(not_object))),
            "{not_object}"
        );
    }
    assert!(malformed(&format!("{h}.{}.{s}", b64::encode(b"\xff\xfe"))));

    let big = format!("{h}.{}.{s}", "A".repeat(MAX_TOKEN_LEN));
    assert_eq!(
        parse(&big).err(),
        Some(JwsError::Malformed("token too long"))
    );
    Ok(())
}

/// Signs a hand-written header and payload text as they are (no re-serialization).
fn sign_raw(key: &SigningKey, header: &str, payload: &str) -> Result<String, JwsError> {
    let input = format!(
        "{}.{}",
        b64::encode(header.as_bytes()),
        b64::encode(payload.as_bytes())
    );
    let sig = key.sign(input.as_bytes())?;
    Ok(format!("{input}.{}", b64::encode(&sig)))
}

#[test]
fn nested_duplicate_members_refused_even_when_signed() -> TestResult {
    let key = SigningKey::generate()?;
    let jwk = serde_json::to_value(key.public_jwk())?;
    let (Some(x), Some(y)) = (jwk["x"].as_str(), jwk["y"].as_str()) else {
        return Err("jwk without x and y".into());
    };
    let good_payload = r#"{"htm":"GET","htu":"https://b/x","iat":1,"jti":"j"}"#;
    let header = |jwk_members: &str| {
        format!(r#"{{"alg":"ES256","typ":"t","jwk":{{"kty":"EC","crv":"P-256",{jwk_members}}}}}"#)
    };

    // The control: the same shapes without a repeat verify.
    let ok = sign_raw(
        &key,
        &header(&format!(r#""x":"{x}","y":"{y}""#)),
        good_payload,
    )?;
    parse(&ok)?.verify_with_embedded_jwk()?;
    let ok = sign_raw(
        &key,
        &header(&format!(r#""x":"{x}","y":"{y}""#)),
        r#"{"a":[{"b":1},{"b":2}]}"#,
    )?;
    parse(&ok)?.verify_with_embedded_jwk()?;

    // A repeated member inside the embedded jwk: two parsers could pick different keys.
    let dup_jwk = sign_raw(
        &key,
        &header(&format!(r#""x":"{x}","y":"{y}","y":"{y}""#)),
        good_payload,
    )?;
    assert!(matches!(parse(&dup_jwk), Err(JwsError::Malformed(_))));

    // A repeated member nested in the payload (an authorization detail, say).
    let dup_claim = sign_raw(
        &key,
        &header(&format!(r#""x":"{x}","y":"{y}""#)),
        r#"{"jti":"j","authorization_details":[{"type":"a","type":"b"}]}"#,
    )?;
    assert!(matches!(parse(&dup_claim), Err(JwsError::Malformed(_))));
    Ok(())
}

#[test]
fn sign_refuses_bad_inputs() -> TestResult {
    let key = SigningKey::generate()?;
    let header = Header::with_kid("t", "k");
    assert!(matches!(
        sign(&key, &header, &[1, 2]),
        Err(JwsError::Malformed(_))
    ));
    assert!(matches!(
        sign(&key, &header, &"claims"),
        Err(JwsError::Malformed(_))
    ));
    let huge = json!({"pad": "x".repeat(MAX_TOKEN_LEN)});
    assert_eq!(
        sign(&key, &header, &huge).err(),
        Some(JwsError::Malformed("token too long"))
    );
    assert!(matches!(
        sign(&key, &Header::with_kid("", "k"), &payload()),
        Err(JwsError::Malformed(_))
    ));
    Ok(())
}

#[test]
fn debug_hides_payload() -> TestResult {
    let (key, token) = signed()?;
    let u = parse(&token)?;
    assert!(!format!("{u:?}").contains("jti-1"));
    let v = u.verify(key.verifying_key())?;
    assert!(!format!("{v:?}").contains("jti-1"));
    assert!(!JwsError::Malformed("x").to_string().contains(&token));
    Ok(())
}

fn b64_part() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<u8>(), 0..200).prop_map(|b| b64::encode(&b))
}

fn json_header() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(r#"{"alg":"ES256","typ":"t","kid":"k"}"#.to_owned()),
        Just(r#"{"alg":"ES256","typ":"t","jwk":{"kty":"EC","crv":"P-256","x":"l8tFrhx-34tV3hRICRDY9zCkDlpBhF42UQUfWVAWBFs","y":"9VE4jf_Ok_o64zbTTlcuNJajHmt6v9TDVrU0CdvGRDA"}}"#.to_owned()),
        any::<String>().prop_map(|s| format!(r#"{{"alg":"ES256","typ":{}}}"#, Value::from(s))),
        "\\PC{0,80}",
    ]
    .prop_map(|h| b64::encode(h.as_bytes()))
}

proptest! {
    #[test]
    fn parse_never_panics_on_strings(s in "\\PC{0,400}") {
        let _ = parse(&s);
    }

    #[test]
    fn parse_never_panics_on_token_shaped_strings(s in "[A-Za-z0-9_=+/.-]{0,300}") {
        let _ = parse(&s);
    }

    #[test]
    fn parse_never_panics_on_three_part_tokens(h in b64_part(), p in b64_part(), s in b64_part()) {
        let _ = parse(&format!("{h}.{p}.{s}"));
    }

    #[test]
    fn forged_tokens_never_verify(
        h in json_header(),
        p in prop_oneof![b64_part(), Just(b64::encode(b"{}"))],
        sig in prop::collection::vec(any::<u8>(), 64..=64),
    ) {
        let token = format!("{h}.{p}.{}", b64::encode(&sig));
        if let Ok(u) = parse(&token) {
            prop_assert!(u.verify_with_embedded_jwk().is_err());
        }
    }
}
