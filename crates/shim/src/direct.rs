//! Direct exec: for crius's own runtime, an exec process is started without a `crius-runc exec` command.
//!
//! The shim runs crius-runc's sealed copy (the memfd criusd hands every shim, `crius_common::sealed`; a shim
//! started without one runs crius-runc by its path, which then seals itself) with the hidden first argument
//! [`ARG`], the exec's stdio, and one end of a socket pair as descriptor [`FD`]. It writes the request (the
//! runtime's root, the container id, the process spec, the console socket) there as JSON and reads back
//! `pid N` or `error MESSAGE`. That process joins the container itself, with the very code `crius-runc exec`
//! uses (`crius_oci::enter`, described with the protocol in `crius_oci::direct`), and exits as soon as the
//! exec'd program runs; the program is then re-parented to the shim, its subreaper, as after
//! `crius-runc exec --detach`. What this spares per exec: the runtime's command line, its log, spec and pid
//! files, a process, and the reads and writes of them.
//!
//! The process that enters is never the shim's own image: the shim holds no sealed copy of itself, and one
//! running from the host's file could be reached by the container through `/proc/<pid>/exe` (CVE-2019-5736).
//!
//! On when the runtime's file is named `crius-runc` and `CRIUS_SHIM_DIRECT_EXEC` is not `0` or `false`
//! (criusd sets it from its `[runtime] direct_exec`); runtimes backed by another OCI runtime (runc, crun)
//! always run `<runtime> exec`.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::OnceLock;

use crate::error::{Error, Result};
use crate::runtime::{ChildIo, Runtime};

/// crius-runc's hidden argument for a direct exec (`crius_oci::direct::ARG`).
pub(crate) const ARG: &str = "__crius-direct-exec";
/// The descriptor of the request's socket in that process (`crius_oci::direct::FD`).
const FD: i32 = 3;
/// The environment variable that turns direct exec off (`0` or `false`).
pub const ENV: &str = "CRIUS_SHIM_DIRECT_EXEC";

/// Whether execs of containers run by `binary` go the direct way.
pub(crate) fn applies(binary: &Path) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    let on = *ON.get_or_init(|| {
        !matches!(
            std::env::var(ENV).as_deref().map(str::trim),
            Ok("0" | "false" | "off" | "no")
        )
    });
    on && binary.file_name().is_some_and(|n| n == "crius-runc")
}

fn stdio(fd: Option<OwnedFd>) -> Stdio {
    fd.map(Stdio::from).unwrap_or_else(Stdio::null)
}

/// Starts exec process `spec` (the OCI process, JSON) in container `id` of `runtime`, with `child` as its stdio
/// and `console` (a console socket's path) when it has a terminal; returns its pid once it runs its program.
/// A refusal (no such program, a bad cwd, a stopped container) is [`Error::Runtime`] with the runtime's
/// message, as from `crius-runc exec`.
pub(crate) fn exec(
    runtime: &Runtime,
    id: &str,
    spec: &[u8],
    child: ChildIo,
    console: Option<&str>,
) -> Result<u32> {
    let process: serde_json::Value = serde_json::from_slice(spec)
        .map_err(|e| Error::InvalidArgument(format!("the exec's process spec: {e}")))?;
    let request = serde_json::json!({
        "root": runtime.root,
        "id": id,
        "process": process,
        "console_socket": console,
    });
    let shown = format!("{} {ARG} ({id})", runtime.binary.display());
    let (mut mine, theirs) = UnixStream::pair().map_err(Error::io("socketpair for a direct exec"))?;
    let mut cmd = crate::runtime::command_for(&runtime.binary);
    cmd.arg(ARG)
        .stdin(stdio(child.stdin))
        .stdout(stdio(child.stdout))
        .stderr(stdio(child.stderr))
        .current_dir("/");
    let raw = theirs.as_raw_fd();
    // SAFETY: only async-signal-safe calls (dup2, fcntl) on descriptors this process holds, in the child.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself would keep close-on-exec: clear it then.
            let r = if raw == FD {
                libc::fcntl(FD, libc::F_SETFD, 0)
            } else {
                libc::dup2(raw, FD)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let spawned = cmd.spawn().map_err(Error::io(shown.clone()));
    drop((cmd, theirs));
    let spawned = spawned?;
    let sent = serde_json::to_vec(&request)
        .map_err(|e| Error::Runtime(format!("{shown}: encoding the request: {e}")))
        .and_then(|b| {
            mine.write_all(&b)
                .map_err(Error::io(format!("{shown}: sending the request")))
        });
    let _ = mine.shutdown(std::net::Shutdown::Write);
    let mut answer = String::new();
    let read = mine.read_to_string(&mut answer);
    let exit = runtime.reaper().wait(spawned.id() as i32);
    sent?;
    read.map_err(Error::io(format!("{shown}: reading its answer")))?;
    match answer.split_once(' ') {
        Some(("pid", n)) => n
            .trim()
            .parse()
            .map_err(|_| Error::Runtime(format!("{shown}: a bad answer {answer:?}"))),
        Some(("error", e)) => Err(Error::Runtime(e.to_string())),
        _ => Err(Error::Runtime(format!(
            "{shown}: exit status {} without an answer",
            exit.status
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_applies_to_crius_runc_alone() {
        assert!(applies(Path::new("/usr/local/bin/crius-runc")));
        assert!(!applies(Path::new("/usr/bin/runc")));
        assert!(!applies(Path::new("/usr/bin/crun")));
    }
}
