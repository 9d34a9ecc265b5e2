//! A service's machine logs in with no person: the real `countersign login --service NAME
//! --token-file FILE` through the real helper against the real broker, configured with
//! `[token_issuer]` (OIDC discovery on a loopback issuer serving real RS256 keys) and
//! `[service_logins]`, with ServiceAccount tokens in kube-apiserver's claim layout; then
//! `countersign run` gets an automatic secret. An unlisted ServiceAccount is refused.
#![allow(clippy::unwrap_used)]

use crate::common;

use common::*;
use countersign_e2e::k8s::{Issuer, IssuerKey, discovery_section};
use serde_json::Value;

const SERVICE: &str = "payments";
const LISTED: &str = "payments/api";
const UNLISTED: &str = "payments/intruder";

/// The issuer (on its own runtime, which must outlive it) and a broker trusting it.
struct World {
    key: IssuerKey,
    issuer: Issuer,
    broker: Broker,
    _rt: tokio::runtime::Runtime,
}

impl World {
    fn start() -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let key = IssuerKey::rsa();
        let issuer = rt.block_on(Issuer::start(&[&key])).unwrap();
        let extra = format!(
            "\n[service_logins]\n{SERVICE:?} = [{LISTED:?}]\n\n[token_issuer]\n{}\n",
            discovery_section(&issuer)
        );
        let broker = Broker::start_configured(None, &extra);
        Self {
            key,
            issuer,
            broker,
            _rt: rt,
        }
    }

    /// A fresh projected token for `account` (the broker's audience, ten minutes), written to a
    /// file as kubelet would project it.
    fn token_file(&self, helper: &Helper, account: &str) -> std::path::PathBuf {
        let now = chrono::Utc::now().timestamp();
        let token = self.key.mint(&self.issuer.projected(account, now));
        let path = helper
            .dir
            .0
            .join(format!("token-{}", account.replace('/', "-")));
        std::fs::write(&path, token).unwrap();
        path
    }
}

#[test]
fn a_service_logs_in_with_its_token_and_runs_with_an_automatic_secret() {
    let w = World::start();
    let helper = Helper::start(&w.broker.url);
    let token = w.token_file(&helper, LISTED);

    let out = helper.run(&[
        "--json",
        "login",
        "--service",
        SERVICE,
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(out.code(), Some(0), "{out:?}\n{}", helper.log());
    let cred: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    let credential = cred["credential_id"].as_str().unwrap().to_owned();
    assert!(!credential.is_empty(), "{cred}");
    assert!(w.issuer.jwks_fetches() >= 1, "the broker fetched the JWKS");

    // No person approved anything; the session gets the automatic secret (compared in the
    // command, since its output is masked).
    let out = helper.run(&[
        "run",
        "--secret",
        AUTO,
        "--",
        "sh",
        "-c",
        &format!("[ \"${AUTO}\" = '{}' ] && printf ok", value_of(AUTO)),
    ]);
    assert_eq!(out.code(), Some(0), "{out:?}\n{}", helper.log());
    assert_eq!(out.stdout, "ok");

    // The helper holds the service's login; the operator routes are a person's.
    let out = helper.run(&["status"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stdout.contains(&format!(
            "logged in as service {SERVICE} (launcher credential {credential}"
        )),
        "{out:?}"
    );
    let out = helper.run(&["--json", "operator", "machines", "list"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("SERVICE_CREDENTIAL"), "{out:?}");
}

#[test]
fn an_unlisted_service_account_is_refused_with_exit_1() {
    let w = World::start();
    let helper = Helper::start(&w.broker.url);
    let token = w.token_file(&helper, UNLISTED);
    let args = [
        "login",
        "--service",
        SERVICE,
        "--token-file",
        token.to_str().unwrap(),
    ];

    let out = helper.run(&[&["--json"], &args[..]].concat());
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["code"], "LOGIN_FAILED", "{err}");
    assert_eq!(err["exit"], 1, "{err}");
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .contains("ACCOUNT_NOT_LISTED"),
        "{err}"
    );

    // Without --json, the person reading stderr sees the broker's code too.
    let out = helper.run(&args);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("ACCOUNT_NOT_LISTED"), "{out:?}");

    // Nothing was logged in: a session cannot start.
    let out = helper.run(&["run", "--secret", AUTO, "--", "true"]);
    assert_ne!(out.code(), Some(0), "{out:?}");
}
