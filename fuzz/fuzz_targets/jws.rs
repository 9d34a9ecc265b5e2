//! Fuzz target `jws`: see `countersign_fuzz::checks::jws`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| countersign_fuzz::checks::jws(data));
