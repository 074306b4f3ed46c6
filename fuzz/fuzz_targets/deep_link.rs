#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_core::fuzzing::links::deep_link(data));
