//! Exec and attach, whatever the transport: the transport (SPDY streams or WebSocket channels) hands the
//! session [`Channels`], bounded queues of byte chunks, and the session copies between them and the
//! [`Process`] the backend started, applies resizes, and writes the end's [`Status`] on the error channel.
//!
//! Bounded queues everywhere: a client that does not read stops the process's output (which then blocks in
//! the process, as a full pipe does), and memory stays bounded.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::resize::Sizes;
use futures::future::BoxFuture;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::backend::{Backend, Control, Output, Process, Request};
use crate::status::{Outcome, Status};

/// Chunks queued per channel and direction.
pub const QUEUE: usize = 8;
/// Largest chunk read from a process at once.
pub const CHUNK: usize = 32 * 1024;
/// How long output may still drain after the process exited (a background child may hold it open).
pub const DRAIN: Duration = Duration::from_secs(2);

/// A channel toward the peer. A send resolves once the transport has taken the bytes in its one ordered
/// queue of the connection, so what the session sends on two channels reaches the peer in that order (the
/// status after the last output).
pub trait Outbound: Send {
    /// Sends `data` (Err: the peer is gone).
    fn send(&mut self, data: Bytes) -> BoxFuture<'_, Result<(), Gone>>;
    /// Ends the channel (a FIN, or v5's close signal), as dropping it does where the transport can.
    fn close(&mut self) -> BoxFuture<'_, ()>;
}

/// The peer went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the client went away")]
pub struct Gone;

/// A boxed [`Outbound`].
pub type Out = Box<dyn Outbound>;

/// The channels a request asks for, whatever the transport. They follow the kept CRI request, as kubelet's
/// server does: error always; stdin, stdout and stderr as asked; no stderr with a terminal; resize with a
/// terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wanted {
    /// stdin.
    pub stdin: bool,
    /// stdout.
    pub stdout: bool,
    /// stderr (never with a terminal).
    pub stderr: bool,
    /// A terminal (and so the resize channel).
    pub tty: bool,
}

impl Wanted {
    /// What `req` asks for.
    pub fn of(req: &Request) -> Wanted {
        let (stdin, stdout, stderr, tty) = match req {
            Request::Exec(r) => (r.stdin, r.stdout, r.stderr, r.tty),
            Request::Attach(r) => (r.stdin, r.stdout, r.stderr, r.tty),
            Request::PortForward(_) => (false, false, false, false),
        };
        Wanted {
            stdin,
            stdout,
            stderr: stderr && !tty,
            tty,
        }
    }
}

