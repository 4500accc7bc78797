//! ttrpc (containerd/ttrpc), the RPC NRI runs on, for unary calls: frames of a 10-byte header (payload length
//! u32 BE, stream id u32 BE, type u8, flags u8) and a payload of at most 4 MiB. A call is a Request frame
//! (type 1, no flags: ttrpc's Go client sets them only to open streams) holding a [`wire::Request`] on a new
//! odd stream id; its answer a Response frame (type 2) with the same id holding a [`wire::Response`], whose
//! google.rpc.Status says OK (absent or code 0) or the error.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use prost::Message;
use tokio::sync::{Semaphore, oneshot};
use tokio::task::JoinHandle;

use crate::Error;
use crate::mux::{Conn, Inbox, MuxWriter};
use crate::wire;

/// Length of a frame header.
pub(crate) const HEADER: usize = 10;
/// ttrpc's largest payload.
pub(crate) const MAX_MESSAGE: usize = 4 << 20;
/// The calls one connection's server runs at once.
pub(crate) const MAX_IN_FLIGHT: usize = 64;
const TYPE_REQUEST: u8 = 1;
const TYPE_RESPONSE: u8 = 2;
/// A unary request's flags, as Go's client sends them ("remote closed" and "remote open" are for streams).
const UNARY_FLAGS: u8 = 0;

/// gRPC status codes this crate sends or acts on.
pub(crate) mod code {
    pub(crate) const UNKNOWN: i32 = 2;
    pub(crate) const INVALID_ARGUMENT: i32 = 3;
    pub(crate) const RESOURCE_EXHAUSTED: i32 = 8;
    pub(crate) const UNIMPLEMENTED: i32 = 12;
}

/// A boxed future, as the handlers return.
pub(crate) type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Serves one call: (service, method, request payload) → response payload or error status.
pub(crate) type Handler =
    Arc<dyn Fn(String, String, Vec<u8>) -> BoxFuture<Result<Vec<u8>, wire::Status>> + Send + Sync>;

/// A status with a code and message.
pub(crate) fn status(code: i32, message: impl Into<String>) -> wire::Status {
    wire::Status {
        code,
        message: message.into(),
        details: Vec::new(),
    }
}

struct Frame {
    stream: u32,
    kind: u8,
    payload: Vec<u8>,
}

fn encode(stream: u32, kind: u8, flags: u8, payload: &[u8]) -> Result<Vec<u8>, Error> {
    if payload.len() > MAX_MESSAGE {
        return Err(Error::Oversized {
            len: payload.len(),
            max: MAX_MESSAGE,
        });
    }
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    out.extend_from_slice(&stream.to_be_bytes());
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(payload);
    Ok(out)
}

/// What arrives on a connection: a frame, or the header of one longer than ttrpc allows (its payload is
/// skipped as it arrives, never held, and the next frame read after it, as Go's ttrpc does).
enum Incoming {
    Frame(Frame),
    TooLarge { stream: u32, kind: u8, len: usize },
}

/// Reassembles ttrpc frames from a logical connection's chunks (a frame may span chunks, a chunk frames).
struct Frames {
    rx: Inbox,
    buf: Vec<u8>,
    /// Bytes of an oversized frame still to skip.
    skip: usize,
}

impl Frames {
    fn new(rx: Inbox) -> Frames {
        Frames {
            rx,
            buf: Vec::new(),
            skip: 0,
        }
    }

