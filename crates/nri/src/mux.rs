//! NRI's connection multiplexer (containerd/nri `pkg/net/multiplex`): one unix stream carries several logical
//! connections. Each frame is an 8-byte header, the connection id then the payload length (both u32, big
//! endian), then the payload. Connection 1 carries the Plugin service (the runtime calls the plugin), 2 the
//! Runtime service (the plugin calls the runtime); 0 is reserved. Frames for a connection nobody opened are
//! dropped, so both connections are opened before the reader starts (NRI's "blocked read").
//!
//! Bounds: a frame longer than [`MAX_FRAME`] and a connection whose received, not yet read payloads pass
//! its byte budget ([`QUEUE_BUDGET`]; a peer that sends faster than it is read, or a reader that stopped)
//! close the whole stream: the socket is shut down both ways, so the peer's reads see the end and its writes
//! fail, and every connection's [`Inbox::recv`] returns the cause ([`Error::Oversized`], [`Error::Overrun`])
//! once the payloads queued before it are read. NRI's Go multiplexer does the same on an overflow (its
//! queue is 256 frames per connection, so up to 1 GiB); it reads a frame of any length.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{Mutex, mpsc, watch};
use tokio::task::JoinHandle;

use crate::Error;

/// The connection on which the plugin serves `Plugin` (the runtime is the ttrpc client).
pub(crate) const PLUGIN_CONN: u32 = 1;
/// The connection on which the runtime serves `Runtime` (the plugin is the ttrpc client).
pub(crate) const RUNTIME_CONN: u32 = 2;

const HEADER: usize = 8;
/// The largest payload of one frame: a ttrpc header and ttrpc's largest message.
pub(crate) const MAX_FRAME: usize = crate::ttrpc::HEADER + crate::ttrpc::MAX_MESSAGE;
/// Go's ttrpc reads a connection through a 4096-byte bufio.Reader, and NRI's connection hands over one frame
/// per read, failing when the reader's buffer is smaller than the frame. Go's own writer therefore never sends
/// a message's first frame longer than that buffer; we cut messages the same way (the first 4096 bytes, then
/// the rest, which Go's reader reads straight into the message's buffer).
const GO_READ_BUFFER: usize = 4096;
/// The bytes a logical connection may hold received and not yet read: four of ttrpc's largest messages.
pub(crate) const QUEUE_BUDGET: usize = 4 * MAX_FRAME;
/// What a frame costs the budget at least, whatever its length (a flood of empty frames is not free).
const FRAME_COST: usize = 64;

struct Shared {
    /// A second handle on the socket, to shut it down while the halves are in use (a write blocked on a
    /// peer that does not read, the reader task).
    sock: Option<std::os::unix::net::UnixStream>,
    write: Mutex<Option<OwnedWriteHalf>>,
    conns: StdMutex<HashMap<u32, Queue>>,
    /// Why the reader cut the stream, for every inbox to report once it has read what came before.
    cut: StdMutex<Option<Cut>>,
    /// True once the stream has ended (read to its end, cut, or closed).
    ended: watch::Sender<bool>,
}

/// The sending end of one connection's queue and what it holds.
struct Queue {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    queued: Arc<AtomicUsize>,
}

/// Why the reader closed the stream.
#[derive(Clone, Copy)]
enum Cut {
    Oversized { len: usize },
    Overrun { conn: u32, queued: usize, budget: usize },
}

/// A multiplexed stream; dropping it (or [`Mux::close`]) ends every logical connection.
pub(crate) struct Mux {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
}

/// One logical connection: the payloads that arrive for it, and a writer.
pub(crate) struct Conn {
    pub(crate) rx: Inbox,
    pub(crate) tx: MuxWriter,
}

/// The payloads received on one logical connection, in order.
pub(crate) struct Inbox {
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
    queued: Arc<AtomicUsize>,
    shared: Arc<Shared>,
}

