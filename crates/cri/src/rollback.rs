//! A rollback guard for calls made of steps that each leave something behind (a snapshot, a directory, a
//! shim task): each step that made something pushes the closure that takes it apart, and the guard runs them
//! in reverse when it is dropped, unless the call [`Rollback::commit`]ted. So an early return (a `?`) after
//! any step leaves nothing, and a step added later cannot forget the undo of the ones before it (CRI-O's
//! `ResourceCleaner` is the same idea).
//!
//! Undo closures cannot fail the call: they log what they could not take apart themselves, and the error
//! the caller sees stays the one that made it give up.

/// One step's undo, named for logs.
type Undo<'a> = (&'static str, Box<dyn FnOnce() + 'a>);

/// Undo closures, run last-pushed first on drop unless committed.
#[must_use = "a rollback guard undoes everything when dropped: commit() it once the call succeeded"]
pub struct Rollback<'a> {
    undo: Vec<Undo<'a>>,
}

impl Default for Rollback<'_> {
    fn default() -> Self {
        Rollback::new()
    }
}

impl<'a> Rollback<'a> {
    /// A guard with nothing to undo yet.
    pub fn new() -> Self {
        Rollback { undo: Vec::new() }
    }

    /// Takes apart what step `what` made, `undo`, if the call does not commit.
    pub fn push(&mut self, what: &'static str, undo: impl FnOnce() + 'a) {
        self.undo.push((what, Box::new(undo)));
    }

    /// The names of the undo steps pending, first pushed first.
    pub fn pending(&self) -> Vec<&'static str> {
        self.undo.iter().map(|(what, _)| *what).collect()
    }

    /// The call succeeded: what its steps made stays.
    pub fn commit(mut self) {
        self.undo.clear();
    }
}

impl Drop for Rollback<'_> {
    fn drop(&mut self) {
        while let Some((what, undo)) = self.undo.pop() {
            tracing::debug!(step = what, "rolling back");
            undo();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    #[test]
    fn undoes_in_reverse_unless_committed() {
        let log = RefCell::new(Vec::new());
        {
            let mut r = Rollback::new();
            r.push("a", || log.borrow_mut().push("a"));
            r.push("b", || log.borrow_mut().push("b"));
            assert_eq!(r.pending(), ["a", "b"]);
        }
        assert_eq!(*log.borrow(), ["b", "a"]);
        log.borrow_mut().clear();
        let mut r = Rollback::new();
        r.push("a", || log.borrow_mut().push("a"));
        r.commit();
        assert!(log.borrow().is_empty());
    }

    #[test]
    fn an_early_return_undoes_the_steps_before_it() {
        let log = RefCell::new(Vec::new());
        let call = |fail: bool| -> Result<(), &'static str> {
            let mut r = Rollback::new();
            r.push("made", || log.borrow_mut().push("unmade"));
            if fail {
                Err("failed")?;
            }
            r.commit();
            Ok(())
        };
        call(true).unwrap_err();
        assert_eq!(*log.borrow(), ["unmade"]);
        call(false).unwrap();
        assert_eq!(*log.borrow(), ["unmade"]);
    }
}
