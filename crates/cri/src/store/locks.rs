//! One lock per object id, the one per-id lock map of crius-cri:
//! - the lifecycle calls' ([`crate::sandbox`], [`crate::container`]): a call that takes an object apart (a
//!   removal) holds it written and runs alone, so a second RemoveContainer waits for the first and then finds
//!   the container gone, instead of meeting it half-deleted; calls that may overlap (two StopContainers, the
//!   second with a shorter grace period) share it read;
//! - a record's writes ([`super::table`]): one at a time, each with its publication in memory.
//!
//! Calls on different objects do not wait for each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// The locks, by id.
#[derive(Debug, Default)]
pub struct IdLocks {
    locks: Mutex<HashMap<String, Arc<RwLock<()>>>>,
}

impl IdLocks {
    /// The lock of `id` (made on first use).
    pub fn of(&self, id: &str) -> Arc<RwLock<()>> {
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    /// `id` is gone: its lock is dropped once its last holder and waiters let go.
    pub fn forget(&self, id: &str) {
        self.locks.lock().unwrap_or_else(|p| p.into_inner()).remove(id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_lock_per_id_until_forgotten() {
        let l = IdLocks::default();
        assert!(Arc::ptr_eq(&l.of("a"), &l.of("a")));
        assert!(!Arc::ptr_eq(&l.of("a"), &l.of("b")));
        let held = l.of("a");
        let _w = held.write().unwrap();
        assert!(l.of("a").try_read().is_err(), "written: others wait");
        assert!(l.of("b").try_write().is_ok(), "another id does not");
        l.forget("a");
        assert!(l.of("a").try_write().is_ok(), "a new lock once forgotten");
    }
}
