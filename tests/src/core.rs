//! Core fixtures (see crate docs).
