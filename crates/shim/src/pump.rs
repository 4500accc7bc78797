//! Copying a process's stdio in the [`Reactor`]: each stream is a pump from a non-blocking source (the
//! container's output pipe, a terminal master, the stdin FIFO) to a sink (a FIFO, the container's stdin pipe,
//! a terminal master, or a CRI log). When a sink descriptor is full, its pump stops reading until the sink
//! drains, so a slow reader slows the container (as a pipe would) and never the shim. A sink whose reader is
//! gone (EPIPE) swallows what follows, so the container is not killed by a closed FIFO. ExecSync's output
//! goes to memory instead (`crate::capture`).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::{Arc, Mutex};

use crate::reactor::{Next, READ, Reactor, WRITE};
use crate::stdio::{CriLog, Lines};

/// A descriptor shared with the process's record (CloseIO takes stdin's out of it, which closes it).
pub(crate) type Slot = Arc<Mutex<Option<File>>>;

/// Where a pump's bytes go.
pub(crate) enum Sink {
    /// A descriptor, made non-blocking by [`start`].
    Fd(Slot),
    /// A CRI log, as the named stream. An unfinished line is written as a partial record at the end of every
    /// read, so that output without a newline (a prompt, `echo -n`) reaches the log, and attach, which
    /// follows it, at once.
    Log(Arc<CriLog>, &'static str),
    /// Kept in memory for ExecSync, as the given stream of the capture.
    Memory(Arc<crate::capture::Captured>, usize),
}

struct Pump {
    src: File,
    token: u64,
    sink: Sink,
    /// Log mode: the line not ended yet.
    lines: Lines,
    /// Bytes the sink descriptor has not taken yet.
    pending: Vec<u8>,
    /// The sink's reader is gone: drop what comes.
    discard: bool,
    /// The source ended; close the sink once `pending` is written.
    eof: bool,
    /// The source is paused until the sink drains (its writable handler is registered).
    paused: bool,
}

/// Makes `f` non-blocking.
pub(crate) fn set_nonblocking(f: &impl AsRawFd) {
    // SAFETY: fcntl on a descriptor the caller owns.
    unsafe {
        let fl = libc::fcntl(f.as_raw_fd(), libc::F_GETFL);
        libc::fcntl(f.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Copies `src` to `sink` in `reactor` until `src` ends; then a descriptor sink is closed (its reader sees
/// EOF) and a log gets the unfinished line.
pub(crate) fn start(reactor: &Reactor, src: File, sink: Sink) -> crate::error::Result<()> {
    set_nonblocking(&src);
    if let Sink::Fd(slot) = &sink
        && let Some(f) = lock(slot).as_ref()
    {
        set_nonblocking(f);
    }
    let token = reactor.reserve();
    let pump = Arc::new(Mutex::new(Pump {
        src,
        token,
        sink,
        lines: Lines::default(),
        pending: Vec::new(),
        discard: false,
        eof: false,
        paused: false,
    }));
    let watched = pump.clone();
    let p = lock(&watched);
    reactor
        .add_as(token, p.src.as_fd(), READ, move |r, _| on_readable(r, &pump))
        .map_err(crate::error::Error::io("watching a stdio stream"))
}

fn on_readable(r: &Reactor, pump: &Arc<Mutex<Pump>>) -> Next {
    let mut p = lock(pump);
    if p.paused {
        // An event fetched before the pause: the sink's handler resumes the source.
        return Next::Keep;
    }
    let mut buf = [0u8; 32 * 1024];
    let n = match (&p.src).read(&mut buf) {
        Ok(n) => n,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ) =>
        {
            return Next::Keep;
        }
        // A terminal whose last slave closed reads EIO: the end, as EOF is.
        Err(_) => 0,
    };
    if n == 0 {
        r.remove(p.src.as_fd());
        p.eof = true;
        p.finish();
        return Next::Done;
    }
    let p = &mut *p;
    match &p.sink {
        Sink::Log(log, stream) => {
            p.lines.feed(&buf[..n], log, stream);
            p.lines.flush_partial(log, stream);
        }
        Sink::Memory(captured, stream) => captured.push(*stream, &buf[..n]),
        Sink::Fd(slot) => {
            if p.discard {
                return Next::Keep;
            }
            p.pending.extend_from_slice(&buf[..n]);
            let slot = slot.clone();
            if !p.flush(&slot) {
                // Full: stop reading (hang-ups included) until the sink drains.
                if let Some(sink) = lock(&slot).as_ref() {
                    let me = pump.clone();
                    if r.add(sink.as_fd(), WRITE, move |r, _| on_writable(r, &me))
                        .is_ok()
                    {
                        r.pause(p.src.as_fd());
                        p.paused = true;
                    } else {
                        // The sink cannot be watched: what it does not take is dropped.
                        p.pending.clear();
                        p.discard = true;
                    }
                }
            }
        }
    }
    Next::Keep
}

fn on_writable(r: &Reactor, pump: &Arc<Mutex<Pump>>) -> Next {
    let mut p = lock(pump);
    let Sink::Fd(slot) = &p.sink else {
        return Next::Done;
    };
    let slot = slot.clone();
    if !p.flush(&slot) {
        return Next::Keep;
    }
    // A sink closed meanwhile (CloseIO) left the set with its descriptor.
    if let Some(sink) = lock(&slot).as_ref() {
        r.remove(sink.as_fd());
    }
    p.paused = false;
    if p.eof {
        p.finish();
    } else if r.resume(p.src.as_fd(), p.token, READ).is_err() {
        // Cannot happen for a descriptor that was watched; if it does, the stream ends here.
        p.eof = true;
        p.finish();
    }
    Next::Done
}

impl Pump {
    /// Writes what is pending; false when the sink is full (some is left).
    fn flush(&mut self, slot: &Slot) -> bool {
        let mut guard = lock(slot);
        let Some(f) = guard.as_mut() else {
            // Closed (CloseIO): nothing more goes there.
            self.pending.clear();
            self.discard = true;
            return true;
        };
        while !self.pending.is_empty() {
            match f.write(&self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
                Err(_) => {
                    self.pending.clear();
                    self.discard = true;
                }
            }
        }
        true
    }

    /// The source ended: a log gets its last line; a descriptor sink closes once nothing is pending.
    fn finish(&mut self) {
        match &self.sink {
            Sink::Log(log, stream) => self.lines.finish(log, stream),
            Sink::Memory(captured, stream) => captured.end(*stream),
            Sink::Fd(slot) if self.pending.is_empty() || self.discard => {
                lock(slot).take();
            }
            Sink::Fd(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    #[test]
    fn a_full_sink_pauses_the_source_and_everything_arrives_in_order() {
        let r = Reactor::new().unwrap();
        let (mut from, src) = UnixStream::pair().unwrap();
        let (sink, mut to) = UnixStream::pair().unwrap();
        let slot: Slot = Arc::new(Mutex::new(Some(File::from(std::os::fd::OwnedFd::from(sink)))));
        start(
            &r,
            File::from(std::os::fd::OwnedFd::from(src)),
            Sink::Fd(slot.clone()),
        )
        .unwrap();
        let lp = std::thread::spawn({
            let r = r.clone();
            move || r.run()
        });
        // Far more than the socket buffers hold, read slowly at first.
        let data: Vec<u8> = (0..4_000_000u32).map(|i| (i % 251) as u8).collect();
        let writer = std::thread::spawn({
            let data = data.clone();
            move || {
                from.write_all(&data).unwrap();
            }
        });
        std::thread::sleep(Duration::from_millis(100));
        let mut got = Vec::new();
        to.read_to_end(&mut got).unwrap();
        writer.join().unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data);
        assert!(lock(&slot).is_none(), "the sink is closed after the source ended");
        r.stop();
        lp.join().unwrap();
    }
}
