//! The shim's direct exec: an exec without a `crius-runc exec` command, its state files, log file or pid file.
//!
//! The shim starts crius-runc's sealed copy (the one criusd hands it, `crius_common::sealed`) once, with the
//! hidden first argument [`SERVER_ARG`] and one end of a `SOCK_SEQPACKET` pair as [`FD`]: the exec server,
//! [`serve_many`], which stays for as long as the shim holds the other end. For each exec the shim sends it one
//! message, `exec`, carrying four descriptors: one end of a fresh stream socket, then the exec's stdin, stdout
//! and stderr. The server forks a worker and goes back to waiting; the worker puts the stdio on 0 to 2 and the
//! socket on [`FD`], and from there on is what a one-shot process started with [`ARG`] is: the shim writes a
//! [`Request`] (JSON) on the socket and shuts its writing down, [`serve`] answers `pid N` (the host pid of the
//! process, which has executed its program) or `error MESSAGE`, and the worker exits. The process itself is
//! started by [`crate::exec::spawn`], so every check and security step is `crius-runc exec`'s, in one
//! implementation ([`crate::enter`]).
//!
//! Why the runtime's sealed copy and not the shim's own image: the process that enters the container must not
//! run from a host file (CVE-2019-5736), and the shim holds no sealed copy of itself (making one per pod would
//! cost each pod a private copy of its binary), while the runtime's copy is one memfd that criusd made once and
//! every shim shares; and the shim then needs neither this library nor libseccomp, so it stays small. Why a
//! server: an `execve` of that copy (4 MB, linked against libseccomp) and its start-up were most of what an
//! exec cost; a fork of a small single-threaded process that already runs it costs a tenth. The server is
//! single-threaded, so its forks may do anything; it is non-dumpable, holds no descriptor but its socket and
//! stdio, and its workers are its only children (the process a worker starts is re-parented to the shim,
//! the subreaper, when the worker exits).

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::PathBuf;

use oci_spec::runtime::Process;
use serde::{Deserialize, Serialize};

use crate::exec::ExecOptions;
use crate::{Result, err};

/// The hidden first argument of crius-runc that runs [`serve`] once, on the socket it was given as [`FD`].
pub const ARG: &str = "__crius-direct-exec";

/// The hidden first argument of crius-runc that runs [`serve_many`], the shim's exec server.
pub const SERVER_ARG: &str = "__crius-direct-exec-server";

/// The message that asks the exec server for one exec (with its four descriptors). It may go on with
/// `\n<root>\n<id>`: the container the exec is for, whose record and seccomp filter the server then reads and
/// compiles before it forks the worker, once per version of the container's state file (`prewarm`).
pub const EXEC: &[u8] = b"exec";

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

/// The shim's exec server: serves [`EXEC`] messages on [`FD`] (a `SOCK_SEQPACKET` socket) until its peer
/// closes it; returns the exit code. The caller has made sure it runs from a sealed copy of the runtime.
pub fn serve_many() -> i32 {
    // SAFETY: close_range, prctl, fcntl and open with integer arguments or a C string; no object of this
    // process owns those descriptors.
    unsafe {
        libc::syscall(libc::SYS_close_range, FD + 1, u32::MAX, 0);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        // Descriptors 0 to 2 open (/dev/null for a missing one), so that none received takes their place.
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) < 0 {
                libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            }
        }
    }
    let mut workers = 0usize;
    loop {
        workers = workers.saturating_sub(reap_workers());
        // While workers run, wake up now and then to collect them: none is left a zombie for long.
        if workers > 0 && !readable(50) {
            continue;
        }
        let fds = match receive() {
            Ok(Some(fds)) => fds,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("crius-runc exec server: {e}");
                return 1;
            }
        };
        let (fds, container) = fds;
        let Ok([sock, stdin, stdout, stderr]) = <[OwnedFd; 4]>::try_from(fds) else {
            continue; // not a request: what came with it is closed
        };
        if let Some((root, id)) = container {
            prewarm(&root, &id);
        }
        // SAFETY: this process is single-threaded; the child only runs `worker`, then _exits.
        match unsafe { nix::unistd::fork() } {
            Ok(nix::unistd::ForkResult::Child) => worker(sock, [stdin, stdout, stderr]),
            Ok(nix::unistd::ForkResult::Parent { .. }) => workers += 1,
            Err(e) => {
                let _ = std::fs::File::from(sock).write_all(format!("error fork: {e}").as_bytes());
            }
        }
    }
}

