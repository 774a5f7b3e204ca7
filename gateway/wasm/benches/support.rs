//! Timing helpers shared by the policy benchmarks.

use std::time::{Duration, Instant};

/// Median and 99th percentile of `samples` timed calls, after a warm-up of a tenth as many.
pub fn measure(samples: usize, mut decide: impl FnMut()) -> (Duration, Duration) {
    for _ in 0..samples / 10 {
        decide();
    }
    let mut timings: Vec<Duration> = (0..samples)
        .map(|_| {
            let started = Instant::now();
            decide();
            started.elapsed()
        })
        .collect();
    timings.sort();
    (timings[samples / 2], timings[samples * 99 / 100])
}

pub fn micros(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e6
}
