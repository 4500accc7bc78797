//! Times as RFC 3339 in UTC, in the two shapes crius writes: with all nine fraction digits (runc's
//! `state.json`, log lines), and Go's `RFC3339Nano`, whose fraction drops trailing zeros (the CRI log format,
//! which kubelet parses with Go); and [`parse`], the one reader of RFC 3339 times outside the CLI (which
//! uses jiff): CRI log records' times. The calendar maths is here once (Howard Hinnant's day-count algorithms).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How many fraction digits to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fraction {
    /// Always nine: `…:05.120000000Z`.
    Nanos,
    /// Go's RFC3339Nano: trailing zeros dropped, no dot for a whole second: `…:05.12Z`, `…:05Z`.
    Trimmed,
}

/// The civil date (year, month 1–12, day 1–31) of a day count since 1970-01-01 (proleptic Gregorian; Howard
/// Hinnant's algorithm).
pub fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Days since 1970-01-01 of a civil date (the inverse of [`civil`]).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix time `secs` + `nanos` as RFC 3339 in UTC.
pub fn rfc3339(secs: i64, nanos: u32, fraction: Fraction) -> String {
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    let mut s = format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}",
        sod / 3600,
        sod % 3600 / 60,
        sod % 60
    );
    match fraction {
        Fraction::Nanos => s += &format!(".{nanos:09}"),
        Fraction::Trimmed if nanos != 0 => {
            s.push('.');
            s += format!("{nanos:09}").trim_end_matches('0');
        }
        Fraction::Trimmed => {}
    }
    s.push('Z');
    s
}

/// `t` as RFC 3339 in UTC (a time before 1970 is written as 1970-01-01T00:00:00Z).
pub fn format(t: SystemTime, fraction: Fraction) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    rfc3339(d.as_secs() as i64, d.subsec_nanos(), fraction)
}

/// An RFC 3339 time (`2026-01-02T03:04:05.123456789Z`, or with a `+02:00` offset) as a [`SystemTime`];
/// None if it is not one. A time before 1970 is the epoch.
pub fn parse(s: &[u8]) -> Option<SystemTime> {
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
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset;
    Some(match u64::try_from(secs) {
        Ok(secs) => UNIX_EPOCH + Duration::new(secs, nanos),
        Err(_) => UNIX_EPOCH,
    })
}

/// `t` in nanoseconds since the epoch, the CRI's unit (0 before the epoch).
pub fn unix_ns(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Now, in nanoseconds since the epoch.
pub fn now_ns() -> i64 {
    unix_ns(SystemTime::now())
}

/// Now, as RFC 3339 in UTC.
pub fn now(fraction: Fraction) -> String {
    format(SystemTime::now(), fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_dates_in_both_shapes() {
        assert_eq!(rfc3339(0, 0, Fraction::Nanos), "1970-01-01T00:00:00.000000000Z");
        assert_eq!(rfc3339(0, 0, Fraction::Trimmed), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(951_782_400, 5, Fraction::Nanos),
            "2000-02-29T00:00:00.000000005Z"
        );
        assert_eq!(
            rfc3339(951_782_400, 5, Fraction::Trimmed),
            "2000-02-29T00:00:00.000000005Z"
        );
        assert_eq!(
            rfc3339(1_796_000_000, 0, Fraction::Nanos),
            "2026-11-30T00:53:20.000000000Z"
        );
        let t = UNIX_EPOCH + Duration::new(1_796_502_000, 120_000_000);
        assert_eq!(format(t, Fraction::Trimmed), "2026-12-05T20:20:00.12Z");
        assert_eq!(rfc3339(-1, 0, Fraction::Trimmed), "1969-12-31T23:59:59Z");
        assert_eq!(unix_ns(t), 1_796_502_000_120_000_000);
        assert_eq!(unix_ns(UNIX_EPOCH - Duration::from_secs(1)), 0);
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
                assert_eq!(parse(format(t, f).as_bytes()), Some(t), "{}", format(t, f));
            }
        }
        let t = |s: &str| parse(s.as_bytes());
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
