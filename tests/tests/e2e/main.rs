//! The end-to-end suite, as one test binary (one link of the whole broker instead of one per
//! file): the core on real SQLite and PostgreSQL, the real server over HTTP, the stores against
//! moto, the Secret Manager REST fake and the local file (one contract, `stores_contract`), the
//! token issuer on loopback.
//!
//! `http_canary` stays a binary of its own: it captures every log line of its process at TRACE.

mod console_agents;
mod core_audit;
mod core_chain;
mod core_props;
mod core_races;
mod fuzz_regressions;
mod http_console;
mod http_hardening;
mod http_issued;
mod http_login;
mod http_open;
mod http_operator;
mod http_passkeys;
mod http_proof;
mod http_requests;
mod http_session;
mod id_rules;
mod issued;
mod k8s_http;
mod k8s_tokens;
mod ops_metrics;
mod outbox_delivery;
mod replicas;
mod stores_aws;
mod stores_common;
mod stores_contract;
mod stores_gcp;
mod stores_local;
mod tamper;
