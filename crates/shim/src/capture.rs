//! An exec's output kept in memory for ExecSync (`exec_sync`): the pumps of its stdout and stderr
//! (`pump::Sink::Memory`) append here, each stream capped at [`MAX_OUTPUT`] (the rest is read and dropped,
//! so the process never blocks on a full pipe). Once both streams ended, the waiting ExecSync is told.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::exec_sync::MAX_OUTPUT;

/// The stdout stream.
pub(crate) const STDOUT: usize = 0;
/// The stderr stream.
pub(crate) const STDERR: usize = 1;

/// Both streams' output.
#[derive(Default)]
pub(crate) struct Captured(Mutex<State>);

#[derive(Default)]
struct State {
    out: [Vec<u8>; 2],
    /// Streams that ended.
    ended: [bool; 2],
    /// Taken: what comes later is dropped.
    taken: bool,
    on_ended: Option<Box<dyn FnOnce() + Send>>,
}

impl Captured {
    /// Empty, both streams open.
    pub(crate) fn new() -> Arc<Captured> {
        Arc::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `data` to `stream`, up to its cap.
    pub(crate) fn push(&self, stream: usize, data: &[u8]) {
        let mut s = self.lock();
        if s.taken {
            return;
        }
        let out = &mut s.out[stream];
        let room = MAX_OUTPUT.saturating_sub(out.len());
        out.extend_from_slice(&data[..data.len().min(room)]);
    }

    /// `stream` ended (its pipe read EOF).
    pub(crate) fn end(&self, stream: usize) {
        let f = {
            let mut s = self.lock();
            s.ended[stream] = true;
            if s.ended == [true, true] {
                s.on_ended.take()
            } else {
                None
            }
        };
        if let Some(f) = f {
            f();
        }
    }

    /// Calls `f` once both streams ended (now, if they have).
    pub(crate) fn when_ended(&self, f: impl FnOnce() + Send + 'static) {
        let mut s = self.lock();
        if s.ended == [true, true] {
            drop(s);
            f();
        } else {
            s.on_ended = Some(Box::new(f));
        }
    }

    /// The output so far, (stdout, stderr); later output is dropped.
    pub(crate) fn take(&self) -> (Vec<u8>, Vec<u8>) {
        let mut s = self.lock();
        s.taken = true;
        s.on_ended = None;
        let [out, err] = std::mem::take(&mut s.out);
        (out, err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn output_is_capped_and_the_end_told_once_both_streams_ended() {
        let c = Captured::new();
        let told = Arc::new(AtomicBool::new(false));
        let t = told.clone();
        c.when_ended(move || t.store(true, Ordering::SeqCst));
        c.push(STDOUT, &vec![b'x'; MAX_OUTPUT - 1]);
        c.push(STDOUT, b"yz");
        c.push(STDERR, b"oops");
        c.end(STDOUT);
        assert!(!told.load(Ordering::SeqCst));
        c.end(STDERR);
        assert!(told.load(Ordering::SeqCst));
        let (out, err) = c.take();
        assert_eq!(out.len(), MAX_OUTPUT);
        assert_eq!(out.last(), Some(&b'y'), "truncated at the cap");
        assert_eq!(err, b"oops");
        c.push(STDERR, b"late");
        assert_eq!(c.take().1, b"", "nothing kept once taken");
    }
}
