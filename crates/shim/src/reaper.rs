//! The shim is the subreaper of everything it starts: runtime commands (its children) and container processes
//! (re-parented to it when the runtime exits). A SIGCHLD handler writes a byte to a pipe; whoever drives the
//! reaper (the shim's [`Reactor`], or a thread for one-shot commands) then reaps every exited child with
//! `waitpid(-1, WNOHANG)` and hands each exit to whoever waits for that pid. An exit nobody claimed yet is kept
//! until it is claimed, so a process that dies before its pid is known is never lost. The signal is handled,
//! never blocked: a blocked mask would be inherited by the containers.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, IntoRawFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::reactor::{Next, READ, Reactor};

/// How a process ended: its exit code, or 128 + the signal that killed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exit {
    /// Exit status as a shell reports it.
    pub(crate) status: u32,
    /// When it was reaped.
    pub(crate) at: SystemTime,
}

type Callback = Box<dyn FnOnce(Exit) + Send>;

#[derive(Default)]
struct State {
    /// Exits nobody has claimed yet.
    unclaimed: HashMap<i32, Exit>,
    /// Who waits for which pid.
    watchers: HashMap<i32, Callback>,
}

/// The reaper; cheap to clone.
#[derive(Clone)]
pub(crate) struct Reaper {
    inner: Arc<Mutex<State>>,
    /// The read end of the SIGCHLD pipe (non-blocking).
    signals: Arc<File>,
}

static SIGCHLD_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_sigchld(_: libc::c_int) {
    let fd = SIGCHLD_PIPE.load(Ordering::Relaxed);
    // SAFETY: write(2) is async-signal-safe; the pipe is non-blocking, so a full pipe drops the byte (one
    // unread byte is enough to make the driver reap).
    unsafe {
        libc::write(fd, b"c".as_ptr().cast(), 1);
    }
}

/// Installs the SIGCHLD handler once per process; returns the pipe's read end.
fn sigchld_pipe() -> std::io::Result<Arc<File>> {
    static PIPE: OnceLock<Arc<File>> = OnceLock::new();
    if let Some(p) = PIPE.get() {
        return Ok(p.clone());
    }
    let flags = nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK;
    let (r, w) = nix::unistd::pipe2(flags)?;
    SIGCHLD_PIPE.store(w.into_raw_fd(), Ordering::Relaxed);
    let action = nix::sys::signal::SigAction::new(
        nix::sys::signal::SigHandler::Handler(on_sigchld),
        nix::sys::signal::SaFlags::SA_RESTART | nix::sys::signal::SaFlags::SA_NOCLDSTOP,
        nix::sys::signal::SigSet::empty(),
    );
    // SAFETY: the handler only calls write(2).
    unsafe { nix::sys::signal::sigaction(nix::sys::signal::Signal::SIGCHLD, &action) }?;
    Ok(PIPE.get_or_init(|| Arc::new(File::from(r))).clone())
}

impl Reaper {
    /// Makes this process a subreaper and installs the SIGCHLD handler. Nothing is reaped until the reaper is
    /// driven: [`Reaper::attach`] or [`Reaper::start`].
    pub(crate) fn install() -> std::io::Result<Reaper> {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Reaper {
            inner: Arc::new(Mutex::new(State::default())),
            signals: sigchld_pipe()?,
        })
    }

    /// A reaper driven by its own thread (for one-shot commands, which have no loop).
    pub(crate) fn start() -> std::io::Result<Reaper> {
        let r = Reaper::install()?;
        let me = r.clone();
        std::thread::Builder::new()
            .name("reaper".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                loop {
                    me.reap();
                    let mut p = libc::pollfd {
                        fd: me.signals.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: poll on one valid pollfd.
                    unsafe { libc::poll(&mut p, 1, -1) };
                }
            })?;
        Ok(r)
    }

    /// Reaps in `reactor`, on each SIGCHLD.
    pub(crate) fn attach(&self, reactor: &Reactor) -> std::io::Result<()> {
        let me = self.clone();
        reactor.add(self.signals.as_fd(), READ, move |_, _| {
            me.reap();
            Next::Keep
        })?;
        // Children that ended before we listened.
        self.reap();
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Empties the signal pipe, then reaps every child that has exited.
    fn reap(&self) {
        let mut sink = [0u8; 64];
        while (&*self.signals).read(&mut sink).is_ok_and(|n| n > 0) {}
        loop {
            match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) => self.deliver(pid.as_raw(), code as u32),
                Ok(WaitStatus::Signaled(pid, sig, _)) => self.deliver(pid.as_raw(), 128 + sig as u32),
                Ok(WaitStatus::StillAlive) | Err(nix::Error::ECHILD) => return,
                Ok(_) | Err(nix::Error::EINTR) => {}
                Err(_) => return,
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

    /// Calls `f` with the exit of `pid`: now if it already happened, else once it does.
    pub(crate) fn on_exit(&self, pid: i32, f: impl FnOnce(Exit) + Send + 'static) {
        let mut st = self.lock();
        if let Some(exit) = st.unclaimed.remove(&pid) {
            drop(st);
            f(exit);
        } else {
            st.watchers.insert(pid, Box::new(f));
        }
    }

    /// Blocks until `pid` exits (never on the reactor's thread, which is the one reaping).
    pub(crate) fn wait(&self, pid: i32) -> Exit {
        let (tx, rx) = std::sync::mpsc::channel();
        self.on_exit(pid, move |e| {
            let _ = tx.send(e);
        });
        rx.recv().expect("the reaper thread never stops")
    }
}
