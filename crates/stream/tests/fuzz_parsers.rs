//! A bounded fuzz run of the parsers a client feeds, as part of the normal `cargo test`: the SPDY/3.1 frame
//! and header-block decoder, the WebSocket frame parser with the server's limits, and the resize channel.
//! Inputs are hostile bytes from proptest, and valid frames mutated (bytes overwritten, lengths set to their
//! largest, cut short). Each input must leave no panic, keep the parser's buffer within its cap, and take
//! less than [`PER_INPUT`]. The regression corpus at the end replays the attacks of issue 25: a 2 GiB length
//! field, a 16 MiB DATA frame, an unterminated resize string, a header block that inflates hugely.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use crius_stream::resize::{MAX_RESIZE, Sizes};
use crius_stream::spdy::frame::{
    Codec, DICTIONARY, Decoder, Frame, FrameError, Headers, MAX_CONTROL_FRAME_LEN, MAX_DATA_FRAME, Setting,
};
use flate2::{Compress, Compression, FlushCompress};
use futures::StreamExt;
use proptest::prelude::*;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::Role;

/// The most one input may take (a debug build, on a loaded machine).
const PER_INPUT: Duration = Duration::from_secs(2);

/// The most the SPDY decoder may keep between reads: one frame's header and its largest body.
const SPDY_CAP: usize = 8 + if MAX_CONTROL_FRAME_LEN > MAX_DATA_FRAME {
    MAX_CONTROL_FRAME_LEN
} else {
    MAX_DATA_FRAME
};

/// Feeds `input` to a fresh decoder in the slices `cuts` makes, decoding all it can after each; stops at the
/// first error. Checks the cap on what stays buffered and the time taken.
fn spdy_decode(input: &[u8], cuts: &[usize]) -> Result<Option<FrameError>, TestCaseError> {
    let start = Instant::now();
    let (_, mut decoder): (_, Decoder) = Codec::new().into_parts();
    let mut buf = BytesMut::new();
    let mut at = 0;
    let mut ends: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
    ends.push(input.len());
    ends.sort_unstable();
    for end in ends {
        buf.extend_from_slice(&input[at..end.max(at)]);
        at = end.max(at);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => return Ok(Some(e)),
            }
        }
        prop_assert!(
            buf.len() < SPDY_CAP,
            "{} bytes buffered, over {SPDY_CAP}",
            buf.len()
        );
        prop_assert!(
            buf.capacity() <= 4 * (SPDY_CAP + input.len()),
            "capacity {}",
            buf.capacity()
        );
    }
    prop_assert!(start.elapsed() < PER_INPUT, "{:?}", start.elapsed());
    Ok(None)
}

fn frame() -> impl Strategy<Value = Frame> {
    let headers = prop::collection::vec(("[a-z]{1,8}", "[ -~]{0,16}"), 0..4)
        .prop_map(|p| p.into_iter().collect::<Headers>());
    prop_oneof![
        (
            1u32..20,
            any::<bool>(),
            prop::collection::vec(any::<u8>(), 0..3000)
        )
            .prop_map(|(id, fin, d)| {
                Frame::Data {
                    stream_id: id,
                    fin,
                    data: Bytes::from(d),
                }
            }),
        (1u32..20, headers.clone()).prop_map(|(id, headers)| Frame::SynStream {
            stream_id: id,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            headers,
        }),
        (1u32..20, headers).prop_map(|(id, headers)| Frame::Headers {
            stream_id: id,
            fin: true,
            headers,
        }),
        any::<u32>().prop_map(|id| Frame::Ping { id: id >> 1 }),
        (1u32..20, any::<u32>()).prop_map(|(id, status)| Frame::RstStream {
            stream_id: id,
            status
        }),
        prop::collection::vec((0u32..0xff_ffff, any::<u32>()), 0..4).prop_map(|e| Frame::Settings {
            clear: false,
            entries: e
                .into_iter()
                .map(|(id, value)| Setting { flags: 0, id, value })
                .collect(),
        }),
        (0u32..20, 1u32..0x7fff_ffff).prop_map(|(id, delta)| Frame::WindowUpdate { stream_id: id, delta }),
    ]
}

/// A way to spoil valid bytes.
#[derive(Debug, Clone)]
enum Mutation {
    /// Overwrite the byte at (position % len).
    Byte(usize, u8),
    /// Set the 24-bit length field of the frame header at (position % len) to its largest.
    HugeLength(usize),
    /// Cut the input at (position % len).
    Cut(usize),
    /// Insert bytes at (position % len).
    Insert(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(p, b)| Mutation::Byte(p, b)),
        any::<usize>().prop_map(Mutation::HugeLength),
        any::<usize>().prop_map(Mutation::Cut),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 1..16)).prop_map(|(p, b)| Mutation::Insert(p, b)),
    ]
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        if bytes.is_empty() {
            break;
        }
        let len = bytes.len();
        match m {
            Mutation::Byte(p, b) => bytes[p % len] = *b,
            Mutation::HugeLength(p) => {
                let at = p % len;
                for b in bytes.iter_mut().skip(at + 5).take(3) {
                    *b = 0xff;
                }
            }
            Mutation::Cut(p) => bytes.truncate(p % len),
            Mutation::Insert(p, b) => {
                let at = p % len;
                bytes.splice(at..at, b.iter().copied());
            }
        }
    }
    bytes
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

