//! The fleet's command rows, decoded as a member decodes the rows it claims.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| wardgate_fleet::fuzzing::command_row(data));
