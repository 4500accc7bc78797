//! Property tests of the streaming protocols. The SPDY/3.1 decoder: random frames encoded by the encoder
//! (then possibly corrupted) and random bytes, fed in random slices; it never panics, gives back what was
//! encoded when nothing was corrupted, and stops at the first error. The server: after a valid SPDY or
//! WebSocket upgrade, random bytes, SPDY frames or WebSocket frames, then the client's end of the stream; the
//! server must close the connection within a deadline, and serve a fresh session right after.

#[allow(dead_code)]
mod local;

use std::sync::OnceLock;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use crius_stream::client::{self, Transport};
use crius_stream::server::Server;
use crius_stream::spdy::frame::{Codec, Frame, Headers};
use crius_stream::status::Outcome;
use local::{exec, read_all, server, stdio};
use proptest::prelude::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn headers() -> impl Strategy<Value = Headers> {
    prop::collection::vec(
        (
            prop_oneof!["[a-z-]{1,10}", Just("streamtype".to_string())],
            "[ -~]{0,12}",
        ),
        0..4,
    )
    .prop_map(|pairs| pairs.into_iter().collect())
}

fn frame() -> impl Strategy<Value = Frame> {
    let id = || 1u32..0x7fff_ffff;
    prop_oneof![
        (id(), 0u32..4, 0u8..8, any::<u8>(), any::<[bool; 2]>(), headers()).prop_map(
            |(stream_id, associated_to, priority, slot, [fin, unidirectional], headers)| Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                slot,
                fin,
                unidirectional,
                headers,
            }
        ),
        (id(), any::<bool>(), headers()).prop_map(|(stream_id, fin, headers)| Frame::SynReply {
            stream_id,
            fin,
            headers
        }),
        (id(), any::<bool>(), headers()).prop_map(|(stream_id, fin, headers)| Frame::Headers {
            stream_id,
            fin,
            headers
        }),
        (id(), any::<u32>()).prop_map(|(stream_id, status)| Frame::RstStream { stream_id, status }),
        any::<u32>().prop_map(|id| Frame::Ping { id }),
        (0u32..0x7fff_ffff, any::<u32>()).prop_map(|(last_good_stream_id, status)| Frame::GoAway {
            last_good_stream_id,
            status
        }),
        (id(), 1u32..0x7fff_ffff).prop_map(|(stream_id, delta)| Frame::WindowUpdate { stream_id, delta }),
        (id(), any::<bool>(), prop::collection::vec(any::<u8>(), 0..300)).prop_map(|(stream_id, fin, d)| {
            Frame::Data {
                stream_id,
                fin,
                data: Bytes::from(d),
            }
        }),
    ]
}

/// What is fed to the decoder or sent after the upgrade.
#[derive(Debug, Clone)]
struct Wire {
    frames: Vec<Frame>,
    /// (position, byte) overwrites, positions modulo the length.
    corrupt: Vec<(usize, u8)>,
    /// Random bytes appended.
    tail: Vec<u8>,
    /// Where the bytes are cut into the slices given to the decoder, modulo the length.
    cuts: Vec<usize>,
}

fn wire() -> impl Strategy<Value = Wire> {
    (
        prop::collection::vec(frame(), 0..6),
        prop_oneof![
            3 => Just(Vec::new()),
            1 => prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
        ],
        prop_oneof![3 => Just(Vec::new()), 1 => prop::collection::vec(any::<u8>(), 1..100)],
        prop::collection::vec(any::<usize>(), 0..6),
    )
        .prop_map(|(frames, corrupt, tail, cuts)| Wire {
            frames,
            corrupt,
            tail,
            cuts,
        })
}

fn encode(w: &Wire) -> Vec<u8> {
    let mut codec = Codec::new();
    let mut out = BytesMut::new();
    for f in &w.frames {
        codec.encode(f, &mut out).unwrap();
    }
    let mut out = out.to_vec();
    let n = out.len();
    for &(at, b) in w.corrupt.iter().filter(|_| n > 0) {
        out[at % n] = b;
    }
    out.extend_from_slice(&w.tail);
    out
}

fn decode(w: &Wire, bytes: &[u8]) -> Result<(), TestCaseError> {
    let mut cuts: Vec<usize> = w.cuts.iter().map(|c| c % (bytes.len() + 1)).collect();
    cuts.push(bytes.len());
    cuts.sort_unstable();
    let mut codec = Codec::new();
    let (mut buf, mut got, mut from, mut failed) = (BytesMut::new(), Vec::new(), 0, false);
    'feed: for to in cuts {
        buf.extend_from_slice(&bytes[from..to]);
        from = to;
        loop {
            match codec.decode(&mut buf) {
                Ok(Some(f)) => got.push(f),
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break 'feed;
                }
            }
        }
    }
    if w.corrupt.is_empty() && w.tail.is_empty() {
        prop_assert!(!failed, "a valid stream was refused");
        prop_assert_eq!(&got, &w.frames);
        prop_assert!(buf.is_empty());
    }
    Ok(())
}

