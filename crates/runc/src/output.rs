//! What `state`, `list`, `ps` and `events` print, as runc 1.1 prints it: fields in runc's order; `state`
//! indented by two spaces with no newline after it, the others one compact JSON document per line (and
//! `null` for an empty list).

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use crius_oci::{Record, Result, Status, err, ops};
use serde::Serialize;

use crate::cli::Format;

/// A container as `state` and `list -f json` show it (runc's `containerState`).
#[derive(Serialize)]
struct ContainerState<'a> {
    #[serde(rename = "ociVersion")]
    version: &'a str,
    id: &'a str,
    pid: i32,
    status: String,
    bundle: String,
    rootfs: String,
    created: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    annotations: Option<&'a HashMap<String, String>>,
    owner: String,
}

impl<'a> ContainerState<'a> {
    fn of(r: &'a Record, status: Status, owner: String) -> Self {
        ContainerState {
            version: r.spec.version(),
            id: &r.id,
            pid: if status == Status::Stopped { 0 } else { r.pid },
            status: status.to_string(),
            bundle: r.bundle.display().to_string(),
            rootfs: r.rootfs.display().to_string(),
            created: &r.created,
            annotations: r.spec.annotations().as_ref().filter(|a| !a.is_empty()),
            owner,
        }
    }
}

fn encode(v: &impl Serialize) -> Result<String> {
    serde_json::to_string(v).map_err(|e| err!("encoding JSON: {e}"))
}

/// `state ID`.
pub fn state(root: &Path, id: &str) -> Result<()> {
    let r = Record::load(root, id)?;
    let s = ContainerState::of(&r, r.status(root), String::new());
    let text = serde_json::to_string_pretty(&s).map_err(|e| err!("encoding JSON: {e}"))?;
    print!("{text}");
    Ok(())
}

/// The name of the user owning `dir` (`#UID` when it has none).
fn owner(dir: &Path) -> String {
    use std::os::unix::fs::MetadataExt;
    let Ok(uid) = std::fs::metadata(dir).map(|m| m.uid()) else {
        return String::new();
    };
    match nix::unistd::User::from_uid(uid.into()) {
        Ok(Some(u)) => u.name,
        _ => format!("#{uid}"),
    }
}

/// `list`.
pub fn list(root: &Path, format: Format, quiet: bool) -> Result<()> {
    let all = ops::list(root)?;
    if quiet {
        for (r, _) in &all {
            println!("{}", r.id);
        }
        return Ok(());
    }
    let owners: Vec<String> = all
        .iter()
        .map(|(r, _)| owner(&Record::dir(root, &r.id)))
        .collect();
    if format == Format::Json {
        let v: Vec<_> = all
            .iter()
            .zip(&owners)
            .map(|((r, s), o)| ContainerState::of(r, *s, o.clone()))
            .collect();
        let text = if v.is_empty() { "null".into() } else { encode(&v)? };
        println!("{text}");
        return Ok(());
    }
    println!(
        "{:<20} {:<8} {:<10} {:<40} {:<32} OWNER",
        "ID", "PID", "STATUS", "BUNDLE", "CREATED"
    );
    for ((r, s), o) in all.iter().zip(&owners) {
        let pid = if *s == Status::Stopped { 0 } else { r.pid };
        println!(
            "{:<20} {:<8} {:<10} {:<40} {:<32} {o}",
            r.id,
            pid,
            s,
            r.bundle.display(),
            r.created
        );
    }
    Ok(())
}

