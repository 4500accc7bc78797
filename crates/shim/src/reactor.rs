//! The shim's one event loop: an epoll set whose ready descriptors are handled on the thread that runs
//! [`Reactor::run`]. The ttrpc connections, every process's stdio, the SIGCHLD and SIGTERM pipes and the
//! OOM inotify descriptor all live here, so a pod's shim has one long-lived thread however many containers
//! it holds. Handlers must not block: work that does (running the OCI runtime) goes to worker threads.

use std::collections::HashMap;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};

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
    epoll: Epoll,
    wake: EventFd,
    handlers: Mutex<HashMap<u64, Handler>>,
    next: AtomicU64,
    stopped: AtomicBool,
}

const WAKE: u64 = 0;

/// A timer of [`Reactor::timer`].
pub(crate) struct Timer(Arc<TimerFd>);

impl Timer {
    /// Fires it now (its function runs on the loop at once, and the timer leaves the set).
    pub(crate) fn fire_now(&self) {
        let _ = self.0.set(
            Expiration::OneShot(TimeSpec::from_duration(std::time::Duration::from_nanos(1))),
            TimerSetTimeFlags::empty(),
        );
    }
}

/// `e` as an I/O error saying what failed.
fn os(what: &str, e: nix::Error) -> std::io::Error {
    let e = std::io::Error::from(e);
    std::io::Error::new(e.kind(), format!("{what}: {e}"))
}

impl Reactor {
    /// An empty loop.
    pub(crate) fn new() -> std::io::Result<Arc<Reactor>> {
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(|e| os("epoll", e))?;
        let wake = EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
            .map_err(|e| os("eventfd", e))?;
        let r = Reactor {
            epoll,
            wake,
            handlers: Mutex::new(HashMap::new()),
            next: AtomicU64::new(WAKE + 1),
            stopped: AtomicBool::new(false),
        };
        r.watch(r.wake.as_fd(), READ, WAKE)?;
        Ok(Arc::new(r))
    }

    fn watch(&self, fd: BorrowedFd<'_>, events: u32, token: u64) -> std::io::Result<()> {
        let ev = EpollEvent::new(EpollFlags::from_bits_retain(events as _), token);
        self.epoll.add(fd, ev).map_err(|e| os("epoll_ctl", e))
    }

    /// Calls `handler` on the loop thread whenever `fd` is ready for `events`; returns the registration's
    /// token (for [`Reactor::resume`]). The caller keeps `fd` open until it removes it.
    pub(crate) fn add(
        &self,
        fd: BorrowedFd<'_>,
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
        fd: BorrowedFd<'_>,
        events: u32,
        handler: impl FnMut(&Reactor, u32) -> Next + Send + 'static,
    ) -> std::io::Result<()> {
        self.lock().insert(token, Box::new(handler));
        if let Err(e) = self.watch(fd, events, token) {
            self.lock().remove(&token);
            return Err(e);
        }
        Ok(())
    }

    /// Watches `fd` again under `token` after [`Reactor::pause`] (its handler was kept).
    pub(crate) fn resume(&self, fd: BorrowedFd<'_>, token: u64, events: u32) -> std::io::Result<()> {
        self.watch(fd, events, token)
    }

    /// Stops watching `fd` but keeps its handler (to [`Reactor::resume`] it). Unlike a zero event mask, this
    /// also silences hang-ups, which epoll reports whatever the mask.
    pub(crate) fn pause(&self, fd: BorrowedFd<'_>) {
        let _ = self.epoll.delete(fd);
    }

    /// Stops watching `fd` (its handler should then return [`Next::Done`]).
    pub(crate) fn remove(&self, fd: BorrowedFd<'_>) {
        let _ = self.epoll.delete(fd);
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
        self.timer(delay, f).map(drop)
    }

    /// [`Reactor::after`], with a handle that can make it fire at once ([`Timer::fire_now`]): a caller
    /// done early frees the timer then, instead of keeping it in the set until `delay`.
    pub(crate) fn timer(
        &self,
        delay: std::time::Duration,
        f: impl FnOnce(&Reactor) + Send + 'static,
    ) -> std::io::Result<Timer> {
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_CLOEXEC | TimerFlags::TFD_NONBLOCK,
        )
        .map_err(|e| os("timerfd", e))?;
        // A zero value would disarm the timer: at least 1 ns.
        let delay = delay.max(std::time::Duration::from_nanos(1));
        timer
            .set(
                Expiration::OneShot(TimeSpec::from_duration(delay)),
                TimerSetTimeFlags::empty(),
            )
            .map_err(|e| os("timerfd_settime", e))?;
        let mut f = Some(f);
        let timer = Arc::new(timer);
        let held = timer.clone();
        self.add(timer.as_fd(), READ, move |r, _| {
            r.remove(held.as_fd());
            if let Some(f) = f.take() {
                f(r);
            }
            Next::Done
        })?;
        Ok(Timer(timer))
    }

    /// Makes [`Reactor::run`] return; callable from any thread.
    pub(crate) fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _ = self.wake.write(1);
    }

    /// Handles ready descriptors until [`Reactor::stop`].
    pub(crate) fn run(&self) {
        let mut events = [EpollEvent::empty(); 32];
        while !self.stopped.load(Ordering::SeqCst) {
            // EINTR: a signal (SIGCHLD) arrived; its pipe is in the set.
            let Ok(n) = self.epoll.wait(&mut events, EpollTimeout::NONE) else {
                continue;
            };
            for ev in &events[..n] {
                let (token, ready) = (ev.data(), ev.events().bits() as u32);
                if token == WAKE {
                    let _ = self.wake.read();
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
        let rd = Arc::new(rd);
        let held = rd.clone();
        r.add(rd.as_fd(), READ, move |r, _| {
            let mut b = [0u8; 16];
            let n = (&*held).read(&mut b).unwrap_or(0);
            seen.lock().unwrap().extend_from_slice(&b[..n]);
            if n == 0 || b[..n].contains(&b'!') {
                r.remove(held.as_fd());
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
