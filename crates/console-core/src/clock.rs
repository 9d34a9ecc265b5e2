//! Time and randomness, from the shared crate: injected so that tests move time and nothing
//! reads the system clock behind the domain's back; SHA-256 and constant-time comparison.

pub use countersign_common::clock::*;
