//! Exec and attach for the streaming server: what [`crate::streaming`] asks of the containers.
//!
//! An exec gets FIFOs in a directory of the container's bundle, as ExecSync does, plus a stdin FIFO and a
//! terminal when asked; criusd holds the other ends and the session copies them to the client. An attach
//! writes to the container's stdin FIFO (made at create when the config asks for stdin, held open by the
//! shim) and follows the container's CRI log for its output, so what was written before stays in the log
//! and several clients can attach at once.

use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::Containers;
use crate::error::{Error, Kind, Result};
use crate::shim::ExecTask;
use crate::store::container::Container;
use crate::store::random_id;

/// The name of a container's stdin FIFO in its bundle.
pub const STDIN_FIFO: &str = "stdin";
/// The output of a container without a log file of its own, in its bundle: a CRI log capped at 1 MiB, for
/// attach.
pub const ATTACH_LOG: &str = "attach.log";

/// An exec started for a stream: the ends criusd holds.
#[derive(Debug)]
pub struct StreamExec {
    /// Its pod.
    pub sandbox: String,
    /// Its container.
    pub id: String,
    /// The exec id.
    pub exec_id: String,
    /// Where its FIFOs are (removed at the end).
    pub dir: PathBuf,
    /// The write end of its stdin.
    pub stdin: Option<File>,
    /// The read end of its stdout.
    pub stdout: Option<File>,
    /// The read end of its stderr.
    pub stderr: Option<File>,
}

/// An attach to a running container: the ends criusd holds.
#[derive(Debug)]
pub struct StreamAttach {
    /// Its pod.
    pub sandbox: String,
    /// The container.
    pub id: String,
    /// The write end of its stdin FIFO.
    pub stdin: Option<File>,
    /// Its CRI log, which its output is followed in (None: no output asked for).
    pub log: Option<PathBuf>,
    /// Whether it has a terminal.
    pub tty: bool,
    /// Close its stdin when this attach lets go.
    pub stdin_once: bool,
}

/// Makes a FIFO (0600) at `path`.
pub(super) fn mkfifo(call: &'static str, path: &Path) -> Result<()> {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| Error::io(format!("{call}: mkfifo {}", path.display()), e.into()))
}

/// Opens the FIFO at `path` without blocking on its other end.
pub(super) fn open(call: &'static str, path: &Path, read: bool, write: bool) -> Result<File> {
    std::fs::OpenOptions::new()
        .read(read)
        .write(write)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| Error::io(format!("{call}: opening {}", path.display()), e))
}

/// A new exec id, `exec-` and 16 hex digits: also the name of the exec's FIFO directory in the bundle,
/// which the start-up pass recognises by the prefix.
pub(crate) fn new_exec_id() -> Result<String> {
    let id = random_id().map_err(|e| Error::io("reading /dev/urandom", e))?;
    Ok(format!("{EXEC_PREFIX}{}", &id[..16]))
}

/// What every exec id starts with.
pub(crate) const EXEC_PREFIX: &str = "exec-";

/// Makes the stdin FIFO of a container created with `stdin` in `bundle`; the path to give the shim.
pub(crate) fn make_stdin_fifo(bundle: &Path) -> Result<PathBuf> {
    let path = bundle.join(STDIN_FIFO);
    mkfifo("CreateContainer", &path)?;
    Ok(path)
}

impl Containers {
    fn stream_target(&self, call: &'static str, id: &str) -> Result<Container> {
        let c = self.get_or_not_found(call, id)?;
        Self::running(call, &c)?;
        Ok(c)
    }

    /// Checks an Exec request before it gets its URL: the container exists and runs, and cmd is not empty.
    pub fn check_exec(&self, id: &str, cmd: &[String], tty: bool, stderr: bool) -> Result<()> {
        self.stream_target("Exec", id)?;
        if cmd.is_empty() {
            return Err(Error::invalid("Exec", "cmd", "is empty"));
        }
        crate::validate::argv("Exec", "cmd", cmd)?;
        if tty && stderr {
            return Err(Error::invalid(
                "Exec",
                "stderr",
                "cannot be asked for with tty: a terminal has one output",
            ));
        }
        Ok(())
    }

