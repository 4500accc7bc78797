//! One line of a CRI log file: `<RFC3339Nano time> <stdout|stderr> <P|F> <text>` (the format the shim writes,
//! and kubelet reads), and its time as a [`SystemTime`]: read by the pod service's logs, `crius run --logs`
//! and criusd's attach (one parser for all three).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

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

/// An RFC 3339 time (`2026-01-02T03:04:05.123456789Z`, or with a `+02:00` offset) as a [`SystemTime`];
/// None if it is not one. A time before 1970 is the epoch.
pub fn parse_time(s: &[u8]) -> Option<SystemTime> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let d = s.get(r)?;
        d.iter()
            .all(u8::is_ascii_digit)
            .then(|| d.iter().fold(0i64, |n, c| n * 10 + i64::from(c - b'0')))
    };
    let sep = |i: usize, c: &[u8]| s.get(i).is_some_and(|b| c.contains(b));
    if !(sep(4, b"-") && sep(7, b"-") && sep(10, b"Tt ") && sep(13, b":") && sep(16, b":")) {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut nanos = 0u32;
    if sep(i, b".") {
        let digits = s[i + 1..].iter().take_while(|b| b.is_ascii_digit()).count();
        if digits == 0 {
            return None;
        }
        for (k, c) in s[i + 1..i + 1 + digits].iter().enumerate().take(9) {
            nanos += u32::from(c - b'0') * 10u32.pow(8 - k as u32);
        }
        i += 1 + digits;
    }
    let offset = match s.get(i..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), ..] if s.len() == i + 6 && sep(i + 3, b":") => {
            let o = num(i + 1..i + 3)? * 3600 + num(i + 4..i + 6)? * 60;
            if *sign == b'+' { o } else { -o }
        }
        _ => return None,
    };
    let secs = crate::time::days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    Some(match u64::try_from(secs) {
        Ok(secs) => UNIX_EPOCH + Duration::new(secs, nanos),
        Err(_) => UNIX_EPOCH,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::{Fraction, format};

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

    #[test]
    fn times_read_back_as_written() {
        for (secs, nanos) in [
            (0, 0),
            (1_767_225_600, 5),
            (951_782_400, 120_000_000),
            (4_102_444_799, 999_999_999),
        ] {
            let t = UNIX_EPOCH + Duration::new(secs, nanos);
            for f in [Fraction::Trimmed, Fraction::Nanos] {
                assert_eq!(parse_time(format(t, f).as_bytes()), Some(t), "{}", format(t, f));
            }
        }
        let t = |s: &str| parse_time(s.as_bytes());
        assert_eq!(t("2026-01-01T02:00:00+02:00"), t("2026-01-01T00:00:00Z"));
        assert_eq!(t("2025-12-31T19:00:00.25-05:00"), t("2026-01-01T00:00:00.25Z"));
        for bad in [
            "t",
            "2026-01-01",
            "2026-13-01T00:00:00Z",
            "2026-01-01T00:00:00",
            "2026-01-01T00:00:00.Z",
        ] {
            assert_eq!(t(bad), None, "{bad}");
        }
    }
}
