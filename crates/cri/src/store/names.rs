//! Names that must be unique — a sandbox's `<name>_<namespace>_<uid>_<attempt>`, a container's name and
//! attempt within its pod — reserved before anything is made (containerd's `registrar`). A reservation that
//! is dropped without [`Reservation::commit`] gives the name back, so a failed create never leaks its name;
//! two concurrent creates of one name cannot both pass the check, because the check is the reservation.

use std::collections::HashMap;
use std::sync::Mutex;

/// Names and the ids holding them.
#[derive(Debug, Default)]
pub struct NameIndex {
    held: Mutex<HashMap<String, String>>,
}

/// A name held for an object being made; released on drop unless committed.
#[derive(Debug)]
#[must_use = "a reservation is released when dropped"]
pub struct Reservation<'a> {
    index: &'a NameIndex,
    name: String,
    id: String,
    committed: bool,
}

impl NameIndex {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves `name` for `id`; if another id holds it, returns that id.
    pub fn reserve(&self, name: &str, id: &str) -> Result<Reservation<'_>, String> {
        let mut held = self.lock();
        if let Some(holder) = held.get(name) {
            return Err(holder.clone());
        }
        held.insert(name.to_string(), id.to_string());
        Ok(Reservation {
            index: self,
            name: name.to_string(),
            id: id.to_string(),
            committed: false,
        })
    }

    /// Records that `id` holds `name` (records read at start-up).
    pub fn hold(&self, name: &str, id: &str) {
        self.lock().insert(name.to_string(), id.to_string());
    }

    /// Gives `name` back if `id` holds it (the object was removed).
    pub fn release(&self, name: &str, id: &str) {
        let mut held = self.lock();
        if held.get(name).is_some_and(|h| h == id) {
            held.remove(name);
        }
    }
}

impl Reservation<'_> {
    /// The object was made: the name stays held until [`NameIndex::release`].
    pub fn commit(mut self) {
        self.committed = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if !self.committed {
            self.index.release(&self.name, &self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn a_reservation_holds_until_dropped_or_committed() {
        let idx = NameIndex::default();
        let r = idx.reserve("web", "a").unwrap();
        assert_eq!(idx.reserve("web", "b").unwrap_err(), "a");
        drop(r);
        let r = idx.reserve("web", "b").unwrap();
        r.commit();
        assert_eq!(idx.reserve("web", "c").unwrap_err(), "b");
        idx.release("web", "c");
        assert_eq!(
            idx.reserve("web", "c").unwrap_err(),
            "b",
            "only the holder releases"
        );
        idx.release("web", "b");
        idx.reserve("web", "c").unwrap().commit();
    }

    #[test]
    fn of_concurrent_reservations_of_one_name_exactly_one_wins() {
        let idx = Arc::new(NameIndex::default());
        let won = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let (idx, won) = (idx.clone(), won.clone());
                std::thread::spawn(move || {
                    if let Ok(r) = idx.reserve("db", &format!("id{i}")) {
                        won.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        r.commit();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(won.load(Ordering::SeqCst), 1);
    }
}
