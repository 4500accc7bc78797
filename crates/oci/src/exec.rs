//! `exec`: runs another process in a running container — same namespaces, cgroup and seccomp profile.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use nix::unistd::{ForkResult, fork};
use oci_spec::runtime::{ContainerState, LinuxNamespaceType, Process};

use crate::cgroup::Cgroup;
use crate::channel::Channel;
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
    /// Run it in a paused container too (runc's `--ignore-paused`): it starts frozen, as the others are.
    pub ignore_paused: bool,
    /// A cgroup below the container's to run it in (runc's `--cgroup`), relative to the container's.
    pub sub_cgroup: Option<PathBuf>,
}

/// Namespace join order: the user namespace first (it owns the others), the mount namespace last.
const ORDER: &[LinuxNamespaceType] = &[
    LinuxNamespaceType::User,
    LinuxNamespaceType::Ipc,
    LinuxNamespaceType::Uts,
    LinuxNamespaceType::Network,
    LinuxNamespaceType::Pid,
    LinuxNamespaceType::Cgroup,
    LinuxNamespaceType::Time,
    LinuxNamespaceType::Mount,
];

/// Runs the process; returns its exit code, or 0 once it runs with `detach`.
pub fn exec(root: &std::path::Path, id: &str, opts: &ExecOptions) -> Result<i32> {
    let pid = spawn(root, id, opts)?;
    if opts.detach {
        return Ok(0);
    }
    crate::wait::forward_until_exit(pid)
}

/// Starts the process and returns its host pid; unless `detach`, the caller is its subreaper and waits for it
/// (`crius-runc exec -t` relays a terminal of its own meanwhile).
pub fn spawn(root: &std::path::Path, id: &str, opts: &ExecOptions) -> Result<i32> {
    let (rec, status) = crate::ops::load(root, id)?;
    let paused_ok = opts.ignore_paused && status == Status::Paused;
    if !matches!(status, Status::Running | Status::Created) && !paused_ok {
        let action = if status == Status::Paused {
            "exec in a paused container (use --ignore-paused to override)"
        } else {
            "exec in it"
        };
        return Err(Error::WrongState {
            id: id.into(),
            status,
            action: action.into(),
        });
    }
    crate::config::check_process("process", &opts.process)?;
    let terminal = opts.process.terminal() == Some(true);
    if terminal && opts.console_socket.is_none() {
        return Err(err!("a terminal was asked for: --console-socket is required"));
    }
    // Open the container's namespaces now, while /proc is the host's.
    let mut ns: Vec<(LinuxNamespaceType, OwnedFd)> = Vec::new();
    let listed: Vec<LinuxNamespaceType> = rec
        .spec
        .linux()
        .as_ref()
        .and_then(|l| l.namespaces().clone())
        .unwrap_or_default()
        .iter()
        .map(|n| n.typ())
        .collect();
    for t in ORDER.iter().filter(|t| listed.contains(t)) {
        let name = crate::namespaces::proc_name(*t);
        let path = format!("/proc/{}/ns/{name}", rec.pid);
        let same = match (
            std::fs::metadata(&path),
            std::fs::metadata(format!("/proc/self/ns/{name}")),
        ) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            (Err(e), _) => return Err(err!("container {id:?}: {path}: {e}")),
            _ => false,
        };
        if !same {
            let f = std::fs::File::open(&path).map_err(|e| err!("opening {path}: {e}"))?;
            ns.push((*t, f.into()));
        }
    }
    // A container without a mount namespace of its own shares the host's and is chrooted: so is the process.
    let chroot = if listed.contains(&LinuxNamespaceType::Mount) {
        None
    } else {
        let path = format!("/proc/{}/root", rec.pid);
        let fd = nix::fcntl::open(
            path.as_str(),
            nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| err!("container {id:?}: opening its root {path}: {e}"))?;
        Some(fd)
    };
    let console = match &opts.console_socket {
        Some(p) => Some(UnixStream::connect(p).map_err(Error::io("connecting to console socket", p))?),
        None => None,
    };
    if !opts.detach {
        crate::wait::become_subreaper()?;
    }
    let cg = match &opts.sub_cgroup {
        None => Cgroup::at(&rec.cgroup)?,
        Some(sub) => sub_cgroup(&rec.cgroup, sub)?,
    };
    let seccomp = rec.spec.linux().as_ref().and_then(|l| l.seccomp().clone());
    let (parent, child) = crate::channel::pair()?;
    // Single-threaded process; the child only runs setup code and then execs or _exits.
    let first = match crate::spawn::fork_into_cgroup(&cg)? {
        ForkResult::Child => {
            drop(parent);
            let e = enter((&ns, chroot), &child, opts, console, seccomp.as_ref()).unwrap_err();
            let _ = child.send(&format!("error {e}"));
            // SAFETY: leave without running the parent's destructors.
            unsafe { libc::_exit(1) }
        }
        ForkResult::Parent { child } => child,
    };
    drop(child);
    let agent = seccomp
        .as_ref()
        .filter(|s| crate::seccomp::notifies(s))
        .map(|profile| Agent {
            profile,
            version: rec.spec.version(),
            state: crate::state::document(id, ContainerState::Running, rec.pid, &rec.bundle, &rec.spec),
        });
    let result = collect(&parent, agent.as_ref());
    let _ = nix::sys::wait::waitpid(first, None);
    let pid = result?;
    crate::log::debug(|| {
        let args = opts.process.args();
        // runc's milestones by name, for tools that read its debug log.
        format!(
            "exec in {id}: process {pid} runs {args:?} (runc: nsexec container setup, child process in init(), setns_init: about to exec)"
        )
    });
    if let Some(p) = &opts.pid_file {
        crate::state::atomic_write(
            &std::path::absolute(p).unwrap_or(p.clone()),
            pid.to_string().as_bytes(),
        )?;
    }
    Ok(pid)
}

