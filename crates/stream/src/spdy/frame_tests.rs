use bytes::{BufMut, Bytes, BytesMut};

use super::*;

fn headers(pairs: &[(&str, &str)]) -> Headers {
    pairs.iter().copied().collect()
}

/// One of each frame type, with three header frames in a row and more after, so that the second and later
/// blocks only inflate if both sides keep their compression context.
fn sample() -> Vec<Frame> {
    let h = headers(&[("streamtype", "error"), ("port", "8080"), ("requestid", "0")]);
    vec![
        Frame::SynStream {
            stream_id: 1,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            headers: h.clone(),
        },
        Frame::SynStream {
            stream_id: 3,
            associated_to: 1,
            priority: 7,
            slot: 9,
            fin: true,
            unidirectional: true,
            headers: headers(&[("streamtype", "data"), ("port", "8080"), ("requestid", "0")]),
        },
        Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::new(),
        },
        Frame::SynReply {
            stream_id: 3,
            fin: true,
            headers: h.clone(),
        },
        Frame::RstStream {
            stream_id: 5,
            status: RST_CANCEL,
        },
        Frame::Settings {
            clear: true,
            entries: vec![
                Setting {
                    flags: 1,
                    id: 7,
                    value: 65536,
                },
                Setting {
                    flags: 0,
                    id: 0xff_ffff,
                    value: 0,
                },
            ],
        },
        Frame::Settings {
            clear: false,
            entries: vec![],
        },
        Frame::Ping { id: 0x8000_0001 },
        Frame::Headers {
            stream_id: 3,
            fin: false,
            headers: headers(&[("a", "1\0two")]),
        },
        Frame::Headers {
            stream_id: 0x7fff_ffff,
            fin: true,
            headers: h,
        },
        Frame::WindowUpdate {
            stream_id: 0,
            delta: 0x7fff_ffff,
        },
        Frame::Data {
            stream_id: 1,
            fin: false,
            data: Bytes::from_static(b"hello"),
        },
        Frame::Data {
            stream_id: 1,
            fin: true,
            data: Bytes::new(),
        },
        Frame::Data {
            stream_id: 0x7fff_ffff,
            fin: false,
            data: Bytes::from(vec![7u8; MAX_DATA_FRAME]),
        },
        Frame::GoAway {
            last_good_stream_id: 3,
            status: GOAWAY_PROTOCOL_ERROR,
        },
    ]
}

fn encode_all(frames: &[Frame]) -> BytesMut {
    let mut codec = Codec::new();
    let mut out = BytesMut::new();
    for f in frames {
        codec.encode(f, &mut out).unwrap();
    }
    out
}

fn decode_all(codec: &mut Codec, buf: &mut BytesMut) -> Result<Vec<Frame>, FrameError> {
    let mut frames = Vec::new();
    while let Some(f) = codec.decode(buf)? {
        frames.push(f);
    }
    Ok(frames)
}

#[test]
fn round_trip_every_frame_type() {
    let frames = sample();
    let mut wire = encode_all(&frames);
    let mut decoder = Codec::new();
    assert_eq!(decode_all(&mut decoder, &mut wire).unwrap(), frames);
    assert!(wire.is_empty());
}

#[test]
fn round_trip_many_header_frames() {
    let mut enc = Codec::new();
    let mut dec = Codec::new();
    let mut wire = BytesMut::new();
    for i in 0..200u32 {
        let f = Frame::SynStream {
            stream_id: 2 * i + 1,
            associated_to: 0,
            priority: 0,
            slot: 0,
            fin: false,
            unidirectional: false,
            headers: headers(&[("streamtype", "data"), ("requestid", &i.to_string())]),
        };
        enc.encode(&f, &mut wire).unwrap();
        assert_eq!(dec.decode(&mut wire).unwrap(), Some(f));
    }
}

#[test]
fn known_encodings() {
    let mut out = BytesMut::new();
    let mut codec = Codec::new();
    codec.encode(&Frame::Ping { id: 1 }, &mut out).unwrap();
    codec
        .encode(
            &Frame::Data {
                stream_id: 3,
                fin: true,
                data: Bytes::from_static(b"ab"),
            },
            &mut out,
        )
        .unwrap();
    codec
        .encode(
            &Frame::RstStream {
                stream_id: 3,
                status: RST_CANCEL,
            },
            &mut out,
        )
        .unwrap();
    codec
        .encode(
            &Frame::GoAway {
                last_good_stream_id: 0,
                status: 0,
            },
            &mut out,
        )
        .unwrap();
    let want: &[u8] = &[
        0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1, // PING 1
        0, 0, 0, 3, 1, 0, 0, 2, b'a', b'b', // DATA stream 3, FIN, "ab"
        0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 3, 0, 0, 0, 5, // RST_STREAM 3 CANCEL
        0x80, 3, 0, 7, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, // GOAWAY 0 OK
    ];
    assert_eq!(&out[..], want);
}

