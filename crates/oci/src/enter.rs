//! Entering a running container: the one implementation of `exec`'s security steps, used by `crius-runc exec`
//! ([`crate::exec`]) and by the shim's direct exec ([`crate::direct`]).
//!
//! [`spawn`] runs in a process that is single-threaded, runs from a sealed copy of the runtime (CVE-2019-5736:
//! `/proc/<pid>/exe` of everything that enters is that copy, never a host file) and is non-dumpable, and that
//! still sees the host. In order:
//! 1. `pidfd_open` of the container's init, checked to be the recorded process (its start time): from here on
//!    a reused pid cannot lead elsewhere;
//! 2. the namespaces the config lists that differ from the caller's are noted;
//! 3. `setns(pidfd, CLONE_NEWPID)`: only the caller's *children* are born in the container's PID namespace;
//! 4. `clone3(CLONE_INTO_CGROUP)`: the child starts in the container's cgroup, created with the host's
//!    credentials and cgroup namespace (after joining a user or cgroup namespace the kernel's permission
//!    checks on the cgroup would fail);
//! 5. in the child: `setns(pidfd, …)` joins the other namespaces in one atomic call (the user namespace
//!    first, as the kernel orders them); then, as `run_process` does, the terminal, the working directory
//!    (checked after entering, CVE-2024-21626), rlimits, user, groups, umask, capabilities, no_new_privs,
//!    seccomp and AppArmor, with every descriptor but stdio (and `preserve_fds`) closed at the `execve`.
//!
//! The caller learns the child's host pid once its `execve` succeeded (a close-on-exec channel closes), or
//! the error of its setup. Kernels before 5.8, whose `setns` takes no pidfd, join by `/proc/<pid>/ns/` files.

use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;

use nix::sched::CloneFlags;
use nix::unistd::{ForkResult, Pid};
use oci_spec::runtime::{LinuxNamespaceType, LinuxSeccomp, Process};

use crate::cgroup::Cgroup;
use crate::channel::Channel;
use crate::state::Record;
use crate::{Error, Result, err};

/// Namespace types in the order they are joined one by one (user first, it owns the others; mount last).
const ORDER: &[LinuxNamespaceType] = &[
    LinuxNamespaceType::User,
    LinuxNamespaceType::Ipc,
    LinuxNamespaceType::Uts,
    LinuxNamespaceType::Network,
    LinuxNamespaceType::Cgroup,
    LinuxNamespaceType::Time,
    LinuxNamespaceType::Mount,
];

/// What the new process is: its OCI process, its terminal (a connected console socket that receives the pty
/// master, when `process.terminal`) and how many descriptors after stdio it keeps.
pub struct Exec<'a> {
    /// The process to run.
    pub process: &'a Process,
    /// The console socket, connected.
    pub console: Option<UnixStream>,
    /// Descriptors 3 to 3+N-1 that cross the `execve`.
    pub preserve_fds: u32,
}

/// A receiver of the listener of the process's seccomp filter (one with `SCMP_ACT_NOTIFY` rules), given the
/// process's host pid: the seccomp agent's. The process waits until it returns.
pub type OnListener<'a> = &'a dyn Fn(i32, &OwnedFd) -> Result<()>;

