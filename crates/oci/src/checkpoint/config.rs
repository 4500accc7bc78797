//! The container's own CRIU configuration file, as runc gives one: the annotation `org.criu.config` names it (set
//! but empty: none), else `/etc/criu/runc.conf` if it exists.
//!
//! runc hands the file to CRIU's RPC, where its settings win over runc's. On CRIU's command line the command line
//! wins over `--config`, so each option the file sets that crius-runc also passes with a value (`--log-file`,
//! `--work-dir`, `--manage-cgroups`...) gets the file's value on the command line; the rest of the file applies
//! through `--config FILE`, which also keeps CRIU from reading its default files (`/etc/criu/default.conf`).

use std::path::{Path, PathBuf};

use oci_spec::runtime::Spec;

use crate::{Error, Result};

/// The annotation naming the container's CRIU configuration file.
pub const ANNOTATION: &str = "org.criu.config";

/// The configuration file CRIU's runc users get when the annotation is not there.
pub const RUNC_DEFAULT: &str = "/etc/criu/runc.conf";

/// The configuration file for the container of `spec`, if any.
pub fn file(spec: &Spec) -> Option<PathBuf> {
    match spec.annotations().as_ref().and_then(|a| a.get(ANNOTATION)) {
        Some(f) if f.is_empty() => None,
        Some(f) => Some(PathBuf::from(f)),
        None => Path::new(RUNC_DEFAULT)
            .exists()
            .then(|| PathBuf::from(RUNC_DEFAULT)),
    }
}

/// The options a configuration file's text sets: `name` or `--name`, then `=VALUE` or ` VALUE` (CRIU's
/// format; `#` starts a comment).
pub fn parse(text: &str) -> Vec<(String, Option<String>)> {
    text.lines()
        .filter_map(|l| {
            let l = l.split('#').next().unwrap_or_default().trim();
            if l.is_empty() {
                return None;
            }
            let l = l.trim_start_matches('-');
            let (k, v) = match l.find(['=', ' ', '\t']) {
                Some(i) => (&l[..i], Some(l[i + 1..].trim().trim_matches('"').to_string())),
                None => (l, None),
            };
            Some((k.to_string(), v.filter(|v| !v.is_empty())))
        })
        .collect()
}

/// `args` with the container's configuration file applied: `--config FILE` first, and the file's values in
/// place of crius-runc's for the options both set.
pub fn apply(spec: &Spec, args: Vec<String>) -> Result<Vec<String>> {
    let Some(path) = file(spec) else {
        return Ok(args);
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        // As CRIU does, a file that is not there is no configuration.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(args),
        Err(e) => return Err(Error::io("reading the CRIU configuration", &path)(e)),
    };
    Ok(with_values(&args, &parse(&text), &path))
}

fn with_values(args: &[String], set: &[(String, Option<String>)], path: &Path) -> Vec<String> {
    let value_of = |k: &str| {
        set.iter()
            .rev()
            .find(|(n, v)| n == k && v.is_some())
            .and_then(|(_, v)| v.clone())
    };
    let mut out: Vec<String> = args.iter().take(1).cloned().collect();
    out.extend(["--config".to_string(), path.to_string_lossy().into_owned()]);
    let mut i = 1;
    while i < args.len() {
        let a = &args[i];
        let name = a.strip_prefix("--").unwrap_or_default();
        if let Some((k, _)) = name.split_once('=') {
            match value_of(k) {
                Some(v) => out.push(format!("--{k}={v}")),
                None => out.push(a.clone()),
            }
            i += 1;
            continue;
        }
        // A single-valued option of ours, `--name VALUE` (the externals and inherited fds add up).
        let single = !name.is_empty()
            && i + 1 < args.len()
            && !args[i + 1].starts_with('-')
            && !matches!(name, "external" | "inherit-fd" | "join-ns");
        match value_of(name).filter(|_| single) {
            Some(v) => {
                out.extend([a.clone(), v]);
                i += 2;
            }
            None => {
                out.push(a.clone());
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_files_values_win_over_ours_and_the_file_is_passed() {
        let set = parse("# runc's\nlog-file=mine.log\n--tcp-established\nmanage-cgroups soft # x\n\n");
        assert_eq!(
            set,
            [
                ("log-file".to_string(), Some("mine.log".to_string())),
                ("tcp-established".into(), None),
                ("manage-cgroups".into(), Some("soft".into())),
            ]
        );
        let args: Vec<String> = [
            "dump",
            "--log-file",
            "dump.log",
            "-v4",
            "--manage-cgroups=ignore",
            "--external",
            "mnt[/a]:/a",
            "--tcp-established",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            with_values(&args, &set, Path::new("/c.conf")).join(" "),
            "dump --config /c.conf --log-file mine.log -v4 --manage-cgroups=soft --external mnt[/a]:/a \
             --tcp-established"
        );
        let spec = |a: serde_json::Value| -> Spec {
            serde_json::from_value(serde_json::json!({
                "ociVersion": "1.0.2", "root": {"path": "rootfs"}, "annotations": a}))
            .unwrap()
        };
        assert_eq!(file(&spec(serde_json::json!({ANNOTATION: ""}))), None);
        assert_eq!(
            file(&spec(serde_json::json!({ANNOTATION: "/x.conf"}))),
            Some(PathBuf::from("/x.conf"))
        );
        let s = spec(serde_json::json!({ANNOTATION: "/nonexistent/x.conf"}));
        assert_eq!(apply(&s, args.clone()).unwrap(), args);
    }
}
