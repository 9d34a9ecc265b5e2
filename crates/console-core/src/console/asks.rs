//! The console's operations on asks, comments with suggestions and mentions, reviews and the inbox (issue 13).
//! Each write runs in one transaction (`transact!`) and appends its event there.

#[allow(unused_imports)]
use super::*;
