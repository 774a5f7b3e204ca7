//! An upstream stdio server's JSON-RPC lines, through the gateway's client of it.
#![no_main]

mod runtime;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    runtime::fresh(wardgate_engine::fuzzing::server_messages(data));
});
