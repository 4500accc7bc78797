//! ExecSync: a command run in a running container through its shim, its output captured
//! ([`super::capture::Capture`]). The wait for its end is one shim call whose deadline is the call's
//! timeout: once over, the process is killed and the call is DeadlineExceeded, after the timeout and not
//! after twice it.

use std::time::Duration;

use crius_api::cri;

use super::Containers;
use super::capture::Capture;
use crate::error::{Error, Kind, Result};
use crate::shim::{ExecTask, ShimError};
use crate::store::container::Container;

const CALL: &str = "ExecSync";

/// The longest a call waits for a process, whatever the timeout asked (a year: "no timeout", kept finite so
/// that a deadline computed from it cannot overflow).
pub(super) const LONGEST: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long a CRI timeout of `secs` seconds lets a call wait: None for 0 or less (no timeout), else at most
/// [`LONGEST`]. Every i64 is valid input: `i64::MAX` is a year.
pub(super) fn limit(secs: i64) -> Option<Duration> {
    (secs > 0).then(|| Duration::from_secs(secs.unsigned_abs()).min(LONGEST))
}

impl Containers {
    /// ExecSync: runs `cmd` in the running container (its process settings, these arguments) and returns its
    /// stdout, stderr and exit code. `timeout` seconds (0: none; capped at `LONGEST`, a year) over, the process
    /// is killed and the call is DeadlineExceeded.
    pub fn exec_sync(&self, id: &str, cmd: &[String], timeout: i64) -> Result<cri::ExecSyncResponse> {
        let c = self.get_or_not_found(CALL, id)?;
        if cmd.is_empty() {
            return Err(Error::invalid(CALL, "cmd", "is empty"));
        }
        crate::validate::argv(CALL, "cmd", cmd)?;
        Self::running(CALL, &c)?;
        let bundle = self.bundle(&c.record.id);
        let mut process = self.process_of(CALL, &c)?;
        process.set_args(Some(cmd.to_vec())).set_terminal(Some(false));
        let exec_id = super::stream::new_exec_id()?;
        let dir = bundle.join(&exec_id);
        let out = Capture::new(&dir)?;
        let task = ExecTask {
            exec_id: exec_id.clone(),
            process,
            stdin: String::new(),
            stdout: out.stdout_path(),
            stderr: out.stderr_path(),
            terminal: false,
        };
        let result = self.run_exec(&c, &task, &out, timeout);
        let _ = self.shims.delete(&c.record.sandbox_id, &c.record.id, &exec_id);
        let (stdout, mut stderr) = out.finish();
        let _ = std::fs::remove_dir_all(&dir);
        let exit_code = match result {
            Ok(code) => code,
            // A command that cannot be run is an answer, as a shell gives it: kubelet's exec probes read the
            // exit code, and an RPC error would be an unknown probe result instead of a failed one.
            Err(Error::Shim {
                source: ShimError::Refused { message, .. },
                ..
            }) if let Some(code) = cannot_run(&message) => {
                // The runtime's own words, without the shim's command line before them.
                let said = message
                    .rsplit_once(": exit status ")
                    .and_then(|(_, rest)| rest.split_once(": "))
                    .map_or(message.as_str(), |(_, words)| words);
                stderr.extend_from_slice(format!("{said}\n").as_bytes());
                code
            }
            Err(e) => return Err(e),
        };
        Ok(cri::ExecSyncResponse {
            stdout,
            stderr,
            exit_code,
        })
    }

    fn run_exec(&self, c: &Container, task: &ExecTask, out: &Capture, timeout: i64) -> Result<i32> {
        let (id, sandbox) = (c.record.id.as_str(), c.record.sandbox_id.as_str());
        let shim_err = |source| Error::Shim {
            call: CALL,
            id: id.to_string(),
            source,
        };
        self.shims.exec(sandbox, id, task).map_err(shim_err)?;
        self.shims.start(sandbox, id, &task.exec_id).map_err(shim_err)?;
        out.started();
        match self
            .shims
            .wait(sandbox, id, &task.exec_id, limit(timeout).unwrap_or(LONGEST))
        {
            Ok(exit) => Ok(exit.status as i32),
            Err(ShimError::Timeout(_)) => {
                // Over time: the process goes, and the caller hears why.
                let _ = self.shims.kill(sandbox, id, &task.exec_id, 9, false);
                let _ = self
                    .shims
                    .wait(sandbox, id, &task.exec_id, Duration::from_secs(30));
                Err(Error::DeadlineExceeded {
                    call: CALL,
                    kind: Kind::Container,
                    id: id.to_string(),
                    reason: format!(
                        "ran {:?}, which still ran after {timeout} s: killed",
                        task.process.args().clone().unwrap_or_default()
                    ),
                })
            }
            Err(e) => Err(shim_err(e)),
        }
    }
}

/// The exit code a shell gives a command it cannot run, when the runtime's refusal to start an exec says
/// that is why: 127 for a file that is not there (or not in `$PATH`), 126 for one that may not be executed.
/// The messages are crius-runc's, runc's and crun's.
pub(crate) fn cannot_run(message: &str) -> Option<i32> {
    let m = message.to_ascii_lowercase();
    if !m.contains("exec") {
        return None;
    }
    if m.contains("permission denied") || m.contains("not executable") {
        Some(126)
    } else if m.contains("not found") || m.contains("no such file") || m.contains("no such executable") {
        Some(127)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{LONGEST, cannot_run, limit};

    #[test]
    fn every_timeout_is_valid_and_capped() {
        assert_eq!(limit(0), None);
        assert_eq!(limit(-1), None);
        assert_eq!(limit(i64::MIN), None);
        assert_eq!(limit(3), Some(std::time::Duration::from_secs(3)));
        assert_eq!(limit(i64::MAX), Some(LONGEST));
        // A deadline from the longest wait does not overflow.
        assert!(std::time::Instant::now().checked_add(LONGEST).is_some());
    }

    #[test]
    fn runtimes_refusals_to_run_a_command() {
        for (msg, code) in [
            // crius-runc
            (r#"exec: "nope": executable file not found in $PATH"#, Some(127)),
            (r#"exec: "/bin/nope": no such executable file"#, Some(127)),
            (
                r#"exec: "/etc/passwd": not executable (permission denied)"#,
                Some(126),
            ),
            // runc
            (
                r#"exec failed: unable to start container process: exec: "nope": executable file not found in $PATH"#,
                Some(127),
            ),
            (
                r#"exec failed: unable to start container process: exec /etc/passwd: permission denied"#,
                Some(126),
            ),
            (
                r#"exec failed: unable to start container process: exec: "/x": stat /x: no such file or directory"#,
                Some(127),
            ),
            // crun
            (
                "executable file `nope` not found in $PATH: No such file or directory: exec",
                Some(127),
            ),
            // not a missing command
            ("the container is not running", None),
            ("exec: setting uid 5: operation not permitted", None),
        ] {
            assert_eq!(cannot_run(msg), code, "{msg}");
        }
    }
}
