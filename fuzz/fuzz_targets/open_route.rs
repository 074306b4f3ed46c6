#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_core::fuzzing::links::open_route(data));
