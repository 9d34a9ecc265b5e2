//! The comments routes.

#[allow(unused_imports)]
use super::*;
