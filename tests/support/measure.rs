//! Small measuring helpers shared by the integration tests and the benchmarks: a free port,
//! a process's resident memory, and latency figures.

// Included by tests and benchmarks, each of which uses part of it.
#![allow(dead_code)]

use std::time::Duration;

/// A port nothing listens on right now (the kernel's pick, released at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind 127.0.0.1:0")
        .local_addr()
        .expect("local address")
        .port()
}

/// A process's resident memory in KiB, from /proc.
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// Calls per second, p50 and p99 of one measured run.
pub struct Figures {
    pub calls_per_second: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// The figures of `latencies` measured over `wall`.
pub fn figures(mut latencies: Vec<Duration>, wall: Duration) -> Figures {
    latencies.sort();
    let at = |q: f64| {
        latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)].as_secs_f64()
            * 1e6
    };
    Figures {
        calls_per_second: latencies.len() as f64 / wall.as_secs_f64(),
        p50_us: at(0.5),
        p99_us: at(0.99),
    }
}
