//! The `countersign` binary end to end, as one test binary: the real broker, the real helper on a
//! temporary socket, the real CLI as a child process.
#![allow(clippy::unwrap_used)]

mod common;
mod e2e;
mod mask;
mod prompt;
mod service_login;