/// `ps ID`: the pids as JSON, or ps(1)'s table with the container's lines only.
pub fn ps(root: &Path, id: &str, format: Format, args: &[String]) -> Result<()> {
    let pids = ops::pids(root, id)?;
    if format == Format::Json {
        println!("{}", encode(&pids)?);
        return Ok(());
    }
    let args: Vec<String> = if args.is_empty() {
        vec!["-ef".into()]
    } else {
        args.to_vec()
    };
    let out = std::process::Command::new("ps")
        .args(&args)
        .output()
        .map_err(|e| err!("running ps: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines = text.lines();
    let Some(header) = lines.next() else { return Ok(()) };
    let col = header
        .split_whitespace()
        .position(|h| h == "PID")
        .ok_or_else(|| err!("ps output has no PID column"))?;
    println!("{header}");
    for line in lines {
        let pid = line
            .split_whitespace()
            .nth(col)
            .and_then(|p| p.parse::<i32>().ok());
        if pid.is_some_and(|p| pids.contains(&p)) {
            println!("{line}");
        }
    }
    Ok(())
}

/// One event as `events` prints it (runc's `type`, `id`, `data`).
#[derive(Serialize)]
struct Event<'a, T: Serialize> {
    #[serde(rename = "type")]
    kind: &'a str,
    id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<T>,
}

fn parse_interval(s: &str) -> Result<Duration> {
    let bad = || err!("--interval {s:?}: expected a duration such as 5s or 500ms");
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map(|i| s.split_at(i))
        .unwrap_or((s, "s"));
    let n: u64 = num.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" => Ok(Duration::from_secs(n)),
        "m" => Ok(Duration::from_secs(n * 60)),
        _ => Err(bad()),
    }
}

/// `events ID`: one stats event with `--stats`; else, as runc, a stats event every interval and an `oom` event
/// (`{"type":"oom","id":ID}`) each time the OOM killer takes a process of the container, until the container's
/// cgroup is empty or gone (it stopped, or was deleted). `memory.events` is read every 100 ms at most.
pub fn events(root: &Path, id: &str, once: bool, interval: &str) -> Result<()> {
    let every = parse_interval(interval)?;
    if every.is_zero() {
        return Err(err!(
            "--interval {interval:?}: the interval must be greater than 0"
        ));
    }
    let stats = |emit: bool| -> Result<()> {
        match ops::stats(root, id) {
            Ok(data) => println!(
                "{}",
                encode(&Event {
                    kind: "stats",
                    id,
                    data: Some(data)
                })?
            ),
            Err(e) if !emit => return Err(e),
            // As runc: a failed read is reported and the watch goes on.
            Err(e) => eprintln!("crius-runc: events {id}: {e}"),
        }
        Ok(())
    };
    if once {
        return stats(false);
    }
    let (rec, status) = ops::load(root, id)?;
    if status == Status::Stopped {
        return Err(err!("container with id {id} is not running"));
    }
    let cg = crius_oci::cgroup::Cgroup::at(&rec.cgroup)?;
    let mut ooms = cg.oom_kills();
    let tick = every.min(Duration::from_millis(100));
    let mut next = Instant::now();
    while cg.populated() {
        if Instant::now() >= next {
            stats(true)?;
            next += every;
        }
        let n = cg.oom_kills();
        if n > ooms {
            let oom: Event<'_, ()> = Event {
                kind: "oom",
                id,
                data: None,
            };
            println!("{}", encode(&oom)?);
            ooms = n;
        }
        std::thread::sleep(
            tick.min(next.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_fields_come_in_runcs_order() {
        let spec: oci_spec::runtime::Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2", "root": {"path": "rootfs"}}))
        .unwrap();
        let r = Record {
            id: "c1".into(),
            pid: 42,
            pid_start: 1,
            bundle: "/b".into(),
            rootfs: "/b/rootfs".into(),
            created: "2026-12-05T09:00:00Z".into(),
            cgroup: "/sys/fs/cgroup/c1".into(),
            systemd_unit: None,
            spec,
        };
        let s = encode(&ContainerState::of(&r, Status::Running, "root".into())).unwrap();
        assert_eq!(
            s,
            r#"{"ociVersion":"1.0.2","id":"c1","pid":42,"status":"running","bundle":"/b","rootfs":"/b/rootfs","created":"2026-12-05T09:00:00Z","owner":"root"}"#
        );
        let e = encode(&Event {
            kind: "stats",
            id: "c1",
            data: Some([1]),
        })
        .unwrap();
        assert_eq!(e, r#"{"type":"stats","id":"c1","data":[1]}"#);
        let e = encode(&Event::<()> {
            kind: "oom",
            id: "c1",
            data: None,
        })
        .unwrap();
        assert_eq!(e, r#"{"type":"oom","id":"c1"}"#);
    }
}
