//! Replays `fuzz/regressions/<target>/` under `cargo test`: every file goes through the same
//! function as the fuzz target of that name (`fuzz/src/checks.rs`, included here), and must not
//! panic. A crash the fuzzer finds is minimized (`cargo fuzz tmin`) and committed there, so it
//! stays fixed without running the fuzzer. The bodies are also read by the broker's own
//! `extract::parse_json` (the fuzz build mirrors it, to stay free of the HTTP server's
//! dependencies).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use countersign_broker_core::ErrorCode;
use countersign_broker_http::extract::parse_json;

/// The broker's body shapes, where `checks` expects them.
mod wire {
    pub use countersign_broker_http::wire::*;
}

#[allow(dead_code)]
#[path = "../../../fuzz/src/checks.rs"]
mod checks;

type Target = fn(&[u8]);

const TARGETS: &[(&str, Target)] = &[
    ("jws", checks::jws),
    ("proof", checks::proof),
    ("request_object", checks::request_object),
    ("k8s_token", checks::k8s_token),
    ("helper_line", checks::helper_line),
    ("json_body", checks::json_body),
];

/// The broker's real body parse, for every route's shape.
fn broker_bodies(data: &[u8]) {
    let _ = parse_json::<wire::EnrollBody>(data, ErrorCode::INVALID_ENROLLMENT);
    let _ = parse_json::<wire::SignedBody>(data, ErrorCode::INVALID_REQUEST);
    let _ = parse_json::<wire::TokenLoginBody>(data, ErrorCode::INVALID_REQUEST);
    let _ = parse_json::<wire::RenewBody>(data, ErrorCode::INVALID_RENEWAL);
    let _ = parse_json::<wire::RequestBody>(data, ErrorCode::INVALID_REQUEST);
    let _ = parse_json::<wire::DecisionBody>(data, ErrorCode::INVALID_DECISION);
    let _ = parse_json::<wire::LookupBody>(data, ErrorCode::INVALID_LOOKUP);
    let _ = parse_json::<wire::RevokeBody>(data, ErrorCode::INVALID_REVOKE);
}

#[test]
fn every_regression_input_parses_without_a_panic() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    let mut failures = Vec::new();
    for (name, target) in TARGETS {
        let dir = root.join(name);
        let mut files = std::fs::read_dir(&dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<Vec<_>, _>>()?;
        files.sort();
        assert!(!files.is_empty(), "{} holds no input", dir.display());
        for file in files {
            let data = std::fs::read(&file)?;
            let run = || {
                target(&data);
                if *name == "json_body" {
                    broker_bodies(&data);
                }
            };
            if catch_unwind(AssertUnwindSafe(run)).is_err() {
                let file_name = file.file_name().unwrap_or_default().to_string_lossy();
                failures.push(format!("fuzz/regressions/{name}/{file_name}"));
            }
        }
    }
    assert!(failures.is_empty(), "inputs that panic: {failures:?}");
    Ok(())
}

/// The fuzz key loads: without it the signed targets (`proof`, `request_object`) would return
/// at once and their replay would check nothing.
#[test]
fn the_fuzz_key_loads() {
    assert!(checks::fixed_key().is_some());
}

/// Times at the ends of `i64` in a signed machine-login object (anyone can make one: it carries
/// its own key) and in a session proof: refused as invalid, over a real socket, rather than
/// overflowing the broker's window arithmetic (`iat - now`, `exp - iat`), which panicked in a
/// build with overflow checks and dropped the connection.
#[tokio::test]
async fn extreme_times_are_refused_not_overflowed() -> anyhow::Result<()> {
    use countersign_e2e::http::{ADA, TestBroker, new_key};

    let tb = TestBroker::builder().start().await?;
    let key = new_key();
    let now = tb.now_secs();
    for (iat, exp) in [
        (i64::MIN, i64::MAX),
        (i64::MAX, i64::MIN),
        (now, i64::MIN),
        (now, i64::MAX),
    ] {
        let mut c = tb.machine_login_claims(ADA, "h");
        (c.iat, c.exp) = (iat, exp);
        tb.start_login_with(&tb.sign_machine_login(&key, &c))
            .await?
            .refused(400, "REQUEST_INVALID");
    }
    let session = tb
        .machine_login(ADA)
        .await?
        .enroll_session("claude-code")
        .await?;
    for iat in [i64::MIN, i64::MAX] {
        let mut spec = session.proof_spec("GET", "/v1/enrollments/self", b"");
        spec.claims.iat = iat;
        let proof = spec.sign(&session.key);
        tb.with_proof("GET", "/v1/enrollments/self", Some(&proof), b"")
            .await?
            .refused(401, "PROOF_INVALID");
    }
    Ok(())
}
