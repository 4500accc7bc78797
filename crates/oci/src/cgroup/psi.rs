//! Pressure stall information (PSI): a cgroup's `cpu.pressure`, `memory.pressure` and `io.pressure`, in the
//! shape runc's stats give it (`psi` with `some` and `full`, each `avg10`, `avg60`, `avg300` and `total`).
//!
//! A kernel without PSI (or booted with `psi=0`) has no such files, or files that cannot be read: the figures
//! are then absent, never zeros that would read as "no pressure".

use std::path::Path;

use serde::Serialize;

/// One line of a pressure file: the share of wall time some (or all) tasks stalled, averaged over 10, 60 and 300
/// seconds (percent), and the total stall time in microseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct PsiData {
    /// Percent over the last 10 s.
    pub avg10: f64,
    /// Percent over the last 60 s.
    pub avg60: f64,
    /// Percent over the last 300 s.
    pub avg300: f64,
    /// Cumulative stall time, microseconds.
    pub total: u64,
}

/// A pressure file: `some` (at least one task stalled) and `full` (all non-idle tasks stalled; the kernel
/// writes it for cpu only since 5.13, and it stays zero where it does not apply).
#[derive(Debug, Default, Clone, Copy, PartialEq, Serialize)]
pub struct Psi {
    /// Some tasks stalled.
    pub some: PsiData,
    /// All non-idle tasks stalled.
    pub full: PsiData,
}

/// Parses one `avg10=… avg60=… avg300=… total=…` line's fields (None if one is missing or malformed).
fn data(fields: std::str::SplitWhitespace<'_>) -> Option<PsiData> {
    let mut d = PsiData::default();
    let mut seen = 0u8;
    for kv in fields {
        let (k, v) = kv.split_once('=')?;
        match k {
            "avg10" => d.avg10 = v.parse().ok()?,
            "avg60" => d.avg60 = v.parse().ok()?,
            "avg300" => d.avg300 = v.parse().ok()?,
            "total" => d.total = v.parse().ok()?,
            _ => continue,
        }
        seen += 1;
    }
    (seen == 4).then_some(d)
}

/// Parses a pressure file's text: None unless it has a well-formed `some` line (a `full` line is optional).
pub fn parse(text: &str) -> Option<Psi> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        match fields.next() {
            Some("some") => some = Some(data(fields)?),
            Some("full") => full = Some(data(fields)?),
            _ => {}
        }
    }
    Some(Psi {
        some: some?,
        full: full.unwrap_or_default(),
    })
}

/// The pressure of resource `what` (`cpu`, `memory` or `io`) in the cgroup at `dir`; None without the file.
pub fn read(dir: &Path, what: &str) -> Option<Psi> {
    parse(&std::fs::read_to_string(dir.join(format!("{what}.pressure"))).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pressure_file_parses_into_some_and_full() {
        let p = parse(
            "some avg10=1.50 avg60=0.25 avg300=0.00 total=123456\n\
             full avg10=0.75 avg60=0.10 avg300=0.01 total=6543\n",
        )
        .unwrap();
        assert_eq!(
            p.some,
            PsiData {
                avg10: 1.5,
                avg60: 0.25,
                avg300: 0.0,
                total: 123456
            }
        );
        assert_eq!((p.full.avg10, p.full.avg300, p.full.total), (0.75, 0.01, 6543));
    }

    #[test]
    fn a_file_with_some_only_has_a_zero_full() {
        // cpu.pressure before Linux 5.13.
        let p = parse("some avg10=0.00 avg60=0.00 avg300=0.00 total=42\n").unwrap();
        assert_eq!(p.some.total, 42);
        assert_eq!(p.full, PsiData::default());
    }

    #[test]
    fn malformed_or_missing_pressure_is_none() {
        assert_eq!(parse(""), None);
        assert_eq!(parse("full avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"), None);
        assert_eq!(parse("some avg10=x avg60=0.00 avg300=0.00 total=1\n"), None);
        assert_eq!(parse("some avg10=0.00 avg60=0.00 total=1\n"), None);
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path(), "cpu"), None, "no file: a kernel without PSI");
        std::fs::write(
            dir.path().join("io.pressure"),
            "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=3\n",
        )
        .unwrap();
        assert_eq!(
            read(dir.path(), "io").map(|p| (p.some.total, p.full.total)),
            Some((7, 3))
        );
    }

    #[test]
    fn it_serializes_as_runc_names_it() {
        let v =
            serde_json::to_value(parse("some avg10=2.00 avg60=0.00 avg300=0.00 total=9\n").unwrap()).unwrap();
        assert_eq!(v["some"]["avg10"], 2.0);
        assert_eq!(v["some"]["total"], 9);
        assert_eq!(v["full"]["total"], 0);
    }
}
