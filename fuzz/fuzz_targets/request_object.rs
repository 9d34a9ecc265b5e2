//! Fuzz target `request_object`: see `countersign_fuzz::checks::request_object`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| countersign_fuzz::checks::request_object(data));
