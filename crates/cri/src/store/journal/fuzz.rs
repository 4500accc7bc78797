//! The journal's on-disk decoding against hostile bytes, bounded: noise after the magic, valid journals with
//! bytes flipped, cut, or a length field rewritten (up to u32::MAX), go through `parse`, `replay` and
//! `Journal::open`. Nothing may panic; an entry parsed lies inside the bytes given (a length field is never
//! trusted beyond them: parsing allocates nothing, and what replay keeps is no more than its input); every
//! entry before the first changed byte survives; what `open` cuts the file to opens again as the same values.
//! Regression inputs: a last entry whose length says 4 GiB, a length of 0, a key length past the body, an
//! unknown op, a key that is not UTF-8.

use proptest::prelude::*;

use super::*;

/// A journal's bytes of `entries` (op, key, value), and where each entry ends.
fn journal(entries: &[(u8, String, Vec<u8>)]) -> (Vec<u8>, Vec<usize>) {
    let mut out = MAGIC.to_vec();
    let mut ends = Vec::new();
    for (op, k, v) in entries {
        out.extend(entry(*op, k, v).unwrap());
        ends.push(out.len());
    }
    (out, ends)
}

/// The checks every input gets: bounds, the prefix kept, and a stable cut.
fn check(bytes: &[u8], intact_end: usize) -> std::result::Result<(), TestCaseError> {
    let mut at = MAGIC.len();
    while at < bytes.len() {
        let Some((op, key, value, n)) = parse(&bytes[at..]) else {
            break;
        };
        prop_assert!(
            n >= HEADER + 2 && at + n <= bytes.len(),
            "entry of {} at {} in {}",
            n,
            at,
            bytes.len()
        );
        prop_assert!(matches!(op, PUT | DELETE) && !key.is_empty() && value.len() < n);
        at += n;
    }
    let r = replay(bytes);
    prop_assert_eq!(r.end, at.min(bytes.len()).max(MAGIC.len()));
    prop_assert!(
        r.end >= intact_end.min(bytes.len()),
        "lost entries before the first change"
    );
    let held: usize = r.values.iter().map(|(k, v)| k.len() + v.len()).sum();
    prop_assert!(held <= bytes.len());
    for (off, n) in r.live.values() {
        prop_assert!(*off as usize >= MAGIC.len() && (off + n) as usize <= r.end);
    }
    // What open keeps (the bytes up to the end) opens again as the same.
    let again = replay(&bytes[..r.end]);
    prop_assert_eq!(&again.values, &r.values);
    prop_assert_eq!(again.end, r.end);
    Ok(())
}

/// Opens a file of `bytes` as a journal: it must not panic, must keep the values replay finds, and leaves
/// the file cut to what it kept.
fn check_open(bytes: &[u8]) -> std::result::Result<(), TestCaseError> {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("journal");
    std::fs::write(&p, bytes).unwrap();
    let t = std::time::Instant::now();
    let (j, values) = Journal::open(&p).unwrap();
    prop_assert!(t.elapsed() < std::time::Duration::from_secs(5));
    let r = replay(bytes);
    prop_assert_eq!(&values, &r.values);
    prop_assert_eq!(std::fs::metadata(&p).unwrap().len(), r.end as u64);
    j.put("after", b"x").unwrap();
    drop(j);
    let (_, again) = Journal::open(&p).unwrap();
    prop_assert_eq!(
        again.len(),
        values.len() + usize::from(!values.contains_key("after"))
    );
    Ok(())
}

fn entries() -> impl Strategy<Value = Vec<(u8, String, Vec<u8>)>> {
    prop::collection::vec(
        (
            prop_oneof![3 => Just(PUT), 1 => Just(DELETE)],
            "[a-c]{1,3}",
            prop::collection::vec(any::<u8>(), 0..40),
        ),
        0..12,
    )
}

#[derive(Debug, Clone)]
enum Change {
    Flip(usize, u8),
    Cut(usize),
    /// The length field of entry `n` (modulo the count) set to a value.
    Len(usize, u32),
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(a, x)| Change::Flip(a, x)),
        any::<usize>().prop_map(Change::Cut),
        (
            any::<usize>(),
            prop_oneof![Just(u32::MAX), Just(0), Just(1), any::<u32>()]
        )
            .prop_map(|(n, v)| Change::Len(n, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn noise_after_the_magic_is_bounded(noise in prop::collection::vec(any::<u8>(), 0..600)) {
        let bytes = [MAGIC, &noise].concat();
        check(&bytes, MAGIC.len())?;
    }

    #[test]
    fn changed_journals_keep_every_entry_before_the_change(es in entries(), cs in prop::collection::vec(change(), 1..4)) {
        let (mut bytes, ends) = journal(&es);
        let mut first = bytes.len();
        for c in cs {
            match c {
                Change::Flip(a, x) if bytes.len() > MAGIC.len() => {
                    let i = MAGIC.len() + a % (bytes.len() - MAGIC.len());
                    bytes[i] ^= x;
                    first = first.min(i);
                }
                Change::Cut(a) => {
                    let at = MAGIC.len() + a % (bytes.len() - MAGIC.len() + 1);
                    bytes.truncate(at);
                    first = first.min(at);
                }
                Change::Len(n, v) if !ends.is_empty() => {
                    let start = [&[MAGIC.len()][..], &ends].concat()[n % ends.len()];
                    if start + 4 <= bytes.len() {
                        bytes[start..start + 4].copy_from_slice(&v.to_le_bytes());
                        first = first.min(start);
                    }
                }
                _ => {}
            }
        }
        let intact = ends.iter().copied().filter(|e| *e <= first).max().unwrap_or(MAGIC.len());
        check(&bytes, intact)?;
        check_open(&bytes)?;
    }
}

#[test]
fn regression_inputs_are_cut_off_and_what_precedes_them_kept() {
    let (good, _) = journal(&[(PUT, "a".into(), b"one".to_vec())]);
    let body = [&[PUT, 1][..], b"b", b"two"].concat();
    let with = |len: u32, body: &[u8]| {
        let mut e = len.to_le_bytes().to_vec();
        e.extend(crc32fast::hash(body).to_le_bytes());
        e.extend(body);
        [&good[..], &e].concat()
    };
    let cases = [
        ("a length of 4 GiB", with(u32::MAX, &body)),
        ("a length of 0", with(0, &[])),
        ("a key length past the body", with(3, &[PUT, 200, b'k'])),
        (
            "an unknown op",
            with(body.len() as u32, &[&[9u8, 1][..], b"b", b"two"].concat()),
        ),
        ("a key not UTF-8", with(4, &[PUT, 2, 0xff, 0xfe])),
        ("a header cut short", [&good[..], &[1, 0, 0][..]].concat()),
    ];
    for (what, bytes) in cases {
        let r = replay(&bytes);
        assert_eq!(r.end, good.len(), "{what}");
        assert_eq!(
            r.values,
            HashMap::from([("a".to_string(), b"one".to_vec())]),
            "{what}"
        );
        check_open(&bytes).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
}
