//! Remote command and port-forward over SPDY/3.1, the server side, as client-go's peers expect them.
//!
//! Remote command: the client opens one stream per channel, each named by its `streamtype` header
//! (`error`, `stdin`, `stdout`, `stderr`, `resize`) and each waiting for our SYN_REPLY; which ones come
//! follows the kept CRI request ([`Wanted`]). Port-forward: a pair of streams per connection (`error` and
//! `data`, with `port` and `requestid` headers), served as soon as both are there.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::backend::{Backend, PortForwardRequest, Request};
use crate::portforward;
use crate::session::Wanted;
use crate::session::{self, Channels, Gone, Out, Outbound};
use crate::spdy::conn::{Config, Connection, Incoming, RecvHalf, Role, SendHalf, Stream};
use crate::spdy::frame::Headers;

/// The header naming a stream's channel.
pub const STREAM_TYPE: &str = "streamtype";
/// The header with a port-forward stream's port.
pub const PORT: &str = "port";
/// The header pairing a port-forward's streams.
pub const REQUEST_ID: &str = "requestid";

/// A stream's sending half as a session channel.
pub struct SpdyOut(pub Option<SendHalf>);

impl Outbound for SpdyOut {
    fn send(&mut self, data: Bytes) -> BoxFuture<'_, Result<(), Gone>> {
        Box::pin(async move {
            match self.0.as_mut() {
                Some(s) => s.send(data).await.map_err(|_| Gone),
                None => Err(Gone),
            }
        })
    }

    fn close(&mut self) -> BoxFuture<'_, ()> {
        if let Some(s) = self.0.take() {
            s.finish();
        }
        Box::pin(async {})
    }
}

/// A channel that takes nothing anywhere (a stream the session does not have).
pub struct Discard;

impl Outbound for Discard {
    fn send(&mut self, _: Bytes) -> BoxFuture<'_, Result<(), Gone>> {
        Box::pin(async { Ok(()) })
    }

    fn close(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }
}

/// The data of `recv`, in a queue of one chunk that ends with the stream: what waits in the stream itself is
/// counted in the session's inbound budget, so this keeps at most one chunk (and the consumer one) beyond it.
pub fn queue(mut recv: RecvHalf) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(async move {
        // Room first, then the data: nothing is held here while the consumer is slow.
        while let Ok(room) = tx.reserve().await {
            match recv.recv().await {
                Some(b) => room.send(b),
                None => return,
            }
        }
    });
    rx
}

/// Serves `req` over an upgraded SPDY connection (or a WebSocket tunnel of one).
/// `config.open_timeout` is how long a remote-command client has to open its streams.
pub async fn serve<S>(io: S, req: Request, backend: Arc<dyn Backend>, config: Config)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let timeout = config.open_timeout;
    let (conn, incoming) = Connection::with_config(io, Role::Server, config);
    match req {
        Request::PortForward(pf) => port_forward(&conn, incoming, pf, backend).await,
        req => remote_command(&conn, incoming, req, backend, timeout).await,
    }
    conn.close();
}

