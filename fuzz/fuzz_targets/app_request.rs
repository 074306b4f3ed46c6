#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| portcullis_core::fuzzing::apps::app_request(data));