    /// The next frame; `Ok(None)` when the connection ends between frames.
    async fn next(&mut self) -> Result<Option<Incoming>, Error> {
        loop {
            if self.skip > 0 {
                let n = self.skip.min(self.buf.len());
                self.buf.drain(..n);
                self.skip -= n;
            }
            if self.skip == 0 && self.buf.len() >= HEADER {
                let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
                let stream = u32::from_be_bytes([self.buf[4], self.buf[5], self.buf[6], self.buf[7]]);
                let kind = self.buf[8];
                if len > MAX_MESSAGE {
                    self.buf.drain(..HEADER);
                    self.skip = len;
                    return Ok(Some(Incoming::TooLarge { stream, kind, len }));
                }
                if self.buf.len() >= HEADER + len {
                    let payload = self.buf[HEADER..HEADER + len].to_vec();
                    self.buf.drain(..HEADER + len);
                    return Ok(Some(Incoming::Frame(Frame {
                        stream,
                        kind,
                        payload,
                    })));
                }
            }
            match self.rx.recv().await? {
                Some(chunk) => self.buf.extend_from_slice(&chunk),
                None if self.buf.is_empty() && self.skip == 0 => return Ok(None),
                None => return Err(Error::Protocol("connection ended inside a ttrpc frame".into())),
            }
        }
    }
}

type Pending = HashMap<u32, oneshot::Sender<Result<wire::Response, Error>>>;

/// The calling side of a connection.
pub(crate) struct Client {
    tx: MuxWriter,
    pending: Arc<StdMutex<Option<Pending>>>,
    next: AtomicU32,
    reader: JoinHandle<()>,
}

impl Client {
    /// Starts reading answers on `conn`; `on_close` runs once when the connection ends.
    pub(crate) fn new(conn: Conn, on_close: impl FnOnce() + Send + 'static) -> Client {
        let pending: Arc<StdMutex<Option<Pending>>> = Arc::new(StdMutex::new(Some(HashMap::new())));
        let for_reader = pending.clone();
        let mut frames = Frames::new(conn.rx);
        let reader = tokio::spawn(async move {
            loop {
                match frames.next().await {
                    Ok(Some(Incoming::Frame(f))) if f.kind == TYPE_RESPONSE => {
                        let Ok(resp) = wire::Response::decode(f.payload.as_slice()) else {
                            tracing::warn!("NRI: undecodable ttrpc response, closing the connection");
                            break;
                        };
                        let waiter = lock(&for_reader).as_mut().and_then(|p| p.remove(&f.stream));
                        if let Some(w) = waiter {
                            let _ = w.send(Ok(resp));
                        }
                    }
                    // The call it answers fails; the connection goes on (Go's ttrpc client does the same).
                    Ok(Some(Incoming::TooLarge { stream, len, .. })) => {
                        tracing::warn!(stream, len, "NRI: ttrpc answer larger than allowed, skipped");
                        let waiter = lock(&for_reader).as_mut().and_then(|p| p.remove(&stream));
                        if let Some(w) = waiter {
                            let _ = w.send(Err(Error::Oversized {
                                len,
                                max: MAX_MESSAGE,
                            }));
                        }
                    }
                    Ok(Some(Incoming::Frame(f))) => tracing::debug!(
                        kind = f.kind,
                        "NRI: ignoring a ttrpc frame a client does not expect"
                    ),
                    Ok(None) => break,
                    Err(e) => {
                        tracing::warn!("NRI: {e}, closing the connection");
                        break;
                    }
                }
            }
            // Dropping the waiters fails the calls in flight with Closed.
            lock(&for_reader).take();
            on_close();
        });
        Client {
            tx: conn.tx,
            pending,
            next: AtomicU32::new(1),
            reader,
        }
    }

