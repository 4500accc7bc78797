//! Times as the API server writes them (RFC 3339) and as kubectl shows them: ages in the short human form of
//! apimachinery's `duration.HumanDuration` and instants in Go's RFC 1123 with a numeric zone.

use std::time::SystemTime;

/// Go's zero `time.Time` in RFC 1123Z: what kubectl prints for a timestamp an object does not carry.
pub const ZERO_RFC1123Z: &str = "Mon, 01 Jan 0001 00:00:00 +0000";

/// Parses `2026-12-01T23:00:00Z`, with optional fractional seconds and a `±HH:MM` offset (jiff's RFC 3339
/// reading: an instant needs its offset, and the date must exist).
pub fn parse_rfc3339(s: &str) -> Option<SystemTime> {
    s.parse::<jiff::Timestamp>().ok().map(SystemTime::from)
}

/// `Mon, 02 Jan 2006 15:04:05 +0000`, in UTC (kubectl uses the local zone; crius's machines run in UTC). Go's
/// layout keeps a two-digit day, which jiff's RFC 2822 printer does not, so it is written with `strftime`.
pub fn rfc1123z(t: SystemTime) -> String {
    match jiff::Timestamp::try_from(t) {
        Ok(ts) => ts.strftime("%a, %d %b %Y %H:%M:%S +0000").to_string(),
        Err(_) => ZERO_RFC1123Z.to_owned(),
    }
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

    use std::time::{Duration, UNIX_EPOCH};

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
            "2026-02-30T00:00:00Z",
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
        assert_eq!(
            rfc1123z(at("1969-12-31T23:59:59Z")),
            "Wed, 31 Dec 1969 23:59:59 +0000"
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
