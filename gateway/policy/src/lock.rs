//! Locks that a panic elsewhere cannot poison for good: every mutex in Wardgate guards
//! plain data that stays consistent between statements, so a poisoned lock is taken as is.
//! The one helper for every Wardgate crate (it lives here because they all depend on this
//! one); the engine's and the WebAssembly host's `clippy.toml` ban the inline form.

use std::sync::{Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Lock `mutex`, recovering its data if a panic poisoned it.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Read `lock`, recovering its data if a panic poisoned it.
pub fn read<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Write `lock`, recovering its data if a panic poisoned it.
pub fn write<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
