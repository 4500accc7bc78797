//! Reading CRI log files (`crius logs`, the pod service's logs) against hostile files, bounded: records of
//! hostile parts, runs of partial records, lines without an end, NULs and noise, read with and without
//! `--tail`, `--timestamps` and `--since`. Nothing may panic; the reader holds at most [`LINE_MAX`] and a
//! [`STEP`] of an unfinished line or partial text (so a file of one endless line costs bounded memory); every
//! line it gives is bounded likewise; what it gives is no more than the file, the times it adds and a newline
//! a line; `--tail` starts at the file's start or just after a newline. Regression inputs: an 8 MiB line
//! without a newline, 8 MiB of partial records of one stream, a time field of 100 bytes.

use proptest::prelude::*;

use super::*;

/// The most the reader may hold of unfinished lines at once, and the longest line it may give.
const HELD_MAX: usize = 2 * LINE_MAX + STEP + 256;

/// Reads all of `content` with `opts` as `stream` does (not following), checking the bounds at each step;
/// what it gave.
fn read(content: &[u8], opts: &LogOptions) -> Result<Vec<u8>, TestCaseError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("0.log");
    std::fs::write(&path, content).unwrap();
    let t = std::time::Instant::now();
    let mut r = Reader::open(path, opts).unwrap();
    prop_assert!(r.pos <= content.len() as u64);
    let at = r.pos as usize;
    prop_assert!(
        at == 0 || at == content.len() || content[at - 1] == b'\n',
        "tail starts at the start, the end or after a newline"
    );
    let mut out = Vec::new();
    while let Some(chunk) = r.step().unwrap() {
        let held = r.pending.len()
            + r.partial
                .iter()
                .flatten()
                .map(|(t, x)| t.len() + x.len())
                .sum::<usize>();
        prop_assert!(held <= HELD_MAX, "the reader holds {} bytes", held);
        out.extend(chunk);
    }
    out.extend(r.finish());
    prop_assert!(t.elapsed() < Duration::from_secs(10));
    let lines = out.iter().filter(|b| **b == b'\n').count();
    prop_assert!(
        out.len() <= content.len() + lines * 66,
        "{} bytes given for {}",
        out.len(),
        content.len()
    );
    for line in out.split(|b| *b == b'\n') {
        prop_assert!(line.len() <= HELD_MAX, "a line of {} bytes", line.len());
    }
    Ok(out)
}

fn part() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        4 => prop::sample::select(vec![
            &b"2026-01-01T00:00:00.5Z stdout F hello"[..], b"2026-01-01T00:00:01Z stderr P par",
            b"2026-01-01T00:00:02Z stdout P ", b"t stdout F x", b"t stderr F:tag y", b"garbage",
            b"2026-01-01T00:00:03+02:00 stdout F z", b"\0\0\0", b"", b"9999-99-99T99:99:99Z stdout F bad time",
        ])
        .prop_map(<[u8]>::to_vec),
        1 => prop::collection::vec(any::<u8>(), 0..40),
    ]
}

fn opts() -> impl Strategy<Value = LogOptions> {
    (
        prop::option::of(0u64..6),
        any::<bool>(),
        prop::option::of(1_767_225_600u64..1_767_225_605),
    )
        .prop_map(|(tail_lines, timestamps, since)| LogOptions {
            follow: false,
            tail_lines,
            timestamps,
            since: since.map(|s| std::time::UNIX_EPOCH + Duration::from_secs(s)),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn hostile_logs_are_read_in_bounded_memory(
        parts in prop::collection::vec(part(), 0..20),
        end in any::<bool>(),
        opts in opts(),
    ) {
        let mut content = parts.join(&b'\n');
        if end {
            content.push(b'\n');
        }
        read(&content, &opts)?;
    }
}

#[test]
fn regression_logs() {
    let plain = LogOptions::default();
    let tail = LogOptions {
        tail_lines: Some(2),
        timestamps: true,
        ..LogOptions::default()
    };
    let endless = vec![b'x'; 8 << 20];
    let partials: Vec<u8> = (0..(8 << 20) / 1024)
        .flat_map(|_| [&b"2026-01-01T00:00:00Z stdout P "[..], &[b'p'; 1000], b"\n"].concat())
        .collect();
    let long_time = [&[b'1'; 100][..], b" stdout F x\n"].concat();
    for (what, content) in [
        ("endless line", endless),
        ("partials", partials),
        ("long time", long_time),
    ] {
        for opts in [&plain, &tail] {
            let out = read(&content, opts).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(!out.is_empty(), "{what}");
        }
    }
}
