//! Fuzz target `helper_line`: see `countersign_fuzz::checks::helper_line`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| countersign_fuzz::checks::helper_line(data));