#[test]
fn byte_at_a_time() {
    let frames = sample();
    let wire = encode_all(&frames);
    let mut codec = Codec::new();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for &b in wire.iter() {
        buf.put_u8(b);
        while let Some(f) = codec.decode(&mut buf).unwrap() {
            got.push(f);
        }
    }
    assert_eq!(got, frames);
}

#[test]
fn split_at_every_position() {
    let frames = sample()[..9].to_vec();
    let wire = encode_all(&frames);
    for at in 0..=wire.len() {
        let mut codec = Codec::new();
        let mut buf = BytesMut::from(&wire[..at]);
        let mut got = decode_all(&mut codec, &mut buf).unwrap();
        buf.extend_from_slice(&wire[at..]);
        got.extend(decode_all(&mut codec, &mut buf).unwrap());
        assert_eq!(got, frames, "split at {at}");
    }
}

#[test]
fn unknown_control_frames_are_skipped() {
    let mut wire = BytesMut::new();
    // NOOP (5, SPDY/2's) and an unassigned type 0x99 with a body.
    wire.extend_from_slice(&[0x80, 3, 0, 5, 0, 0, 0, 0]);
    wire.extend_from_slice(&[0x80, 3, 0, 0x99, 0xff, 0, 0, 3, 1, 2, 3]);
    wire.extend_from_slice(&[0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 9]);
    let mut codec = Codec::new();
    assert_eq!(codec.decode(&mut wire).unwrap(), Some(Frame::Ping { id: 9 }));
    assert!(wire.is_empty());
}

fn decode_err(bytes: &[u8]) -> FrameError {
    let mut buf = BytesMut::from(bytes);
    decode_all(&mut Codec::new(), &mut buf).expect_err("must not decode")
}

#[test]
fn malformed_frames() {
    assert_eq!(
        decode_err(&[0x80, 2, 0, 6, 0, 0, 0, 4, 0, 0, 0, 1]),
        FrameError::BadVersion(2)
    );
    assert_eq!(
        decode_err(&[0xff, 0xff, 0, 1, 0, 0, 0, 0]),
        FrameError::BadVersion(0x7fff)
    );
    // Refused on the header alone, before its 16 MiB arrive.
    assert!(matches!(
        decode_err(&[0x80, 3, 0, 1, 0, 0xff, 0xff, 0xff]),
        FrameError::TooLarge { .. }
    ));
    assert_eq!(
        decode_err(&[0, 0, 0, 0, 0, 0, 0, 1, 0]),
        FrameError::ZeroStreamId("DATA")
    );
    // Lengths too short for the frame's fixed fields.
    assert!(matches!(
        decode_err(&[0x80, 3, 0, 1, 0, 0, 0, 5, 0, 0, 0, 1, 0]),
        FrameError::BadLength { .. }
    ));
    assert!(matches!(
        decode_err(&[0x80, 3, 0, 2, 0, 0, 0, 2, 0, 1]),
        FrameError::BadLength { .. }
    ));
    assert!(matches!(
        decode_err(&[0x80, 3, 0, 3, 0, 0, 0, 4, 0, 0, 0, 1]),
        FrameError::BadLength { .. }
    ));
    assert!(matches!(
        decode_err(&[0x80, 3, 0, 6, 0, 0, 0, 2, 0, 1]),
        FrameError::BadLength { .. }
    ));
    assert!(matches!(
        decode_err(&[0x80, 3, 0, 7, 0, 0, 0, 4, 0, 0, 0, 1]),
        FrameError::BadLength { .. }
    ));
    assert!(matches!(
        decode_err(&[0x80, 3, 0, 9, 0, 0, 0, 0]),
        FrameError::BadLength { .. }
    ));
    // SETTINGS whose count is more than its entries.
    let settings = [0x80, 3, 0, 4, 0, 0, 0, 12, 0x10, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1];
    assert!(matches!(decode_err(&settings), FrameError::BadLength { .. }));
    // Stream 0 where a stream is needed.
    assert_eq!(
        decode_err(&[0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 1]),
        FrameError::ZeroStreamId("RST_STREAM")
    );
    // A SYN_STREAM whose header block is not zlib.
    let syn = [
        0x80, 3, 0, 1, 0, 0, 0, 14, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xde, 0xad, 0xbe, 0xef,
    ];
    assert!(matches!(decode_err(&syn), FrameError::Zlib(_)));
}