    /// Calls `service/method` with `req`, waiting at most `timeout`.
    pub(crate) async fn call<Req: Message, Resp: Message + Default>(
        &self,
        service: &str,
        method: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, Error> {
        let request = wire::Request {
            service: service.to_string(),
            method: method.to_string(),
            payload: req.encode_to_vec(),
            timeout_nano: i64::try_from(timeout.as_nanos()).unwrap_or(i64::MAX),
            metadata: Vec::new(),
        };
        let stream = self.next.fetch_add(2, Ordering::Relaxed);
        let frame = encode(stream, TYPE_REQUEST, UNARY_FLAGS, &request.encode_to_vec())?;
        let (tx, rx) = oneshot::channel();
        match lock(&self.pending).as_mut() {
            Some(p) => p.insert(stream, tx),
            None => return Err(Error::Closed),
        };
        let full = format!("{service}/{method}");
        let answer = tokio::time::timeout(timeout, async {
            self.tx.send(&frame).await?;
            rx.await.map_err(|_| Error::Closed)?
        })
        .await;
        let resp = match answer {
            Ok(r) => r?,
            Err(_) => {
                if let Some(p) = lock(&self.pending).as_mut() {
                    p.remove(&stream);
                }
                return Err(Error::Timeout {
                    method: full,
                    after: timeout,
                });
            }
        };
        if let Some(s) = resp.status.filter(|s| s.code != 0) {
            return Err(Error::Status {
                method: full,
                code: s.code,
                message: s.message,
            });
        }
        Resp::decode(resp.payload.as_slice())
            .map_err(|e| Error::Protocol(format!("decoding the answer of {full}: {e}")))
    }

    /// Whether the connection has ended.
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.pending).is_none()
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Serves the calls arriving on `conn` with `handler`, each in its own task, [`MAX_IN_FLIGHT`] at most at once
/// (then the connection is not read until one ends, and a peer that goes on sending passes the multiplexer's
/// budget), until the connection ends. A request longer than ttrpc allows is answered ResourceExhausted, as
/// Go's ttrpc server answers it, and the connection goes on.
pub(crate) fn serve(conn: Conn, handler: Handler) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut frames = Frames::new(conn.rx);
        let in_flight = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let mut last = 0u32;
        let answer = |status: wire::Status| wire::Response {
            status: Some(status),
            payload: Vec::new(),
        };
        loop {
            let f = match frames.next().await {
                Ok(Some(Incoming::Frame(f))) => f,
                Ok(Some(Incoming::TooLarge { stream, kind, len })) => {
                    if kind == TYPE_REQUEST {
                        let s = status(
                            code::RESOURCE_EXHAUSTED,
                            format!("message length {len} exceeds the maximum message size of {MAX_MESSAGE}"),
                        );
                        respond(&conn.tx, stream, &answer(s)).await;
                    }
                    continue;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!("NRI: {e}, closing the connection");
                    break;
                }
            };
            if f.kind != TYPE_REQUEST {
                continue;
            }
            let permit = tokio::select! {
                p = in_flight.clone().acquire_owned() => p,
                () = frames.rx.ended() => break,
            };
            let Ok(permit) = permit else { break };
            let tx = conn.tx.clone();
            // ttrpc's rules: client streams are odd and increase.
            if f.stream % 2 == 0 || f.stream <= last {
                let resp = answer(status(
                    code::INVALID_ARGUMENT,
                    format!("stream id {} is not a new odd id", f.stream),
                ));
                respond(&tx, f.stream, &resp).await;
                continue;
            }
            last = f.stream;
            let req = match wire::Request::decode(f.payload.as_slice()) {
                Ok(r) => r,
                Err(e) => {
                    respond(
                        &tx,
                        f.stream,
                        &answer(status(
                            code::INVALID_ARGUMENT,
                            format!("undecodable request: {e}"),
                        )),
                    )
                    .await;
                    continue;
                }
            };
            let handler = handler.clone();
            tokio::spawn(async move {
                let _permit = permit;
                let resp = match handler(req.service, req.method, req.payload).await {
                    Ok(payload) => wire::Response {
                        status: Some(status(0, "")),
                        payload,
                    },
                    Err(s) => answer(s),
                };
                respond(&tx, f.stream, &resp).await;
            });
        }
    })
}

async fn respond(tx: &MuxWriter, stream: u32, resp: &wire::Response) {
    let frame = encode(stream, TYPE_RESPONSE, 0, &resp.encode_to_vec()).or_else(|e| {
        let s = wire::Response {
            status: Some(status(code::RESOURCE_EXHAUSTED, e.to_string())),
            payload: Vec::new(),
        };
        encode(stream, TYPE_RESPONSE, 0, &s.encode_to_vec())
    });
    let sent = match frame {
        Ok(frame) => tx.send(&frame).await,
        Err(e) => Err(e),
    };
    if let Err(e) = sent {
        tracing::debug!("NRI: answer on stream {stream} not sent: {e}");
    }
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests;
