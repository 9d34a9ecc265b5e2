//! The delivery routes.

#[allow(unused_imports)]
use super::*;