    /// Checks an Attach request before it gets its URL.
    pub fn check_attach(&self, id: &str, stdin: bool, tty: bool, stderr: bool) -> Result<()> {
        self.attach_target(id, stdin, tty, stderr).map(drop)
    }

    /// The running container an Attach request names, once the request is checked against it.
    fn attach_target(&self, id: &str, stdin: bool, tty: bool, stderr: bool) -> Result<Container> {
        let c = self.stream_target("Attach", id)?;
        if stdin && !c.config.stdin {
            return Err(Error::FailedPrecondition {
                call: "Attach",
                kind: Kind::Container,
                id: id.into(),
                reason: "was not created with stdin: true, so it has no stdin to attach to".into(),
            });
        }
        if tty && stderr {
            return Err(Error::invalid(
                "Attach",
                "stderr",
                "cannot be asked for with tty: a terminal has one output",
            ));
        }
        Ok(c)
    }

    /// Starts `cmd` in the running container for a stream, with the container's process settings, a
    /// terminal if `tty`, and the stdio asked for.
    pub fn exec_stream(
        &self,
        id: &str,
        cmd: &[String],
        tty: bool,
        size: Option<(u16, u16)>,
        stdio: [bool; 3],
    ) -> Result<StreamExec> {
        const CALL: &str = "Exec";
        let c = self.stream_target(CALL, id)?;
        if cmd.is_empty() {
            return Err(Error::invalid(CALL, "cmd", "is empty"));
        }
        crate::validate::argv(CALL, "cmd", cmd)?;
        let mut process = self.process_of(CALL, &c.record.id)?;
        process.set_args(Some(cmd.to_vec())).set_terminal(Some(tty));
        if let Some((width, height)) = size.filter(|_| tty) {
            let b = oci_spec::runtime::BoxBuilder::default()
                .width(u64::from(width))
                .height(u64::from(height))
                .build()
                .map_err(|e| Error::invalid(CALL, "terminal size", e.to_string()))?;
            process.set_console_size(Some(b));
        }
        let exec_id = new_exec_id()?;
        let dir = self.bundle(&c.record.id).join(&exec_id);
        std::fs::create_dir_all(&dir)
            .map_err(|e| Error::io(format!("{CALL}: creating {}", dir.display()), e))?;
        let made = (|| {
            let [want_in, want_out, want_err] = stdio;
            let mut paths = [String::new(), String::new(), String::new()];
            let mut ends = [None, None, None];
            for (i, (name, want)) in [
                ("stdin", want_in),
                ("stdout", want_out),
                ("stderr", want_err && !tty),
            ]
            .into_iter()
            .enumerate()
            {
                if !want {
                    continue;
                }
                let path = dir.join(name);
                mkfifo(CALL, &path)?;
                // stdin: read-write, so the open needs no reader yet; outputs: read, before the shim opens.
                ends[i] = Some(open(CALL, &path, true, i == 0)?);
                paths[i] = path.display().to_string();
            }
            let [stdin, stdout, stderr] = paths;
            let task = ExecTask {
                exec_id: exec_id.clone(),
                process,
                stdin,
                stdout,
                stderr,
                terminal: tty,
            };
            let shim_err = |source| Error::Shim {
                call: CALL,
                id: c.record.id.clone(),
                source,
            };
            let sandbox = &c.record.sandbox_id;
            self.shims.exec(sandbox, &c.record.id, &task).map_err(shim_err)?;
            if let Err(e) = self.shims.start(sandbox, &c.record.id, &exec_id) {
                let _ = self.shims.delete(sandbox, &c.record.id, &exec_id);
                return Err(shim_err(e));
            }
            Ok(ends)
        })();
        match made {
            Ok([stdin, stdout, stderr]) => Ok(StreamExec {
                sandbox: c.record.sandbox_id.clone(),
                id: c.record.id.clone(),
                exec_id,
                dir,
                stdin,
                stdout,
                stderr,
            }),
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                Err(e)
            }
        }
    }

    /// Attaches to the running container's stdio.
    pub fn attach_stream(&self, id: &str, stdin: bool, stdout: bool, stderr: bool) -> Result<StreamAttach> {
        const CALL: &str = "Attach";
        let c = self.attach_target(id, stdin, false, false)?;
        let want_output = stdout || stderr;
        let log = if c.record.log_path.is_empty() {
            self.bundle(&c.record.id).join(ATTACH_LOG)
        } else {
            PathBuf::from(&c.record.log_path)
        };
        let stdin = if stdin {
            let path = self.bundle(&c.record.id).join(STDIN_FIFO);
            Some(open(CALL, &path, false, true)?)
        } else {
            None
        };
        Ok(StreamAttach {
            sandbox: c.record.sandbox_id.clone(),
            id: c.record.id.clone(),
            stdin,
            log: want_output.then_some(log),
            tty: c.config.tty,
            stdin_once: c.config.stdin_once,
        })
    }

    /// The terminal of the container's init (`exec_id` empty) or an exec is `width` × `height`.
    pub fn resize(&self, sandbox: &str, id: &str, exec_id: &str, width: u16, height: u16) -> Result<()> {
        self.shims
            .resize_pty(sandbox, id, exec_id, u32::from(width), u32::from(height))
            .map_err(|source| Error::Shim {
                call: "ResizePty",
                id: id.into(),
                source,
            })
    }

    /// Waits for the end of the init (`exec_id` empty) or an exec; its exit code.
    pub fn wait_stream(&self, sandbox: &str, id: &str, exec_id: &str) -> Result<i32> {
        let exit = self
            .shims
            .wait(sandbox, id, exec_id, Duration::from_secs(10 * 365 * 24 * 3600))
            .map_err(|source| Error::Shim {
                call: "Exec",
                id: id.into(),
                source,
            })?;
        Ok(exit.status as i32)
    }

    /// Resolves when the container stops running: its exit code. Follows the containers' changes (the shims'
    /// exit events), so no thread waits on a shim meanwhile.
    pub async fn wait_exit(&self, id: &str) -> Result<i32> {
        let mut changes = self.subscribe();
        loop {
            let c = self.get_or_not_found("Attach", id)?;
            if c.record.state() != crate::store::container::State::Running {
                return Ok(c.record.exit_code);
            }
            match changes.recv().await {
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return Err(Error::io(
                        format!("Attach: following container {id:?}"),
                        std::io::Error::other("the container events ended"),
                    ));
                }
            }
        }
    }

    /// Ends a stream's exec: killed first if the client went away; then deleted in the shim, its FIFOs
    /// removed.
    pub fn end_exec(&self, sandbox: &str, id: &str, exec_id: &str, dir: &Path, kill: bool) {
        if kill {
            let _ = self.shims.kill(sandbox, id, exec_id, 9, false);
            let _ = self.shims.wait(sandbox, id, exec_id, Duration::from_secs(10));
        }
        let _ = self.shims.delete(sandbox, id, exec_id);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// An attach let go: with `stdin_once`, the container's stdin is closed (it reads EOF).
    pub fn end_attach(&self, sandbox: &str, id: &str, close_stdin: bool) {
        if close_stdin {
            let _ = self.shims.close_io(sandbox, id, "");
        }
    }

    /// The container's process settings from its config.json (the base of an exec's process).
    /// Read once per version of the file (`process_cache`).
    pub(crate) fn process_of(&self, call: &'static str, id: &str) -> Result<oci_spec::runtime::Process> {
        let config = self.bundle(id).join("config.json");
        let p = self.processes.get(call, id, &config)?;
        Ok((*p).clone())
    }
}
