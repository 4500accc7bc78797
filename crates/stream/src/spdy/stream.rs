//! One stream of a session: its headers, and its sending and receiving halves.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, mpsc};

use super::conn::{Error, Owner};
use super::frame::{Frame, Headers, RST_CANCEL, RST_REFUSED_STREAM};
use super::session::Chunk;

/// The most payload one DATA frame carries; longer sends are split.
pub const MAX_CHUNK: usize = 32 * 1024;

/// A stream: opened by [`Connection::open`](super::conn::Connection::open) or accepted from
/// [`Incoming::accept`](super::conn::Incoming::accept). Dropping it finishes (or, if accepted and never replied
/// to, refuses) it.
#[derive(Debug)]
pub struct Stream {
    send: SendHalf,
    recv: RecvHalf,
    headers: Headers,
    reply_headers: Option<Headers>,
}

impl Stream {
    pub(crate) fn new(
        owner: Arc<Owner>,
        id: u32,
        headers: Headers,
        reply_headers: Option<Headers>,
        rx: mpsc::Receiver<Chunk>,
    ) -> Self {
        let send = SendHalf {
            id,
            owner: Arc::clone(&owner),
            done: false,
            acquiring: None,
        };
        let recv = RecvHalf {
            id,
            owner,
            rx,
            pending: Bytes::new(),
            held: None,
        };
        Self {
            send,
            recv,
            headers,
            reply_headers,
        }
    }

    /// The stream's id (odd: opened by the client, even: by the server).
    #[must_use]
    pub fn id(&self) -> u32 {
        self.send.id
    }

    /// The headers of the SYN_STREAM that opened it.
    #[must_use]
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// For a stream this side opened, the headers of the peer's SYN_REPLY.
    #[must_use]
    pub fn reply_headers(&self) -> Option<&Headers> {
        self.reply_headers.as_ref()
    }

    /// Accepts a stream the peer opened (SYN_REPLY). spdystream drops data on a stream not replied to, so reply
    /// before sending.
    ///
    /// # Errors
    /// [`Error::Closed`] if the session ended, [`Error::StreamClosed`] if the stream is gone (reset),
    /// [`Error::Frame`] if the headers are over the limits.
    pub async fn reply(&self, headers: Headers) -> Result<(), Error> {
        headers.write_block(&mut Vec::new())?;
        let shared = &self.send.owner.shared;
        let permit = shared.room_for(0).await.ok_or(Error::Closed)?;
        let mut state = shared.lock();
        if state.ended {
            return Err(Error::Closed);
        }
        let slot = state.streams.get_mut(&self.id()).ok_or(Error::StreamClosed)?;
        slot.unreplied = false;
        shared.push(
            Frame::SynReply {
                stream_id: self.id(),
                fin: false,
                headers,
            },
            Some(permit),
        );
        Ok(())
    }

    /// The sending and the receiving half, to use from different tasks.
    #[must_use]
    pub fn split(self) -> (SendHalf, RecvHalf) {
        (self.send, self.recv)
    }
}

type Acquire = Pin<Box<dyn Future<Output = Option<OwnedSemaphorePermit>> + Send + Sync>>;

/// The sending side of a stream. Dropped without [`finish`](Self::finish) or [`reset`](Self::reset), it
/// finishes the stream (an accepted stream never replied to is refused instead). It implements
/// [`AsyncWrite`]: `poll_shutdown` finishes.
pub struct SendHalf {
    id: u32,
    owner: Arc<Owner>,
    done: bool,
    /// `poll_write`'s wait for room: the length it waits for, and the wait.
    acquiring: Option<(usize, Acquire)>,
}

