//! A SPDY/3.1 session over one connection, as github.com/moby/spdystream (kubelet, crictl, client-go) speaks
//! it: the client opens streams (odd ids) with SYN_STREAM, the server accepts them and replies with SYN_REPLY,
//! both send DATA and end their side with FIN (or the whole stream with RST_STREAM).
//!
//! [`Connection::new`] spawns a reader and a writer task that own the io. There is no flow control (spdystream
//! does none: the peer's WINDOW_UPDATE and SETTINGS are ignored, and none are sent); memory is bounded by
//! back-pressure instead. Senders wait while the writer's queue is full. Inbound data waits in its stream's
//! queue, and all of a session's queued inbound data together is at most [`Config::inbound_bytes`]: when that
//! is used up (or a stream's queue is full) the reader waits for the consumers, so it stops reading the
//! socket and the peer's writes block (TCP back-pressure). A DATA frame over [`Config::max_data_frame`] is a
//! protocol error, and a stream past [`Config::max_streams`] is refused (RST_STREAM, REFUSED_STREAM). That is head-of-line blocking by design: a stream
//! whose data is not read holds up every other stream of the session until it is read (or its [`RecvHalf`] is
//! dropped, after which its data is discarded).
//!
//! A malformed frame from the peer ends the session with GOAWAY (PROTOCOL_ERROR); every stream's `recv` then
//! returns `None` once the data already queued is read.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use super::codec::MAX_STREAM_ID;
use super::frame::{Codec, FrameError, GOAWAY_OK, Headers, MAX_DATA_FRAME, RST_CANCEL};
use super::session::{Shared, Slot, reader, writer};
pub use super::stream::{MAX_CHUNK, RecvHalf, SendHalf, Stream};

/// Which end of the connection this is: it decides the parity of the stream ids this side opens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Opens odd stream ids (spdystream's client: kubelet's proxy, crictl, client-go).
    Client,
    /// Opens even stream ids; usually only accepts.
    Server,
}

/// A session's limits.
#[derive(Clone, Debug)]
pub struct Config {
    /// How long [`Connection::open`] waits for the peer's SYN_REPLY (client-go waits 30 s).
    pub open_timeout: Duration,
    /// Bytes of frames the writer's queue holds before senders wait (at least [`MAX_CHUNK`]).
    pub write_queue: usize,
    /// DATA frames one stream's inbound queue holds before the reader waits for its consumer.
    pub stream_queue: usize,
    /// Streams the peer opened that wait for [`Incoming::accept`] before the reader waits.
    pub accept_queue: usize,
    /// The largest DATA payload accepted from the peer (at most [`MAX_FRAME_LEN`](super::frame::MAX_FRAME_LEN); [`MAX_DATA_FRAME`] by
    /// default); a larger one is a protocol error. spdystream sends each write as one frame, which `io.Copy`
    /// keeps at 32 KiB.
    pub max_data_frame: usize,
    /// Bytes of the peer's data all the session's streams together hold before their consumers take it (at
    /// least `max_data_frame`); the reader waits for room past it.
    pub inbound_bytes: usize,
    /// Streams open at once; one more from the peer is refused with RST_STREAM (REFUSED_STREAM).
    pub max_streams: usize,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            open_timeout: Duration::from_secs(30),
            write_queue: 256 * 1024,
            stream_queue: 16,
            accept_queue: 16,
            max_data_frame: MAX_DATA_FRAME,
            inbound_bytes: 1024 * 1024,
            max_streams: 64,
        }
    }
}

/// What went wrong with a session or a stream.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The session has ended.
    #[error("the SPDY session has ended")]
    Closed,
    /// A GOAWAY was sent or received: no new streams.
    #[error("the SPDY session is going away")]
    GoingAway,
    /// The peer reset the stream with this status.
    #[error("the peer reset the stream (status {0})")]
    Reset(u32),
    /// The peer did not reply in time.
    #[error("no SYN_REPLY in time")]
    Timeout,
    /// The stream was finished or reset.
    #[error("the stream is closed")]
    StreamClosed,
    /// Every stream id this side may use was used.
    #[error("no stream ids left")]
    IdsExhausted,
    /// Headers over the limits.
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// What every user handle (connections, incoming, streams) holds: when the last one goes, the session closes.
pub(crate) struct Owner {
    pub(crate) shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.close(GOAWAY_OK);
    }
}

impl std::fmt::Debug for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owner")
            .field("role", &self.shared.role)
            .finish_non_exhaustive()
    }
}

/// A handle on a session (cheap to clone). The session lives while any handle, [`Incoming`] or stream does,
/// until the peer closes it, it fails or [`close`](Self::close) is called.
#[derive(Clone, Debug)]
pub struct Connection {
    owner: Arc<Owner>,
}

/// The streams the peer opens, to [`accept`](Self::accept). Once it is dropped, new streams are refused.
#[derive(Debug)]
pub struct Incoming {
    rx: mpsc::Receiver<Stream>,
    _owner: Arc<Owner>,
}

