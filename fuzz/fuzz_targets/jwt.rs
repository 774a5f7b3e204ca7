//! OAuth access tokens and JWKS documents, checked as `/mcp` checks them.
#![no_main]

mod runtime;

libfuzzer_sys::fuzz_target!(|data: &[u8]| runtime::shared(wardgate_downstream::fuzzing::jwt(data)));
