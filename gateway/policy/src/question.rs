//! The five questions a recovery policy answers, named once for everyone who counts,
//! records or calls them: the WebAssembly host, the policy registry, the decision log and
//! the simulator's timeline.

/// One of the decisions of [`RecoveryPolicy`](crate::RecoveryPolicy) (`describe`, what a
/// policy is, is not a decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Question {
    Classify,
    ReconnectDelay,
    Health,
    ProbeSchedule,
    Crash,
}

impl Question {
    /// Every question, in the order of the trait (and of a per-question counter array).
    pub const ALL: [Question; 5] = [
        Question::Classify,
        Question::ReconnectDelay,
        Question::Health,
        Question::ProbeSchedule,
        Question::Crash,
    ];

    /// The trait method's name, as metrics and counters key it (`reconnect_delay`).
    pub fn name(self) -> &'static str {
        match self {
            Question::Classify => "classify",
            Question::ReconnectDelay => "reconnect_delay",
            Question::Health => "health",
            Question::ProbeSchedule => "probe_schedule",
            Question::Crash => "crash",
        }
    }

    /// The export's name in the WIT world (`reconnect-delay`), as faults and the decision
    /// log show it.
    pub fn wit_name(self) -> &'static str {
        match self {
            Question::Classify => "classify",
            Question::ReconnectDelay => "reconnect-delay",
            Question::Health => "health",
            Question::ProbeSchedule => "probe-schedule",
            Question::Crash => "crash",
        }
    }

    /// Its place in [`Question::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

#[cfg(test)]
mod tests {
    use super::Question;

    #[test]
    fn all_is_in_index_order_and_the_two_names_differ_only_in_separators() {
        for (index, question) in Question::ALL.into_iter().enumerate() {
            assert_eq!(question.index(), index);
            assert_eq!(question.wit_name().replace('-', "_"), question.name());
        }
    }
}
