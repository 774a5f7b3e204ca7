//! A test fixture, never a policy to deploy: misbehaves on demand so the host's fault handling can be tested.
//!
//! With no `fault` parameter every decision gives a fixed, recognisable answer (so a test
//! can tell the module's answer from the host's fallback). With the server parameter
//! `fault` set, every export misbehaves that way:
//!
//! - `loop`: runs forever (the host's epoch deadline must stop it);
//! - `alloc`: allocates without bound (the host's memory cap must stop it);
//! - `leak`: keeps 1 MiB more on every call and never frees it, then answers normally (as
//!   some language runtimes do, slowly): the host must retire the instance before the cap;
//! - `trap`: executes `unreachable`;
//! - `panic`: panics, which prints to stderr and then aborts;
//! - `invalid`: returns answers the host must reject (delays past one day, a zero probe interval);
//! - `print`: writes a line to stdout and to stderr, then answers normally.

use std::hint::black_box;

wit_bindgen::generate!({
    world: "recovery-policy",
    path: "../../wit",
});

/// The fixed answers of a well-behaved call, chosen to differ from the host's defaults.
pub const RETRY_MS: u64 = 4_242;
pub const RECONNECT_MS: u64 = 4_343;
pub const PROBE_INTERVAL_MS: u64 = 4_444;
pub const RESTART_MS: u64 = 4_545;

/// Misbehaves as the server's `fault` parameter says; returns true when the answer must be invalid.
fn inject(server: &ServerContext) -> bool {
    let fault = server
        .params
        .iter()
        .find(|(name, _)| name == "fault")
        .map(|(_, value)| value.as_str());
    match fault {
        Some("loop") => {
            let mut spins = 0u64;
            loop {
                spins = black_box(spins.wrapping_add(1));
            }
        }
        Some("alloc") => {
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                // Touch every page so the memory is really used, not just reserved.
                hoard.push(black_box(vec![1u8; 1 << 20]));
            }
        }
        Some("leak") => {
            // Written to, so the pages are really used.
            std::mem::forget(black_box(vec![1u8; 1 << 20]));
            false
        }
        Some("trap") => core::arch::wasm32::unreachable(),
        Some("panic") => panic!("faulty policy: panic requested for server {}", server.name),
        Some("invalid") => true,
        Some("print") => {
            println!("faulty policy: hello on stdout for {}", server.name);
            eprintln!("faulty policy: hello on stderr for {}", server.name);
            false
        }
        _ => false,
    }
}

struct FaultyPolicy;

impl Guest for FaultyPolicy {
    fn describe() -> Description {
        Description {
            name: "faulty".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            intent: "test fixture: misbehaves as the `fault` parameter says".into(),
        }
    }

    fn classify(server: ServerContext, _failure: FailedRequest) -> RetryVerdict {
        if inject(&server) {
            return RetryVerdict::RetryAfter(u64::MAX);
        }
        RetryVerdict::RetryAfter(RETRY_MS)
    }

    fn reconnect_delay(server: ServerContext, _attempt: u32, _seed: u64) -> ReconnectVerdict {
        if inject(&server) {
            return ReconnectVerdict::RetryAfter(u64::MAX);
        }
        ReconnectVerdict::RetryAfter(RECONNECT_MS)
    }

    fn health(server: ServerContext, _probe: ProbeOutcome) -> HealthVerdict {
        // Every health verdict is valid, so `invalid` answers normally here.
        inject(&server);
        HealthVerdict::Unhealthy
    }

    fn probe_schedule(server: ServerContext, _seed: u64) -> ProbePlan {
        if inject(&server) {
            return ProbePlan {
                interval_ms: 0,
                timeout_ms: 0,
            };
        }
        ProbePlan {
            interval_ms: PROBE_INTERVAL_MS,
            timeout_ms: PROBE_INTERVAL_MS,
        }
    }

    fn crash(server: ServerContext, _crash: CrashReport) -> CrashVerdict {
        if inject(&server) {
            return CrashVerdict::RestartAfter(u64::MAX);
        }
        CrashVerdict::RestartAfter(RESTART_MS)
    }
}

export!(FaultyPolicy);
