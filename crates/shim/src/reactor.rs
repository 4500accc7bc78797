//! The shim's one event loop: an epoll set whose ready descriptors are handled on the thread that runs
//! [`Reactor::run`]. The ttrpc connections, every process's stdio, the SIGCHLD and SIGTERM pipes and the
//! OOM inotify descriptor all live here, so a pod's shim has one long-lived thread however many containers
//! it holds. Handlers must not block: work that does (running the OCI runtime) goes to worker threads.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Readable (level-triggered).
pub(crate) const READ: u32 = libc::EPOLLIN as u32;
/// Writable.
pub(crate) const WRITE: u32 = libc::EPOLLOUT as u32;

/// What a handler wants after it ran: keep it registered, or drop it (it deregistered or closed its fd).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// Call again on the next readiness.
    Keep,
    /// Forget this handler.
    Done,
}

type Handler = Box<dyn FnMut(&Reactor, u32) -> Next + Send>;

/// The loop; shared with an `Arc`, driven by one thread.
pub(crate) struct Reactor {
    epoll: OwnedFd,
    wake: OwnedFd,
    handlers: Mutex<HashMap<u64, Handler>>,
    next: AtomicU64,
    stopped: AtomicBool,
}

const WAKE: u64 = 0;

fn check(r: libc::c_int, what: &str) -> std::io::Result<libc::c_int> {
    if r < 0 {
        let e = std::io::Error::last_os_error();
        return Err(std::io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(r)
}

impl Reactor {
    /// An empty loop.
    pub(crate) fn new() -> std::io::Result<Arc<Reactor>> {
        // SAFETY: plain syscalls; the results are checked and owned at once.
        let epoll =
            unsafe { OwnedFd::from_raw_fd(check(libc::epoll_create1(libc::EPOLL_CLOEXEC), "epoll")?) };
        // SAFETY: as above.
        let wake = unsafe {
            OwnedFd::from_raw_fd(check(
                libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK),
                "eventfd",
            )?)
        };
        let r = Reactor {
            epoll,
            wake,
            handlers: Mutex::new(HashMap::new()),
            next: AtomicU64::new(WAKE + 1),
            stopped: AtomicBool::new(false),
        };
        r.ctl(libc::EPOLL_CTL_ADD, r.wake.as_raw_fd(), READ, WAKE)?;
        Ok(Arc::new(r))
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> std::io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: token };
        // SAFETY: epoll_ctl with a valid event struct.
        check(
            unsafe { libc::epoll_ctl(self.epoll.as_raw_fd(), op, fd, &mut ev) },
            "epoll_ctl",
        )
        .map(drop)
    }

    /// Calls `handler` on the loop thread whenever `fd` is ready for `events`; returns the registration's
    /// token (for [`Reactor::resume`]). The caller keeps `fd` open until it removes it.
    pub(crate) fn add(
        &self,
        fd: RawFd,
        events: u32,
        handler: impl FnMut(&Reactor, u32) -> Next + Send + 'static,
    ) -> std::io::Result<u64> {
        let token = self.reserve();
        self.add_as(token, fd, events, handler)?;
        Ok(token)
    }

    /// A token for [`Reactor::add_as`], for a handler that must know its own token.
    pub(crate) fn reserve(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// [`Reactor::add`] under a token from [`Reactor::reserve`].
    pub(crate) fn add_as(
        &self,
        token: u64,
        fd: RawFd,
        events: u32,
        handler: impl FnMut(&Reactor, u32) -> Next + Send + 'static,
    ) -> std::io::Result<()> {
        self.lock().insert(token, Box::new(handler));
        if let Err(e) = self.ctl(libc::EPOLL_CTL_ADD, fd, events, token) {
            self.lock().remove(&token);
            return Err(e);
        }
        Ok(())
    }

    /// Watches `fd` again under `token` after [`Reactor::pause`] (its handler was kept).
    pub(crate) fn resume(&self, fd: RawFd, token: u64, events: u32) -> std::io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    /// Stops watching `fd` but keeps its handler (to [`Reactor::resume`] it). Unlike a zero event mask, this
    /// also silences hang-ups, which epoll reports whatever the mask.
    pub(crate) fn pause(&self, fd: RawFd) {
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    /// Stops watching `fd` (its handler should then return [`Next::Done`]).
    pub(crate) fn remove(&self, fd: RawFd) {
        let _ = self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Handler>> {
        self.handlers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls `f` once on the loop thread after `delay` (a timerfd in the set: no thread waits for it).
    pub(crate) fn after(
        &self,
        delay: std::time::Duration,
        f: impl FnOnce(&Reactor) + Send + 'static,
    ) -> std::io::Result<()> {
        // SAFETY: plain syscalls; the descriptor is owned at once.
        let fd = unsafe {
            OwnedFd::from_raw_fd(check(
                libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK),
                "timerfd",
            )?)
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: delay.as_secs() as libc::time_t,
                // A zero value would disarm the timer: at least 1 ns.
                tv_nsec: (delay.subsec_nanos().max(1)) as libc::c_long,
            },
        };
        check(
            // SAFETY: arming our own timer with a valid spec.
            unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) },
            "timerfd_settime",
        )?;
        let mut f = Some(f);
        let raw = fd.as_raw_fd();
        self.add(raw, READ, move |r, _| {
            r.remove(fd.as_raw_fd());
            if let Some(f) = f.take() {
                f(r);
            }
            Next::Done
        })?;
        Ok(())
    }

    /// Makes [`Reactor::run`] return; callable from any thread.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let one = 1u64.to_ne_bytes();
        // SAFETY: an 8-byte write to our eventfd.
        unsafe {
            libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), 8);
        }
    }

    /// Handles ready descriptors until [`Reactor::stop`].
    pub(crate) fn run(&self) {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 32];
        while !self.stopped.load(Ordering::SeqCst) {
            // SAFETY: the buffer outlives the call and its length is passed.
            let n = unsafe {
                libc::epoll_wait(
                    self.epoll.as_raw_fd(),
                    events.as_mut_ptr(),
                    events.len() as i32,
                    -1,
                )
            };
            if n < 0 {
                // EINTR: a signal (SIGCHLD) arrived; its pipe is in the set.
                continue;
            }
            for ev in &events[..n as usize] {
                let (token, ready) = (ev.u64, ev.events);
                if token == WAKE {
                    let mut b = [0u8; 8];
                    // SAFETY: reading the eventfd's counter.
                    unsafe { libc::read(self.wake.as_raw_fd(), b.as_mut_ptr().cast(), 8) };
                    continue;
                }
                // Taken out while it runs, so it may register others.
                let Some(mut h) = self.lock().remove(&token) else {
                    continue;
                };
                if h(self, ready) == Next::Keep {
                    self.lock().insert(token, h);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn handlers_run_on_readiness_and_stop_ends_the_loop() {
        let r = Reactor::new().unwrap();
        let (rd, wr) = std::os::unix::net::UnixStream::pair().unwrap();
        rd.set_nonblocking(true).unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let seen = got.clone();
        let fd = rd.as_raw_fd();
        r.add(fd, READ, move |r, _| {
            let mut b = [0u8; 16];
            let n = (&rd).read(&mut b).unwrap_or(0);
            seen.lock().unwrap().extend_from_slice(&b[..n]);
            if n == 0 || b[..n].contains(&b'!') {
                r.remove(rd.as_raw_fd());
                r.stop();
                return Next::Done;
            }
            Next::Keep
        })
        .unwrap();
        let t = std::thread::spawn({
            let mut wr = wr;
            move || {
                wr.write_all(b"ab").unwrap();
                std::thread::sleep(std::time::Duration::from_millis(20));
                wr.write_all(b"c!").unwrap();
            }
        });
        r.run();
        t.join().unwrap();
        assert_eq!(&got.lock().unwrap()[..], b"abc!");
    }

    use std::io::Read;

    #[test]
    fn timers_fire_once_on_the_loop() {
        let r = Reactor::new().unwrap();
        let fired = Arc::new(Mutex::new(Vec::new()));
        for (ms, tag) in [(30u64, 2), (5, 1)] {
            let fired = fired.clone();
            r.after(std::time::Duration::from_millis(ms), move |r| {
                fired.lock().unwrap().push(tag);
                if tag == 2 {
                    r.stop();
                }
            })
            .unwrap();
        }
        r.run();
        assert_eq!(*fired.lock().unwrap(), [1, 2]);
        assert!(r.lock().is_empty(), "the timers are gone");
    }
}
