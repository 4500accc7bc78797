//! Names that must be unique — a sandbox's `<name>_<namespace>_<uid>_<attempt>`, a container's name and
//! attempt within its pod — reserved before anything is made (containerd's `registrar`). A reservation that
//! is dropped without [`Reservation::commit`] gives the name back, so a failed create never leaks its name;
//! two concurrent creates of one name cannot both pass the check, because the check is the reservation.
//!
//! Each name keeps the request that took it (`R`, compared with `==`). A request equal to the holder's is a
//! retry (kubelet calls again after its own deadline): while the first call is still making the object, the
//! retry waits for it; then it gets the id that call made ([`Taken::Same`]), or, if that call failed, it
//! makes the object itself. A different request gets the holder's id ([`Taken::By`]).

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};

/// Why a name could not be reserved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// A different request holds it: the holder's id.
    By(String),
    /// An equal request made the object: its id (the caller answers with it, as the first call did).
    Same(String),
}

#[derive(Debug)]
struct Held<R> {
    id: String,
    request: R,
    /// Still being made by its first call.
    in_flight: bool,
}

/// Names, the ids holding them and the requests that took them.
#[derive(Debug)]
pub struct NameIndex<R> {
    held: Mutex<HashMap<String, Held<R>>>,
    /// Notified when an in-flight reservation is committed or given back.
    settled: Condvar,
}

impl<R> Default for NameIndex<R> {
    fn default() -> Self {
        NameIndex {
            held: Mutex::new(HashMap::new()),
            settled: Condvar::new(),
        }
    }
}

/// A name held for an object being made; released on drop unless committed.
#[derive(Debug)]
#[must_use = "a reservation is released when dropped"]
pub struct Reservation<'a, R> {
    index: &'a NameIndex<R>,
    name: String,
    id: String,
    committed: bool,
}

impl<R: PartialEq> NameIndex<R> {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Held<R>>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves `name` for `id`, made from `request`. Waits while an equal request is still making it.
    pub fn reserve(&self, name: &str, id: &str, request: R) -> Result<Reservation<'_, R>, Taken> {
        let mut held = self.lock();
        loop {
            match held.get(name) {
                None => break,
                Some(h) if h.request != request => return Err(Taken::By(h.id.clone())),
                Some(h) if !h.in_flight => return Err(Taken::Same(h.id.clone())),
                Some(_) => {
                    held = self.settled.wait(held).unwrap_or_else(|p| p.into_inner());
                }
            }
        }
        held.insert(
            name.to_string(),
            Held {
                id: id.to_string(),
                request,
                in_flight: true,
            },
        );
        Ok(Reservation {
            index: self,
            name: name.to_string(),
            id: id.to_string(),
            committed: false,
        })
    }

    /// Records that `id`, made from `request`, holds `name` (records read at start-up).
    pub fn hold(&self, name: &str, id: &str, request: R) {
        self.lock().insert(
            name.to_string(),
            Held {
                id: id.to_string(),
                request,
                in_flight: false,
            },
        );
    }

    /// Gives `name` back if `id` holds it (the object was removed).
    pub fn release(&self, name: &str, id: &str) {
        let mut held = self.lock();
        if held.get(name).is_some_and(|h| h.id == id) {
            held.remove(name);
        }
        drop(held);
        self.settled.notify_all();
    }

    fn settle(&self, name: &str, id: &str) {
        if let Some(h) = self.lock().get_mut(name).filter(|h| h.id == id) {
            h.in_flight = false;
        }
        self.settled.notify_all();
    }
}

impl<R: PartialEq> Reservation<'_, R> {
    /// The object was made: the name stays held until [`NameIndex::release`].
    pub fn commit(mut self) {
        self.committed = true;
        self.index.settle(&self.name, &self.id);
    }
}

impl<R> Drop for Reservation<'_, R> {
    fn drop(&mut self) {
        if !self.committed {
            let mut held = self.index.held.lock().unwrap_or_else(|p| p.into_inner());
            if held.get(&self.name).is_some_and(|h| h.id == self.id) {
                held.remove(&self.name);
            }
            drop(held);
            self.index.settled.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_reservation_holds_until_dropped_or_committed() {
        let idx = NameIndex::default();
        let r = idx.reserve("web", "a", 1).unwrap();
        assert_eq!(idx.reserve("web", "b", 2).unwrap_err(), Taken::By("a".into()));
        drop(r);
        let r = idx.reserve("web", "b", 2).unwrap();
        r.commit();
        assert_eq!(idx.reserve("web", "c", 3).unwrap_err(), Taken::By("b".into()));
        idx.release("web", "c");
        assert_eq!(
            idx.reserve("web", "c", 3).unwrap_err(),
            Taken::By("b".into()),
            "only the holder releases"
        );
        idx.release("web", "b");
        idx.reserve("web", "c", 3).unwrap().commit();
    }

    #[test]
    fn of_concurrent_reservations_of_one_name_exactly_one_wins() {
        let idx = Arc::new(NameIndex::default());
        let won = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..16)
            .map(|i| {
                let (idx, won) = (idx.clone(), won.clone());
                std::thread::spawn(move || {
                    if let Ok(r) = idx.reserve("db", &format!("id{i}"), i) {
                        won.fetch_add(1, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_millis(20));
                        r.commit();
                    }
                })
            })
            .collect();
        threads.into_iter().for_each(|t| t.join().unwrap());
        assert_eq!(won.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_retry_waits_for_the_first_call_and_gets_its_id() {
        let idx = Arc::new(NameIndex::default());
        let first = idx.reserve("web", "a", "req").unwrap();
        let retry = {
            let idx = idx.clone();
            std::thread::spawn(move || idx.reserve("web", "b", "req").map(|r| r.commit()))
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(!retry.is_finished(), "the retry waits while the first call runs");
        first.commit();
        assert_eq!(retry.join().unwrap().unwrap_err(), Taken::Same("a".into()));
        // Later retries get the same id; another request gets the holder.
        assert_eq!(
            idx.reserve("web", "c", "req").unwrap_err(),
            Taken::Same("a".into())
        );
        assert_eq!(
            idx.reserve("web", "c", "other").unwrap_err(),
            Taken::By("a".into())
        );
    }

    #[test]
    fn a_retry_of_a_failed_call_makes_the_object_itself() {
        let idx = Arc::new(NameIndex::default());
        let first = idx.reserve("web", "a", "req").unwrap();
        let retry = {
            let idx = idx.clone();
            std::thread::spawn(move || {
                let r = idx.reserve("web", "b", "req").unwrap();
                r.commit();
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        drop(first);
        retry.join().unwrap();
        assert_eq!(
            idx.reserve("web", "c", "req").unwrap_err(),
            Taken::Same("b".into())
        );
    }
}
