//! One lock per object id: a call that takes an object apart (a removal) runs alone, so a second
//! RemoveContainer waits for the first and then finds the container gone, instead of meeting it
//! half-deleted; calls that may overlap (two StopContainers, the second with a shorter grace period) share
//! the lock. Calls on different objects do not wait for each other.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

/// The locks, by id.
#[derive(Debug, Default)]
pub struct Busy {
    locks: Mutex<HashMap<String, Arc<RwLock<()>>>>,
}

impl Busy {
    /// The lock of `id`: written for as long as a call takes the object apart, read by calls that may
    /// overlap.
    pub fn guard(&self, id: &str) -> Arc<RwLock<()>> {
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