/// The server and the runtime it runs on, shared by every case.
fn shared() -> &'static (tokio::runtime::Runtime, Server) {
    static S: OnceLock<(tokio::runtime::Runtime, Server)> = OnceLock::new();
    S.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let (s, _backend) = rt.block_on(server());
        (rt, s)
    })
}

const SPDY_UPGRADE: &str = "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n";
const WS_UPGRADE: &str = "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n";

/// A WebSocket frame as a client sends it: FIN and opcode, a mask (or none), a length of any encoding.
fn ws_frame(head: u8, masked: bool, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let mut f = vec![head];
    let m = if masked { 0x80 } else { 0 };
    match payload.len() {
        n @ 0..126 => f.push(m | n as u8),
        n => {
            f.push(m | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    if masked {
        f.extend_from_slice(&mask);
    }
    f.extend(
        payload
            .iter()
            .enumerate()
            .map(|(i, b)| b ^ if masked { mask[i % 4] } else { 0 }),
    );
    f
}

#[derive(Debug, Clone)]
enum After {
    Spdy(Wire),
    Ws(Vec<(u8, bool, Vec<u8>, [u8; 4])>),
    Bytes { ws: bool, bytes: Vec<u8> },
}

fn after() -> impl Strategy<Value = After> {
    let ws = (
        prop_oneof![
            Just(0x82u8),
            Just(0x81),
            Just(0x88),
            Just(0x89),
            Just(0x02),
            Just(0x80),
            any::<u8>()
        ],
        prop::bool::weighted(0.9),
        prop_oneof![
            prop::collection::vec(any::<u8>(), 0..4).prop_map(|mut v| {
                v.insert(0, 0); // stdin's channel
                v
            }),
            prop::collection::vec(any::<u8>(), 0..300),
        ],
        any::<[u8; 4]>(),
    );
    prop_oneof![
        2 => wire().prop_map(After::Spdy),
        2 => prop::collection::vec(ws, 0..5).prop_map(After::Ws),
        1 => (any::<bool>(), prop::collection::vec(any::<u8>(), 0..400))
            .prop_map(|(ws, bytes)| After::Bytes { ws, bytes }),
    ]
}

async fn session(s: &Server, after: &After) -> Result<(), String> {
    let (ws, bytes) = match after {
        After::Spdy(w) => (false, encode(w)),
        After::Ws(frames) => (
            true,
            frames
                .iter()
                .flat_map(|(h, m, p, k)| ws_frame(*h, *m, p, *k))
                .collect(),
        ),
        After::Bytes { ws, bytes } => (*ws, bytes.clone()),
    };
    let base = s.local_addr();
    let url = s.url(exec(&["true"], true)).map_err(|e| e.to_string())?;
    let path = url.split_once(&base.to_string()).unwrap().1.to_string();
    let mut tcp = tokio::net::TcpStream::connect(base)
        .await
        .map_err(|e| e.to_string())?;
    let upgrade = if ws { WS_UPGRADE } else { SPDY_UPGRADE };
    let req = format!("GET {path} HTTP/1.1\r\nHost: {base}\r\nConnection: Upgrade\r\n{upgrade}\r\n");
    tcp.write_all(req.as_bytes()).await.map_err(|e| e.to_string())?;
    let mut head = [0u8; 12];
    tcp.read_exact(&mut head).await.map_err(|e| e.to_string())?;
    if !head.starts_with(b"HTTP/1.1 101") {
        return Err(format!("no upgrade: {:?}", String::from_utf8_lossy(&head)));
    }
    // The server may close first: the rest is not sent.
    let _ = tcp.write_all(&bytes).await;
    let _ = tcp.shutdown().await;
    let mut rest = Vec::new();
    match tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest)).await {
        Err(_) => Err("the server did not close the connection".into()),
        Ok(_) => Ok(()),
    }
}

async fn echo_ok(s: &Server, t: Transport) -> Result<(), String> {
    let url = s.url(exec(&["echo", "ok"], false)).map_err(|e| e.to_string())?;
    let (io, cap) = stdio(None);
    let o = client::remote_command(&url, t, io)
        .await
        .map_err(|e| e.to_string())?;
    let out = read_all(cap.out).await;
    if o != Outcome::Success || out != "ok\n" {
        return Err(format!("a fresh session: {o:?}, {out:?}"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 3000,
        max_shrink_iters: 500,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_spdy_decoder_takes_any_bytes_in_any_slices(w in wire()) {
        decode(&w, &encode(&w))?;
    }

    #[test]
    fn the_spdy_decoder_takes_pure_noise(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        let w = Wire { frames: Vec::new(), corrupt: Vec::new(), tail: bytes.clone(), cuts: vec![bytes.len() / 2] };
        decode(&w, &bytes)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Fewer: each case runs a process for its fresh session.
        cases: 600,
        max_shrink_iters: 100,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn after_garbage_the_server_closes_and_serves_on(after in after(), spdy in any::<bool>()) {
        let (rt, s) = shared();
        rt.block_on(session(s, &after)).map_err(TestCaseError::fail)?;
        let t = if spdy { Transport::Spdy } else { Transport::WebSocket };
        rt.block_on(echo_ok(s, t)).map_err(TestCaseError::fail)?;
    }
}
