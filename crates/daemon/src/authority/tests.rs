//! The rewriter on hand-made HTTP/2 byte streams: fed whole and a byte at a time, padded and continued blocks,
//! the dynamic table's later references, and what it leaves alone.

use super::*;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len();
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A literal with incremental indexing on the static `:authority` name, its value a plain literal.
fn authority_literal(value: &[u8]) -> Vec<u8> {
    let mut b = vec![0x41, value.len() as u8];
    b.extend_from_slice(value);
    b
}

fn run(input: &[u8], byte_at_a_time: bool) -> (Vec<u8>, usize) {
    let mut r = Rewriter::default();
    let mut out = Vec::new();
    if byte_at_a_time {
        for b in input {
            r.feed(std::slice::from_ref(b), &mut out);
        }
    } else {
        r.feed(input, &mut out);
    }
    r.flush(&mut out);
    (out, r.rewritten())
}

fn both(input: &[u8]) -> (Vec<u8>, usize) {
    let whole = run(input, false);
    assert_eq!(whole, run(input, true), "fed whole and a byte at a time");
    whole
}

#[test]
fn a_percent_encoded_socket_path_becomes_a_valid_authority_of_the_same_length() {
    // :method POST (static 3), :path as a plain literal, then the authority grpcio 1.85 sends.
    let mut block = vec![0x83, 0x44, 0x03];
    block.extend_from_slice(b"/x/");
    block.extend_from_slice(&authority_literal(b"tmp%2Fcrius.sock"));
    let settings = frame(0x4, 0, 0, &[]);
    let data = frame(0x0, 0x1, 1, b"\0\0\0\0\0");
    let input = [PREFACE, &settings, &frame(HEADERS, END_HEADERS, 1, &block), &data].concat();
    let (out, n) = both(&input);
    assert_eq!(n, 1);
    assert_eq!(out.len(), input.len());
    let want = input.windows(16).position(|w| w == b"tmp%2Fcrius.sock").unwrap();
    assert_eq!(&out[want..want + 16], b"tmp-2Fcrius.sock");
    assert_eq!(out[..want], input[..want]);
    assert_eq!(out[want + 16..], input[want + 16..]);
}

#[test]
fn a_padded_block_split_over_continuations_is_rewritten_across_the_split() {
    let mut block = vec![0x82];
    block.extend_from_slice(&authority_literal(b"a b:c:d"));
    let (first, rest) = block.split_at(4);
    // HEADERS padded by 3 with a priority field, then the rest in a CONTINUATION.
    let mut payload = vec![3];
    payload.extend_from_slice(&[0, 0, 0, 0, 16]);
    payload.extend_from_slice(first);
    payload.extend_from_slice(&[0, 0, 0]);
    let input = [
        PREFACE,
        &frame(HEADERS, PADDED | PRIORITY, 1, &payload),
        &frame(CONTINUATION, END_HEADERS, 1, rest),
    ]
    .concat();
    let (out, n) = both(&input);
    assert_eq!(n, 1);
    let text = String::from_utf8_lossy(&out);
    assert!(!text.contains("a b"), "{text:?}");
    assert_eq!(out.len(), input.len());
    // The split value reads "a-b-c-d" once the frames' own bytes are skipped.
    let flat: Vec<u8> = out.iter().copied().filter(|b| b"ab-cd".contains(b)).collect();
    assert!(flat.windows(7).any(|w| w == b"a-b-c-d"), "{flat:?}");
}

#[test]
fn the_dynamic_table_is_followed_for_a_literal_naming_an_earlier_authority_entry() {
    // Block 1 adds "x-other: v" (new name, incremental indexing) then a good :authority (indexed too).
    let mut b1 = vec![0x40, 7];
    b1.extend_from_slice(b"x-other");
    b1.extend_from_slice(&[1, b'v']);
    b1.extend_from_slice(&authority_literal(b"localhost"));
    // Block 2: a literal without indexing whose name is dynamic index 62 (the newest: :authority).
    let mut b2 = vec![0x0F, 62 - 15, 5];
    b2.extend_from_slice(b"a%20b");
    let input = [
        PREFACE,
        &frame(HEADERS, END_HEADERS, 1, &b1),
        &frame(HEADERS, END_HEADERS, 3, &b2),
    ]
    .concat();
    let (out, n) = both(&input);
    assert_eq!(n, 1);
    assert!(out.windows(5).any(|w| w == b"a-20b"));
    assert!(out.windows(9).any(|w| w == b"localhost"));
}

#[test]
fn good_huffman_coded_and_other_headers_pass_unchanged() {
    let mut block = authority_literal(b"localhost:1234");
    // A Huffman-coded value (the H bit) is not decoded: it passes as it came.
    block.extend_from_slice(&[0x41, 0x83, b'%', b'%', b'%']);
    // A header of another name with a value that would be a bad authority.
    block.extend_from_slice(&[0x40 | 4, 4]);
    block.extend_from_slice(b"a%bc");
    let input = [PREFACE, &frame(HEADERS, END_HEADERS, 1, &block)].concat();
    assert_eq!(both(&input), (input.clone(), 0));
}

#[test]
fn a_malformed_block_turns_the_rewrite_off_and_the_bytes_pass_as_they_came() {
    // A string length past the block's end.
    let block = [0x41, 0x20, b'%'];
    let later = [0x41, 3, b'%', b'%', b'%'];
    let input = [
        PREFACE,
        &frame(HEADERS, END_HEADERS, 1, &block),
        &frame(HEADERS, END_HEADERS, 3, &later),
    ]
    .concat();
    assert_eq!(both(&input), (input.clone(), 0));
}

#[test]
fn a_block_over_the_limit_passes_unread() {
    let mut block = authority_literal(b"a%b");
    block.resize(MAX_HELD, 0x82);
    let input = [PREFACE, &frame(HEADERS, END_HEADERS, 1, &block)].concat();
    assert_eq!(both(&input), (input.clone(), 0));
}
