//! Direct exec: for crius's own runtime, an exec process is started without a `crius-runc exec` command.
//!
//! The shim starts crius-runc's sealed copy (the memfd criusd hands every shim, `crius_common::sealed`; a shim
//! started without one runs crius-runc by its path, which then seals itself) once, with the hidden first
//! argument [`SERVER_ARG`] and one end of a `SOCK_SEQPACKET` pair as descriptor [`FD`]: the exec server
//! (`crius_oci::direct::serve_many`), single-threaded, which stays until the shim closes its end (the shim's
//! exit does). Each exec is one message to it, `exec` and the container's root and id (whose record and
//! seccomp filter the server then keeps, read and compiled once), with four descriptors (one end of a fresh
//! socket pair, the exec's stdin, stdout and stderr); the server forks a worker, and the shim writes the request (the
//! runtime's root, the container id, the process spec, the console socket) on its end of the pair as JSON
//! and reads back `pid N` or `error MESSAGE`. The worker joins the container itself, with the very code
//! `crius-runc exec` uses (`crius_oci::enter`, described with the protocol in `crius_oci::direct`), and
//! exits as soon as the exec'd program runs; the program is then re-parented to the shim, its subreaper, as
//! after `crius-runc exec --detach`. What this spares per exec: the runtime's command line, its log, spec and
//! pid files, and an `execve` of the runtime with its dynamic linking and start-up: a fork of the server is
//! all. A server that cannot be reached is started afresh once; a runtime that cannot serve (one older than
//! the server) is run once per exec with the hidden argument [`ARG`] instead, on the same protocol.
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
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};

use nix::sys::socket;

use crate::error::{Error, Result};
use crate::runtime::{ChildIo, Runtime};

/// crius-runc's hidden argument for one direct exec (`crius_oci::direct::ARG`).
pub(crate) const ARG: &str = "__crius-direct-exec";
/// crius-runc's hidden argument for the exec server (`crius_oci::direct::SERVER_ARG`).
pub(crate) const SERVER_ARG: &str = "__crius-direct-exec-server";
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

/// The exec server of this shim: the runtime it runs and the shim's end of its socket.
struct Server {
    binary: PathBuf,
    pid: i32,
    ctl: OwnedFd,
}

/// The server, started at the first direct exec.
static SERVER: Mutex<Option<Server>> = Mutex::new(None);

/// Starts an exec server of `runtime`.
fn start_server(runtime: &Runtime) -> Result<Server> {
    let shown = format!("{} {SERVER_ARG}", runtime.binary.display());
    let (mine, theirs) = socket::socketpair(
        socket::AddressFamily::Unix,
        socket::SockType::SeqPacket,
        None,
        socket::SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| Error::io(format!("socketpair for {shown}"))(e.into()))?;
    let mut cmd = crate::runtime::command_for(&runtime.binary);
    cmd.arg(SERVER_ARG)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .current_dir("/");
    pass_as_fd(&mut cmd, theirs.as_raw_fd());
    let spawned = cmd.spawn().map_err(Error::io(shown));
    drop((cmd, theirs));
    let pid = spawned?.id() as i32;
    // Its exit (with the shim, or a crash) is collected; a dead server is replaced at the next exec.
    runtime.reaper().on_exit(pid, drop);
    Ok(Server {
        binary: runtime.binary.clone(),
        pid,
        ctl: mine,
    })
}

/// Makes `raw` descriptor [`FD`] of the command's process, inheritable.
fn pass_as_fd(cmd: &mut std::process::Command, raw: i32) {
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
}

