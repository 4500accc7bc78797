//! One line of a CRI log file: `<RFC3339Nano time> <stdout|stderr> <P|F> <text>` (the format the shim writes,
//! and kubelet reads), and its time as a [`std::time::SystemTime`]: read by the pod service's logs,
//! `crius run --logs` and criusd's attach (one parser for all three).

/// The stream a record was written from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// The process's standard output.
    Stdout,
    /// Its standard error.
    Stderr,
}

/// A record of a CRI log file, borrowed from its line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Its time, as written (Go's RFC3339Nano).
    pub time: &'a [u8],
    /// Where the text came from.
    pub stream: Stream,
    /// A `P` record: the text is part of a line, which a later record of the same stream goes on with.
    pub partial: bool,
    /// The text, without the newline of a full line.
    pub text: &'a [u8],
}

/// The longest time field a record may have (RFC3339Nano with a zone offset is 35 bytes). Bounding it lets
/// [`parse`] decide on the first [`HEADER_MAX`] bytes of a line, which is what the tail search looks at.
const TIME_MAX: usize = 64;
/// How many bytes of a line are enough for [`parse`] to know whether it is a record, and a partial one.
pub const HEADER_MAX: usize = 128;

/// The record `line` holds (a trailing newline is ignored), or None for a line not in the CRI format.
///
/// The tag is kubelet's: `P` or `F`, possibly followed by `:`-separated tags of its own.
pub fn parse(line: &[u8]) -> Option<Record<'_>> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let mut parts = line.splitn(4, |b| *b == b' ');
    let time = parts.next()?;
    if time.is_empty() || time.len() > TIME_MAX {
        return None;
    }
    let stream = match parts.next()? {
        b"stdout" => Stream::Stdout,
        b"stderr" => Stream::Stderr,
        _ => return None,
    };
    let partial = match parts.next()?.split(|b| *b == b':').next() {
        Some(b"P") => true,
        Some(b"F") => false,
        _ => return None,
    };
    Some(Record {
        time,
        stream,
        partial,
        text: parts.next().unwrap_or_default(),
    })
}

/// A record's time as a [`std::time::SystemTime`]: [`crate::time::parse`], the one RFC 3339 reader.
pub use crate::time::parse as parse_time;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_other_lines() {
        let r = parse(b"2026-01-01T00:00:00.5Z stderr P $ ").unwrap();
        assert_eq!(
            (r.time, r.stream, r.partial, r.text),
            (&b"2026-01-01T00:00:00.5Z"[..], Stream::Stderr, true, &b"$ "[..])
        );
        let r = parse(b"t stdout F hello world\n").unwrap();
        assert_eq!(
            (r.stream, r.partial, r.text),
            (Stream::Stdout, false, &b"hello world"[..])
        );
        assert_eq!(parse(b"t stdout F").unwrap().text, b"");
        assert_eq!(parse(b"t stdout F:x y").unwrap().text, b"y");
        for other in [&b"garbage"[..], b"a b c d", b"t stdout X y", b"", b" stdout F x"] {
            assert_eq!(parse(other), None, "{:?}", String::from_utf8_lossy(other));
        }
        // A record is known by its first HEADER_MAX bytes.
        let long = format!("{} stdout P {}", "9".repeat(TIME_MAX), "x".repeat(1000));
        assert!(parse(&long.as_bytes()[..HEADER_MAX]).unwrap().partial);
    }
}
