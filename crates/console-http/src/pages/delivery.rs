//! The delivery pages.

#[allow(unused_imports)]
use super::*;
