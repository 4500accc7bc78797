//! `exec`: the process from `--process` (a file, `/dev/fd/N` or `-`) or from the command and flags over the
//! container's own process; a terminal in the foreground for `-t` without `--console-socket`, as `run` has.

use std::io::Read;
use std::path::{Path, PathBuf};

use crius_oci::exec::ExecOptions;
use crius_oci::{Error, Result, err};
use oci_spec::runtime::Process;

use crate::cli::ExecArgs;

/// Reads a JSON document from a file, or from stdin for `-`; errors name the file and the field.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    parse_json(path, &read_text(path)?)
}

/// The text of `path`, or stdin's for `-`.
pub fn read_text(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| err!("reading stdin: {e}"))?;
        return Ok(s);
    }
    std::fs::read_to_string(path).map_err(|e| err!("reading {}: {e}", path.display()))
}

fn parse_json<T: serde::de::DeserializeOwned>(path: &Path, text: &str) -> Result<T> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de)
        .map_err(|e| Error::config(path.display(), e.path().to_string(), e.inner().to_string()))
}

/// A process document as runc reads it: a missing `user` is uid 0, gid 0.
fn parse_process(path: &Path, text: &str) -> Result<Process> {
    let mut v: serde_json::Value = parse_json(path, text)?;
    if let Some(o) = v.as_object_mut() {
        o.entry("user")
            .or_insert_with(|| serde_json::json!({"uid": 0, "gid": 0}));
    }
    parse_json(path, &v.to_string())
}

/// The single cgroup path of runc's `--cgroup` entries (`path` or `controllers:path`; cgroup v2 has one tree).
fn sub_cgroup(entries: &[String]) -> Result<Option<PathBuf>> {
    let mut path: Option<&str> = None;
    for e in entries {
        let p = match e.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err(err!("--cgroup {e:?}: expected [controllers:]path"));
            }
            Some((_, p)) => p,
            None => e.as_str(),
        };
        if path.is_some_and(|q| q != p) {
            return Err(err!(
                "--cgroup: cgroup v2 has one tree, so every entry must name one path ({entries:?})"
            ));
        }
        path = Some(p);
    }
    if let Some(p) = path
        && Path::new(p)
            .components()
            .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(err!(
            "--cgroup {p}: {p} is not a sub cgroup path of the container's"
        ));
    }
    Ok(path.map(PathBuf::from))
}

/// Runs `exec`; returns the process's exit code.
pub fn exec(root: &Path, a: ExecArgs) -> Result<i32> {
    let process: Process = match (&a.process, &a.process_text) {
        (Some(path), Some(text)) => parse_process(path, text)?,
        (Some(path), None) => parse_process(path, &read_text(path)?)?,
        (None, _) => process_from_flags(root, &a)?,
    };
    let terminal = process.terminal() == Some(true);
    // A terminal in the foreground when nobody else takes the master.
    let foreground = if terminal && !a.detach && a.console_socket.is_none() {
        Some(crius_oci::foreground::Foreground::listen()?)
    } else {
        None
    };
    let opts = ExecOptions {
        process,
        detach: a.detach,
        pid_file: a.pid_file,
        console_socket: foreground
            .as_ref()
            .map(|f| f.path().to_path_buf())
            .or(a.console_socket),
        preserve_fds: a.preserve_fds,
        ignore_paused: a.ignore_paused,
        sub_cgroup: sub_cgroup(&a.cgroup)?,
    };
    let Some(fg) = foreground else {
        return crius_oci::exec::exec(root, &a.id, &opts);
    };
    let pid = crius_oci::exec::spawn(root, &a.id, &opts)?;
    let relay = fg.attach()?;
    let resize = || relay.resize();
    let code = crius_oci::wait::forward_until_exit_resizing(pid, Some(&resize));
    relay.finish();
    code
}

/// runc's plain-args exec: the container's own process settings with the command and flags applied.
fn process_from_flags(root: &Path, a: &ExecArgs) -> Result<Process> {
    if a.command.is_empty() {
        return Err(err!("exec needs a command (or --process)"));
    }
    let rec = crius_oci::Record::load(root, &a.id)?;
    let mut p = rec.spec.process().clone().unwrap_or_default();
    p.set_args(Some(a.command.clone()));
    p.set_terminal(Some(a.tty));
    if let Some(cwd) = &a.cwd {
        p.set_cwd(cwd.clone());
    }
    let mut env = p.env().clone().unwrap_or_default();
    for kv in &a.env {
        let name = kv.split('=').next().unwrap_or_default();
        env.retain(|e| e.split('=').next() != Some(name));
        env.push(kv.clone());
    }
    p.set_env(Some(env));
    let mut user = p.user().clone();
    if let Some(u) = &a.user {
        let (uid, gid) = u.split_once(':').unwrap_or((u, "0"));
        user.set_uid(
            uid.parse()
                .map_err(|_| err!("--user {u:?}: expected uid[:gid]"))?,
        );
        user.set_gid(
            gid.parse()
                .map_err(|_| err!("--user {u:?}: expected uid[:gid]"))?,
        );
    }
    if !a.additional_gids.is_empty() {
        user.set_additional_gids(Some(a.additional_gids.clone()));
    }
    p.set_user(user);
    if !a.cap.is_empty() {
        let mut caps = p.capabilities().clone().unwrap_or_default();
        for name in &a.cap {
            let c: oci_spec::runtime::Capability =
                serde_json::from_value(serde_json::json!(name)).map_err(|e| err!("--cap {name}: {e}"))?;
            let add = |s: &Option<oci_spec::runtime::Capabilities>| {
                let mut s = s.clone().unwrap_or_default();
                s.insert(c);
                Some(s)
            };
            caps.set_bounding(add(caps.bounding()));
            caps.set_effective(add(caps.effective()));
            caps.set_permitted(add(caps.permitted()));
        }
        p.set_capabilities(Some(caps));
    }
    if a.no_new_privs {
        p.set_no_new_privileges(Some(true));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_user_runs_as_root() {
        let p = parse_process(Path::new("p.json"), r#"{"args": ["true"], "cwd": "/"}"#).unwrap();
        assert_eq!((p.user().uid(), p.user().gid()), (0, 0));
        let p = parse_process(
            Path::new("p.json"),
            r#"{"args": ["true"], "cwd": "/", "user": {"uid": 7, "gid": 8}}"#,
        )
        .unwrap();
        assert_eq!((p.user().uid(), p.user().gid()), (7, 8));
    }

    #[test]
    fn cgroup_entries_name_one_path_below_the_container() {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(sub_cgroup(&v(&[])).unwrap(), None);
        assert_eq!(sub_cgroup(&v(&["sub"])).unwrap(), Some(PathBuf::from("sub")));
        assert_eq!(
            sub_cgroup(&v(&["cpu,memory:sub", "pids:sub"])).unwrap(),
            Some(PathBuf::from("sub"))
        );
        assert!(sub_cgroup(&v(&["cpu:a", "memory:b"])).is_err());
        let e = sub_cgroup(&v(&[".."])).unwrap_err().to_string();
        assert!(e.contains(".. is not a sub cgroup path"), "{e}");
    }
}
