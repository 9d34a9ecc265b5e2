//! The console's operations on targeted messages, broadcasts, delivery attempts, threads and per-agent conversation state (issue 14).
//! Each write runs in one transaction (`transact!`) and appends its event there.

#[allow(unused_imports)]
use super::*;