impl Inbox {
    /// The next payload; `Ok(None)` once the stream has ended (closed by either side), or the reason the
    /// reader cut it.
    pub(crate) async fn recv(&mut self) -> Result<Option<Vec<u8>>, Error> {
        match self.rx.recv().await {
            Some(p) => {
                self.queued.fetch_sub(cost(p.len()), Ordering::Relaxed);
                Ok(Some(p))
            }
            None => match *lock(&self.shared.cut) {
                None => Ok(None),
                Some(Cut::Oversized { len }) => Err(Error::Oversized { len, max: MAX_FRAME }),
                Some(Cut::Overrun { conn, queued, budget }) => Err(Error::Overrun { conn, queued, budget }),
            },
        }
    }

    /// Returns once the stream has ended, whether or not this inbox was read to its end (for a reader that
    /// waits on something else meanwhile).
    pub(crate) async fn ended(&self) {
        let _ = self.shared.ended.subscribe().wait_for(|&e| e).await;
    }

    /// The bytes received and not yet read (as the budget counts them).
    #[cfg(test)]
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

fn cost(len: usize) -> usize {
    len.max(FRAME_COST)
}

/// Writes one logical connection's messages onto the shared stream.
#[derive(Clone)]
pub(crate) struct MuxWriter {
    id: u32,
    shared: Arc<Shared>,
}

impl Mux {
    /// Opens the logical connections `ids` (in that order) on `stream` and starts reading it.
    pub(crate) fn new(stream: UnixStream, ids: &[u32]) -> (Mux, Vec<Conn>) {
        Mux::with_budget(stream, ids, QUEUE_BUDGET)
    }

    /// [`Mux::new`] with a budget of `budget` bytes received and not yet read per connection.
    pub(crate) fn with_budget(stream: UnixStream, ids: &[u32], budget: usize) -> (Mux, Vec<Conn>) {
        let sock = std::os::fd::AsFd::as_fd(&stream)
            .try_clone_to_owned()
            .map(std::os::unix::net::UnixStream::from)
            .map_err(|e| tracing::warn!("NRI: no second handle on the connection: {e}"))
            .ok();
        let (mut read, write) = stream.into_split();
        let shared = Arc::new(Shared {
            sock,
            write: Mutex::new(Some(write)),
            conns: StdMutex::new(HashMap::new()),
            cut: StdMutex::new(None),
            ended: watch::Sender::new(false),
        });
        let mut conns = Vec::new();
        for &id in ids {
            let (tx, rx) = mpsc::unbounded_channel();
            let queued = Arc::new(AtomicUsize::new(0));
            lock(&shared.conns).insert(
                id,
                Queue {
                    tx,
                    queued: queued.clone(),
                },
            );
            conns.push(Conn {
                rx: Inbox {
                    rx,
                    queued,
                    shared: shared.clone(),
                },
                tx: MuxWriter {
                    id,
                    shared: shared.clone(),
                },
            });
        }
        let for_reader = shared.clone();
        let reader = tokio::spawn(async move {
            let mut header = [0u8; HEADER];
            loop {
                if read.read_exact(&mut header).await.is_err() {
                    break;
                }
                let id = u32::from_be_bytes([header[0], header[1], header[2], header[3]]);
                let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
                if len > MAX_FRAME {
                    tracing::warn!(
                        len,
                        max = MAX_FRAME,
                        "NRI: multiplexer frame larger than allowed, closing the connection"
                    );
                    cut(&for_reader, Cut::Oversized { len });
                    break;
                }
                let mut payload = vec![0u8; len];
                if read.read_exact(&mut payload).await.is_err() {
                    break;
                }
                let overrun = {
                    let conns = lock(&for_reader.conns);
                    let Some(q) = conns.get(&id) else { continue };
                    // Only this task adds to `queued` (the inbox takes off), so the sum cannot pass the budget.
                    let queued = q.queued.load(Ordering::Relaxed) + cost(len);
                    if queued > budget {
                        Some(queued)
                    } else {
                        q.queued.fetch_add(cost(len), Ordering::Relaxed);
                        let _ = q.tx.send(payload);
                        None
                    }
                };
                if let Some(queued) = overrun {
                    tracing::warn!(
                        conn = id,
                        queued,
                        budget,
                        "NRI: the peer sends more than is read on a connection, closing the connection"
                    );
                    cut(
                        &for_reader,
                        Cut::Overrun {
                            conn: id,
                            queued,
                            budget,
                        },
                    );
                    break;
                }
            }
            // Every receiver sees the end of its connection (after the payloads queued before it).
            lock(&for_reader.conns).clear();
            for_reader.ended.send_replace(true);
        });
        (Mux { shared, reader }, conns)
    }

