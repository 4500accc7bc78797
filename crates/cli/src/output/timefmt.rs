//! Times as the API server writes them (RFC 3339) and as kubectl shows them: ages in the short human form of
//! apimachinery's `duration.HumanDuration` and instants in Go's RFC 1123 with a numeric zone.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Go's zero `time.Time` in RFC 1123Z: what kubectl prints for a timestamp an object does not carry.
pub const ZERO_RFC1123Z: &str = "Mon, 01 Jan 0001 00:00:00 +0000";

/// Parses `2026-12-01T23:00:00Z`, with optional fractional seconds and a `±HH:MM` offset.
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes().all(|c| c.is_ascii_digit()).then(|| t.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut rest = &s[19..];
    let mut nanos = 0u32;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let mut n: u64 = 0;
        for (i, c) in frac[..digits].bytes().enumerate() {
            if i < 9 {
                n = n * 10 + u64::from(c - b'0');
            }
        }
        for _ in digits..9 {
            n *= 10;
        }
        nanos = u32::try_from(n).ok()?;
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && rest.as_bytes()[3] == b':' => {
            let sign = match rest.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let h: i64 = rest[1..3].parse().ok()?;
            let m: i64 = rest[4..6].parse().ok()?;
            sign * (h * 3600 + m * 60)
        }
        _ => return None,
    };
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec - offset;
    let whole = u64::try_from(secs).ok()?;
    Some(UNIX_EPOCH + Duration::new(whole, nanos))
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number from [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

/// `Mon, 02 Jan 2006 15:04:05 +0000`, in UTC (kubectl uses the local zone; crius's machines run in UTC).
pub fn rfc1123z(t: SystemTime) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX) - 1,
    };
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    let weekday = DAYS[usize::try_from(days.rem_euclid(7)).unwrap_or(0)];
    let month = MONTHS[usize::try_from(m - 1).unwrap_or(0)];
    let (hh, mm, ss) = (rem / 3600, rem % 3600 / 60, rem % 60);
    format!("{weekday}, {d:02} {month} {y:04} {hh:02}:{mm:02}:{ss:02} +0000")
}

/// A timestamp field in RFC 1123Z, Go's zero time when absent or unreadable (as kubectl describe prints it).
pub fn rfc1123z_of(ts: Option<&str>) -> String {
    ts.and_then(parse_rfc3339)
        .map_or_else(|| ZERO_RFC1123Z.to_owned(), rfc1123z)
}

/// Signed seconds from `from` to `to`, truncated toward zero as Go's `int(d.Seconds())` does.
fn seconds_between(from: SystemTime, to: SystemTime) -> i64 {
    match to.duration_since(from) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// kubectl's short age: `5s`, `3m12s`, `15m`, `2h5m`, `20h`, `2d3h`, `40d`, `2y30d`, `10y`; `<invalid>` for a
/// time more than a second in the future (clock skew of a second is tolerated as `0s`).
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_owned();
    }
    if seconds < 0 {
        return "0s".to_owned();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The age of a timestamp field at `now`; `<unknown>` when the field is absent or unreadable.
pub fn since(now: SystemTime, ts: Option<&str>) -> String {
    match ts.and_then(parse_rfc3339) {
        Some(t) => human_duration(seconds_between(t, now)),
        None => "<unknown>".to_owned(),
    }
}

/// The time left until a timestamp field (kubectl's `translateTimestampUntil`).
pub fn until(now: SystemTime, ts: Option<&str>) -> String {
    match ts.and_then(parse_rfc3339) {
        Some(t) => human_duration(seconds_between(now, t)),
        None => "<unknown>".to_owned(),
    }
}

/// The span between two timestamps, in the same human form.
pub fn between(from: SystemTime, to: SystemTime) -> String {
    human_duration(seconds_between(from, to))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SystemTime {
        parse_rfc3339(s).unwrap()
    }

    #[test]
    fn parses_the_forms_the_api_server_writes() {
        assert_eq!(at("1970-01-01T00:00:00Z"), UNIX_EPOCH);
        assert_eq!(
            at("2026-12-01T23:00:00Z"),
            UNIX_EPOCH + Duration::from_secs(1_796_166_000)
        );
        assert_eq!(
            at("2026-12-01T23:00:00.250000Z"),
            at("2026-12-01T23:00:00Z") + Duration::from_millis(250)
        );
        assert_eq!(at("2026-12-02T01:00:00+02:00"), at("2026-12-01T23:00:00Z"));
        for bad in [
            "",
            "2026-12-01",
            "2026-13-01T00:00:00Z",
            "2026-12-01T00:00:00",
            "2026-12-01T00:00:00.Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc1123z_is_gos_layout() {
        assert_eq!(
            rfc1123z(at("2026-12-01T23:04:05Z")),
            "Tue, 01 Dec 2026 23:04:05 +0000"
        );
        assert_eq!(
            rfc1123z(at("2024-02-29T00:00:09Z")),
            "Thu, 29 Feb 2024 00:00:09 +0000"
        );
        assert_eq!(rfc1123z_of(None), ZERO_RFC1123Z);
    }

    #[test]
    fn human_durations_match_apimachinery() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (0, "0s"),
            (5, "5s"),
            (119, "119s"),
            (120, "2m"),
            (192, "3m12s"),
            (599, "9m59s"),
            (600, "10m"),
            (179 * 60, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (8 * 3600, "8h"),
            (47 * 3600, "47h"),
            (51 * 3600, "2d3h"),
            (72 * 3600, "3d"),
            (8 * 86_400, "8d"),
            (729 * 86_400, "729d"),
            (760 * 86_400, "2y30d"),
            (730 * 86_400, "2y"),
            (9 * 365 * 86_400, "9y"),
        ];
        for (secs, want) in cases {
            assert_eq!(human_duration(secs), want, "{secs}s");
        }
    }

    #[test]
    fn since_and_until() {
        let now = at("2026-12-01T23:10:00Z");
        assert_eq!(since(now, Some("2026-12-01T23:06:48Z")), "3m12s");
        assert_eq!(since(now, None), "<unknown>");
        assert_eq!(since(now, Some("yesterday")), "<unknown>");
        assert_eq!(until(now, Some("2026-12-01T23:10:30Z")), "30s");
        assert_eq!(between(at("2026-12-01T23:00:00Z"), now), "10m");
    }
}