/// Whether [`FD`] has something to read (or was closed) within `ms` milliseconds.
fn readable(ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd: FD,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll on one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Collects the workers that have exited (they are the server's only children); returns how many.
fn reap_workers() -> usize {
    use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
    let mut n = 0;
    while let Ok(s) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if s == WaitStatus::StillAlive {
            break;
        }
        n += 1;
    }
    n
}

/// What a worker is handed by the server: the record of the exec's container, read (and its filter compiled,
/// `crate::seccomp::build_cached`) before the fork.
struct Loaded {
    root: PathBuf,
    id: String,
    /// The state file's inode, size and mtime when it was read.
    version: (u64, u64, i128),
    rec: crate::state::Record,
}

/// The last container an exec went to (in the server, and in each worker as forked).
static LOADED: std::sync::Mutex<Option<Loaded>> = std::sync::Mutex::new(None);

/// The state file's version: inode, size, mtime (ns).
fn version(path: &std::path::Path) -> Option<(u64, u64, i128)> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((
        m.ino(),
        m.size(),
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    ))
}

/// In the server, before the fork: container `id`'s record, read again only if its state file changed, and
/// its seccomp filter compiled once per profile. Whatever fails here is left to the worker, which reads and
/// compiles as without it (and reports the error).
fn prewarm(root: &std::path::Path, id: &str) {
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    let state = crate::state::Record::dir(root, id).join(crate::state::STATE_FILE);
    let Some(now) = version(&state) else {
        *loaded = None;
        return;
    };
    let fresh = loaded
        .as_ref()
        .is_some_and(|l| l.root == root && l.id == id && l.version == now);
    if !fresh {
        *loaded = crate::state::Record::load(root, id).ok().map(|rec| Loaded {
            root: root.to_path_buf(),
            id: id.to_string(),
            version: now,
            rec,
        });
    }
    if let Some(profile) = loaded
        .as_ref()
        .and_then(|l| l.rec.spec.linux().as_ref())
        .and_then(|l| l.seccomp().as_ref())
    {
        let _ = crate::seccomp::build_cached(profile);
    }
}

/// In a worker: the record the server read for container `id` of `root`, if it did.
fn prewarmed(root: &std::path::Path, id: &str) -> Option<crate::state::Record> {
    let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
    loaded
        .take()
        .filter(|l| l.root == root && l.id == id)
        .map(|l| l.rec)
}

/// What a message brought: its descriptors, and the container named after [`EXEC`].
type Received = (Vec<OwnedFd>, Option<(PathBuf, String)>);

/// Receives one message on [`FD`]: its descriptors when it is [`EXEC`] (none for another message), with the
/// container it names, if it does; or None once the peer closed the socket.
fn receive() -> Result<Option<Received>> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut buf = [0u8; 4096];
    loop {
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
        let msg = match recvmsg::<()>(FD, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
            Ok(m) => m,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(err!("receiving a request: {e}")),
        };
        let mut fds = Vec::new();
        for c in msg.cmsgs().map_err(|e| err!("receiving a request: {e}"))? {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: descriptors just received are this process's alone.
                fds.extend(raw.iter().map(|&r| unsafe { OwnedFd::from_raw_fd(r) }));
            }
        }
        let n = msg.bytes;
        if n == 0 && fds.is_empty() {
            return Ok(None);
        }
        let msg = &buf[..n];
        if msg == EXEC {
            return Ok(Some((fds, None)));
        }
        let named = msg
            .strip_prefix(EXEC)
            .and_then(|rest| rest.strip_prefix(b"\n"))
            .and_then(|rest| std::str::from_utf8(rest).ok())
            .and_then(|rest| rest.split_once('\n'))
            .filter(|(_, id)| crate::id::validate(id).is_ok());
        return Ok(Some(match named {
            Some((root, id)) => (fds, Some((PathBuf::from(root), id.to_string()))),
            None => (Vec::new(), None),
        }));
    }
}

/// In a worker of the exec server: `stdio` on 0 to 2 and `sock` on [`FD`], then [`serve`]; never returns.
fn worker(sock: OwnedFd, stdio: [OwnedFd; 3]) -> ! {
    use std::os::fd::{AsRawFd, IntoRawFd};
    // The server's socket goes first, so that FD is free; the received descriptors are all above 2 (the
    // server's stdio is open), so no dup2 below overwrites one not moved yet but for FD, moved last.
    // SAFETY: dup2 and close on descriptor numbers this process holds; then the process only serves and exits.
    unsafe {
        libc::close(FD);
        for (i, fd) in stdio.iter().enumerate() {
            if libc::dup2(fd.as_raw_fd(), i as i32) < 0 {
                libc::_exit(1);
            }
        }
        if libc::dup2(sock.as_raw_fd(), FD) < 0 {
            libc::_exit(1);
        }
        libc::fcntl(FD, libc::F_SETFD, 0);
    }
    // serve() closes everything above FD, these included: given up here, not closed twice.
    let _ = sock.into_raw_fd();
    let _ = stdio.map(IntoRawFd::into_raw_fd);
    let code = serve();
    // SAFETY: leave without the server's destructors or atexit handlers.
    unsafe { libc::_exit(code) }
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
    match prewarmed(&req.root, &req.id) {
        Some(rec) => {
            // The record is the server's reading of a moment ago; the status is found now.
            let status = rec.status(&req.root);
            crate::exec::spawn_loaded(rec, status, &opts)
        }
        None => crate::exec::spawn(&req.root, &req.id, &opts),
    }
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
