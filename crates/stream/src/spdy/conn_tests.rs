use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::*;
use crate::spdy::frame::{Frame, GOAWAY_PROTOCOL_ERROR, RST_REFUSED_STREAM};

async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), f)
        .await
        .expect("timed out")
}

fn headers(pairs: &[(&str, &str)]) -> Headers {
    pairs.iter().copied().collect()
}

fn pair() -> ((Connection, Incoming), (Connection, Incoming)) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    (Connection::new(a, Role::Client), Connection::new(b, Role::Server))
}

/// A peer that speaks frames by hand.
struct Raw {
    io: DuplexStream,
    codec: Codec,
    buf: BytesMut,
}

impl Raw {
    /// A server session and the raw client talking to it.
    fn with_server() -> (Self, Connection, Incoming) {
        let (a, b) = tokio::io::duplex(64 * 1024);
        let (conn, incoming) = Connection::new(b, Role::Server);
        (
            Self {
                io: a,
                codec: Codec::new(),
                buf: BytesMut::new(),
            },
            conn,
            incoming,
        )
    }

    async fn send(&mut self, frame: Frame) {
        let mut out = BytesMut::new();
        self.codec.encode(&frame, &mut out).unwrap();
        self.io.write_all(&out).await.unwrap();
    }

    async fn syn(&mut self, stream_id: u32) {
        let headers = headers(&[("streamtype", "data")]);
        self.send(Frame::SynStream {
            stream_id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            headers,
        })
        .await;
    }

    /// The next frame, `None` at EOF.
    async fn next(&mut self) -> Option<Frame> {
        within(async {
            loop {
                if let Some(frame) = self.codec.decode(&mut self.buf).unwrap() {
                    return Some(frame);
                }
                if self.io.read_buf(&mut self.buf).await.unwrap_or(0) == 0 {
                    return None;
                }
            }
        })
        .await
    }
}

async fn read_all(recv: &mut RecvHalf) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(data) = within(recv.recv()).await {
        all.extend_from_slice(&data);
    }
    all
}

/// Accepts every stream, replies with its streamtype and echoes its data back, then finishes.
fn echo_server(mut incoming: Incoming) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut n = 0;
        while let Some(stream) = incoming.accept().await {
            n += 1;
            let kind = stream.headers().get("streamtype").unwrap_or("").to_owned();
            stream.reply(headers(&[("streamtype", &kind)])).await.unwrap();
            let (mut send, mut recv) = stream.split();
            tokio::spawn(async move {
                while let Some(data) = recv.recv().await {
                    send.send(data).await.unwrap();
                }
                send.finish();
            });
        }
        n
    })
}

#[tokio::test]
async fn three_streams_echo_and_fin_both_ways() {
    let ((client, _client_in), (server, server_in)) = pair();
    let echo = echo_server(server_in);
    let mut tasks = Vec::new();
    for i in 0..3u8 {
        let stream = within(client.open(headers(&[("streamtype", &format!("s{i}"))])))
            .await
            .unwrap();
        assert_eq!(stream.id(), u32::from(2 * i + 1));
        assert_eq!(
            stream.reply_headers().unwrap().get("streamtype"),
            Some(format!("s{i}").as_str())
        );
        let (mut send, mut recv) = stream.split();
        tasks.push(tokio::spawn(async move {
            let payload: Vec<u8> = (0..100_000u32).map(|n| (n % 251) as u8 ^ i).collect();
            send.send(Bytes::from(payload.clone())).await.unwrap();
            send.finish();
            assert_eq!(read_all(&mut recv).await, payload);
        }));
    }
    for task in tasks {
        within(task).await.unwrap();
    }
    assert!(!client.is_closed());
    client.close();
    within(client.closed()).await;
    within(server.closed()).await;
    assert_eq!(within(echo).await.unwrap(), 3);
}

