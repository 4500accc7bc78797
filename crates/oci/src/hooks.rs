//! OCI hooks: programs run at fixed points of the lifecycle, given the container state on stdin (its document is
//! `state::document`, the one the `state` command prints too).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oci_spec::runtime::Hook;

use crate::{Result, err};

/// Runs `hooks` in order; the first failure (non-zero exit, timeout) stops and names the hook and phase (an
/// exit in runc's words, `error running hook #N`, which tools built on runc look for).
pub fn run(phase: &str, hooks: &[Hook], state: &serde_json::Value) -> Result<()> {
    run_in(phase, hooks, state, None)
}

/// [`run`], with `cwd` as the hooks' working directory (createContainer hooks run in the rootfs).
pub fn run_in(phase: &str, hooks: &[Hook], state: &serde_json::Value, cwd: Option<&Path>) -> Result<()> {
    let input = state.to_string();
    for (i, h) in hooks.iter().enumerate() {
        let path = h.path();
        let args = h.args().clone().unwrap_or_default();
        let mut cmd = Command::new(path);
        if let Some(dir) = cwd {
            cmd.current_dir(dir);
        }
        if let Some((arg0, rest)) = args.split_first() {
            cmd.arg0(arg0).args(rest);
        }
        cmd.env_clear();
        for kv in h.env().iter().flatten() {
            if let Some((k, v)) = kv.split_once('=') {
                cmd.env(k, v);
            }
        }
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| err!("{phase} hook {}: {e}", path.display()))?;
        if let Some(mut stdin) = child.stdin.take() {
            let _ = stdin.write_all(input.as_bytes());
        }
        let deadline = h
            .timeout()
            .filter(|&t| t > 0)
            .map(|t| Instant::now() + Duration::from_secs(t as u64));
        let status = loop {
            if let Some(s) = child
                .try_wait()
                .map_err(|e| err!("{phase} hook {}: {e}", path.display()))?
            {
                break s;
            }
            if deadline.is_some_and(|d| Instant::now() > d) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(err!(
                    "{phase} hook {} timed out after {}s",
                    path.display(),
                    h.timeout().unwrap_or(0)
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if !status.success() {
            let mut stderr = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
            }
            return Err(err!(
                "error running hook #{i} ({phase} {}): {}: {}",
                path.display(),
                describe(status),
                stderr.trim()
            ));
        }
    }
    Ok(())
}

/// How a hook ended, in words: `exit status 3`, or the signal's name and description (`signal SIGSYS: bad
/// system call`, the words runc's users look for).
fn describe(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => {
            let name = nix::sys::signal::Signal::try_from(sig)
                .map(|s| s.as_str())
                .unwrap_or("?");
            // SAFETY: strsignal returns a pointer to a static (or thread-local) NUL-terminated string.
            let text = unsafe { std::ffi::CStr::from_ptr(libc::strsignal(sig)) };
            format!("signal {name}: {}", text.to_string_lossy().to_lowercase())
        }
        _ => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_killed_by_a_signal_is_described_by_its_name_and_words() {
        let s = std::process::ExitStatus::from_raw(libc::SIGSYS);
        assert_eq!(describe(s), "signal SIGSYS: bad system call");
        assert_eq!(
            describe(std::process::ExitStatus::from_raw(3 << 8)),
            "exit status 3"
        );
    }

    #[test]
    fn a_hook_runs_in_the_directory_given() {
        let dir = tempfile::tempdir().unwrap();
        let hook: Hook = serde_json::from_value(serde_json::json!({
            "path": "/bin/sh", "args": ["sh", "-c", "pwd > where"]}))
        .unwrap();
        run_in(
            "createContainer",
            &[hook],
            &serde_json::json!({}),
            Some(dir.path()),
        )
        .unwrap();
        let said = std::fs::read_to_string(dir.path().join("where")).unwrap();
        assert_eq!(said.trim(), dir.path().canonicalize().unwrap().to_str().unwrap());
    }
}
