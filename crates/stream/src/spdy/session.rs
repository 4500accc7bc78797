//! A session's state and its reader task (socket → frames → streams); the writer task (one FIFO queue of
//! frames → socket) is in `writer.rs`.
//!
//! Memory stays bounded: the writer's queue holds at most `Config::write_queue` bytes of frames that asked for
//! room (data, replies, pings' answers); the frames queued without room are at most one FIN or RST per stream
//! and one GOAWAY. Each stream's inbound queue holds at most `Config::stream_queue` frames, every frame holds
//! its bytes of the session's inbound budget (`Config::inbound_bytes`) until its consumer takes it, and when
//! either is used up the reader waits, so it stops reading the socket.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, ReadHalf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};

use super::conn::{Config, Error, Owner, Role};
use super::frame::{Decoder, Frame, GOAWAY_PROTOCOL_ERROR, Headers, RST_REFUSED_STREAM};
use super::stream::Stream;
pub(crate) use super::writer::{Out, writer};

/// Inbound data, with its share of the session's inbound budget (given back when the consumer takes it).
pub(crate) type Chunk = (Bytes, OwnedSemaphorePermit);

/// One stream's entry, from its SYN_STREAM until both sides are done with it.
pub(crate) struct Slot {
    /// Where the peer's data goes; `None` once the peer finished or the `RecvHalf` is gone.
    pub(crate) data: Option<mpsc::Sender<Chunk>>,
    /// The opener waiting for SYN_REPLY.
    pub(crate) reply: Option<oneshot::Sender<Result<Headers, Error>>>,
    /// The peer opened it and it has not been replied to.
    pub(crate) unreplied: bool,
    /// We sent FIN or RST.
    pub(crate) local_done: bool,
    /// The peer sent FIN or RST.
    pub(crate) remote_done: bool,
}

pub(crate) struct State {
    pub(crate) next_id: u32,
    /// The highest stream id the peer opened.
    pub(crate) last_peer_id: u32,
    pub(crate) streams: HashMap<u32, Slot>,
    /// A GOAWAY was sent or received: no new streams.
    pub(crate) going_away: bool,
    pub(crate) ended: bool,
    incoming: Option<mpsc::Sender<Stream>>,
}

/// What the handles and both tasks share.
pub(crate) struct Shared {
    pub(crate) role: Role,
    pub(crate) config: Config,
    state: Mutex<State>,
    out: mpsc::UnboundedSender<Out>,
    /// Room in the writer's queue, in bytes.
    pub(crate) room: Arc<Semaphore>,
    /// Room for the peer's data not yet taken by the streams' consumers, in bytes.
    inbound: Arc<Semaphore>,
    ended: watch::Sender<bool>,
    /// The user's handles; streams the peer opens hold it too. When the last one goes, the session closes.
    owner: Weak<Owner>,
}