/// Feeds `input` to a server-side WebSocket with the streaming server's limits, then ends it; every message is
/// read until the parser gives up or the input ends, within [`PER_INPUT`]. Returns the messages' total size.
fn ws_parse(input: Vec<u8>) -> Result<usize, TestCaseError> {
    let start = Instant::now();
    let got = runtime().block_on(async move {
        let (mut client, server) = tokio::io::duplex(256 * 1024);
        let writer = tokio::spawn(async move {
            let _ = client.write_all(&input).await;
            let _ = client.shutdown().await;
            // Held open until the reader is done, so that our replies (pongs, the close) have somewhere to go.
            tokio::time::sleep(PER_INPUT).await;
        });
        let mut ws =
            WebSocketStream::from_raw_socket(server, Role::Server, Some(crius_stream::ws::server_config()))
                .await;
        let mut total = 0;
        let read = tokio::time::timeout(PER_INPUT, async {
            while let Some(Ok(m)) = ws.next().await {
                total += m.len();
            }
        })
        .await;
        writer.abort();
        read.map(|()| total)
    });
    prop_assert!(
        got.is_ok(),
        "the WebSocket parser did not finish within {PER_INPUT:?}"
    );
    prop_assert!(start.elapsed() < PER_INPUT * 2, "{:?}", start.elapsed());
    Ok(got.unwrap_or(0))
}

