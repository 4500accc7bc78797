//! NRI's connection multiplexer (containerd/nri `pkg/net/multiplex`): one unix stream carries several logical
//! connections. Each frame is an 8-byte header, the connection id then the payload length (both u32, big
//! endian), then the payload. Connection 1 carries the Plugin service (the runtime calls the plugin), 2 the
//! Runtime service (the plugin calls the runtime); 0 is reserved. Frames for a connection nobody opened are
//! dropped, so both connections are opened before the reader starts (NRI's "blocked read").

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;

use crate::Error;

/// The connection on which the plugin serves `Plugin` (the runtime is the ttrpc client).
pub(crate) const PLUGIN_CONN: u32 = 1;
/// The connection on which the runtime serves `Runtime` (the plugin is the ttrpc client).
pub(crate) const RUNTIME_CONN: u32 = 2;

const HEADER: usize = 8;
/// The largest payload of one frame: a ttrpc header and ttrpc's largest message.
const MAX_FRAME: usize = crate::ttrpc::HEADER + crate::ttrpc::MAX_MESSAGE;
/// Go's ttrpc reads a connection through a 4096-byte bufio.Reader, and NRI's connection hands over one frame
/// per read, failing when the reader's buffer is smaller than the frame. Go's own writer therefore never sends
/// a message's first frame longer than that buffer; we cut messages the same way (the first 4096 bytes, then
/// the rest, which Go's reader reads straight into the message's buffer).
const GO_READ_BUFFER: usize = 4096;

struct Shared {
    write: Mutex<Option<OwnedWriteHalf>>,
    conns: StdMutex<HashMap<u32, mpsc::UnboundedSender<Vec<u8>>>>,
}

/// A multiplexed stream; dropping it (or [`Mux::close`]) ends every logical connection.
pub(crate) struct Mux {
    shared: Arc<Shared>,
    reader: JoinHandle<()>,
}

/// One logical connection: the payloads that arrive for it, and a writer.
pub(crate) struct Conn {
    pub(crate) rx: mpsc::UnboundedReceiver<Vec<u8>>,
    pub(crate) tx: MuxWriter,
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
        let (mut read, write) = stream.into_split();
        let shared = Arc::new(Shared {
            write: Mutex::new(Some(write)),
            conns: StdMutex::new(HashMap::new()),
        });
        let mut conns = Vec::new();
        for &id in ids {
            let (tx, rx) = mpsc::unbounded_channel();
            lock(&shared.conns).insert(id, tx);
            conns.push(Conn {
                rx,
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
                        "NRI: multiplexer frame larger than allowed, closing the connection"
                    );
                    break;
                }
                let mut payload = vec![0u8; len];
                if read.read_exact(&mut payload).await.is_err() {
                    break;
                }
                if let Some(tx) = lock(&for_reader.conns).get(&id) {
                    let _ = tx.send(payload);
                }
            }
            // Every receiver sees the end of its connection.
            lock(&for_reader.conns).clear();
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
        if let Some(mut w) = self.shared.write.lock().await.take() {
            let _ = w.shutdown().await;
        }
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        self.reader.abort();
        lock(&self.shared.conns).clear();
    }
}

impl MuxWriter {
    /// Writes one whole message (a ttrpc frame) on this connection, in frames Go's reader accepts.
    pub(crate) async fn send(&self, message: &[u8]) -> Result<(), Error> {
        let mut guard = self.shared.write.lock().await;
        let Some(w) = guard.as_mut() else {
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
        if let Err(e) = w.write_all(&out).await {
            *guard = None;
            return Err(Error::io("write to the NRI connection", e));
        }
        Ok(())
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
        assert_eq!(conns[1].rx.recv().await.unwrap(), b"hi");
        assert_eq!(conns[0].rx.recv().await.unwrap(), b"y");
        drop(b);
        assert!(
            conns[0].rx.recv().await.is_none(),
            "the end of the stream ends the connections"
        );
    }
}
