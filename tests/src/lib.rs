//! Test support for the end-to-end tests in `tests/tests/`: [`http`] starts the real broker on
//! port 0 and speaks to it with real ES256 keys; [`core`] builds the core on real SQLite or
//! PostgreSQL for state-machine, property and race tests; [`k8s`] serves a ServiceAccount token
//! issuer on loopback and starts the broker from a configuration file that trusts it; [`moto`]
//! runs AWS Secrets Manager's emulator and [`gcp_fake`] a Google Secret Manager REST fake, for
//! the broker over the cloud stores.

pub mod core;
pub mod gcp_fake;
pub mod http;
pub mod k8s;
pub mod moto;