/// Starts `exec` in the container of `rec` (which must be running), in cgroup `cg` (the container's, or one
/// below it), and returns the host pid of the process once it has executed the program. The caller must be
/// single-threaded, sealed and non-dumpable (see the module doc); afterwards its own children are born in the
/// container's PID namespace. A container without a mount namespace of its own is chrooted: so is the
/// process.
pub fn spawn(rec: &Record, exec: Exec<'_>, cg: &Cgroup, on_listener: Option<OnListener<'_>>) -> Result<Pid> {
    let pidfd = pidfd_open(rec)?;
    let listed: Vec<LinuxNamespaceType> = rec
        .spec
        .linux()
        .as_ref()
        .and_then(|l| l.namespaces().clone())
        .unwrap_or_default()
        .iter()
        .map(|n| n.typ())
        .collect();
    let differs = |t: LinuxNamespaceType| -> Result<bool> {
        let name = crate::namespaces::proc_name(t);
        let path = format!("/proc/{}/ns/{name}", rec.pid);
        match (
            std::fs::metadata(&path),
            std::fs::metadata(format!("/proc/self/ns/{name}")),
        ) {
            (Ok(a), Ok(b)) => Ok(a.ino() != b.ino() || a.dev() != b.dev()),
            (Err(e), _) => Err(err!("container {:?}: {path}: {e}", rec.id)),
            _ => Ok(true),
        }
    };
    // The caller's own PID namespace, to go back to once the child is made: a process whose children would
    // be born elsewhere cannot make threads (EINVAL), and `crius-runc exec -t` makes one.
    let mut own_pid_ns = None;
    if listed.contains(&LinuxNamespaceType::Pid) && differs(LinuxNamespaceType::Pid)? {
        own_pid_ns = Some(
            std::fs::File::open("/proc/self/ns/pid").map_err(|e| err!("opening /proc/self/ns/pid: {e}"))?,
        );
        match nix::sched::setns(&pidfd, CloneFlags::CLONE_NEWPID) {
            Ok(()) => {}
            Err(nix::Error::EINVAL) if pidfd_setns_unsupported() => {
                let path = format!("/proc/{}/ns/pid", rec.pid);
                crate::namespaces::join(LinuxNamespaceType::Pid, std::path::Path::new(&path))?;
            }
            Err(e) => return Err(err!("joining the PID namespace of container {:?}: {e}", rec.id)),
        }
    }
    let mut join = Vec::new();
    for t in ORDER.iter().filter(|t| listed.contains(t)) {
        if differs(*t)? {
            join.push(*t);
        }
    }
    let chroot = if listed.contains(&LinuxNamespaceType::Mount) {
        None
    } else {
        let path = format!("/proc/{}/root", rec.pid);
        let fd = nix::fcntl::open(
            path.as_str(),
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| err!("container {:?}: opening its root {path}: {e}", rec.id))?;
        Some(fd)
    };
    let seccomp = rec.spec.linux().as_ref().and_then(|l| l.seccomp().clone());
    let (parent, child) = crate::channel::pair()?;
    // SAFETY (of what follows): the caller is single-threaded, as documented; the child runs setup code only,
    // then execs or _exits.
    let forked = crate::spawn::fork_into_cgroup(cg);
    if let (Ok(ForkResult::Parent { .. }) | Err(_), Some(own)) = (&forked, &own_pid_ns) {
        nix::sched::setns(own, CloneFlags::CLONE_NEWPID)
            .map_err(|e| err!("going back to this process's PID namespace: {e}"))?;
    }
    match forked? {
        ForkResult::Child => {
            drop(parent);
            let e = enter(rec.pid, (&pidfd, &join, chroot), &child, exec, seccomp.as_ref()).unwrap_err();
            let _ = child.send(&format!("error {e}"));
            // SAFETY: leave without running the parent's destructors.
            unsafe { libc::_exit(127) }
        }
        ForkResult::Parent { child: pid } => {
            drop(child);
            let r = collect(&parent, pid, on_listener);
            if r.is_err() {
                let _ = nix::sys::wait::waitpid(pid, None);
            }
            r
        }
    }
}

/// Waits for the channel to close (the process executed its program) or for its error; hands a seccomp
/// listener it sends to `on_listener` and lets it go on.
fn collect(ch: &Channel, pid: Pid, on_listener: Option<OnListener<'_>>) -> Result<Pid> {
    loop {
        let (msg, fd) = ch.recv_with_fd()?;
        match (msg.split_once(' ').unwrap_or((&msg, "")), fd, on_listener) {
            (("", _), _, _) => return Ok(pid),
            (("error", e), _, _) => return Err(Error::Msg(e.to_string())),
            (("seccomp", _), Some(fd), Some(f)) => {
                f(pid.as_raw(), &fd)?;
                ch.send("go")?;
            }
            _ => return Err(err!("protocol error: unexpected {msg:?}")),
        }
    }
}