/// A masked client frame: FIN and opcode `head`, the payload's length in the encoding `len_code` (0: shortest,
/// 126: 16 bits, 127: 64 bits) or the `claimed` length if given.
fn ws_frame(head: u8, payload: &[u8], len_code: u8, claimed: Option<u64>) -> Vec<u8> {
    let mut f = vec![head];
    let len = claimed.unwrap_or(payload.len() as u64);
    match (len_code, len) {
        (0, n) if n < 126 => f.push(0x80 | n as u8),
        (0 | 126, n) if n <= 0xffff => {
            f.push(0x80 | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        (_, n) => {
            f.push(0x80 | 127);
            f.extend_from_slice(&n.to_be_bytes());
        }
    }
    let mask = [0x12, 0x34, 0x56, 0x78];
    f.extend_from_slice(&mask);
    f.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

fn ws_input() -> impl Strategy<Value = Vec<u8>> {
    let one = (
        prop_oneof![
            Just(0x82u8),
            Just(0x02),
            Just(0x80),
            Just(0x81),
            Just(0x89),
            Just(0x8a),
            Just(0x88),
            any::<u8>()
        ],
        prop::collection::vec(any::<u8>(), 0..300),
        prop_oneof![Just(0u8), Just(126), Just(127)],
        prop::option::of(prop_oneof![
            Just(u64::MAX),
            Just(1u64 << 31),
            Just(1u64 << 63),
            (crius_stream::ws::MAX_MESSAGE as u64 - 2)..(crius_stream::ws::MAX_MESSAGE as u64 + 2),
        ]),
    )
        .prop_map(|(h, p, c, claimed)| ws_frame(h, &p, c, claimed));
    prop_oneof![
        prop::collection::vec(one, 0..6).prop_map(|v| v.concat()),
        prop::collection::vec(any::<u8>(), 0..400),
    ]
}

fn resize_chunks() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let valid = (any::<u16>(), any::<u16>())
        .prop_map(|(w, h)| format!(r#"{{"Width":{w},"Height":{h}}}"#).into_bytes());
    let piece = prop_oneof![
        valid.clone(),
        valid.prop_map(|v| v[..v.len() / 2].to_vec()),
        Just(br#"{"Width":""#.to_vec()),
        Just(vec![b'a'; 1500]),
        Just(b"[[[[[[[[".to_vec()),
        prop::collection::vec(any::<u8>(), 0..200),
    ];
    prop::collection::vec(piece, 0..40)
}

fn push_all(chunks: &[Vec<u8>]) -> Result<usize, TestCaseError> {
    let start = Instant::now();
    let mut s = Sizes::new();
    let mut n = 0;
    for c in chunks {
        n += s.push(c).len();
        prop_assert!(s.buffered() <= MAX_RESIZE, "{} bytes kept", s.buffered());
    }
    prop_assert!(start.elapsed() < PER_INPUT, "{:?}", start.elapsed());
    Ok(n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn spdy_takes_hostile_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2000), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        spdy_decode(&bytes, &cuts)?;
    }

    #[test]
    fn spdy_takes_mutated_frames(
        frames in prop::collection::vec(frame(), 1..6),
        mutations in prop::collection::vec(mutation(), 0..4),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let mut codec = Codec::new();
        let mut out = BytesMut::new();
        for f in &frames {
            codec.encode(f, &mut out).unwrap();
        }
        spdy_decode(&mutate(out.to_vec(), &mutations), &cuts)?;
    }

    #[test]
    fn websocket_takes_hostile_frames(input in ws_input()) {
        let total = ws_parse(input)?;
        prop_assert!(total <= 6 * crius_stream::ws::MAX_MESSAGE, "{total}");
    }

    #[test]
    fn websocket_takes_mutated_frames(payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..500), 1..4), mutations in prop::collection::vec(mutation(), 0..4)) {
        let valid: Vec<u8> = payloads.iter().flat_map(|p| ws_frame(0x82, p, 0, None)).collect();
        ws_parse(mutate(valid, &mutations))?;
    }

    #[test]
    fn resize_takes_hostile_chunks(chunks in resize_chunks()) {
        push_all(&chunks)?;
    }
}

// The regression corpus.

#[test]
fn corpus_a_16_mib_data_frame_is_refused_on_its_header() {
    // DATA on stream 1, length 0xffffff: refused before any of its body is awaited.
    let head = [0, 0, 0, 1, 0, 0xff, 0xff, 0xff];
    let e = spdy_decode(&head, &[]).unwrap();
    assert!(
        matches!(e, Some(FrameError::TooLarge { len: 0xff_ffff, .. })),
        "{e:?}"
    );
    // A control frame of the same length too.
    let head = [0x80, 3, 0, 1, 0, 0xff, 0xff, 0xff];
    let e = spdy_decode(&head, &[]).unwrap();
    assert!(matches!(e, Some(FrameError::TooLarge { .. })), "{e:?}");
    // And the largest allowed DATA frame passes.
    let mut ok = vec![0, 0, 0, 1, 0];
    ok.extend_from_slice(&(MAX_DATA_FRAME as u32).to_be_bytes()[1..]);
    ok.resize(8 + MAX_DATA_FRAME, 7);
    assert_eq!(spdy_decode(&ok, &[3, 1000]).unwrap(), None);
}

#[test]
fn corpus_a_2_gib_websocket_length_is_refused_at_once() {
    let mut input = ws_frame(0x82, b"", 127, Some(1 << 31));
    input.extend_from_slice(&[0; 1000]);
    let start = Instant::now();
    assert_eq!(ws_parse(input).unwrap(), 0);
    assert!(
        start.elapsed() < Duration::from_millis(500),
        "{:?}",
        start.elapsed()
    );
    // A message one byte over the limit, sent whole, is refused too.
    let big = vec![1; crius_stream::ws::MAX_MESSAGE + 1];
    assert_eq!(ws_parse(ws_frame(0x82, &big, 127, None)).unwrap(), 0);
    let fits = vec![1; crius_stream::ws::MAX_MESSAGE];
    assert_eq!(ws_parse(ws_frame(0x82, &fits, 127, None)).unwrap(), fits.len());
}

#[test]
fn corpus_an_unterminated_resize_string_keeps_4_kib_and_stays_linear() {
    // 384 MiB made the old parser hold 400 MiB and re-parse it on every message; 64 MiB here in 64 KiB
    // messages (each parsed once): nothing kept past the cap, and about linear time.
    let mut s = Sizes::new();
    assert!(s.push(br#"{"Width":80,"Height":""#).is_empty());
    let chunk = vec![b'a'; 64 * 1024];
    let start = Instant::now();
    for _ in 0..1024 {
        assert!(s.push(&chunk).is_empty());
        assert!(s.buffered() <= MAX_RESIZE, "{}", s.buffered());
    }
    assert!(start.elapsed() < Duration::from_secs(20), "{:?}", start.elapsed());
    assert_eq!(s.push(br#"{"Width":100,"Height":40}"#), vec![(100, 40)]);
}

#[test]
fn corpus_a_header_block_that_inflates_hugely_is_refused() {
    // 16 MiB of one byte, compressed with SPDY's dictionary to a few KiB, in a SYN_STREAM.
    let mut z = Compress::new(Compression::best(), true);
    z.set_dictionary(DICTIONARY).unwrap();
    let mut block = vec![0, 0, 0, 1, 0, 0, 0, 1, b'a'];
    block.extend_from_slice(&(16u32 << 20).to_be_bytes());
    block.resize(block.len() + (16 << 20), b'x');
    let mut packed = Vec::with_capacity(1 << 20);
    z.compress_vec(&block, &mut packed, FlushCompress::Sync).unwrap();
    assert!(packed.len() < MAX_CONTROL_FRAME_LEN - 10, "{}", packed.len());
    let len = 10 + packed.len();
    let mut frame = vec![0x80, 3, 0, 1, 0];
    frame.extend_from_slice(&(len as u32).to_be_bytes()[1..]);
    frame.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    frame.extend_from_slice(&packed);
    let start = Instant::now();
    let e = spdy_decode(&frame, &[]).unwrap();
    assert_eq!(e, Some(FrameError::HeaderBlockTooLarge));
    assert!(start.elapsed() < PER_INPUT, "{:?}", start.elapsed());
}
