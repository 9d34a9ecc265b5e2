//! What the load generator's binaries share: the machine-login flow and a session's enrollment
//! over HTTP ([`login`]).

pub mod login;