/// A pidfd of the init of `rec`, checked to be that process (not a reused pid); a stopped container is
/// [`Error::WrongState`].
fn pidfd_open(rec: &Record) -> Result<OwnedFd> {
    let gone = || Error::WrongState {
        id: rec.id.clone(),
        status: crate::state::Status::Stopped,
        action: "exec in it (its init process has exited)".into(),
    };
    // SAFETY: pidfd_open with integer arguments; a non-negative result is a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, rec.pid, 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ESRCH) => Err(gone()),
            _ => Err(err!(
                "pidfd_open of container {:?}'s init (pid {}): {e}",
                rec.id,
                rec.pid
            )),
        };
    }
    // SAFETY: the syscall just returned this descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd as i32) };
    // Checked after opening: the pidfd names whatever process had the pid then, and that is the init only if
    // the init still runs now.
    if !crate::state::process_alive(rec.pid, rec.pid_start) {
        return Err(gone());
    }
    Ok(fd)
}

/// In the child: joins the namespaces `join` of the init behind `pidfd` (pid `pid`), chroots to `chroot` when
/// given, then runs the process.
fn enter(
    pid: i32,
    (pidfd, join, chroot): (&OwnedFd, &[LinuxNamespaceType], Option<OwnedFd>),
    ch: &Channel,
    exec: Exec<'_>,
    seccomp: Option<&LinuxSeccomp>,
) -> Result<std::convert::Infallible> {
    let flags = join
        .iter()
        .fold(CloneFlags::empty(), |f, t| f | crate::namespaces::flag(*t));
    if !flags.is_empty() {
        match nix::sched::setns(pidfd, flags) {
            Ok(()) => {}
            // Before 5.8 setns takes namespace files only; the call changed nothing, /proc is still the host's.
            Err(nix::Error::EINVAL) if pidfd_setns_unsupported() => {
                // All opened first: once in the user namespace, the host's /proc may refuse the rest.
                let mut files = Vec::new();
                for t in join {
                    let path = format!("/proc/{pid}/ns/{}", crate::namespaces::proc_name(*t));
                    let f = std::fs::File::open(&path).map_err(|e| err!("opening {path}: {e}"))?;
                    files.push((*t, f));
                }
                for (t, f) in &files {
                    nix::sched::setns(f, crate::namespaces::flag(*t)).map_err(|e| {
                        err!(
                            "joining the container's {} namespace: {e}",
                            crate::namespaces::proc_name(*t)
                        )
                    })?;
                }
            }
            Err(e) => {
                let names: Vec<&str> = join.iter().map(|t| crate::namespaces::proc_name(*t)).collect();
                return Err(err!(
                    "joining the container's namespaces ({}): {e}",
                    names.join(", ")
                ));
            }
        }
    }
    if let Some(root) = chroot {
        nix::unistd::fchdir(&root).map_err(|e| err!("chdir to the container's root: {e}"))?;
        nix::unistd::chroot(".").map_err(|e| err!("chroot to the container's root: {e}"))?;
    }
    run_process(ch, exec, seccomp)
}

/// Whether this kernel's setns takes no pidfd (it came with Linux 5.8): told by the kernel's version, since
/// the EINVAL it answers then is also what a refused pidfd setns answers.
fn pidfd_setns_unsupported() -> bool {
    let Ok(u) = nix::sys::utsname::uname() else {
        return false;
    };
    let release = u.release().to_string_lossy().into_owned();
    let mut parts = release.split(['.', '-']).map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) < (5, 8)
}

/// The last steps, inside the container: the terminal, the working directory (checked), then what
/// [`crate::process`] applies, and `execve`. Returns only on error.
fn run_process(
    ch: &Channel,
    exec: Exec<'_>,
    seccomp: Option<&LinuxSeccomp>,
) -> Result<std::convert::Infallible> {
    let p = exec.process;
    if let Some(sock) = exec.console {
        nix::unistd::setsid().map_err(|e| err!("setsid: {e}"))?;
        crate::console::setup(&sock, p.console_size().as_ref(), false)?;
        drop(sock);
    }
    nix::unistd::chdir(p.cwd()).map_err(|e| err!("process.cwd {}: {e}", p.cwd().display()))?;
    crate::process::check_cwd(p.cwd())?;
    let prepared = crate::process::prepare(p, seccomp)?;
    // A filter's listener goes to the caller, for the seccomp agent, before anything else runs under it.
    let listener: crate::seccomp::Listener<'_> = Some(Box::new(|fd| {
        ch.send_fd("seccomp", &fd)?;
        drop(fd);
        ch.expect("go")
    }));
    crate::process::finish(p, prepared, exec.preserve_fds, listener, || Ok(()))
}