/// A SYN_REPLY for stream 1 carrying `block`, compressed as a peer would.
fn syn_reply_with_block(block: &[u8]) -> Vec<u8> {
    let mut z = flate2::Compress::new(flate2::Compression::default(), true);
    z.set_dictionary(DICTIONARY).unwrap();
    let mut compressed = Vec::with_capacity(block.len() + 1024);
    z.compress_vec(block, &mut compressed, flate2::FlushCompress::Sync)
        .unwrap();
    let len = u32::try_from(compressed.len() + 4).unwrap();
    let mut frame = vec![0x80, 3, 0, 2];
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 1]);
    frame.extend_from_slice(&compressed);
    frame
}

#[test]
fn malformed_header_blocks() {
    // More pairs than the block has bytes for.
    assert_eq!(
        decode_err(&syn_reply_with_block(&[0, 0, 0, 100, 0, 0, 0, 0])),
        FrameError::TruncatedHeaderBlock
    );
    assert_eq!(
        decode_err(&syn_reply_with_block(&[0, 0xff, 0, 0])),
        FrameError::TooManyHeaders(0xff_0000)
    );
    // A pair cut short.
    assert_eq!(
        decode_err(&syn_reply_with_block(&[0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0])),
        FrameError::TruncatedHeaderBlock
    );
    // One value that inflates past the cap.
    let mut bomb = vec![0, 0, 0, 1, 0, 0, 0, 1, b'a', 0, 0x10, 0, 0];
    bomb.resize(bomb.len() + 0x10_0000, b'z');
    let frame = syn_reply_with_block(&bomb);
    assert!(frame.len() < 8192);
    assert_eq!(decode_err(&frame), FrameError::HeaderBlockTooLarge);
}

#[test]
fn encode_refuses_out_of_range_fields() {
    let mut codec = Codec::new();
    let mut out = BytesMut::new();
    let data = Frame::Data {
        stream_id: 0,
        fin: false,
        data: Bytes::new(),
    };
    assert_eq!(
        codec.encode(&data, &mut out),
        Err(FrameError::ZeroStreamId("DATA"))
    );
    let rst = Frame::RstStream {
        stream_id: 0x8000_0000,
        status: 1,
    };
    assert_eq!(
        codec.encode(&rst, &mut out),
        Err(FrameError::InvalidStreamId(0x8000_0000))
    );
    let big = Frame::Data {
        stream_id: 1,
        fin: false,
        data: Bytes::from(vec![0; MAX_FRAME_LEN + 1]),
    };
    assert!(matches!(
        codec.encode(&big, &mut out),
        Err(FrameError::TooLarge { .. })
    ));
    let syn = Frame::SynStream {
        stream_id: 1,
        associated_to: 0,
        priority: 8,
        slot: 0,
        fin: false,
        unidirectional: false,
        headers: Headers::new(),
    };
    assert_eq!(codec.encode(&syn, &mut out), Err(FrameError::InvalidPriority(8)));
    let settings = Frame::Settings {
        clear: false,
        entries: vec![Setting {
            flags: 0,
            id: 1 << 24,
            value: 0,
        }],
    };
    assert_eq!(
        codec.encode(&settings, &mut out),
        Err(FrameError::InvalidSetting(1 << 24))
    );
    assert!(out.is_empty());
}

#[test]
fn data_length_limit() {
    let mut codec = Codec::new();
    let mut wire = BytesMut::new();
    codec
        .encode(
            &Frame::Data {
                stream_id: 1,
                fin: false,
                data: Bytes::from(vec![1; 100]),
            },
            &mut wire,
        )
        .unwrap();
    let (_, mut decoder) = Codec::new().into_parts();
    decoder.set_max_data_len(99);
    assert_eq!(
        decoder.decode(&mut wire),
        Err(FrameError::TooLarge { len: 100, max: 99 })
    );
}

/// xorshift64*: deterministic, good enough to make garbage.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let valid = encode_all(&sample());
    for case in 0..4000 {
        let len = usize::try_from(rng.next() % 256).unwrap();
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next().to_le_bytes()[0]).collect();
        // Most cases get a plausible control or data header so that the body parsers are reached too.
        match case % 4 {
            0 => {}
            1 if len >= 8 => {
                bytes[..8].copy_from_slice(&[0x80, 3, 0, (case % 10) as u8, 0, 0, 0, (len - 8) as u8]);
            }
            2 if len >= 8 => bytes[..4].copy_from_slice(&[0, 0, 0, 1]),
            _ => {
                // A valid stream with a few bytes flipped.
                bytes = valid.to_vec();
                for _ in 0..3 {
                    let at = usize::try_from(rng.next()).unwrap() % bytes.len();
                    bytes[at] ^= rng.next().to_le_bytes()[0] | 1;
                }
            }
        }
        let mut codec = Codec::new();
        let mut buf = BytesMut::from(&bytes[..]);
        let _ = decode_all(&mut codec, &mut buf);
    }
}
