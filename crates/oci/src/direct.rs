//! The shim's direct exec: an exec without a `crius-runc exec` command, its state files, log file or pid file.
//!
//! The shim runs crius-runc's sealed copy (the one criusd hands it, `crius_common::sealed`) with the hidden
//! first argument [`ARG`], the exec's stdio as descriptors 0 to 2 and one end of a stream socket as [`FD`].
//! It writes a [`Request`] (JSON) there and shuts its writing down; [`serve`] answers `pid N` (the host pid of
//! the process, which has executed its program) or `error MESSAGE`, and exits. The process itself is started
//! by [`crate::exec::spawn`], so every check and security step is `crius-runc exec`'s, in one implementation
//! ([`crate::enter`]).
//!
//! Why the runtime's sealed copy and not the shim's own image: the process that enters the container must not
//! run from a host file (CVE-2019-5736), and the shim holds no sealed copy of itself (making one per pod would
//! cost each pod a private copy of its binary), while the runtime's copy is one memfd that criusd made once and
//! every shim shares; and the shim then needs neither this library nor libseccomp, so it stays small. The
//! cost left is one `execve` of that copy and one `clone3`: no self-copy, no second exec, no command-line
//! parsing, no files.

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;

use oci_spec::runtime::Process;
use serde::{Deserialize, Serialize};

use crate::exec::ExecOptions;
use crate::{Result, err};

/// The hidden first argument of crius-runc that runs [`serve`].
pub const ARG: &str = "__crius-direct-exec";

/// The descriptor the request comes on and the answer goes back on.
pub const FD: i32 = 3;

/// What the shim asks for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The runtime's state root (`--root`).
    pub root: PathBuf,
    /// The container.
    pub id: String,
    /// The process to start.
    pub process: Process,
    /// The console socket that receives the pty master, when `process.terminal`.
    #[serde(default)]
    pub console_socket: Option<PathBuf>,
}

/// Serves one request on [`FD`]; returns the exit code (0 when the process runs). The caller has made sure it
/// runs from a sealed copy of the runtime.
pub fn serve() -> i32 {
    // Nothing but stdio and the request's socket (CVE-2024-21626); non-dumpable while in the container's
    // namespaces (its process is dumpable again after its execve).
    // SAFETY: close_range and prctl with integer arguments; no object of this process owns those descriptors.
    unsafe {
        libc::syscall(libc::SYS_close_range, FD + 1, u32::MAX, 0);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
    }
    // SAFETY: FD is the socket the caller gave this process, owned by nothing else here.
    let mut sock = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(FD) });
    // SAFETY: as above; close-on-exec, so that the process started does not inherit it.
    unsafe { libc::fcntl(FD, libc::F_SETFD, libc::FD_CLOEXEC) };
    let answer = match run(&mut sock) {
        Ok(pid) => format!("pid {pid}"),
        Err(e) => format!("error {e}"),
    };
    let ok = answer.starts_with("pid ");
    let _ = sock.write_all(answer.as_bytes());
    if ok { 0 } else { 1 }
}

fn run(sock: &mut std::fs::File) -> Result<i32> {
    let mut buf = Vec::new();
    sock.read_to_end(&mut buf)
        .map_err(|e| err!("reading the direct exec request: {e}"))?;
    let req: Request =
        serde_json::from_slice(&buf).map_err(|e| err!("decoding the direct exec request: {e}"))?;
    let opts = ExecOptions {
        process: req.process,
        detach: true,
        pid_file: None,
        console_socket: req.console_socket,
        preserve_fds: 0,
        ignore_paused: false,
        sub_cgroup: None,
    };
    crate::exec::spawn(&req.root, &req.id, &opts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_with_its_process() {
        let p: Process = serde_json::from_value(serde_json::json!({
            "args": ["true"], "cwd": "/", "user": {"uid": 0, "gid": 0}, "terminal": false
        }))
        .unwrap();
        let r = Request {
            root: "/run/x".into(),
            id: "c1".into(),
            process: p,
            console_socket: None,
        };
        let back: Request = serde_json::from_slice(&serde_json::to_vec(&r).unwrap()).unwrap();
        assert_eq!(back.process.args().as_deref(), Some(&["true".to_string()][..]));
        assert_eq!(back.id, "c1");
    }
}
