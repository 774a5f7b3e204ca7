//! Small measuring helpers shared by the integration tests and the benchmarks: a free port,
//! a process's resident memory, CPU time and descendants (from `/proc`), and latency figures.

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

/// The fields of `/proc/PID/stat` after the command (field 2, in parentheses, which may
/// hold spaces): the first is field 3, the state.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// The CPU time (user and system) process `pid` has used so far, its children not
/// counted: fields 14 and 15 of `/proc/PID/stat`, in clock ticks.
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let fields = stat_fields(pid)?;
    let ticks = |field: usize| fields.get(field - 3)?.parse::<u64>().ok();
    let used = ticks(14)? + ticks(15)?;
    // SAFETY: sysconf takes no pointers.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (per_second > 0).then(|| Duration::from_secs_f64(used as f64 / per_second as f64))
}

/// `root` and its descendants, by the parent ids in `/proc` (field 4 of each `stat`).
/// Descendants, not a process group: gateways put their servers in groups of their own.
pub fn process_tree(root: u32) -> Vec<u32> {
    let mut parents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let parent = stat_fields(pid).and_then(|fields| fields.get(1)?.parse::<u32>().ok());
        if let Some(parent) = parent {
            parents.push((pid, parent));
        }
    }
    let mut found = vec![root];
    let mut index = 0;
    while index < found.len() {
        let at = found[index];
        found.extend(
            parents
                .iter()
                .filter(|(_, parent)| *parent == at)
                .map(|(pid, _)| *pid),
        );
        index += 1;
    }
    found
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