/// The cgroup `sub` below the container's cgroup `dir`: it must exist (runc makes none) and stay below it.
fn sub_cgroup(dir: &std::path::Path, sub: &std::path::Path) -> Result<Cgroup> {
    use std::path::Component;
    if sub
        .components()
        .any(|c| !matches!(c, Component::Normal(_) | Component::RootDir | Component::CurDir))
    {
        return Err(err!(
            "--cgroup {}: must name a cgroup below the container's",
            sub.display()
        ));
    }
    let rel = sub.strip_prefix("/").unwrap_or(sub);
    let path = dir.join(rel);
    if !path.is_dir() {
        return Err(err!("--cgroup {}: no cgroup {}", sub.display(), path.display()));
    }
    Cgroup::at(&path)
}

/// Where the listener of an exec'd process's seccomp filter goes: the agent of `profile`, told the container's
/// `state`.
struct Agent<'a> {
    profile: &'a oci_spec::runtime::LinuxSeccomp,
    version: &'a str,
    state: serde_json::Value,
}

/// Reads "pid N" (from the first child) and, with a seccomp agent, the process's listener ("seccomp", which
/// may come first: the process runs meanwhile), then waits for the channel to close (exec succeeded) or for an
/// error.
fn collect(ch: &Channel, agent: Option<&Agent<'_>>) -> Result<i32> {
    let mut pid: Option<i32> = None;
    let mut listener: Option<OwnedFd> = None;
    loop {
        if let (Some(p), Some(fd), Some(a)) = (pid, listener.as_ref(), agent) {
            crate::notify::send_to_agent(a.profile, a.version, p, &a.state, fd)?;
            listener = None;
            ch.send("go")?;
        }
        let (msg, fd) = ch.recv_with_fd()?;
        match msg.split_once(' ').unwrap_or((&msg, "")) {
            ("pid", n) if pid.is_none() => {
                pid = Some(n.parse().map_err(|_| err!("protocol error: {msg:?}"))?);
            }
            ("seccomp", _) if agent.is_some() && fd.is_some() => listener = fd,
            ("error", e) => return Err(Error::Msg(e.to_string())),
            ("", _) => return pid.ok_or_else(|| err!("the exec process exited during setup")),
            _ => return Err(err!("protocol error: unexpected {msg:?}")),
        }
    }
}

fn enter(
    (ns, chroot): (&[(LinuxNamespaceType, OwnedFd)], Option<OwnedFd>),
    ch: &Channel,
    opts: &ExecOptions,
    console: Option<UnixStream>,
    seccomp: Option<&oci_spec::runtime::LinuxSeccomp>,
) -> Result<()> {
    for (t, fd) in ns {
        nix::sched::setns(fd, crate::namespaces::flag(*t)).map_err(|e| {
            err!(
                "joining the container's {} namespace: {e}",
                crate::namespaces::proc_name(*t)
            )
        })?;
    }
    if let Some(root) = chroot {
        nix::unistd::fchdir(&root).map_err(|e| err!("chdir to the container's root: {e}"))?;
        nix::unistd::chroot(".").map_err(|e| err!("chroot to the container's root: {e}"))?;
    }
    // SAFETY: single-threaded; the child execs or _exits.
    match unsafe { fork() }.map_err(|e| err!("fork: {e}"))? {
        ForkResult::Child => {
            let e = run_process(ch, opts, console, seccomp).unwrap_err();
            let _ = ch.send(&format!("error {e}"));
            // SAFETY: as above.
            unsafe { libc::_exit(127) }
        }
        ForkResult::Parent { child } => {
            ch.send(&format!("pid {child}"))?;
            // SAFETY: as above.
            unsafe { libc::_exit(0) }
        }
    }
}

fn run_process(
    ch: &Channel,
    opts: &ExecOptions,
    console: Option<UnixStream>,
    seccomp: Option<&oci_spec::runtime::LinuxSeccomp>,
) -> Result<()> {
    let p = &opts.process;
    if let Some(sock) = console {
        nix::unistd::setsid().map_err(|e| err!("setsid: {e}"))?;
        crate::console::setup(&sock, p.console_size().as_ref(), false)?;
    }
    nix::unistd::chdir(p.cwd()).map_err(|e| err!("process.cwd {}: {e}", p.cwd().display()))?;
    crate::process::check_cwd(p.cwd())?;
    let prepared = crate::process::prepare(p, seccomp)?;
    // A filter's listener goes to the runtime, for the seccomp agent, before anything else runs under it.
    let listener: crate::seccomp::Listener<'_> = Some(Box::new(|fd| {
        ch.send_fd("seccomp", &fd)?;
        drop(fd);
        ch.expect("go")
    }));
    match crate::process::finish(p, prepared, opts.preserve_fds, listener, || Ok(()))? {}
}