    /// Waits until the peer has closed the stream (or it broke), at most `max`.
    pub(crate) async fn hung_up(&self, max: std::time::Duration) {
        let deadline = tokio::time::Instant::now() + max;
        while !self.reader.is_finished() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Ends every logical connection and shuts the stream down.
    pub(crate) async fn close(&self) {
        self.reader.abort();
        lock(&self.shared.conns).clear();
        self.shared.ended.send_replace(true);
        // First, so that a write blocked on a peer that does not read fails and lets go of the writer.
        self.shared.shutdown();
        if let Some(mut w) = self.shared.write.lock().await.take() {
            let _ = w.shutdown().await;
        }
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        self.reader.abort();
        lock(&self.shared.conns).clear();
        self.shared.ended.send_replace(true);
        // The second handle keeps the socket open: the peer sees the end now, not when the last writer goes.
        self.shared.shutdown();
    }
}

impl MuxWriter {
    /// Writes one whole message (a ttrpc frame) on this connection, in frames Go's reader accepts.
    pub(crate) async fn send(&self, message: &[u8]) -> Result<(), Error> {
        let mut guard = self.shared.write.lock().await;
        // Taken for the write: a send cancelled part-way (its call timed out on a peer that does not read)
        // leaves no half frame for the next one to follow; the writer is dropped and the stream closed.
        let Some(mut w) = guard.take() else {
            return Err(Error::Closed);
        };
        let first = message.len().min(GO_READ_BUFFER);
        let mut out = Vec::with_capacity(message.len() + 2 * HEADER);
        let (head, rest) = message.split_at(first);
        for chunk in std::iter::once(head).chain(rest.chunks(MAX_FRAME)) {
            if chunk.is_empty() && !out.is_empty() {
                continue;
            }
            out.extend_from_slice(&self.id.to_be_bytes());
            out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        match w.write_all(&out).await {
            Ok(()) => {
                *guard = Some(w);
                Ok(())
            }
            Err(e) => Err(Error::io("write to the NRI connection", e)),
        }
    }
}

/// Records why the stream is cut and shuts it down.
fn cut(shared: &Shared, why: Cut) {
    lock(&shared.cut).get_or_insert(why);
    shared.shutdown();
}

impl Shared {
    /// Shuts the socket down both ways: the peer's reads end and its writes fail, and so do ours, also a
    /// write blocked on a peer that does not read.
    fn shutdown(&self) {
        if let Some(Err(e)) = self.sock.as_ref().map(|s| s.shutdown(std::net::Shutdown::Both)) {
            tracing::debug!("NRI: shutting the connection down: {e}");
        }
    }
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Frames as NRI writes them: header (id, length), payload; a long message is cut after 4096 bytes.
    #[tokio::test]
    async fn frames_carry_the_connection_id_and_length() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (_mux, conns) = Mux::new(a, &[PLUGIN_CONN, RUNTIME_CONN]);
        conns[1].tx.send(b"hello").await.unwrap();
        let mut got = [0u8; 13];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"\0\0\0\x02\0\0\0\x05hello");

        let long = vec![7u8; 5000];
        conns[0].tx.send(&long).await.unwrap();
        let mut header = [0u8; 8];
        b.read_exact(&mut header).await.unwrap();
        assert_eq!(header, [0, 0, 0, 1, 0, 0, 0x10, 0]);
        let mut first = vec![0u8; 4096];
        b.read_exact(&mut first).await.unwrap();
        b.read_exact(&mut header).await.unwrap();
        assert_eq!(header, [0, 0, 0, 1, 0, 0, 0x03, 0x88]);
    }

    #[tokio::test]
    async fn frames_go_to_their_connection_and_unknown_ids_are_dropped() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (_mux, mut conns) = Mux::new(a, &[PLUGIN_CONN, RUNTIME_CONN]);
        b.write_all(b"\0\0\0\x09\0\0\0\x01x\0\0\0\x02\0\0\0\x02hi\0\0\0\x01\0\0\0\x01y")
            .await
            .unwrap();
        assert_eq!(conns[1].rx.recv().await.unwrap().unwrap(), b"hi");
        assert_eq!(conns[0].rx.recv().await.unwrap().unwrap(), b"y");
        drop(b);
        assert!(
            conns[0].rx.recv().await.unwrap().is_none(),
            "the end of the stream ends the connections"
        );
    }