impl Shared {
    pub(crate) fn new(
        role: Role,
        config: Config,
        out: mpsc::UnboundedSender<Out>,
        incoming: mpsc::Sender<Stream>,
        owner: Weak<Owner>,
    ) -> Self {
        let state = State {
            next_id: match role {
                Role::Client => 1,
                Role::Server => 2,
            },
            last_peer_id: 0,
            streams: HashMap::new(),
            going_away: false,
            ended: false,
            incoming: Some(incoming),
        };
        let room = Arc::new(Semaphore::new(
            config
                .write_queue
                .clamp(super::stream::MAX_CHUNK, Semaphore::MAX_PERMITS),
        ));
        let inbound = Arc::new(Semaphore::new(
            config
                .inbound_bytes
                .clamp(config.max_data_frame.max(1), Semaphore::MAX_PERMITS),
        ));
        Self {
            role,
            config,
            state: Mutex::new(state),
            out,
            room,
            inbound,
            ended: watch::Sender::new(false),
            owner,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held leaves plain bookkeeping behind; carry on with it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a frame; false if the writer is gone.
    pub(crate) fn push(&self, frame: Frame, permit: Option<OwnedSemaphorePermit>) -> bool {
        self.out.send(Out::Frame(frame, permit)).is_ok()
    }

    /// Room for a frame of `len` bytes in the writer's queue; `None` once the session ended.
    pub(crate) async fn room_for(&self, len: usize) -> Option<OwnedSemaphorePermit> {
        let n = u32::try_from(len.clamp(1, super::stream::MAX_CHUNK)).unwrap_or(1);
        Arc::clone(&self.room).acquire_many_owned(n).await.ok()
    }

    /// Queues a frame once there is room for it.
    async fn send(&self, frame: Frame) -> bool {
        match self.room_for(0).await {
            Some(permit) => self.push(frame, Some(permit)),
            None => false,
        }
    }

    pub(crate) fn is_ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// Resolves once the session has ended.
    pub(crate) async fn wait_ended(&self) {
        let mut rx = self.ended.subscribe();
        // The sender lives in `self`, so waiting cannot fail.
        let _ = rx.wait_for(|ended| *ended).await;
    }

    /// Sends GOAWAY with `status` and ends the session.
    pub(crate) fn close(&self, status: u32) {
        let last_good_stream_id = {
            let mut state = self.lock();
            if state.ended {
                return;
            }
            state.going_away = true;
            state.last_peer_id
        };
        self.push(
            Frame::GoAway {
                last_good_stream_id,
                status,
            },
            None,
        );
        self.end();
    }

    /// Ends the session: no more streams, every stream's receiver ends once drained, openers get an error,
    /// the writer flushes and shuts the io down, and the reader stops.
    pub(crate) fn end(&self) {
        // Taken out and dropped after the lock is released: dropping a queued `Stream` takes the lock itself.
        let (streams, incoming) = {
            let mut state = self.lock();
            if state.ended {
                return;
            }
            state.ended = true;
            state.going_away = true;
            (std::mem::take(&mut state.streams), state.incoming.take())
        };
        drop(incoming);
        for (_, mut slot) in streams {
            if let Some(reply) = slot.reply.take() {
                let _ = reply.send(Err(Error::Closed));
            }
        }
        let _ = self.out.send(Out::Shutdown);
        self.ended.send_replace(true);
    }

    /// Forgets `id` if both sides are done with it, then ends a session that is going away and has no stream
    /// left.
    pub(crate) fn settle(&self, mut state: MutexGuard<'_, State>, id: u32) {
        if state
            .streams
            .get(&id)
            .is_some_and(|s| s.local_done && s.remote_done)
        {
            state.streams.remove(&id);
        }
        let drained = state.going_away && state.streams.is_empty() && !state.ended;
        drop(state);
        if drained {
            self.end();
        }
    }

    fn is_peer_id(&self, id: u32) -> bool {
        // The client opens odd ids, the server even ones.
        (id % 2 == 1) == (self.role == Role::Server)
    }
}

/// Reads frames and hands them out until the io ends, the peer breaks the protocol or the session ends.
pub(crate) async fn reader<T: AsyncRead>(shared: Arc<Shared>, mut io: ReadHalf<T>, mut decoder: Decoder) {
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut ended = shared.ended.subscribe();
    loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    if let Err(why) = handle(&shared, frame, &mut ended).await {
                        tracing::debug!(%why, "spdy: protocol error from the peer");
                        shared.close(GOAWAY_PROTOCOL_ERROR);
                        return;
                    }
                    if shared.is_ended() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(why) => {
                    tracing::debug!(%why, "spdy: malformed frame from the peer");
                    shared.close(GOAWAY_PROTOCOL_ERROR);
                    return;
                }
            }
        }
        buf.reserve(16 * 1024);
        let read = tokio::select! {
            read = io.read_buf(&mut buf) => read,
            _ = ended.wait_for(|e| *e) => return,
        };
        match read {
            Ok(0) => {
                if !buf.is_empty() {
                    tracing::debug!(left = buf.len(), "spdy: the connection ended inside a frame");
                }
                shared.end();
                return;
            }
            Ok(_) => {}
            Err(why) => {
                tracing::debug!(%why, "spdy: read failed");
                shared.end();
                return;
            }
        }
    }
}

