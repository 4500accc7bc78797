//! Times as RFC 3339 in UTC, in the two shapes crius writes: with all nine fraction digits (runc's
//! `state.json`, log lines), and Go's `RFC3339Nano`, whose fraction drops trailing zeros (the CRI log format,
//! which kubelet parses with Go).

use std::time::{SystemTime, UNIX_EPOCH};

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
    use std::time::Duration;

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
}
