//! A software authenticator (aws-lc-rs keys, CBOR written with ciborium) against the checks:
//! registrations and assertions that pass, and each refusal the ceremonies name.

use ciborium::Value as Cbor;

use super::soft::{AAGUID, client_data};
use super::*;

const RP: &str = "console.example";
const ORIGIN: &str = "https://console.example";

fn cbor(v: &Cbor) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::ser::into_writer(v, &mut out).expect("CBOR");
    out
}

fn int(i: i64) -> Cbor {
    Cbor::Integer(i.into())
}

struct Soft;

impl Soft {
    fn p256() -> soft::Soft {
        let mut s = soft::Soft::p256(RP, ORIGIN);
        s.id = b"credential-one".to_vec();
        s
    }

    fn ed25519() -> soft::Soft {
        let mut s = soft::Soft::ed25519(RP, ORIGIN);
        s.id = b"credential-ed".to_vec();
        s
    }
}

fn expect(challenge: &[u8]) -> Expect<'_> {
    Expect {
        rp_id: RP,
        origins: &[ORIGIN],
        challenge,
        user_verification: true,
    }
}

const CHALLENGE: &[u8] = b"the statement's SHA-256, 32 byte";

#[test]
fn a_passkey_registers_and_asserts_with_each_key_kind() {
    for (mut soft, fmt) in [
        (Soft::p256(), "none"),
        (Soft::p256(), "packed"),
        (Soft::ed25519(), "none"),
        (Soft::ed25519(), "packed"),
    ] {
        let (client, object) = soft.create(CHALLENGE, fmt);
        let r = verify_registration(&client, &object, &expect(CHALLENGE)).expect(fmt);
        assert_eq!(r.credential_id, soft.id);
        assert_eq!((r.aaguid, r.format, r.user_verified), (AAGUID, fmt, true));
        assert_eq!(r.backup_eligible, soft.flags & flags::BE != 0);
        let (c, a, s) = soft.get(CHALLENGE);
        let asserted = verify_assertion(&r.key, r.sign_count, &c, &a, &s, &expect(CHALLENGE))
            .expect("assertion");
        assert_eq!(asserted.sign_count, 1);
    }
}

#[test]
fn assertions_are_refused_for_each_broken_check() {
    let mut soft = Soft::p256();
    let (client, object) = soft.create(CHALLENGE, "none");
    let key = verify_registration(&client, &object, &expect(CHALLENGE))
        .expect("registration")
        .key;
    let check = |c: &[u8], a: &[u8], s: &[u8], stored: u32, challenge: &[u8]| {
        verify_assertion(&key, stored, c, a, s, &expect(challenge))
    };

    // Another statement's assertion.
    let (c, a, s) = soft.get(b"another statement's hash, 32 byt");
    assert_eq!(check(&c, &a, &s, 0, CHALLENGE), Err(E::WrongChallenge));
    // A registration's client data, an origin elsewhere, a cross-origin frame.
    let (c, a, s) = soft.get(CHALLENGE);
    let swap = |from: &str, to: &str| String::from_utf8_lossy(&c).replace(from, to).into_bytes();
    assert_eq!(
        check(
            &swap("webauthn.get", "webauthn.create"),
            &a,
            &s,
            0,
            CHALLENGE
        ),
        Err(E::WrongType)
    );
    assert_eq!(
        check(&swap(ORIGIN, "https://evil.example"), &a, &s, 0, CHALLENGE),
        Err(E::WrongOrigin)
    );
    assert_eq!(
        check(
            &swap("\"crossOrigin\":false", "\"crossOrigin\":true"),
            &a,
            &s,
            0,
            CHALLENGE
        ),
        Err(E::CrossOrigin)
    );
    let twice = swap(
        "\"crossOrigin\":false",
        "\"type\":\"webauthn.get\",\"crossOrigin\":false",
    );
    assert!(matches!(
        check(&twice, &a, &s, 0, CHALLENGE),
        Err(E::ClientData(_))
    ));
    // The untouched assertion passes, once: the same count again is a copy's.
    let passed = check(&c, &a, &s, 0, CHALLENGE).expect("the assertion");
    assert_eq!(
        check(&c, &a, &s, passed.sign_count, CHALLENGE),
        Err(E::SignCountRegressed)
    );
    // Authenticator data edited after signing (its backed-up flag cleared): the signature fails.
    let (c, mut a, s) = soft.get(CHALLENGE);
    a[32] ^= flags::BS;
    assert_eq!(check(&c, &a, &s, 0, CHALLENGE), Err(E::BadSignature));

    // No user verification; no user presence; another relying party.
    for (flags_now, rp, want) in [
        (flags::UP, RP, E::NoUserVerification),
        (flags::UV, RP, E::NoUserPresence),
        (flags::UP | flags::UV, "other.example", E::WrongRpId),
    ] {
        soft.flags = flags_now;
        soft.count += 1;
        let c = client_data("webauthn.get", CHALLENGE, ORIGIN);
        let a = soft.auth_data(rp, false);
        let s = soft.sign(&signed_bytes(&a, &c));
        assert_eq!(check(&c, &a, &s, 0, CHALLENGE), Err(want));
    }
    // Without verification required, presence alone passes.
    soft.flags = flags::UP;
    let (c, a, s) = soft.get(CHALLENGE);
    let lenient = Expect {
        user_verification: false,
        ..expect(CHALLENGE)
    };
    assert!(verify_assertion(&key, 0, &c, &a, &s, &lenient).is_ok());
}

