//! The console's operations on documents (typed-block markdown with versions), files and images, references (issue 12).
//! Each write runs in one transaction (`transact!`) and appends its event there.

#[allow(unused_imports)]
use super::*;