/// The channels of one remote-command session, as the transport made them.
pub struct Channels {
    /// From the client's stdin (closed: EOF).
    pub stdin: Option<mpsc::Receiver<Bytes>>,
    /// To the client's stdout.
    pub stdout: Option<Out>,
    /// To the client's stderr.
    pub stderr: Option<Out>,
    /// Terminal sizes from the client, JSON objects `{"Width":W,"Height":H}` one after another.
    pub resize: Option<mpsc::Receiver<Bytes>>,
    /// The status, written once at the end.
    pub error: Out,
    /// Resolves when the client went away.
    pub gone: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// Runs an exec or attach request on `backend` over `channels` until the process ends or the client goes.
pub async fn run(backend: Arc<dyn Backend>, req: Request, channels: Channels) {
    let Channels {
        stdin,
        stdout,
        stderr,
        mut resize,
        error,
        gone,
    } = channels;
    let mut resize_sizes = Sizes::new();
    // Sizes that came before the start: the first is the terminal's at start, the others are applied after.
    let mut early = Vec::new();
    let (started, cmd) = match req {
        Request::Exec(mut r) => {
            // A terminal is made at its first size, which clients send right after connecting: the command
            // never sees 0x0 (`stty size` at once gives the client's size).
            if r.tty
                && let Some(rx) = resize.as_mut()
            {
                early = first_sizes(rx, &mut resize_sizes).await;
                r.size = early.first().copied();
            }
            let cmd = r.cmd.clone();
            (backend.exec(r).await, cmd)
        }
        Request::Attach(r) => (backend.attach(r).await, Vec::new()),
        Request::PortForward(_) => return,
    };
    let mut error = error;
    let process = match started {
        Ok(p) => p,
        Err(e) => {
            let _ = error
                .send(Status::of(&Outcome::Failed(e.message), &cmd).to_json().into())
                .await;
            error.close().await;
            return;
        }
    };
    let Process {
        stdin: input,
        stdout: out,
        stderr: err,
        control,
    } = process;
    let control: Arc<dyn Control> = Arc::from(control);
    let mut tasks = Vec::new();
    if let (Some(mut rx), Some(mut w)) = (stdin, input) {
        tasks.push(tokio::spawn(async move {
            while let Some(b) = rx.recv().await {
                if w.write_all(&b).await.is_err() {
                    return;
                }
            }
            // The client's stdin ended: so does the process's.
            let _ = w.shutdown().await;
        }));
    }
    if let Some(mut rx) = resize {
        let control = control.clone();
        tasks.push(tokio::spawn(async move {
            let mut sizes = resize_sizes;
            for (w, h) in early.into_iter().skip(1) {
                let _ = control.resize(w, h).await;
            }
            while let Some(b) = rx.recv().await {
                for (w, h) in sizes.push(&b) {
                    let _ = control.resize(w, h).await;
                }
            }
        }));
    }
    let mut copies = Vec::new();
    for (from, to) in [(out, stdout), (err, stderr)] {
        if let (Some(from), Some(to)) = (from, to) {
            copies.push(tokio::spawn(copy_out(from, to)));
        }
    }
    let mut gone = gone;
    let outcome = tokio::select! {
        r = control.wait() => match r {
            Ok(0) => Outcome::Success,
            Ok(code) => Outcome::Exit(code),
            Err(e) => Outcome::Failed(e.message),
        },
        () = &mut gone => {
            control.finish(true).await;
            abort(tasks.into_iter().chain(copies));
            return;
        }
    };
    // Output written before the end reaches the client.
    let drained = tokio::time::timeout(DRAIN, async {
        for c in &mut copies {
            let _ = c.await;
        }
    });
    tokio::select! {
        _ = drained => {}
        () = &mut gone => {}
    }
    abort(tasks.into_iter().chain(copies));
    let _ = error.send(Status::of(&outcome, &cmd).to_json().into()).await;
    error.close().await;
    // The client has its answer; the clean-up (a shim call for an exec) need not hold it up.
    control.finish(false).await;
}

/// How long a terminal session waits for the client's first size before the command starts without one.
pub const FIRST_SIZE: Duration = Duration::from_secs(1);

/// The terminal sizes the client sent first, read off `rx` until there is one or [`FIRST_SIZE`] passed
/// (empty then); an unfinished one stays in `sizes`.
async fn first_sizes(rx: &mut mpsc::Receiver<Bytes>, sizes: &mut Sizes) -> Vec<(u16, u16)> {
    let deadline = tokio::time::Instant::now() + FIRST_SIZE;
    loop {
        let b = match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(b)) if b.is_empty() => continue,
            Ok(Some(b)) => b,
            _ => return Vec::new(),
        };
        let got = sizes.push(&b);
        // Sizes, or garbage (which `push` drops whole, where an unfinished size stays): either ends the wait.
        if !got.is_empty() || sizes.buffered() == 0 {
            return got;
        }
    }
}

fn abort(tasks: impl Iterator<Item = tokio::task::JoinHandle<()>>) {
    for t in tasks {
        t.abort();
    }
}

async fn copy_out(mut from: Output, mut to: Out) {
    loop {
        let mut buf = BytesMut::with_capacity(CHUNK);
        match from.read_buf(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                if to.send(buf.freeze()).await.is_err() {
                    return;
                }
            }
        }
    }
    to.close().await;
}