impl Incoming {
    /// The next stream the peer opened, not replied to yet (see [`Stream::reply`]); `None` once the session
    /// ended or is going away.
    pub async fn accept(&mut self) -> Option<Stream> {
        self.rx.recv().await
    }
}

impl Connection {
    /// Starts a session over `io` with the default [`Config`]. Must be called within a tokio runtime.
    pub fn new<T>(io: T, role: Role) -> (Self, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        Self::with_config(io, role, Config::default())
    }

    /// Starts a session over `io`: spawns its reader and writer tasks. Must be called within a tokio runtime.
    pub fn with_config<T>(io: T, role: Role, config: Config) -> (Self, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (encoder, mut decoder) = Codec::new().into_parts();
        decoder.set_max_data_len(config.max_data_frame);
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (in_tx, in_rx) = mpsc::channel(config.accept_queue.max(1));
        let owner = Arc::new_cyclic(|weak| Owner {
            shared: Arc::new(Shared::new(role, config, out_tx, in_tx, weak.clone())),
        });
        let (read, write) = tokio::io::split(io);
        tokio::spawn(reader(Arc::clone(&owner.shared), read, decoder));
        tokio::spawn(writer(Arc::clone(&owner.shared), write, encoder, out_rx));
        (
            Self {
                owner: Arc::clone(&owner),
            },
            Incoming {
                rx: in_rx,
                _owner: owner,
            },
        )
    }

    /// This side's role.
    #[must_use]
    pub fn role(&self) -> Role {
        self.owner.shared.role
    }

    /// Opens a stream and waits (up to [`Config::open_timeout`]) for the peer's SYN_REPLY.
    ///
    /// # Errors
    /// As [`open_timeout`](Self::open_timeout).
    pub async fn open(&self, headers: Headers) -> Result<Stream, Error> {
        self.open_timeout(headers, self.owner.shared.config.open_timeout)
            .await
    }

    /// Opens a stream (SYN_STREAM) and waits up to `timeout` for the peer's SYN_REPLY.
    ///
    /// # Errors
    /// [`Error::Closed`], [`Error::GoingAway`], [`Error::Reset`] (the peer refused it), [`Error::Timeout`] (the
    /// stream is then reset), [`Error::IdsExhausted`], or [`Error::Frame`] for headers over the limits.
    pub async fn open_timeout(&self, headers: Headers, timeout: Duration) -> Result<Stream, Error> {
        headers.write_block(&mut Vec::new())?;
        let shared = &self.owner.shared;
        let permit = shared.room_for(0).await.ok_or(Error::Closed)?;
        let (reply_tx, reply_rx) = tokio::sync::oneshot::channel();
        let (data_tx, data_rx) = mpsc::channel(shared.config.stream_queue.max(1));
        let id = {
            // The id is taken and the frame queued under one lock, so ids reach the wire in increasing order.
            let mut state = shared.lock();
            if state.ended {
                return Err(Error::Closed);
            }
            if state.going_away {
                return Err(Error::GoingAway);
            }
            let id = state.next_id;
            if id > MAX_STREAM_ID {
                return Err(Error::IdsExhausted);
            }
            state.next_id = id.saturating_add(2);
            let slot = Slot {
                data: Some(data_tx),
                reply: Some(reply_tx),
                unreplied: false,
                local_done: false,
                remote_done: false,
            };
            state.streams.insert(id, slot);
            let frame = super::frame::Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                slot: 0,
                fin: false,
                unidirectional: false,
                headers: headers.clone(),
            };
            shared.push(frame, Some(permit));
            id
        };
        let mut pending = Pending { shared, id: Some(id) };
        let reply = match tokio::time::timeout(timeout, reply_rx).await {
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(Error::Closed),
            Err(_) => Err(Error::Timeout),
        };
        if reply.is_ok() {
            pending.id = None;
        }
        Ok(Stream::new(
            Arc::clone(&self.owner),
            id,
            headers,
            Some(reply?),
            data_rx,
        ))
    }

    /// Sends GOAWAY and ends the session now: streams end, the writer flushes and shuts the io down.
    pub fn close(&self) {
        self.owner.shared.close(GOAWAY_OK);
    }

    /// Resolves once the session has ended: the io reached EOF or failed, the peer broke the protocol,
    /// [`close`](Self::close) was called, or the peer sent GOAWAY and no stream is left.
    pub async fn closed(&self) {
        self.owner.shared.wait_ended().await;
    }

    /// Whether the session has ended.
    #[must_use]
    pub fn is_closed(&self) -> bool {
        self.owner.shared.is_ended()
    }
}

/// A stream being opened: if the opener gives up (timeout, error, or its future is dropped), the stream is
/// reset and forgotten.
struct Pending<'a> {
    shared: &'a Shared,
    id: Option<u32>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        let mut state = self.shared.lock();
        if state.streams.remove(&id).is_some() && !state.ended {
            self.shared.push(
                super::frame::Frame::RstStream {
                    stream_id: id,
                    status: RST_CANCEL,
                },
                None,
            );
        }
        self.shared.settle(state, id);
    }
}

#[cfg(test)]
#[path = "conn_tests.rs"]
mod tests;
