//! One kind's records (sandboxes, containers) in memory and in its journal: the one store shape both kinds
//! share. A change is written whole, one at a time per record ([`IdLocks`]), and seen in memory once it is on
//! disk; other records' changes go on meanwhile. The map of records is locked only to read or publish, never
//! across a write: under it, one fsync held every RunPodSandbox, CreateContainer, event and status call of
//! the node.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use super::journal::Journal;
use super::locks::IdLocks;
use super::{by_id_or_prefix, encode};
use crate::error::{Error, Result};

/// A record a [`Table`] holds: what criusd keeps of it (JSON in the journal) and the CRI config as sent
/// (protobuf).
pub trait Entry: Clone {
    /// What criusd records of it.
    type Record: serde::Serialize + serde::de::DeserializeOwned;
    /// Its CRI config.
    type Config: prost::Message + Default;
    /// The kind, as messages and logs name it ("sandbox", "container").
    const KIND: &'static str;
    /// Its id, the journal's key.
    fn id(&self) -> &str;
    /// Its record and config.
    fn parts(&self) -> (&Self::Record, &Self::Config);
    /// It, made of a record and config read back.
    fn from_parts(record: Self::Record, config: Self::Config) -> Self;
}

/// An entry in memory, and whether the journal has it yet.
#[derive(Clone)]
struct Slot<E> {
    entry: E,
    written: bool,
}

/// One kind's records: the journal under its directory and the entries in memory.
pub struct Table<E> {
    journal: Journal,
    all: Mutex<HashMap<String, Slot<E>>>,
    writes: IdLocks,
}

impl<E: Entry> Table<E> {
    /// Opens the records under `dir` (created if missing) with `fix` applied to each as it is read (not
    /// written back). A record that cannot be read is skipped with a warning, not deleted; those an older
    /// criusd kept as a directory each (`<id>/<main>` and `config.pb`) move into the journal.
    pub fn open(dir: &Path, main: &str, mut fix: impl FnMut(&mut E)) -> std::io::Result<Table<E>> {
        let (journal, found) = super::open_records(dir, main, E::KIND)?;
        let all = found
            .into_iter()
            .map(|(record, config)| {
                let mut entry = E::from_parts(record, config);
                fix(&mut entry);
                let id = entry.id().to_string();
                (id, Slot { entry, written: true })
            })
            .collect();
        Ok(Table {
            journal,
            all: Mutex::new(all),
            writes: IdLocks::default(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Slot<E>>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn encoded(e: &E) -> std::io::Result<Vec<u8>> {
        let (record, config) = e.parts();
        encode(record, config)
    }

    fn write(&self, e: &E) -> Result<()> {
        Self::encoded(e)
            .and_then(|v| self.journal.put(e.id(), &v))
            .map_err(|err| Error::io(format!("writing the record of {} {}", E::KIND, e.id()), err))
    }

    /// Adds `e` in memory only: the journal gets it with its first [`Table::modify`], whatever that changes.
    /// Until then a crash leaves nothing of it here.
    pub fn add(&self, e: E) {
        let lock = self.writes.of(e.id());
        let _writing = lock.write().unwrap_or_else(|p| p.into_inner());
        let id = e.id().to_string();
        self.lock().insert(
            id,
            Slot {
                entry: e,
                written: false,
            },
        );
    }

    /// Records `e`, on disk, then in memory.
    pub fn insert(&self, e: &E) -> Result<()> {
        let lock = self.writes.of(e.id());
        let _writing = lock.write().unwrap_or_else(|p| p.into_inner());
        self.write(e)?;
        let slot = Slot {
            entry: e.clone(),
            written: true,
        };
        self.lock().insert(e.id().to_string(), slot);
        Ok(())
    }

    /// Changes entry `id` with `f` and writes it if it changed (or was never written); returns it as it was
    /// before, or None if it is gone. The change is seen once it is on disk; a failed write changes nothing.
    pub fn modify(&self, id: &str, f: impl FnOnce(&mut E)) -> Result<Option<E>> {
        let lock = self.writes.of(id);
        let _writing = lock.write().unwrap_or_else(|p| p.into_inner());
        let Some(before) = self.lock().get(id).cloned() else {
            return Ok(None);
        };
        let mut after = before.entry.clone();
        f(&mut after);
        let changed = !before.written || Self::encoded(&before.entry).ok() != Self::encoded(&after).ok();
        if changed {
            self.write(&after)?;
            if let Some(slot) = self.lock().get_mut(id) {
                *slot = Slot {
                    entry: after,
                    written: true,
                };
            }
        }
        Ok(Some(before.entry))
    }

    /// The entry whose id is `id`, or the only one whose id starts with it.
    pub fn get(&self, id: &str) -> Option<E> {
        self.read(id, E::clone)
    }

    /// What `f` takes of the entry [`Table::get`] would answer, read in place: a call that needs a few fields
    /// of a record (an ExecSync, every probe) clones those, not the record and its whole CRI config.
    pub fn read<T>(&self, id: &str, f: impl FnOnce(&E) -> T) -> Option<T> {
        by_id_or_prefix(&self.lock(), id).map(|s| f(&s.entry))
    }

    /// Every entry.
    pub fn list(&self) -> Vec<E> {
        self.list_where(|_| true)
    }

    /// The entries `keep` selects, each read in place and only those cloned (a list filtered by pod clones
    /// that pod's entries, not the node's).
    pub fn list_where(&self, keep: impl Fn(&E) -> bool) -> Vec<E> {
        self.map_where(keep, E::clone)
    }

    /// What `f` makes of each entry `keep` selects, read in place (ListContainers answers with a part of
    /// each record: it clones that part only).
    pub fn map_where<T>(&self, keep: impl Fn(&E) -> bool, f: impl Fn(&E) -> T) -> Vec<T> {
        self.lock()
            .values()
            .filter(|s| keep(&s.entry))
            .map(|s| f(&s.entry))
            .collect()
    }

    /// Forgets entry `id` and deletes its record; returns it if it was there.
    pub fn remove(&self, id: &str) -> Result<Option<E>> {
        let lock = self.writes.of(id);
        let gone = {
            let _writing = lock.write().unwrap_or_else(|p| p.into_inner());
            let gone = self.lock().remove(id).map(|s| s.entry);
            self.journal
                .delete(id)
                .map_err(|e| Error::io(format!("removing the record of {} {id}", E::KIND), e))?;
            gone
        };
        self.writes.forget(id);
        Ok(gone)
    }
}
