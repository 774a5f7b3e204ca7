//! A client session's JSON-RPC lines, through the gateway's own MCP server.
#![no_main]

mod runtime;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    runtime::fresh(wardgate_downstream::fuzzing::client_messages(data));
});
