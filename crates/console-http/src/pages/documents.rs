//! The documents pages.

#[allow(unused_imports)]
use super::*;
