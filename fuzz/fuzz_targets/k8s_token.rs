//! Fuzz target `k8s_token`: see `countersign_fuzz::checks::k8s_token`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| countersign_fuzz::checks::k8s_token(data));
