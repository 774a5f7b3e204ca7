//! A legacy SSE upstream's event stream, cut into reads at the fuzzer's points.
#![no_main]

mod runtime;

libfuzzer_sys::fuzz_target!(|data: &[u8]| runtime::fresh(wardgate_engine::fuzzing::sse(data)));
