//! Locks that a panic elsewhere cannot poison for good: every mutex in the engine guards
//! plain data that stays consistent between statements, so a poisoned lock is taken as is.

use std::sync::{Mutex, MutexGuard};

/// Lock `mutex`, recovering its data if a panic poisoned it.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
