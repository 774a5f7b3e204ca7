//! The fleet's one backoff: how long a member waits between attempts at the database
//! (rejoining, recording a command of its local queue, writing a command's end), doubling
//! from half a second up to ten.

use std::time::Duration;

/// The wait before the first retry.
const FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two attempts.
const CAP: Duration = Duration::from_secs(10);

/// Waits between attempts: 0.5 s, 1 s, 2 s, … up to 10 s, until [`Backoff::reset`].
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Backoff {
        Backoff { next: FIRST }
    }

    /// The wait before the next attempt; the one after is twice as long, up to the cap.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(CAP);
        wait
    }

    /// An attempt succeeded: the next failure waits the first wait again.
    pub(crate) fn reset(&mut self) {
        self.next = FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_cap_and_start_over_after_a_success() {
        let mut backoff = Backoff::new();
        let waits: Vec<u64> = (0..7)
            .map(|_| backoff.next_wait().as_millis() as u64)
            .collect();
        assert_eq!(waits, [500, 1_000, 2_000, 4_000, 8_000, 10_000, 10_000]);
        backoff.reset();
        assert_eq!(backoff.next_wait(), FIRST);
    }
}
