//! `exec`: runs another process in a running container — same namespaces, cgroup and seccomp profile.

use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use oci_spec::runtime::Process;

use crate::state::Status;
use crate::{Error, Result, err};

/// Options of `exec`.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// The process to run.
    pub process: Process,
    /// Return once it runs instead of waiting for it.
    pub detach: bool,
    /// Write its host pid here.
    pub pid_file: Option<PathBuf>,
    /// Socket that receives the pty master when `process.terminal` is set.
    pub console_socket: Option<PathBuf>,
    /// Descriptors 3 to 3+N-1 of the caller that the process gets (runc's `--preserve-fds`).
    pub preserve_fds: u32,
}

/// Runs the process; returns its exit code, or 0 once it runs with `detach`.
pub fn exec(root: &std::path::Path, id: &str, opts: &ExecOptions) -> Result<i32> {
    let pid = start(root, id, opts)?;
    if let Some(p) = &opts.pid_file {
        crate::state::atomic_write(
            &std::path::absolute(p).unwrap_or(p.clone()),
            pid.to_string().as_bytes(),
        )?;
    }
    if opts.detach {
        return Ok(0);
    }
    crate::wait::forward_until_exit(pid)
}

/// Checks the container and the process, then starts it ([`crate::enter::spawn`]); returns its host pid once
/// it runs the program. Without `detach`, this process becomes a subreaper first.
pub fn start(root: &std::path::Path, id: &str, opts: &ExecOptions) -> Result<i32> {
    let (rec, status) = crate::ops::load(root, id)?;
    if !matches!(status, Status::Running | Status::Created) {
        return Err(Error::WrongState {
            id: id.into(),
            status,
            action: "exec in it".into(),
        });
    }
    crate::config::check_process("process", &opts.process)?;
    let terminal = opts.process.terminal() == Some(true);
    if terminal && opts.console_socket.is_none() {
        return Err(err!("a terminal was asked for: --console-socket is required"));
    }
    let console = match &opts.console_socket {
        Some(p) => Some(UnixStream::connect(p).map_err(Error::io("connecting to console socket", p))?),
        None => None,
    };
    if !opts.detach {
        crate::wait::become_subreaper()?;
    }
    // The one implementation of entering a container, shared with the shim's direct exec.
    let pid = crate::enter::spawn(
        &rec,
        crate::enter::Exec {
            process: &opts.process,
            console,
            preserve_fds: opts.preserve_fds,
        },
    )?
    .as_raw();
    Ok(pid)
}