#[test]
fn registrations_are_refused_for_each_broken_check() {
    let soft = Soft::p256();
    let (client, object) = soft.create(CHALLENGE, "none");
    let e = expect(CHALLENGE);
    assert_eq!(
        verify_registration(&client, &object, &expect(b"another challenge")),
        Err(E::WrongChallenge)
    );
    let get = client_data("webauthn.get", CHALLENGE, ORIGIN);
    assert_eq!(verify_registration(&get, &object, &e), Err(E::WrongType));
    // An attestation format not asked for, `none` carrying a statement, trailing bytes.
    let with = |fmt: Cbor, statement: Cbor, auth: Vec<u8>| {
        cbor(&Cbor::Map(vec![
            (Cbor::Text("fmt".into()), fmt),
            (Cbor::Text("attStmt".into()), statement),
            (Cbor::Text("authData".into()), Cbor::Bytes(auth)),
        ]))
    };
    let auth = soft.auth_data(RP, true);
    for (fmt, statement) in [
        (Cbor::Text("tpm".into()), Cbor::Map(vec![])),
        (
            Cbor::Text("none".into()),
            Cbor::Map(vec![(Cbor::Text("sig".into()), Cbor::Bytes(vec![1]))]),
        ),
        (
            Cbor::Text("packed".into()),
            Cbor::Map(vec![
                (Cbor::Text("alg".into()), int(-7)),
                (Cbor::Text("sig".into()), Cbor::Bytes(vec![0x30, 0x00])),
                (Cbor::Text("x5c".into()), Cbor::Array(vec![])),
            ]),
        ),
    ] {
        assert!(matches!(
            verify_registration(&client, &with(fmt, statement, auth.clone()), &e),
            Err(E::Attestation(_))
        ));
    }
    let mut longer = object.clone();
    longer.push(0);
    assert!(matches!(
        verify_registration(&client, &longer, &e),
        Err(E::Attestation(_))
    ));
    // Packed self-attestation whose signature is over something else, or names another alg.
    let bad_sig = with(
        Cbor::Text("packed".into()),
        Cbor::Map(vec![
            (Cbor::Text("alg".into()), int(-7)),
            (
                Cbor::Text("sig".into()),
                Cbor::Bytes(soft.sign(b"something else")),
            ),
        ]),
        auth.clone(),
    );
    assert_eq!(
        verify_registration(&client, &bad_sig, &e),
        Err(E::BadSignature)
    );
    let bad_alg = with(
        Cbor::Text("packed".into()),
        Cbor::Map(vec![
            (Cbor::Text("alg".into()), int(-8)),
            (Cbor::Text("sig".into()), Cbor::Bytes(soft.sign(b"x"))),
        ]),
        auth.clone(),
    );
    assert!(matches!(
        verify_registration(&client, &bad_alg, &e),
        Err(E::Attestation(_))
    ));
    // Authenticator data: no attested credential; cut short; bytes after the key; BS
    // without BE.
    let plain = soft.auth_data(RP, false);
    let none = |auth: Vec<u8>| with(Cbor::Text("none".into()), Cbor::Map(vec![]), auth);
    assert!(matches!(
        verify_registration(&client, &none(plain), &e),
        Err(E::AuthenticatorData(_))
    ));
    for cut in [10, 36, 40, 60, auth.len() - 1] {
        assert!(
            matches!(
                verify_registration(&client, &none(auth[..cut].to_vec()), &e),
                Err(E::AuthenticatorData(_))
            ),
            "cut at {cut}"
        );
    }
    let mut after = auth.clone();
    after.push(0xa0);
    assert!(matches!(
        verify_registration(&client, &none(after), &e),
        Err(E::AuthenticatorData(_))
    ));
    let mut bs = auth.clone();
    bs[32] = (bs[32] | flags::BS) & !flags::BE;
    assert!(matches!(
        verify_registration(&client, &none(bs), &e),
        Err(E::AuthenticatorData(_))
    ));
}