#[tokio::test]
async fn adapters_copy() {
    let ((client, _ci), (_server, mut server_in)) = pair();
    tokio::spawn(async move {
        let stream = server_in.accept().await.unwrap();
        stream.reply(Headers::new()).await.unwrap();
        let (mut send, mut recv) = stream.split();
        tokio::io::copy(&mut recv, &mut send).await.unwrap();
        send.shutdown().await.unwrap();
    });
    let (mut send, mut recv) = within(client.open(Headers::new())).await.unwrap().split();
    let payload = vec![42u8; 200_000];
    let writer = tokio::spawn(async move {
        send.write_all(&payload).await.unwrap();
        send.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    within(recv.read_to_end(&mut back)).await.unwrap();
    within(writer).await.unwrap();
    assert_eq!(back.len(), 200_000);
    assert!(back.iter().all(|&b| b == 42));
}

#[tokio::test]
async fn reset_ends_the_other_side() {
    let ((client, _ci), (_server, mut server_in)) = pair();
    let opened = tokio::spawn({
        let client = client.clone();
        async move { client.open(Headers::new()).await }
    });
    let accepted = within(server_in.accept()).await.unwrap();
    accepted.reply(Headers::new()).await.unwrap();
    let (client_send, mut client_recv) = within(opened).await.unwrap().unwrap().split();
    let (mut server_send, mut server_recv) = accepted.split();
    client_send.reset();
    assert_eq!(within(server_recv.recv()).await, None);
    assert_eq!(within(client_recv.recv()).await, None);
    // The server learns that its side is gone too.
    within(async {
        while server_send.send(Bytes::from_static(b"x")).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert_eq!(
        server_send.send(Bytes::from_static(b"x")).await,
        Err(Error::StreamClosed)
    );
}

#[tokio::test]
async fn unreplied_stream_dropped_is_refused() {
    let ((client, _ci), (_server, mut server_in)) = pair();
    let opened = tokio::spawn({
        let client = client.clone();
        async move { client.open(Headers::new()).await }
    });
    drop(within(server_in.accept()).await.unwrap());
    assert_eq!(
        within(opened).await.unwrap().unwrap_err(),
        Error::Reset(RST_REFUSED_STREAM)
    );
    // The session goes on.
    let opened = tokio::spawn(async move { client.open(Headers::new()).await.map(|s| s.id()) });
    within(server_in.accept())
        .await
        .unwrap()
        .reply(Headers::new())
        .await
        .unwrap();
    assert_eq!(within(opened).await.unwrap(), Ok(3));
}

#[tokio::test]
async fn ping_is_answered_with_its_id() {
    let (mut raw, _conn, _incoming) = Raw::with_server();
    // An even id is the server's own: not a question, so no answer.
    raw.send(Frame::Ping { id: 2 }).await;
    raw.send(Frame::Ping { id: 7 }).await;
    assert_eq!(raw.next().await, Some(Frame::Ping { id: 7 }));
}

#[tokio::test]
async fn settings_and_window_updates_are_ignored() {
    let (mut raw, _conn, mut incoming) = Raw::with_server();
    raw.send(Frame::Settings {
        clear: false,
        entries: vec![],
    })
    .await;
    raw.send(Frame::WindowUpdate {
        stream_id: 0,
        delta: 1000,
    })
    .await;
    raw.syn(1).await;
    let stream = within(incoming.accept()).await.unwrap();
    stream.reply(Headers::new()).await.unwrap();
    assert!(matches!(
        raw.next().await,
        Some(Frame::SynReply {
            stream_id: 1,
            fin: false,
            ..
        })
    ));
}

#[tokio::test]
async fn open_times_out_and_resets() {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (client, _incoming) = Connection::new(a, Role::Client);
    let mut raw = Raw {
        io: b,
        codec: Codec::new(),
        buf: BytesMut::new(),
    };
    let err = within(client.open_timeout(Headers::new(), Duration::from_millis(50)))
        .await
        .unwrap_err();
    assert_eq!(err, Error::Timeout);
    assert!(matches!(
        raw.next().await,
        Some(Frame::SynStream { stream_id: 1, .. })
    ));
    assert_eq!(
        raw.next().await,
        Some(Frame::RstStream {
            stream_id: 1,
            status: RST_CANCEL
        })
    );
}

#[tokio::test]
async fn slow_consumer_blocks_the_sender_not_memory() {
    let ((client, _ci), (_server, mut server_in)) = pair();
    let open = |name: &'static str| {
        let client = client.clone();
        tokio::spawn(async move { client.open(headers(&[("name", name)])).await.unwrap() })
    };
    let (a, b) = (open("a"), open("b"));
    let mut accepted = Vec::new();
    for _ in 0..2 {
        let stream = within(server_in.accept()).await.unwrap();
        stream.reply(Headers::new()).await.unwrap();
        accepted.push(stream);
    }
    let (mut a_send, _a_recv) = within(a).await.unwrap().split();
    let (mut b_send, _b_recv) = within(b).await.unwrap().split();
    let (_sa, mut server_a) = accepted.remove(0).split();
    let (_sb, mut server_b) = accepted.remove(0).split();

    const TOTAL: usize = 10 << 20;
    let sent = Arc::new(AtomicUsize::new(0));
    let sender = tokio::spawn({
        let sent = Arc::clone(&sent);
        async move {
            let chunk = Bytes::from(vec![1u8; MAX_CHUNK]);
            while sent.load(Ordering::Relaxed) < TOTAL {
                a_send.send(chunk.clone()).await.unwrap();
                sent.fetch_add(chunk.len(), Ordering::Relaxed);
            }
            a_send.finish();
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stalled = sent.load(Ordering::Relaxed);
    assert!(stalled < 2 << 20, "{stalled} bytes went out while nobody read");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        sent.load(Ordering::Relaxed),
        stalled,
        "the sender should be blocked"
    );

    // Stream b is held up behind a (head-of-line blocking: its sender waits for room in the same write
    // queue) ...
    let b_sender = tokio::spawn(async move { b_send.send(Bytes::from_static(b"hello b")).await });
    assert!(
        tokio::time::timeout(Duration::from_millis(200), server_b.recv())
            .await
            .is_err()
    );
    // ... until a is read.
    assert_eq!(read_all(&mut server_a).await.len(), TOTAL);
    within(sender).await.unwrap();
    within(b_sender).await.unwrap().unwrap();
    assert_eq!(within(server_b.recv()).await.as_deref(), Some(&b"hello b"[..]));
}

#[tokio::test]
async fn data_for_a_dropped_receiver_is_discarded() {
    let ((client, _ci), (_server, mut server_in)) = pair();
    let opened = tokio::spawn(async move { client.open(Headers::new()).await.unwrap() });
    let stream = within(server_in.accept()).await.unwrap();
    stream.reply(Headers::new()).await.unwrap();
    let (_server_send, server_recv) = stream.split();
    drop(server_recv);
    let (mut send, _recv) = within(opened).await.unwrap().split();
    // Far more than any queue holds: it all goes, since nothing is kept.
    let chunk = Bytes::from(vec![0u8; MAX_CHUNK]);
    for _ in 0..200 {
        within(send.send(chunk.clone())).await.unwrap();
    }
}

#[tokio::test]
async fn garbage_ends_the_session_with_goaway() {
    let (mut raw, conn, mut incoming) = Raw::with_server();
    raw.syn(1).await;
    raw.syn(3).await;
    let (_s1, mut r1) = within(incoming.accept()).await.unwrap().split();
    let (_s3, mut r3) = within(incoming.accept()).await.unwrap().split();
    raw.io
        .write_all(&[0x80, 0x02, 0x00, 0x01, 0, 0, 0, 4, 1, 2, 3, 4])
        .await
        .unwrap();
    assert_eq!(
        raw.next().await,
        Some(Frame::GoAway {
            last_good_stream_id: 3,
            status: GOAWAY_PROTOCOL_ERROR
        })
    );
    assert_eq!(raw.next().await, None);
    within(conn.closed()).await;
    assert_eq!(within(r1.recv()).await, None);
    assert_eq!(within(r3.recv()).await, None);
    assert!(within(incoming.accept()).await.is_none());
    assert_eq!(
        within(conn.open(Headers::new())).await.unwrap_err(),
        Error::Closed
    );
}

#[tokio::test]
async fn decreasing_stream_id_is_a_protocol_error() {
    let (mut raw, conn, _incoming) = Raw::with_server();
    raw.syn(5).await;
    raw.syn(3).await;
    assert!(matches!(
        raw.next().await,
        Some(Frame::GoAway {
            status: GOAWAY_PROTOCOL_ERROR,
            ..
        })
    ));
    within(conn.closed()).await;
}

#[tokio::test]
async fn dropping_the_io_ends_the_session() {
    let (raw, conn, mut incoming) = Raw::with_server();
    drop(raw);
    within(conn.closed()).await;
    assert!(within(incoming.accept()).await.is_none());
    assert_eq!(
        within(conn.open(Headers::new())).await.unwrap_err(),
        Error::Closed
    );
}

#[tokio::test]
async fn goaway_from_the_peer_ends_once_streams_are_done() {
    let (mut raw, conn, mut incoming) = Raw::with_server();
    raw.syn(1).await;
    raw.send(Frame::GoAway {
        last_good_stream_id: 0,
        status: 0,
    })
    .await;
    let stream = within(incoming.accept()).await.unwrap();
    assert!(within(incoming.accept()).await.is_none());
    assert_eq!(
        within(conn.open(Headers::new())).await.unwrap_err(),
        Error::GoingAway
    );
    assert!(!conn.is_closed());
    stream.reply(Headers::new()).await.unwrap();
    let (send, mut recv) = stream.split();
    raw.send(Frame::Data {
        stream_id: 1,
        fin: true,
        data: Bytes::from_static(b"bye"),
    })
    .await;
    assert_eq!(within(recv.recv()).await.as_deref(), Some(&b"bye"[..]));
    assert_eq!(within(recv.recv()).await, None);
    assert!(!conn.is_closed());
    send.finish();
    within(conn.closed()).await;
    assert!(matches!(
        raw.next().await,
        Some(Frame::SynReply { stream_id: 1, .. })
    ));
    assert_eq!(
        raw.next().await,
        Some(Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::new()
        })
    );
    assert_eq!(raw.next().await, None);
}

#[tokio::test]
async fn dropping_every_handle_closes_the_session() {
    let (mut raw, conn, incoming) = Raw::with_server();
    drop((conn, incoming));
    assert_eq!(
        raw.next().await,
        Some(Frame::GoAway {
            last_good_stream_id: 0,
            status: GOAWAY_OK
        })
    );
    assert_eq!(raw.next().await, None);
}
