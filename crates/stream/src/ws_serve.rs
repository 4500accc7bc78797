//! Exec and attach served over a WebSocket (`v4`/`v5.channel.k8s.io`): the channels the request asks for
//! ([`Wanted`]) are made on the connection's [`ws::Mux`], then [`session::run`] drives them. Its SPDY twin is
//! `spdy_serve.rs`.

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;

use crate::backend::{Backend, Request};
use crate::session::{self, Channels, Wanted};
use crate::ws;

/// Serves `req` over a WebSocket that negotiated `v4` or `v5.channel.k8s.io`. The server sends no close
/// signals of its own (client-go reads v5's close signal only from the client, its stdin, and logs any it
/// gets as an unknown stream); a v5 client's close signals are read.
pub async fn over_ws<S>(ws_stream: WebSocketStream<S>, req: Request, backend: Arc<dyn Backend>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let want = Wanted::of(&req);
    let mut mux = ws::Mux::new(false);
    let channels = Channels {
        stdin: want.stdin.then(|| mux.inbound(ws::STDIN)),
        stdout: want
            .stdout
            .then(|| Box::new(mux.outbound(ws::STDOUT)) as session::Out),
        stderr: want
            .stderr
            .then(|| Box::new(mux.outbound(ws::STDERR)) as session::Out),
        resize: want.tty.then(|| mux.inbound(ws::RESIZE)),
        error: Box::new(mux.outbound(ws::ERROR)),
        gone: {
            let g = mux.gone();
            Box::pin(async move {
                let _ = g.await;
            })
        },
    };
    // client-go's WebSocket client waits for a first (empty) message: on stdout if asked for, else stderr,
    // else the error channel.
    let first = if want.stdout {
        ws::STDOUT
    } else if want.stderr {
        ws::STDERR
    } else {
        ws::ERROR
    };
    let mut hello = mux.outbound(first);
    let greet = async move {
        let _ = session::Outbound::send(&mut hello, bytes::Bytes::new()).await;
    };
    tokio::join!(
        async {
            greet.await;
            session::run(backend, req, channels).await;
        },
        ws::drive(ws_stream, mux)
    );
}
