//! The documents routes.

#[allow(unused_imports)]
use super::*;
