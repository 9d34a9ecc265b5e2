//! HTTP fixtures (see crate docs).
