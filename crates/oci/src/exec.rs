//! `exec`: runs another process in a running container — same namespaces, cgroup and seccomp profile.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;

use oci_spec::runtime::{ContainerState, Process};

use crate::cgroup::Cgroup;
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
    spawn_loaded(rec, status, opts)
}

/// [`spawn`] in container `rec` (its record as read from its state, `status` as found now).
pub fn spawn_loaded(rec: crate::state::Record, status: Status, opts: &ExecOptions) -> Result<i32> {
    let id = rec.id.as_str();
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
    // A cgroup with domain controllers enabled for its children takes no process (EBUSY). Without --cgroup,
    // the process then goes where init is, as runc falls back; with it, that is the error.
    let init_cgroup = || -> Result<Cgroup> {
        let own = std::fs::read_to_string(format!("/proc/{}/cgroup", rec.pid)).map_err(Error::io(
            "reading the cgroup of init",
            format!("/proc/{}/cgroup", rec.pid),
        ))?;
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .ok_or_else(|| err!("/proc/{}/cgroup: no cgroup v2 line", rec.pid))?;
        Cgroup::at(&crate::cgroup::mount_point()?.join(rel.trim_start_matches('/')))
    };
    let seccomp = rec.spec.linux().as_ref().and_then(|l| l.seccomp().clone());
    let agent = seccomp
        .as_ref()
        .filter(|s| crate::seccomp::notifies(s))
        .map(|profile| Agent {
            profile,
            version: rec.spec.version(),
            state: crate::state::document(id, ContainerState::Running, rec.pid, &rec.bundle, &rec.spec),
        });
    let to_agent = |pid: i32, fd: &OwnedFd| match &agent {
        Some(a) => crate::notify::send_to_agent(a.profile, a.version, pid, &a.state, fd),
        None => Err(err!("protocol error: a seccomp listener without an agent")),
    };
    // The one implementation of entering a container, shared with the shim's direct exec.
    let enter = |cg: &Cgroup, console: Option<UnixStream>| {
        crate::enter::spawn(
            &rec,
            crate::enter::Exec {
                process: &opts.process,
                console,
                preserve_fds: opts.preserve_fds,
            },
            cg,
            agent
                .is_some()
                .then_some(&to_agent as &dyn Fn(i32, &OwnedFd) -> Result<()>),
        )
    };
    let spare = match (&opts.sub_cgroup, &console) {
        (None, Some(c)) => Some(
            c.try_clone()
                .map_err(|e| err!("duplicating the console socket: {e}"))?,
        ),
        _ => None,
    };
    let busy = |e: &Error| e.errno() == Some(nix::errno::Errno::EBUSY);
    let pid = match enter(&cg, console) {
        Ok(pid) => pid,
        Err(e) if busy(&e) && opts.sub_cgroup.is_none() => {
            let init = init_cgroup()?;
            crate::log::debug(|| format!("exec in {id}: {} takes no process; joining init's cgroup {}", cg.dir.display(), init.dir.display()));
            enter(&init, spare)?
        }
        Err(e) if busy(&e) => {
            return Err(err!(
                "--cgroup {}: adding pid of the new process to cgroups: {}/cgroup.procs: device or resource busy \
                 (it has domain controllers enabled for its children)",
                opts.sub_cgroup.as_deref().unwrap_or(std::path::Path::new("/")).display(),
                cg.dir.display()
            ));
        }
        Err(e) => return Err(e),
    }
    .as_raw();
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
        // runc's wording (its write to cgroup.procs fails), which tools match.
        return Err(err!(
            "--cgroup {}: adding pid of the new process to cgroups: {}/cgroup.procs: no such file or directory",
            sub.display(),
            path.display()
        ));
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