impl std::fmt::Debug for SendHalf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendHalf")
            .field("id", &self.id)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl SendHalf {
    /// The stream's id.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Sends `data` in DATA frames of at most [`MAX_CHUNK`] bytes, waiting while the session's write queue is
    /// full (the peer does not read).
    ///
    /// # Errors
    /// [`Error::Closed`] if the session ended, [`Error::StreamClosed`] if the stream was finished or reset.
    pub async fn send(&mut self, mut data: Bytes) -> Result<(), Error> {
        while !data.is_empty() {
            let chunk = data.split_to(data.len().min(MAX_CHUNK));
            let permit = self
                .owner
                .shared
                .room_for(chunk.len())
                .await
                .ok_or(Error::Closed)?;
            self.push_data(chunk, permit)?;
        }
        Ok(())
    }

    fn push_data(&self, data: Bytes, permit: OwnedSemaphorePermit) -> Result<(), Error> {
        let shared = &self.owner.shared;
        let state = shared.lock();
        if state.ended {
            return Err(Error::Closed);
        }
        if self.done || state.streams.get(&self.id).is_none_or(|s| s.local_done) {
            return Err(Error::StreamClosed);
        }
        if shared.push(
            Frame::Data {
                stream_id: self.id,
                fin: false,
                data,
            },
            Some(permit),
        ) {
            Ok(())
        } else {
            Err(Error::Closed)
        }
    }

    /// Ends the sending side: an empty DATA frame with FIN.
    pub fn finish(mut self) {
        self.end(false);
    }

    /// Ends the stream both ways: RST_STREAM with CANCEL.
    pub fn reset(mut self) {
        self.end(true);
    }

    fn end(&mut self, reset: bool) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let shared = &self.owner.shared;
        let mut state = shared.lock();
        if state.ended {
            return;
        }
        let Some(slot) = state.streams.get_mut(&self.id).filter(|s| !s.local_done) else {
            return;
        };
        slot.local_done = true;
        // Refusing a stream never replied to tells the peer it was not processed; a finish would be dropped.
        let status = if slot.unreplied {
            Some(RST_REFUSED_STREAM)
        } else {
            reset.then_some(RST_CANCEL)
        };
        let frame = match status {
            Some(status) => {
                slot.remote_done = true;
                slot.data = None;
                Frame::RstStream {
                    stream_id: self.id,
                    status,
                }
            }
            None => Frame::Data {
                stream_id: self.id,
                fin: true,
                data: Bytes::new(),
            },
        };
        // Queued without waiting for room: at most one such frame per stream.
        shared.push(frame, None);
        shared.settle(state, self.id);
    }
}

impl Drop for SendHalf {
    fn drop(&mut self) {
        self.end(false);
    }
}

impl AsyncWrite for SendHalf {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let this = &mut *self;
        let (len, acquire) = this.acquiring.get_or_insert_with(|| {
            let len = buf.len().min(MAX_CHUNK);
            let shared = Arc::clone(&this.owner.shared);
            (len, Box::pin(async move { shared.room_for(len).await }))
        });
        let permit = ready!(acquire.as_mut().poll(cx));
        // A caller may offer a shorter buffer than the one room was taken for; send what both allow.
        let len = (*len).min(buf.len());
        this.acquiring = None;
        let permit = permit.ok_or_else(|| io::Error::from(Error::Closed))?;
        this.push_data(Bytes::copy_from_slice(&buf[..len]), permit)?;
        Poll::Ready(Ok(len))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Queued frames are the writer's; there is nothing to flush here.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.end(false);
        Poll::Ready(Ok(()))
    }
}

/// The receiving side of a stream. Dropped, the stream's further data is discarded. It implements
/// [`AsyncRead`].
#[derive(Debug)]
pub struct RecvHalf {
    id: u32,
    owner: Arc<Owner>,
    rx: mpsc::Receiver<Chunk>,
    /// What `poll_read` took but could not hand out yet.
    pending: Bytes,
    /// `pending`'s share of the session's inbound budget.
    held: Option<OwnedSemaphorePermit>,
}

impl RecvHalf {
    /// The stream's id.
    #[must_use]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The next data from the peer; `None` after its FIN or RST, or the end of the session.
    pub async fn recv(&mut self) -> Option<Bytes> {
        self.held = None;
        if !self.pending.is_empty() {
            return Some(std::mem::take(&mut self.pending));
        }
        // The budget is given back as the data is handed out.
        self.rx.recv().await.map(|(data, _permit)| data)
    }
}

impl Drop for RecvHalf {
    fn drop(&mut self) {
        if let Some(slot) = self.owner.shared.lock().streams.get_mut(&self.id) {
            slot.data = None;
        }
    }
}

impl AsyncRead for RecvHalf {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.pending.is_empty() {
            self.held = None;
            match ready!(self.rx.poll_recv(cx)) {
                Some((data, permit)) => {
                    self.pending = data;
                    self.held = Some(permit);
                }
                None => return Poll::Ready(Ok(())),
            }
        }
        let n = self.pending.len().min(buf.remaining());
        buf.put_slice(&self.pending.split_to(n));
        if self.pending.is_empty() {
            self.held = None;
        }
        Poll::Ready(Ok(()))
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        let kind = match e {
            Error::Closed | Error::GoingAway => io::ErrorKind::ConnectionAborted,
            Error::Reset(_) | Error::StreamClosed => io::ErrorKind::BrokenPipe,
            Error::Timeout => io::ErrorKind::TimedOut,
            Error::IdsExhausted | Error::Frame(_) => io::ErrorKind::InvalidInput,
        };
        io::Error::new(kind, e)
    }
}
