//! Kubernetes' channel framing over WebSocket (`v4`/`v5.channel.k8s.io`, `portforward.k8s.io`): every binary
//! message is one channel's data, its first byte the channel number. v5 adds a close signal: a message on
//! channel 255 whose second byte names the channel that ended (the client's stdin, say).
//!
//! [`Mux`] binds channel numbers to bounded queues, in both directions, and [`drive`] runs it over a
//! WebSocket: the same code serves the server and the client. Everything outbound goes through one ordered
//! queue, so the order of sends across channels is the order on the wire.

use std::collections::HashMap;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, oneshot};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};

use crate::session::{Gone, Outbound, QUEUE};

/// stdin's channel.
pub const STDIN: u8 = 0;
/// stdout's channel.
pub const STDOUT: u8 = 1;
/// stderr's channel.
pub const STDERR: u8 = 2;
/// The error (status) channel.
pub const ERROR: u8 = 3;
/// The terminal-size channel.
pub const RESIZE: u8 = 4;
/// v5's close signal.
pub const CLOSE: u8 = 255;

/// Largest message (and frame) the server accepts from a client (a chunk of stdin, say): 64 KiB, as SPDY's
/// DATA frames. client-go writes 32 KiB chunks.
pub const MAX_MESSAGE: usize = 64 * 1024;

/// The WebSocket limits of the server's side: frames and messages of at most [`MAX_MESSAGE`].
pub fn server_config() -> WebSocketConfig {
    let mut cfg = WebSocketConfig::default();
    cfg.max_message_size = Some(MAX_MESSAGE);
    cfg.max_frame_size = Some(MAX_MESSAGE);
    cfg
}

/// Messages queued per inbound channel before the reader waits for the channel's consumer: with
/// [`MAX_MESSAGE`], a channel holds at most 128 KiB.
pub const INBOUND_QUEUE: usize = 2;

enum Out {
    Data(u8, Bytes),
    Close(u8),
}

/// Channels bound to queues.
pub struct Mux {
    inbound: HashMap<u8, mpsc::Sender<Bytes>>,
    tx: mpsc::Sender<Out>,
    rx: mpsc::Receiver<Out>,
    close_signal: bool,
    gone: Option<oneshot::Sender<()>>,
}

/// One outbound channel of a [`Mux`].
pub struct Sender {
    channel: u8,
    tx: Option<mpsc::Sender<Out>>,
}

impl Outbound for Sender {
    fn send(&mut self, data: Bytes) -> BoxFuture<'_, Result<(), Gone>> {
        Box::pin(async move {
            let tx = self.tx.as_ref().ok_or(Gone)?;
            tx.send(Out::Data(self.channel, data)).await.map_err(|_| Gone)
        })
    }

    fn close(&mut self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Some(tx) = self.tx.take() {
                let _ = tx.send(Out::Close(self.channel)).await;
            }
        })
    }
}

impl Mux {
    /// A mux; `close_signal` (v5) sends the close signal when an outbound channel is closed.
    pub fn new(close_signal: bool) -> Mux {
        let (tx, rx) = mpsc::channel(QUEUE);
        Mux {
            inbound: HashMap::new(),
            tx,
            rx,
            close_signal,
            gone: None,
        }
    }

    /// Messages on `channel` go to the returned queue (closed by the peer's close signal or the end).
    pub fn inbound(&mut self, channel: u8) -> mpsc::Receiver<Bytes> {
        let (tx, rx) = mpsc::channel(INBOUND_QUEUE);
        self.inbound.insert(channel, tx);
        rx
    }

    /// What is sent on the returned channel goes out on `channel`.
    pub fn outbound(&mut self, channel: u8) -> Sender {
        Sender {
            channel,
            tx: Some(self.tx.clone()),
        }
    }

    /// Resolves when the peer closed or the connection failed.
    pub fn gone(&mut self) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.gone = Some(tx);
        rx
    }
}

/// Runs `mux` over `ws`. Once every outbound [`Sender`] is dropped, the WebSocket is closed normally (after
/// a short wait for the peer's close); if the peer closes first, inbound queues end, `gone` fires, and what
/// is still sent is dropped until the senders are gone. Reading and writing go on independently, so a slow
/// reader of one inbound channel never holds up the outbound ones. Returns when the connection is done.
pub async fn drive<S>(ws: WebSocketStream<S>, mux: Mux)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    let Mux {
        mut inbound,
        tx,
        mut rx,
        close_signal,
        gone,
    } = mux;
    drop(tx);
    let (mut sink, mut source) = ws.split();
    let (ended_tx, mut ended) = tokio::sync::watch::channel(false);
    let reader = async move {
        let read = async {
            while let Some(msg) = source.next().await {
                match msg {
                    Ok(Message::Binary(b)) if !b.is_empty() => {
                        let (ch, data) = (b[0], b.slice(1..));
                        if ch == CLOSE {
                            if let Some(c) = data.first() {
                                inbound.remove(c);
                            }
                        } else if let Some(q) = inbound.get(&ch)
                            && q.send(data).await.is_err()
                        {
                            inbound.remove(&ch);
                        }
                    }
                    Ok(Message::Close(_)) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        // Our side done (every sender dropped, the close sent): the peer has a moment to close too.
        let done = async {
            let _ = ended.wait_for(|e| *e).await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        tokio::select! {
            () = read => {}
            () = done => {}
        }
        inbound.clear();
        if let Some(g) = gone {
            let _ = g.send(());
        }
    };
    let writer = async move {
        let mut broken = false;
        while let Some(out) = rx.recv().await {
            let msg = match out {
                _ if broken => continue,
                Out::Data(ch, b) => {
                    let mut m = Vec::with_capacity(b.len() + 1);
                    m.push(ch);
                    m.extend_from_slice(&b);
                    m
                }
                Out::Close(ch) if close_signal => vec![CLOSE, ch],
                Out::Close(_) => continue,
            };
            broken = sink.send(Message::Binary(msg.into())).await.is_err();
        }
        if !broken {
            let _ = sink
                .send(Message::Close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "".into(),
                })))
                .await;
        }
        let _ = ended_tx.send(true);
    };
    tokio::join!(reader, writer);
}
