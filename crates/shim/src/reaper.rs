//! The shim is the subreaper of everything it starts: runtime commands (its children) and container processes
//! (re-parented to it when the runtime exits). One thread reaps every child with `waitpid(-1)` and hands each
//! exit to whoever waits for that pid; an exit nobody claimed yet is kept until it is claimed, so a process that
//! dies before its pid is known is never lost.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::SystemTime;

use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::Pid;

/// How a process ended: its exit code, or 128 + the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exit {
    /// Exit status as a shell reports it.
    pub status: u32,
    /// When it was reaped.
    pub at: SystemTime,
}

type Callback = Box<dyn FnOnce(Exit) + Send>;

#[derive(Default)]
struct State {
    /// Exits nobody has claimed yet.
    unclaimed: HashMap<i32, Exit>,
    /// Who waits for which pid.
    watchers: HashMap<i32, Callback>,
    /// Bumped after each spawn: the reaper sleeps on "no children" until it changes.
    generation: u64,
}

/// The reaper; cheap to clone.
#[derive(Clone)]
pub struct Reaper {
    inner: Arc<(Mutex<State>, Condvar)>,
}

impl Reaper {
    /// Makes this process a subreaper and starts the reaping thread.
    pub fn start() -> std::io::Result<Reaper> {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let r = Reaper {
            inner: Arc::new((Mutex::new(State::default()), Condvar::new())),
        };
        let me = r.clone();
        std::thread::Builder::new()
            .name("reaper".into())
            .stack_size(64 * 1024)
            .spawn(move || me.run())?;
        Ok(r)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run(&self) {
        let mut seen = 0;
        loop {
            match waitpid(Pid::from_raw(-1), None) {
                Ok(WaitStatus::Exited(pid, code)) => self.deliver(pid.as_raw(), code as u32),
                Ok(WaitStatus::Signaled(pid, sig, _)) => self.deliver(pid.as_raw(), 128 + sig as u32),
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(_) => {
                    // No children: sleep until a command is started (processes re-parented to us are only
                    // ever descendants of commands we started).
                    let mut st = self.lock();
                    while st.generation == seen {
                        st = self.inner.1.wait(st).unwrap_or_else(|p| p.into_inner());
                    }
                    seen = st.generation;
                }
            }
        }
    }

    fn deliver(&self, pid: i32, status: u32) {
        let exit = Exit {
            status,
            at: SystemTime::now(),
        };
        let cb = {
            let mut st = self.lock();
            match st.watchers.remove(&pid) {
                Some(cb) => Some(cb),
                None => {
                    st.unclaimed.insert(pid, exit);
                    None
                }
            }
        };
        if let Some(cb) = cb {
            cb(exit);
        }
    }

    /// Wakes the reaper: a child was just spawned.
    pub fn child_started(&self) {
        self.lock().generation += 1;
        self.inner.1.notify_all();
    }

    /// Calls `f` with the exit of `pid`: now if it already happened, else once it does.
    pub fn on_exit(&self, pid: i32, f: impl FnOnce(Exit) + Send + 'static) {
        let mut st = self.lock();
        if let Some(exit) = st.unclaimed.remove(&pid) {
            drop(st);
            f(exit);
        } else {
            st.watchers.insert(pid, Box::new(f));
        }
    }

    /// Blocks until `pid` exits.
    pub fn wait(&self, pid: i32) -> Exit {
        let (tx, rx) = std::sync::mpsc::channel();
        self.on_exit(pid, move |e| {
            let _ = tx.send(e);
        });
        rx.recv().expect("the reaper thread never stops")
    }

    /// Forgets an unclaimed exit of `pid` (a pid about to be reused must not inherit it).
    pub fn forget(&self, pid: i32) {
        self.lock().unclaimed.remove(&pid);
    }
}
