#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_core::fuzzing::agent::server_answer(data));
