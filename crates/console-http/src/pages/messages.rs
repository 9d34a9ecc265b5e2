//! The messages pages.

#[allow(unused_imports)]
use super::*;