/// Asks the exec server of `runtime` (started or replaced as needed) for a worker that serves `theirs`,
/// with `child` as its stdio. Err when no server could take it.
fn ask_server(runtime: &Runtime, id: &str, theirs: &UnixStream, child: &[OwnedFd; 3]) -> Result<()> {
    // The container named too: the server reads its record and compiles its filter before the fork, once.
    let mut message = SERVER_EXEC.to_vec();
    let root = runtime.root.as_os_str().as_encoded_bytes();
    if !root.contains(&b'\n') && SERVER_EXEC.len() + root.len() + id.len() + 2 <= SERVER_MESSAGE_MAX {
        message.extend_from_slice(b"\n");
        message.extend_from_slice(root);
        message.extend_from_slice(b"\n");
        message.extend_from_slice(id.as_bytes());
    }
    let fds = [
        theirs.as_raw_fd(),
        child[0].as_raw_fd(),
        child[1].as_raw_fd(),
        child[2].as_raw_fd(),
    ];
    let mut server = SERVER.lock().unwrap_or_else(|p| p.into_inner());
    let mut fresh = false;
    loop {
        if server.as_ref().is_none_or(|s| s.binary != runtime.binary) {
            *server = Some(start_server(runtime)?);
            fresh = true;
        }
        let s = server.as_ref().expect("just set");
        let sent = socket::sendmsg::<()>(
            s.ctl.as_raw_fd(),
            &[std::io::IoSlice::new(&message)],
            &[socket::ControlMessage::ScmRights(&fds)],
            socket::MsgFlags::MSG_NOSIGNAL,
            None,
        );
        match sent {
            Ok(_) => return Ok(()),
            Err(e) if fresh => {
                let pid = s.pid;
                *server = None;
                return Err(Error::Runtime(format!(
                    "{} {SERVER_ARG} (pid {pid}): {e}",
                    runtime.binary.display()
                )));
            }
            // It died since (EPIPE, ECONNREFUSED): a new one.
            Err(_) => *server = None,
        }
    }
}

/// The exec server's request message (`crius_oci::direct::EXEC`), followed by `\n<root>\n<id>`.
const SERVER_EXEC: &[u8] = b"exec";
/// The longest message the server reads.
const SERVER_MESSAGE_MAX: usize = 4096;

/// The descriptor for one stdio stream of the process: the one given, or /dev/null.
fn or_null(fd: Option<OwnedFd>) -> Result<OwnedFd> {
    match fd {
        Some(fd) => Ok(fd),
        None => std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map(OwnedFd::from)
            .map_err(Error::io("opening /dev/null")),
    }
}

/// Runs the runtime once with [`ARG`], serving `theirs`: for a runtime that has no exec server.
fn one_shot(runtime: &Runtime, theirs: UnixStream, child: [OwnedFd; 3]) -> Result<std::process::Child> {
    let shown = format!("{} {ARG}", runtime.binary.display());
    let [stdin, stdout, stderr] = child;
    let mut cmd = crate::runtime::command_for(&runtime.binary);
    cmd.arg(ARG)
        .stdin(Stdio::from(stdin))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .current_dir("/");
    pass_as_fd(&mut cmd, theirs.as_raw_fd());
    let spawned = cmd.spawn().map_err(Error::io(shown));
    drop((cmd, theirs));
    spawned
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
    let shown = format!("{} {SERVER_ARG} ({id})", runtime.binary.display());
    let (mut mine, theirs) = UnixStream::pair().map_err(Error::io("socketpair for a direct exec"))?;
    let child = [
        or_null(child.stdin)?,
        or_null(child.stdout)?,
        or_null(child.stderr)?,
    ];
    // A server that cannot be had (a runtime older than it refuses the argument and exits) leaves the
    // one-shot way.
    let mut one = None;
    if let Err(e) = ask_server(runtime, id, &theirs, &child) {
        tracing_note(&e);
        one = Some(one_shot(runtime, theirs, child)?);
    } else {
        drop((theirs, child));
    }
    let sent = serde_json::to_vec(&request)
        .map_err(|e| Error::Runtime(format!("{shown}: encoding the request: {e}")))
        .and_then(|b| {
            mine.write_all(&b)
                .map_err(Error::io(format!("{shown}: sending the request")))
        });
    let _ = mine.shutdown(std::net::Shutdown::Write);
    let mut answer = String::new();
    let read = mine.read_to_string(&mut answer);
    let exit = one.map(|c| runtime.reaper().wait(c.id() as i32).status);
    sent?;
    read.map_err(Error::io(format!("{shown}: reading its answer")))?;
    match answer.split_once(' ') {
        Some(("pid", n)) => n
            .trim()
            .parse()
            .map_err(|_| Error::Runtime(format!("{shown}: a bad answer {answer:?}"))),
        Some(("error", e)) => Err(Error::Runtime(e.to_string())),
        _ => Err(Error::Runtime(format!(
            "{shown}: ended without an answer{}",
            exit.map(|s| format!(" (exit status {s})")).unwrap_or_default()
        ))),
    }
}

/// Says on stderr (the shim's log) why the exec server was not used.
fn tracing_note(e: &Error) {
    eprintln!("containerd-shim-crius-v2: no exec server ({e}); running the runtime once per exec");
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
