//! The fuzz targets' bodies. [`checks`] is shared, by `#[path]`, with the workspace test
//! `tests/tests/e2e/fuzz_regressions.rs`, which replays `fuzz/regressions/<target>/` through the
//! same functions under `cargo test`.

/// The broker's request-body shapes, compiled from the broker's own source file so the target
/// fuzzes exactly the structs the routes parse, without building the HTTP server and its cloud
/// SDKs.
#[allow(dead_code, clippy::all)]
#[path = "../../crates/broker-http/src/wire.rs"]
pub mod wire;

pub mod checks;
