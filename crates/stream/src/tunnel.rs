//! A WebSocket as a byte pipe: the `SPDY/3.1+portforward.k8s.io` tunnel that client-go's port-forward
//! (crictl's `--transport websocket`) speaks runs a plain SPDY session inside binary messages, cut
//! anywhere (each write of the peer's framer is a message). [`Tunnel`] reads the messages' bytes in order
//! and sends each write as one message.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

/// The WebSocket subprotocol of the port-forward tunnel.
pub const PORT_FORWARD_TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";

/// A WebSocket read and written as bytes.
pub struct Tunnel<S> {
    ws: WebSocketStream<S>,
    pending: Bytes,
    eof: bool,
}

impl<S> Tunnel<S> {
    /// Wraps `ws`.
    pub fn new(ws: WebSocketStream<S>) -> Tunnel<S> {
        Tunnel {
            ws,
            pending: Bytes::new(),
            eof: false,
        }
    }
}

fn broken(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, e.to_string())
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tunnel<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                let chunk = self.pending.split_to(n);
                buf.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(b))) => self.pending = b,
                Some(Ok(Message::Close(_))) | None => self.eof = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(broken(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tunnel<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(broken)?;
        Pin::new(&mut self.ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(data)))
            .map_err(broken)?;
        Poll::Ready(Ok(data.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(broken)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_close(cx).map_err(broken)
    }
}
