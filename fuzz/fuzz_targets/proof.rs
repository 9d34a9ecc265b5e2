//! Fuzz target `proof`: see `countersign_fuzz::checks::proof`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| countersign_fuzz::checks::proof(data));
