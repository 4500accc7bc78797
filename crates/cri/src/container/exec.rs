//! ExecSync: a command run in a running container through its shim, in one call of the shim
//! ([`crate::shim::ShimClient::exec_sync`]): the shim starts it, keeps its output in memory, kills it once
//! its timeout passed and deletes it. criusd holds no thread while the command runs: the call is a future,
//! awaited on the gRPC worker, and the shim's answer wakes it. The timeout is the shim's to keep (it kills at
//! the timeout, so the call ends after the timeout and not after twice it); criusd's own deadline is only for
//! a shim that never answers.

use std::time::Duration;

use crius_api::cri;

use super::Containers;
use crate::error::{Error, Kind, Result};
use crate::shim::{ExecSyncTask, ShimCode, ShimError};

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
    /// stdout, stderr (each at most 16 MiB, the rest dropped) and exit code. `timeout` seconds (0: none;
    /// capped at `LONGEST`, a year) over, the process is killed and the call is DeadlineExceeded.
    pub async fn exec_sync(&self, id: &str, cmd: &[String], timeout: i64) -> Result<cri::ExecSyncResponse> {
        // Its ids and state alone: every probe comes here, and the record's CRI config is not needed.
        let (id, sandbox, state) = self.read_or_not_found(CALL, id, |c| {
            (c.record.id.clone(), c.record.sandbox_id.clone(), c.record.state())
        })?;
        if cmd.is_empty() {
            return Err(Error::invalid(CALL, "cmd", "is empty"));
        }
        crate::validate::argv(CALL, "cmd", cmd)?;
        Self::running_state(CALL, &id, state)?;
        let mut process = self.process_of(CALL, &id)?;
        process.set_args(Some(cmd.to_vec())).set_terminal(Some(false));
        let task = ExecSyncTask {
            exec_id: super::stream::new_exec_id()?,
            process,
            timeout: limit(timeout),
        };
        let (sandbox, id) = (sandbox.as_str(), id.as_str());
        let deadline_exceeded = |why: &str| Error::DeadlineExceeded {
            call: CALL,
            kind: Kind::Container,
            id: id.to_string(),
            reason: format!("ran {cmd:?}, which still ran after {timeout} s: {why}"),
        };
        let shim_err = |source| Error::Shim {
            call: CALL,
            id: id.to_string(),
            source,
        };
        match self.shims.exec_sync(sandbox, id, task).await {
            // Over time: the process went, and the caller hears why.
            Ok(out) if out.timed_out => Err(deadline_exceeded("killed")),
            Ok(out) => Ok(cri::ExecSyncResponse {
                stdout: out.stdout,
                stderr: out.stderr,
                exit_code: out.status as i32,
            }),
            // A command that cannot be run is an answer, as a shell gives it: kubelet's exec probes read the
            // exit code, and an RPC error would be an unknown probe result instead of a failed one.
            Err(ShimError::Refused { message, .. }) if let Some(code) = cannot_run(&message) => {
                // The runtime's own words, without the shim's command line before them.
                let said = message
                    .rsplit_once(": exit status ")
                    .and_then(|(_, rest)| rest.split_once(": "))
                    .map_or(message.as_str(), |(_, words)| words);
                Ok(cri::ExecSyncResponse {
                    stdout: Vec::new(),
                    stderr: format!("{said}\n").into_bytes(),
                    exit_code: code,
                })
            }
            Err(ShimError::Refused {
                code: ShimCode::Unimplemented,
                message,
            }) => Err(shim_err(ShimError::Refused {
                code: ShimCode::Unimplemented,
                message: format!(
                    "the pod's shim is older than criusd and has no ExecSync call ({message}): \
                     recreate the pod to run it under the current shim"
                ),
            })),
            // The shim did not answer by the timeout and its margin.
            Err(ShimError::Timeout(_)) => Err(deadline_exceeded("the shim did not answer in time")),
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
