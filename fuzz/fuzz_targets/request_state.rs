#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_core::fuzzing::ledger::request_state(data));
