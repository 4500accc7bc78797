//! Frames recorded from Go's moby/spdystream Framer (see testdata/spdystream-frames.txt): we must decode what
//! it writes, and write what it writes where no compression is involved.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::frame::{Codec, Frame, Headers, RST_CANCEL, Setting};

const FRAMES: &str = include_str!("testdata/spdystream-frames.txt");

/// (number, framer, bytes) per recorded frame.
fn recorded() -> Vec<(u32, char, Vec<u8>)> {
    FRAMES
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let mut fields = line.split_whitespace();
            let n = fields.next().unwrap().parse().unwrap();
            let framer = fields.next().unwrap().chars().next().unwrap();
            let hex = fields.next().unwrap();
            let bytes = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (n, framer, bytes)
        })
        .collect()
}

fn headers(pairs: &[(&str, &str)]) -> Headers {
    pairs.iter().copied().collect()
}

fn syn(stream_id: u32, h: Headers) -> Frame {
    Frame::SynStream {
        stream_id,
        associated_to: 0,
        priority: 0,
        slot: 0,
        fin: false,
        unidirectional: false,
        headers: h,
    }
}

/// What each recorded frame is (14's header order is Go's map order, so it is checked apart).
fn expected(n: u32) -> Option<Frame> {
    Some(match n {
        1 => syn(1, headers(&[("streamtype", "error")])),
        2 => syn(3, headers(&[("streamtype", "stdout")])),
        3 => Frame::SynReply {
            stream_id: 1,
            fin: false,
            headers: Headers::new(),
        },
        4 => Frame::SynReply {
            stream_id: 3,
            fin: false,
            headers: Headers::new(),
        },
        5 => Frame::Data {
            stream_id: 3,
            fin: false,
            data: Bytes::from_static(b"hello\n"),
        },
        6 => Frame::Data {
            stream_id: 3,
            fin: true,
            data: Bytes::new(),
        },
        7 => Frame::RstStream {
            stream_id: 3,
            status: RST_CANCEL,
        },
        8 => Frame::Ping { id: 1 },
        9 => Frame::GoAway {
            last_good_stream_id: 0,
            status: 0,
        },
        10 => Frame::GoAway {
            last_good_stream_id: 7,
            status: 0,
        },
        11 => Frame::WindowUpdate {
            stream_id: 3,
            delta: 65536,
        },
        12 => Frame::Settings {
            clear: false,
            entries: vec![Setting {
                flags: 0,
                id: 7,
                value: 65536,
            }],
        },
        13 => Frame::Headers {
            stream_id: 3,
            fin: false,
            headers: headers(&[("foo", "bar")]),
        },
        _ => return None,
    })
}

#[test]
fn decodes_what_spdystream_writes() {
    let frames = recorded();
    assert_eq!(frames.len(), 14);
    let mut decoders: HashMap<char, Codec> = HashMap::new();
    for (n, framer, bytes) in frames {
        let mut buf = BytesMut::from(&bytes[..]);
        let frame = decoders
            .entry(framer)
            .or_default()
            .decode(&mut buf)
            .unwrap()
            .unwrap();
        assert!(buf.is_empty(), "frame {n} not used up");
        match expected(n) {
            Some(want) => assert_eq!(frame, want, "frame {n}"),
            None => {
                let Frame::SynStream {
                    stream_id: 1,
                    headers,
                    ..
                } = frame
                else {
                    panic!("frame {n}: {frame:?}")
                };
                assert_eq!(headers.len(), 3);
                assert_eq!(headers.get("streamtype"), Some("error"));
                assert_eq!(headers.get("port"), Some("8080"));
                assert_eq!(headers.get("requestid"), Some("0"));
            }
        }
    }
}

#[test]
fn decodes_spdystream_byte_at_a_time() {
    // Framer A's frames back to back, as one connection would carry them.
    let wire: Vec<u8> = recorded()
        .into_iter()
        .filter(|f| f.1 == 'A')
        .flat_map(|f| f.2)
        .collect();
    let mut codec = Codec::new();
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    for b in wire {
        buf.put_u8(b);
        while let Some(frame) = codec.decode(&mut buf).unwrap() {
            got.push(frame);
        }
    }
    let want: Vec<Frame> = [1, 2, 5, 6, 7, 8, 9, 11, 12, 13]
        .into_iter()
        .filter_map(expected)
        .collect();
    assert_eq!(got, want);
}

#[test]
fn writes_what_spdystream_writes() {
    // Frames without header blocks are byte-for-byte the same from any correct writer.
    let mut codec = Codec::new();
    for (n, _, bytes) in recorded().into_iter().filter(|f| (5..=12).contains(&f.0)) {
        let mut out = BytesMut::new();
        codec.encode(&expected(n).unwrap(), &mut out).unwrap();
        assert_eq!(&out[..], &bytes[..], "frame {n}");
    }
}

#[test]
fn first_header_block_names_the_same_dictionary() {
    // Our compressed bytes may differ from Go's, but the zlib header and dictionary id must agree.
    let (_, _, go) = &recorded()[0];
    let mut ours = BytesMut::new();
    Codec::new().encode(&expected(1).unwrap(), &mut ours).unwrap();
    // CMF (deflate, 32 KiB window), then FLG's FDICT bit (the level bits may differ), then the id.
    assert_eq!(ours[18], go[18]);
    assert_eq!(ours[19] & 0x20, 0x20);
    assert_eq!(&ours[20..24], &go[20..24]);
    assert_eq!(&go[20..24], &[0xe3, 0xc6, 0xa7, 0xc2]);
}
