//! The asks pages.

#[allow(unused_imports)]
use super::*;