async fn remote_command(
    conn: &Connection,
    mut incoming: Incoming,
    req: Request,
    backend: Arc<dyn Backend>,
    timeout: Duration,
) {
    let want = Wanted::of(&req);
    let needed = 1 + [want.stdin, want.stdout, want.stderr, want.tty]
        .iter()
        .filter(|w| **w)
        .count();
    let mut streams: HashMap<String, Stream> = HashMap::new();
    let deadline = tokio::time::Instant::now() + timeout;
    while streams.len() < needed {
        let Ok(next) = tokio::time::timeout_at(deadline, incoming.accept()).await else {
            tracing::debug!(
                have = ?streams.keys().collect::<Vec<_>>(),
                "a remote-command client did not open its streams within {timeout:?}"
            );
            return;
        };
        let Some(s) = next else { return };
        let kind = s.headers().get(STREAM_TYPE).unwrap_or("").to_string();
        let wanted = match kind.as_str() {
            "error" => true,
            "stdin" => want.stdin,
            "stdout" => want.stdout,
            "stderr" => want.stderr,
            "resize" => want.tty,
            _ => false,
        };
        if !wanted || streams.contains_key(&kind) {
            s.split().0.reset();
            continue;
        }
        if s.reply(Headers::new()).await.is_err() {
            return;
        }
        streams.insert(kind, s);
    }
    let mut take = |k: &str| streams.remove(k).map(Stream::split);
    let Some((error, _)) = take("error") else { return };
    // Our halves of stdin and resize stay open for the session: client-go takes our FIN on its stdin
    // stream as the end of the session's input, and closes it.
    let mut held = Vec::new();
    let mut inbound = |k: &str| {
        take(k).map(|(s, r)| {
            held.push(s);
            queue(r)
        })
    };
    let stdin = inbound("stdin");
    let resize = inbound("resize");
    let stdout = take("stdout").map(|(s, _)| Box::new(SpdyOut(Some(s))) as Out);
    let stderr = take("stderr").map(|(s, _)| Box::new(SpdyOut(Some(s))) as Out);
    let watch = conn.clone();
    let channels = Channels {
        stdin,
        stdout,
        stderr,
        resize,
        error: Box::new(SpdyOut(Some(error))),
        gone: Box::pin(async move { watch.closed().await }),
    };
    session::run(backend, req, channels).await;
    drop(held);
}

async fn port_forward(
    conn: &Connection,
    mut incoming: Incoming,
    req: PortForwardRequest,
    backend: Arc<dyn Backend>,
) {
    // Streams waiting for their pair, by request id.
    let mut halves: HashMap<String, (Option<Stream>, Option<Stream>)> = HashMap::new();
    let mut pairs = Vec::new();
    let watch = conn.clone();
    loop {
        let next = tokio::select! {
            s = incoming.accept() => s,
            () = watch.closed() => None,
        };
        let Some(s) = next else { break };
        let kind = s.headers().get(STREAM_TYPE).unwrap_or("").to_string();
        let port = s
            .headers()
            .get(PORT)
            .and_then(|p| p.parse::<u16>().ok())
            .filter(|p| *p > 0);
        let (Some(port), "error" | "data") = (port, kind.as_str()) else {
            s.split().0.reset();
            continue;
        };
        if s.reply(Headers::new()).await.is_err() {
            break;
        }
        let id = match s.headers().get(REQUEST_ID) {
            Some(r) => r.to_string(),
            // No request id: an error stream and the data stream after it pair by their ids.
            None if kind == "error" => s.id().to_string(),
            None => s.id().saturating_sub(2).to_string(),
        };
        let entry = halves.entry(id.clone()).or_default();
        let slot = if kind == "error" {
            &mut entry.0
        } else {
            &mut entry.1
        };
        if slot.is_some() {
            s.split().0.reset();
            continue;
        }
        *slot = Some(s);
        let complete = entry.0.is_some() && entry.1.is_some();
        if complete && let Some((Some(error), Some(data))) = halves.remove(&id) {
            pairs.push(tokio::spawn(serve_pair(
                error,
                data,
                port,
                req.clone(),
                backend.clone(),
            )));
        }
    }
    for p in pairs {
        p.abort();
    }
}

async fn serve_pair(
    error: Stream,
    data: Stream,
    port: u16,
    req: PortForwardRequest,
    backend: Arc<dyn Backend>,
) {
    let (mut err_out, _err_in) = error.split();
    let (data_out, data_in) = data.split();
    match portforward::connect(backend.as_ref(), &req, port).await {
        Ok(tcp) => {
            portforward::pipe(tcp, queue(data_in), Box::new(SpdyOut(Some(data_out)))).await;
            err_out.finish();
        }
        Err(why) => {
            let _ = err_out.send(Bytes::from(why.to_string())).await;
            err_out.reset();
            data_out.reset();
        }
    }
}