    /// A peer that sends on a connection nobody reads is cut off once the budget is passed: its writes fail,
    /// what was queued stays within the budget, and the reader gets the overrun after the queued payloads.
    #[tokio::test]
    async fn a_peer_flooding_past_the_budget_is_cut_off() {
        const BUDGET: usize = 64 << 10;
        let (a, mut b) = UnixStream::pair().unwrap();
        let (_mux, mut conns) = Mux::with_budget(a, &[PLUGIN_CONN, RUNTIME_CONN], BUDGET);
        let mut frame = b"\0\0\0\x01\0\0\x10\0".to_vec();
        frame.extend_from_slice(&[b'x'; 4096]);
        let mut sent = 0usize;
        let err = loop {
            match b.write_all(&frame).await {
                Ok(()) => sent += frame.len(),
                Err(e) => break e,
            }
            assert!(sent < 64 << 20, "64 MiB sent and the peer is not cut off");
        };
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
            ),
            "{err}"
        );
        let mut end = [0u8; 1];
        assert_eq!(b.read(&mut end).await.unwrap(), 0, "the peer reads the end");
        assert!(
            conns[0].rx.queued() <= BUDGET,
            "{} bytes queued",
            conns[0].rx.queued()
        );
        let mut got = 0;
        let err = loop {
            match conns[0].rx.recv().await {
                Ok(Some(p)) => got += p.len(),
                Ok(None) => panic!("the connection ended without its cause"),
                Err(e) => break e,
            }
        };
        assert!(got <= BUDGET, "{got} bytes were queued, over the budget");
        assert!(
            got >= BUDGET - 4096,
            "only {got} bytes were queued before the cut"
        );
        assert!(
            matches!(err, Error::Overrun { conn: PLUGIN_CONN, budget: BUDGET, queued } if queued > BUDGET),
            "{err}"
        );
        assert!(err.to_string().contains("connection 1"), "{err}");
        assert!(
            matches!(conns[1].rx.recv().await, Err(Error::Overrun { .. })),
            "the other connection ends with the same cause"
        );
    }

    /// A frame longer than NRI allows closes the stream before its payload is read.
    #[tokio::test]
    async fn an_oversized_frame_closes_the_stream() {
        let (a, mut b) = UnixStream::pair().unwrap();
        let (_mux, mut conns) = Mux::new(a, &[PLUGIN_CONN, RUNTIME_CONN]);
        let len = MAX_FRAME as u32 + 1;
        let mut header = vec![0, 0, 0, 2];
        header.extend_from_slice(&len.to_be_bytes());
        b.write_all(&header).await.unwrap();
        let err = conns[1].rx.recv().await.unwrap_err();
        assert!(
            matches!(err, Error::Oversized { len: l, max: MAX_FRAME } if l == len as usize),
            "{err}"
        );
        let mut end = [0u8; 1];
        assert_eq!(b.read(&mut end).await.unwrap(), 0, "the peer reads the end");
    }

    /// A write blocked on a peer that does not read does not keep close from closing.
    #[tokio::test]
    async fn close_ends_a_write_blocked_on_a_peer_that_does_not_read() {
        let (a, _b) = UnixStream::pair().unwrap();
        let (mux, conns) = Mux::new(a, &[PLUGIN_CONN]);
        let tx = conns[0].tx.clone();
        let blocked = tokio::spawn(async move {
            let big = vec![0u8; 1 << 20];
            loop {
                if let Err(e) = tx.send(&big).await {
                    return e;
                }
            }
        });
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        tokio::time::timeout(std::time::Duration::from_secs(5), mux.close())
            .await
            .expect("close returns");
        let err = tokio::time::timeout(std::time::Duration::from_secs(5), blocked)
            .await
            .expect("the blocked write ends")
            .unwrap();
        assert!(matches!(err, Error::Io { .. } | Error::Closed), "{err}");
    }
}
