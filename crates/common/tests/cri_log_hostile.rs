//! CRI log lines against hostile input, bounded: `cri_log::parse` and `parse_time` get noise, lines made of
//! hostile parts (long or empty times, odd streams and tags, NULs, CRs, missing spaces) and mutations of valid
//! records. Nothing may panic; a record parsed borrows from its line (parsing allocates nothing, whatever
//! the line) with a time of at most 64 bytes; the first HEADER_MAX bytes of a line tell what the whole line
//! tells (the tail search reads no more); a time written reads back, and a mutated one reads as a time at or
//! after the epoch or as none. Each case is timed.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crius_common::cri_log::{HEADER_MAX, parse, parse_time};
use crius_common::time::{Fraction, format};
use proptest::prelude::*;

fn part() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            &b"2026-01-01T00:00:00.123456789Z"[..],
            b"stdout",
            b"stderr",
            b"P",
            b"F",
            b"F:x",
            b"P:",
            b":",
            b"",
            b" ",
            b"\n",
            b"\r",
            b"\0",
            b"stdin",
            b"9999-99-99T99:99:99Z",
        ])
        .prop_map(<[u8]>::to_vec),
        prop::collection::vec(any::<u8>(), 0..8),
        (1usize..200).prop_map(|n| vec![b'9'; n]),
    ]
}

fn line() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(part(), 0..6).prop_map(|parts| parts.join(&b' '))
}

/// The checks of one line.
fn check(line: &[u8]) -> Result<(), TestCaseError> {
    let t = Instant::now();
    let r = parse(line);
    if let Some(r) = r {
        let inside = |s: &[u8]| {
            let (a, b) = (s.as_ptr() as usize, line.as_ptr() as usize);
            s.is_empty() || (a >= b && a + s.len() <= b + line.len())
        };
        prop_assert!(inside(r.time) && inside(r.text), "a record borrows from its line");
        prop_assert!(!r.time.is_empty() && r.time.len() <= 64);
        let head = parse(&line[..line.len().min(HEADER_MAX)]);
        prop_assert!(
            head.is_some_and(|h| (h.stream, h.partial, h.time) == (r.stream, r.partial, r.time)),
            "the head of a record tells what it is"
        );
        if let Some(at) = parse_time(r.time) {
            prop_assert!(at >= UNIX_EPOCH);
        }
    }
    let _ = parse_time(line);
    prop_assert!(t.elapsed() < Duration::from_secs(1));
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn noise_and_hostile_lines_parse_without_panic(noise in prop::collection::vec(any::<u8>(), 0..300), l in line()) {
        check(&noise)?;
        check(&l)?;
    }

    #[test]
    fn times_read_back_and_mutated_ones_are_times_or_none(
        secs in 0u64..253_402_300_799, nanos in 0u32..1_000_000_000, nanos_only in any::<bool>(),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 0..3),
        text in prop::collection::vec(any::<u8>(), 0..100),
    ) {
        let at = UNIX_EPOCH + Duration::new(secs, nanos);
        let written = format(at, if nanos_only { Fraction::Nanos } else { Fraction::Trimmed });
        prop_assert_eq!(parse_time(written.as_bytes()), Some(at));
        let record = [written.as_bytes(), b" stderr F ", &text].concat();
        let r = parse(&record).unwrap();
        prop_assert_eq!(r.text, &text[..text.len() - usize::from(text.last() == Some(&b'\n'))]);
        let mut bytes = written.into_bytes();
        for (i, x) in flips {
            let n = bytes.len();
            bytes[i % n] = x;
        }
        if let Some(t) = parse_time(&bytes) {
            prop_assert!(t >= UNIX_EPOCH && t < UNIX_EPOCH + Duration::from_secs(400_000_000_000));
        }
        check(&[&bytes[..], b" stdout P ", &text].concat())?;
    }
}

#[test]
fn regression_lines() {
    let long_time = [vec![b'1'; 65], b" stdout F x".to_vec()].concat();
    assert_eq!(parse(&long_time), None, "a time over 64 bytes");
    let huge = [&b"2026-01-01T00:00:00Z stdout P "[..], &vec![b'x'; 8 << 20]].concat();
    let t = Instant::now();
    assert_eq!(parse(&huge).unwrap().text.len(), 8 << 20);
    assert!(t.elapsed() < Duration::from_secs(1));
    for bad in [
        &b"2026-01-01T00:00:00.Z"[..],
        b"2026-01-01T00:00:00.",
        b"2026-01-01T00:00:00+",
        b"2026-01-01T00:00:00+99:99x",
        b"0000-00-00T00:00:00Z",
        b"2026-01-01T00:00:00.99999999999999999999999999999999999999Z",
    ] {
        let _ = parse_time(bad);
    }
    // Years before 1970 are the epoch, not a panic or a wrap.
    assert_eq!(parse_time(b"0001-01-01T00:00:00Z"), Some(UNIX_EPOCH));
    assert_eq!(
        parse_time(b"9999-12-31T23:59:60+00:00").map(|t| t > SystemTime::now()),
        Some(true)
    );
}
