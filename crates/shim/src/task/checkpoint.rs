//! Checkpoint and restore with CRIU, through the OCI runtime's `checkpoint` and `restore` verbs (runc's
//! command line). Checkpoint dumps a running container's processes into an image directory; the container
//! keeps running with `leave_running`, else CRIU ends it and its exit is reported as any other. A container
//! created with a checkpoint path is made at Start by `restore --detach` instead of `create` + `start`, as
//! containerd's runc shim does, with the same stdio plumbing as a create, so its output keeps flowing.
//!
//! A failure names the runtime's message and, where CRIU wrote one, the errors of its log (`dump.log` or
//! `restore.log` in the work directory).

use std::path::{Path, PathBuf};

use super::Tasks;
use crate::error::{Error, Result};
use crate::events::Event;

/// What Checkpoint asks for (containerd's `CheckpointTaskRequest` with its `CheckpointOptions`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CheckpointTask {
    /// Where CRIU's images go (the request's `path`, or the options' `image_path`).
    pub(crate) image_path: PathBuf,
    /// CRIU's work directory (its logs); empty: the image directory.
    pub(crate) work_path: Option<PathBuf>,
    /// End the container after the dump (`exit`); else it keeps running (`--leave-running`).
    pub(crate) exit: bool,
    /// Dump established TCP connections (`--tcp-established`).
    pub(crate) open_tcp: bool,
    /// Dump external unix sockets (`--ext-unix-sk`).
    pub(crate) external_unix_sockets: bool,
    /// Dump file locks (`--file-locks`).
    pub(crate) file_locks: bool,
    /// The container has a terminal (`--shell-job`).
    pub(crate) terminal: bool,
    /// `--manage-cgroups-mode` (empty: the runtime's default).
    pub(crate) cgroups_mode: String,
}

impl CheckpointTask {
    /// The runtime's arguments for it, the container id last.
    pub(crate) fn args(&self, id: &str) -> Vec<String> {
        let mut a = vec![
            "checkpoint".to_string(),
            "--image-path".into(),
            self.image_path.display().to_string(),
            "--work-path".into(),
            self.work().display().to_string(),
        ];
        let flags = [
            (!self.exit, "--leave-running"),
            (self.open_tcp, "--tcp-established"),
            (self.external_unix_sockets, "--ext-unix-sk"),
            (self.file_locks, "--file-locks"),
            (self.terminal, "--shell-job"),
        ];
        a.extend(flags.iter().filter(|f| f.0).map(|f| f.1.to_string()));
        if !self.cgroups_mode.is_empty() {
            a.extend(["--manage-cgroups-mode".into(), self.cgroups_mode.clone()]);
        }
        a.push(id.to_string());
        a
    }

    fn work(&self) -> &Path {
        self.work_path.as_deref().unwrap_or(&self.image_path)
    }
}

/// The error lines of CRIU's log `log` (at most the last 10), for a failure's message.
pub(crate) fn criu_errors(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Error") || l.contains("error"))
        .collect();
    if lines.is_empty() {
        return None;
    }
    let tail = &lines[lines.len().saturating_sub(10)..];
    Some(format!("CRIU's {}: {}", log.display(), tail.join(" | ")))
}

/// `e` with CRIU's errors from `log` appended, when it is the runtime's failure and the log has some.
pub(crate) fn with_criu_log(e: Error, log: &Path) -> Error {
    match (e, criu_errors(log)) {
        (Error::Runtime(m), Some(c)) => Error::Runtime(format!("{m}; {c}")),
        (e, _) => e,
    }
}

impl Tasks {
    /// Checkpoint: CRIU dumps container `id` (its init running) into `req.image_path`. Without `exit` the
    /// container goes on running; with it, CRIU ends it and its exit is recorded and published as any other.
    pub(crate) fn checkpoint(&self, id: &str, req: &CheckpointTask) -> Result<()> {
        if req.image_path.as_os_str().is_empty() {
            return Err(Error::InvalidArgument(format!(
                "Checkpoint of container {id:?}: no image path"
            )));
        }
        let (runtime, bundle) = self.with(id, |c| {
            c.init
                .life
                .require_running(&format!("container {id:?}"), "checkpoint")?;
            Ok((c.runtime.clone(), c.bundle.clone()))
        })?;
        for dir in [req.image_path.as_path(), req.work()] {
            crius_common::private::dir_all(dir).map_err(|source| Error::Io {
                context: format!("creating {}", dir.display()),
                source,
            })?;
        }
        let args = req.args(id);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        runtime
            .run(&args, None, &bundle)
            .map_err(|e| with_criu_log(e, &req.work().join("dump.log")))?;
        self.publish(Event::Checkpointed {
            container_id: id.to_string(),
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_arguments_are_runcs() {
        let mut t = CheckpointTask {
            image_path: "/img".into(),
            ..Default::default()
        };
        assert_eq!(
            t.args("c1").join(" "),
            "checkpoint --image-path /img --work-path /img --leave-running c1"
        );
        t = CheckpointTask {
            image_path: "/img".into(),
            work_path: Some("/work".into()),
            exit: true,
            open_tcp: true,
            external_unix_sockets: true,
            file_locks: true,
            terminal: true,
            cgroups_mode: "soft".into(),
        };
        assert_eq!(
            t.args("c1").join(" "),
            "checkpoint --image-path /img --work-path /work --tcp-established --ext-unix-sk --file-locks \
             --shell-job --manage-cgroups-mode soft c1"
        );
    }

    #[test]
    fn criu_errors_are_the_logs_last_error_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("dump.log");
        assert_eq!(criu_errors(&log), None);
        let mut text = String::from("(00.000001) Version: 3.17\n");
        for i in 0..12 {
            text.push_str(&format!("(00.1) Error (criu/x.c:{i}): cannot dump\n"));
        }
        std::fs::write(&log, text).unwrap();
        let got = criu_errors(&log).unwrap();
        assert!(
            got.contains("x.c:11") && got.contains("x.c:2") && !got.contains("x.c:1)"),
            "{got}"
        );
        let e = with_criu_log(Error::Runtime("runc checkpoint: exit status 1".into()), &log);
        assert!(
            e.to_string()
                .starts_with("runc checkpoint: exit status 1; CRIU's"),
            "{e}"
        );
    }
}