/// Acts on one frame from the peer; an error is a protocol error that ends the session.
async fn handle(shared: &Arc<Shared>, frame: Frame, ended: &mut watch::Receiver<bool>) -> Result<(), String> {
    match frame {
        Frame::SynStream {
            stream_id,
            fin,
            headers,
            ..
        } => return syn_stream(shared, stream_id, fin, headers, ended).await,
        Frame::SynReply {
            stream_id,
            fin,
            headers,
        } => {
            let mut state = shared.lock();
            if let Some(slot) = state.streams.get_mut(&stream_id)
                && let Some(reply) = slot.reply.take()
            {
                let _ = reply.send(Ok(headers));
            }
            if fin {
                remote_finished(shared, state, stream_id);
            }
        }
        Frame::Headers {
            stream_id, fin: true, ..
        } => remote_finished(shared, shared.lock(), stream_id),
        Frame::RstStream { stream_id, status } => {
            let mut state = shared.lock();
            if let Some(slot) = state.streams.get_mut(&stream_id) {
                tracing::debug!(stream_id, status, "spdy: the peer reset a stream");
                slot.local_done = true;
                if let Some(reply) = slot.reply.take() {
                    let _ = reply.send(Err(Error::Reset(status)));
                }
            }
            remote_finished(shared, state, stream_id);
        }
        Frame::Ping { id } if shared.is_peer_id(id) => {
            shared.send(Frame::Ping { id }).await;
        }
        Frame::GoAway {
            last_good_stream_id,
            status,
        } => {
            tracing::debug!(last_good_stream_id, status, "spdy: the peer is going away");
            let mut state = shared.lock();
            state.going_away = true;
            state.incoming = None;
            // Streams we opened past the peer's last good one were never seen by it.
            let unseen: Vec<u32> = state
                .streams
                .keys()
                .copied()
                .filter(|&id| !shared.is_peer_id(id) && id > last_good_stream_id)
                .collect();
            for id in unseen {
                if let Some(mut slot) = state.streams.remove(&id)
                    && let Some(reply) = slot.reply.take()
                {
                    let _ = reply.send(Err(Error::GoingAway));
                }
            }
            shared.settle(state, 0);
        }
        Frame::Data { stream_id, fin, data } => {
            let sender = shared.lock().streams.get(&stream_id).and_then(|s| s.data.clone());
            if let Some(sender) = sender
                && !data.is_empty()
            {
                // The head-of-line wait: until the consumers take enough data (this stream's, or any stream's
                // for the session's budget), nothing else is read.
                let n = u32::try_from(data.len()).unwrap_or(u32::MAX);
                let budget = Arc::clone(&shared.inbound);
                let permit = tokio::select! {
                    permit = budget.acquire_many_owned(n) => permit,
                    _ = ended.wait_for(|e| *e) => return Ok(()),
                };
                let Ok(permit) = permit else { return Ok(()) };
                tokio::select! {
                    _ = sender.send((data, permit)) => {}
                    _ = ended.wait_for(|e| *e) => return Ok(()),
                }
            }
            if fin {
                remote_finished(shared, shared.lock(), stream_id);
            }
        }
        // Pings answering ours (we send none), flow control that spdystream does not do, HEADERS without FIN.
        Frame::Ping { .. } | Frame::Settings { .. } | Frame::WindowUpdate { .. } | Frame::Headers { .. } => {}
    }
    Ok(())
}

async fn syn_stream(
    shared: &Arc<Shared>,
    id: u32,
    fin: bool,
    headers: Headers,
    ended: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let (incoming, full) = {
        let mut state = shared.lock();
        if !shared.is_peer_id(id) || id <= state.last_peer_id {
            return Err(format!("SYN_STREAM for stream {id} after {}", state.last_peer_id));
        }
        state.last_peer_id = id;
        let full = state.streams.len() >= shared.config.max_streams;
        match (&state.incoming, state.going_away) {
            (Some(incoming), false) => (Some(incoming.clone()), full),
            _ => (None, full),
        }
    };
    if full {
        tracing::debug!(
            id,
            max = shared.config.max_streams,
            "spdy: refusing a stream over the limit"
        );
        shared
            .send(Frame::RstStream {
                stream_id: id,
                status: RST_REFUSED_STREAM,
            })
            .await;
        return Ok(());
    }
    let owner = shared.owner.upgrade();
    let (Some(incoming), Some(owner)) = (incoming, owner) else {
        tracing::debug!(id, "spdy: refusing a stream: not accepting any");
        shared
            .send(Frame::RstStream {
                stream_id: id,
                status: RST_REFUSED_STREAM,
            })
            .await;
        return Ok(());
    };
    let (tx, rx) = mpsc::channel(shared.config.stream_queue.max(1));
    let slot = Slot {
        data: (!fin).then_some(tx),
        reply: None,
        unreplied: true,
        local_done: false,
        remote_done: fin,
    };
    shared.lock().streams.insert(id, slot);
    let stream = Stream::new(owner, id, headers, None, rx);
    tokio::select! {
        sent = incoming.send(stream) => if let Err(mpsc::error::SendError(stream)) = sent {
            // Incoming was dropped meanwhile; dropping the stream resets it.
            drop(stream);
        },
        _ = ended.wait_for(|e| *e) => {}
    }
    Ok(())
}

/// The peer sends nothing more on `id`.
fn remote_finished(shared: &Shared, mut state: MutexGuard<'_, State>, id: u32) {
    if let Some(slot) = state.streams.get_mut(&id) {
        slot.remote_done = true;
        slot.data = None;
    }
    shared.settle(state, id);
}
