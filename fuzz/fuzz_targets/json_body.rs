//! Fuzz target `json_body`: see `countersign_fuzz::checks::json_body`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| countersign_fuzz::checks::json_body(data));
