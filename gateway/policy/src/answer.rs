//! Who answered a decision: reported by the policy that knows (a module, or the built-in
//! policy standing in for a faulted one), read by whoever asked, on the asking thread.
//!
//! A decision is one synchronous call on the caller's thread, through layers (a counter, a
//! reloadable handle, the module with its fallback). Only the innermost layer knows who
//! answered, and the outermost wants to record it; this carries that one fact back up
//! without widening every method of [`crate::RecoveryPolicy`].

use std::cell::RefCell;

/// Who answered one decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnsweredBy {
    /// A module answered; `version` is its name, version and content hash prefix.
    Module { version: String },
    /// The module faulted (`fault` says how) and the built-in policy answered instead.
    Fallback { version: String, fault: String },
    /// The built-in policy: bound by name, or standing in for a module not loaded yet.
    Builtin,
}

thread_local! {
    /// `Some` while [`observe`] runs on this thread: what has been reported so far.
    static REPORTED: RefCell<Option<Option<AnsweredBy>>> = const { RefCell::new(None) };
}

/// Runs one decision and returns its answer with who answered it ([`AnsweredBy::Builtin`]
/// when no layer reported a module).
pub fn observe<T>(decide: impl FnOnce() -> T) -> (T, AnsweredBy) {
    let outer = REPORTED.with(|reported| reported.borrow_mut().replace(None));
    let answer = decide();
    let answered = REPORTED.with(|reported| std::mem::replace(&mut *reported.borrow_mut(), outer));
    (answer, answered.flatten().unwrap_or(AnsweredBy::Builtin))
}

/// Reports who answered the decision under way on this thread. The first report stands:
/// the innermost layer, which knows best, reports first. Free when no one observes.
pub fn report(answered: impl FnOnce() -> AnsweredBy) {
    REPORTED.with(|reported| {
        if let Some(slot @ None) = reported.borrow_mut().as_mut() {
            *slot = Some(answered());
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn module(version: &str) -> AnsweredBy {
        AnsweredBy::Module {
            version: version.to_owned(),
        }
    }

    #[test]
    fn the_innermost_report_stands_and_nothing_reported_is_builtin() {
        let (answer, by) = observe(|| {
            report(|| module("inner"));
            report(|| module("outer"));
            7
        });
        assert_eq!((answer, by), (7, module("inner")));
        assert_eq!(observe(|| ()).1, AnsweredBy::Builtin);
    }

    #[test]
    fn a_report_with_no_one_observing_is_dropped_and_observations_nest() {
        report(|| module("lost"));
        let (inner, outer) = observe(|| {
            let (_, inner) = observe(|| report(|| module("nested")));
            report(|| module("outer"));
            inner
        });
        assert_eq!((inner, outer), (module("nested"), module("outer")));
        assert_eq!(observe(|| ()).1, AnsweredBy::Builtin);
    }
}
