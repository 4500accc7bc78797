//! CronJob schedules: the five fields of cron (minute, hour, day of month, month, day of week) with `*`,
//! `*/N`, `A-B`, `A-B/N` and lists, and the `@hourly`-style names, in UTC (a CronJob's `timeZone` other than
//! UTC is refused).

/// A parsed schedule: the allowed values of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    fields: [Vec<u32>; 5],
    /// Both day fields restricted: either may match (cron's rule).
    either_day: bool,
}

const RANGES: [(u32, u32); 5] = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 6)];

fn field(text: &str, (lo, hi): (u32, u32)) -> Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().map_err(|_| format!("bad step in {part:?}"))?),
            None => (part, 1),
        };
        if step == 0 {
            return Err(format!("step 0 in {part:?}"));
        }
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            let n = |s: &str| s.parse::<u32>().map_err(|_| format!("bad value in {part:?}"));
            (n(a)?, n(b)?)
        } else {
            let v = range.parse::<u32>().map_err(|_| format!("bad value {range:?}"))?;
            (v, if part.contains('/') { hi } else { v })
        };
        // Sunday is 0 or 7.
        let hi = if (lo, hi) == (0, 6) { 7 } else { hi };
        if a < lo || b > hi || a > b {
            return Err(format!("{part:?} is outside {lo}-{hi}"));
        }
        out.extend(
            (a..=b)
                .step_by(step as usize)
                .map(|v| if hi == 7 && v == 7 { 0 } else { v }),
        );
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

impl Schedule {
    /// Reads a schedule; the error names what is wrong.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let text = match text.trim() {
            "@yearly" | "@annually" => "0 0 1 1 *",
            "@monthly" => "0 0 1 * *",
            "@weekly" => "0 0 * * 0",
            "@daily" | "@midnight" => "0 0 * * *",
            "@hourly" => "0 * * * *",
            t => t,
        };
        let parts: Vec<&str> = text.split_whitespace().collect();
        if parts.len() != 5 {
            return Err(format!(
                "schedule {text:?} has {} fields, cron has 5",
                parts.len()
            ));
        }
        let mut fields: [Vec<u32>; 5] = Default::default();
        for (i, p) in parts.iter().enumerate() {
            fields[i] = field(p, RANGES[i]).map_err(|e| format!("schedule {text:?}: {e}"))?;
        }
        Ok(Schedule {
            fields,
            either_day: parts[2] != "*" && parts[4] != "*",
        })
    }

    /// Whether the minute starting at Unix time `t` (seconds) matches.
    fn matches(&self, t: i64) -> bool {
        let days = t.div_euclid(86_400);
        let secs = t.rem_euclid(86_400);
        let (minute, hour) = ((secs / 60 % 60) as u32, (secs / 3600) as u32);
        let weekday = ((days + 4).rem_euclid(7)) as u32; // 1970-01-01 was a Thursday.
        let (_, month, day) = crius_common::time::civil(days);
        let (month, day) = (month as u32, day as u32);
        let has = |i: usize, v: u32| self.fields[i].contains(&v);
        let dom = has(2, day);
        let dow = has(4, weekday);
        let day_ok = if self.either_day { dom || dow } else { dom && dow };
        has(0, minute) && has(1, hour) && has(3, month) && day_ok
    }

    /// The latest matching minute after `since` and at or before `now` (Unix seconds), looking back at most a
    /// day (a CronJob that missed more runs starts once, as Kubernetes' does).
    pub fn last_between(&self, since: i64, now: i64) -> Option<i64> {
        let mut t = now - now.rem_euclid(60);
        let floor = since.max(now - 86_400);
        while t > floor {
            if self.matches(t) {
                return Some(t);
            }
            t -= 60;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2026-12-01T23:37:00Z, a Tuesday.
    const T: i64 = 1_796_168_220;

    #[test]
    fn fields_and_names_parse() {
        let s = Schedule::parse("*/15 9-17 * * 1-5").unwrap();
        assert_eq!(s.fields[0], [0, 15, 30, 45]);
        assert_eq!(s.fields[4], [1, 2, 3, 4, 5]);
        assert_eq!(
            Schedule::parse("@hourly").unwrap(),
            Schedule::parse("0 * * * *").unwrap()
        );
        assert_eq!(Schedule::parse("0 0 * * 7").unwrap().fields[4], [0]);
        for bad in ["* * * *", "61 * * * *", "*/0 * * * *", "a * * * *", "5-1 * * * *"] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_last_due_minute_is_found() {
        assert_eq!(crius_common::time::civil(T.div_euclid(86_400)), (2026, 12, 1));
        let every = Schedule::parse("* * * * *").unwrap();
        assert_eq!(every.last_between(T - 120, T + 30), Some(T));
        // Nothing due since the last run in the same minute.
        assert_eq!(every.last_between(T, T + 30), None);
        let half = Schedule::parse("30 23 * * 2").unwrap();
        assert_eq!(half.last_between(T - 3600, T), Some(T - 7 * 60));
        let monday = Schedule::parse("30 23 * * 1").unwrap();
        assert_eq!(monday.last_between(T - 3600, T), None);
    }
}
