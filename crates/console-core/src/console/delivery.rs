//! The console's operations on delivery settings, the synced GitHub data behind the timeline and measures, session groups, architecture sources (issue 15).
//! Each write runs in one transaction (`transact!`) and appends its event there.

#[allow(unused_imports)]
use super::*;