#[test]
fn cose_keys_other_than_the_three_are_refused() {
    let map = |entries: Vec<(i64, Cbor)>| {
        Cbor::Map(entries.into_iter().map(|(k, v)| (int(k), v)).collect())
    };
    let xy = Cbor::Bytes(vec![7; 32]);
    for key in [
        // ES256 on another curve; a short coordinate; a repeated label; ES384.
        map(vec![
            (1, int(2)),
            (3, int(-7)),
            (-1, int(2)),
            (-2, xy.clone()),
            (-3, xy.clone()),
        ]),
        map(vec![
            (1, int(2)),
            (3, int(-7)),
            (-1, int(1)),
            (-2, Cbor::Bytes(vec![7; 31])),
            (-3, xy.clone()),
        ]),
        map(vec![
            (1, int(2)),
            (1, int(2)),
            (3, int(-7)),
            (-1, int(1)),
            (-2, xy.clone()),
            (-3, xy.clone()),
        ]),
        map(vec![
            (1, int(2)),
            (3, int(-35)),
            (-1, int(2)),
            (-2, xy.clone()),
            (-3, xy.clone()),
        ]),
        // A 1024-bit RSA key; not a map.
        map(vec![
            (1, int(3)),
            (3, int(-257)),
            (-1, Cbor::Bytes(vec![0xc1; 128])),
            (-2, Cbor::Bytes(vec![1, 0, 1])),
        ]),
        Cbor::Array(vec![]),
    ] {
        assert!(
            matches!(CredentialKey::from_cose(&key), Err(E::Key(_))),
            "{key:?}"
        );
    }
}

proptest::proptest! {
    /// Any bytes, as authenticator data, a client data JSON or an attestation object, and any
    /// one byte of a valid registration changed: refused or parsed, never a panic, and a changed
    /// byte never registers a credential other than the authenticator's.
    #[test]
    fn nothing_panics_and_a_changed_byte_registers_nothing_else(
        noise in proptest::collection::vec(proptest::num::u8::ANY, 0..300),
        at in 0usize..400,
        xor in 1u8..=255,
    ) {
        let _ = AuthenticatorData::parse(&noise);
        let e = expect(CHALLENGE);
        let _ = verify_registration(&noise, &noise, &e);
        let soft = Soft::p256();
        let (client, mut object) = soft.create(CHALLENGE, "packed");
        let i = at % object.len();
        object[i] ^= xor;
        if let Ok(r) = verify_registration(&client, &object, &e) {
            // Only bytes the signature does not cover may change without a refusal, and none
            // of them is the credential.
            proptest::prop_assert_eq!(r.credential_id, soft.id);
        }
    }
}

#[test]
fn a_key_survives_its_text_form_and_bad_text_is_refused() {
    for soft in [Soft::p256(), Soft::ed25519()] {
        let key = CredentialKey::from_cose(&soft.cose()).expect("key");
        assert_eq!(CredentialKey::from_text(&key.to_text()), Ok(key));
    }
    for bad in [
        "",
        "es256:",
        "es256:AAAA",
        "ed25519:AAAA",
        "rs256:AAAA",
        "p384:AAAA",
        "es256",
    ] {
        assert!(CredentialKey::from_text(bad).is_err(), "{bad}");
    }
}
