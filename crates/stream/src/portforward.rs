//! Port-forward: connections to ports of a pod, through [`Backend::connect`] (which enters the pod's
//! network namespace). Over WebSocket (`portforward.k8s.io`), port `i` of the `ports` query has the data
//! channel `2i` and the error channel `2i+1`, and the server starts each with the port, two bytes little
//! endian; one connection per port and WebSocket. Over SPDY, see `spdy_serve`.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;

use crate::backend::{Backend, Request};
use crate::session::{CHUNK, Out};
use crate::ws;
use crate::{Error, Result};

/// Whether `req` lets the client reach `port` ([`Error::PortNotAllowed`] says why not).
pub fn allowed(req: &crate::PortForwardRequest, port: u16) -> Result<()> {
    if port == 0 || (!req.ports.is_empty() && !req.ports.contains(&i32::from(port))) {
        return Err(Error::PortNotAllowed {
            port,
            ports: req.ports.clone(),
        });
    }
    Ok(())
}

/// Connects to `port` of the pod, if `req` allows it ([`Error::PortNotAllowed`]; [`Error::Forward`] when the
/// backend could not); the error's message is the text the client is shown.
pub async fn connect(backend: &dyn Backend, req: &crate::PortForwardRequest, port: u16) -> Result<TcpStream> {
    allowed(req, port)?;
    backend
        .connect(req.sandbox_id.clone(), port)
        .await
        .map_err(|source| Error::Forward {
            sandbox: req.sandbox_id.clone(),
            port,
            source,
        })
}

/// Serves a WebSocket port-forward of `ports`.
pub async fn over_ws<S>(socket: WebSocketStream<S>, req: Request, ports: Vec<u16>, backend: Arc<dyn Backend>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let Request::PortForward(pf) = req else { return };
    let mut mux = ws::Mux::new(false);
    for (i, port) in ports.into_iter().enumerate() {
        let Ok(data) = u8::try_from(2 * i) else { break };
        let input = mux.inbound(data);
        let mut out: Out = Box::new(mux.outbound(data));
        let mut err: Out = Box::new(mux.outbound(data + 1));
        let backend = backend.clone();
        let pf = pf.clone();
        tokio::spawn(async move {
            let prefix = Bytes::copy_from_slice(&port.to_le_bytes());
            if out.send(prefix.clone()).await.is_err() || err.send(prefix).await.is_err() {
                return;
            }
            match connect(backend.as_ref(), &pf, port).await {
                Ok(tcp) => pipe(tcp, input, out).await,
                Err(e) => {
                    let _ = err.send(Bytes::from(e.to_string())).await;
                }
            }
            err.close().await;
        });
    }
    ws::drive(socket, mux).await;
}

/// Copies between `tcp` and a channel pair until the connection's side closes.
pub async fn pipe(tcp: TcpStream, input: mpsc::Receiver<Bytes>, out: Out) {
    let (r, w) = tcp.into_split();
    pipe_local(r, w, input, out).await;
}

/// Copies `input` into `w` and `r` into `out` until either direction ends, as Kubernetes' peers expect (a
/// client-go client waits for the server to end the pair once its side closed).
pub async fn pipe_local<R, W>(mut r: R, mut w: W, mut input: mpsc::Receiver<Bytes>, mut out: Out)
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send,
{
    let up = async {
        while let Some(b) = input.recv().await {
            if w.write_all(&b).await.is_err() {
                break;
            }
        }
        let _ = w.shutdown().await;
    };
    let down = async {
        loop {
            let mut buf = BytesMut::with_capacity(CHUNK);
            match r.read_buf(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if out.send(buf.freeze()).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    tokio::select! {
        () = up => {}
        () = down => {}
    }
    out.close().await;
}
