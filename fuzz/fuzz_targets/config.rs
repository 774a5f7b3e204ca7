//! Config files, TOML and JSON: parsed and validated, never a panic.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wardgate_engine::fuzzing::config(data));
