//! The asks routes.

#[allow(unused_imports)]
use super::*;
