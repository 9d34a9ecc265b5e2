//! The messages routes.

#[allow(unused_imports)]
use super::*;
