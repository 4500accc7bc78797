//! OCI hooks: programs run at fixed points of the lifecycle, given the container state on stdin (its document is
//! `state::document`, the one the `state` command prints too).

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use oci_spec::runtime::Hook;

use crate::{Result, err};

/// Runs `hooks` in order; the first failure (non-zero exit, timeout) stops and names the hook and phase.
pub fn run(phase: &str, hooks: &[Hook], state: &serde_json::Value) -> Result<()> {
    let input = state.to_string();
    for h in hooks {
        let path = h.path();
        let args = h.args().clone().unwrap_or_default();
        let mut cmd = Command::new(path);
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
                "{phase} hook {} failed ({status}): {}",
                path.display(),
                stderr.trim()
            ));
        }
    }
    Ok(())
}
