//! `create`: from a bundle to a container whose init process waits for `start`.
//!
//! ```text
//! runtime ──fork──► stage 1: joins the cgroup and the namespaces given by path, creates the new ones
//!    │                 (user namespace first; the runtime writes its uid/gid maps), then forks
//!    │                 └──fork──► init (pid 1 of a new pid namespace): mounts, hostname, pivot_root,
//!    │                               masked/read-only paths, sysctls, console, prepares the process,
//!    │                               then blocks opening exec.fifo until `start`, and execs.
//!    ◄── channel: "userns", "pid N", "hooks" (the rootfs is ready: runtime sets the cgroup limits, runs
//!        createRuntime/prestart), "created" or "error ..."
//! ```
//! Stage 1 exits once init exists, so init is re-parented to the nearest subreaper (a shim, or `run` itself).
//! On any error everything made so far (process, cgroup, state dir) is removed again.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sched::CloneFlags;
use nix::sys::stat::Mode;
use nix::unistd::{ForkResult, Pid, fork};
use oci_spec::runtime::{ContainerState, LinuxNamespaceType};

use crate::cgroup::{Cgroup, systemd};
use crate::channel::Channel;
use crate::config::Bundle;
use crate::state::{EXEC_FIFO, Record};
use crate::{Error, Result, err};

/// Options of `create`.
#[derive(Debug, Default, Clone)]
pub struct CreateOptions {
    /// Write the init pid here.
    pub pid_file: Option<PathBuf>,
    /// Unix socket that receives the pty master when `process.terminal` is set.
    pub console_socket: Option<PathBuf>,
    /// Descriptors 3 to 3+N-1 of the caller that the container's process gets (runc's `--preserve-fds`).
    pub preserve_fds: u32,
    /// The cgroup is a systemd scope (`--systemd-cgroup`; cgroupsPath `slice:prefix:name`).
    pub systemd_cgroup: bool,
}

/// Removes what a failed create made.
struct Undo {
    dir: PathBuf,
    cgroup: Option<Cgroup>,
    unit: Option<String>,
    pid: Option<i32>,
    armed: bool,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(pid) = self.pid {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::SIGKILL);
        }
        if let Some(cg) = &self.cgroup {
            let _ = cg.kill_all();
            if let Some(unit) = &self.unit {
                let _ = systemd::dbus::Systemd::connect().and_then(|s| s.stop(unit));
            }
            let _ = cg.remove();
            remove_default_parent(cg);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the shared `crius` parent of default cgroup paths once it is empty.
pub(crate) fn remove_default_parent(cg: &Cgroup) {
    if let Some(parent) = cg.dir.parent()
        && parent == cg.mount.join("crius")
    {
        let _ = std::fs::remove_dir(parent);
    }
}

/// Creates container `id` from the bundle at `bundle_dir` under the state root `root`.
pub fn create(root: &Path, id: &str, bundle_dir: &Path, opts: &CreateOptions) -> Result<Record> {
    crate::id::validate(id)?;
    crate::log::debug(|| format!("create {id}: loading the bundle {}", bundle_dir.display()));
    let bundle = crate::config::load(bundle_dir)?;
    let spec = &bundle.spec;
    let process = spec.process().as_ref().expect("checked by config::load");
    let terminal = process.terminal() == Some(true);
    if terminal && opts.console_socket.is_none() {
        return Err(err!("process.terminal is true: --console-socket is required"));
    }
    // The state holds the spec, env included: root's alone, as runc keeps it (0700 directories, 0600 files).
    let dir = Record::create_dir(root, id)?;
    let mut undo = Undo {
        dir: dir.clone(),
        cgroup: None,
        unit: None,
        pid: None,
        armed: true,
    };
    let fifo_path = dir.join(EXEC_FIFO);
    // Writable by all (as runc's): the init opens it after it became the container's user, through its
    // descriptor, never by path (the directory is 0700). Nobody but root reads it.
    nix::unistd::mkfifo(&fifo_path, Mode::from_bits_truncate(0o622)).map_err(|e| err!("mkfifo: {e}"))?;
    nix::sys::stat::fchmodat(
        nix::fcntl::AT_FDCWD,
        &fifo_path,
        Mode::from_bits_truncate(0o622),
        nix::sys::stat::FchmodatFlags::FollowSymlink,
    )
    .map_err(|e| err!("chmod exec fifo: {e}"))?;
    let linux = spec.linux().as_ref().expect("checked by config::load");
    let (cg, holder) = if opts.systemd_cgroup {
        let path = linux.cgroups_path().as_ref().map(|p| p.to_string_lossy());
        let scope = systemd::Scope::parse(path.as_deref(), id)?;
        let cg = Cgroup::of_scope(&scope)?;
        let limits = match linux.resources() {
            Some(res) => systemd::props::of_resources(res)?,
            None => Vec::new(),
        };
        undo.cgroup = Some(cg.clone());
        undo.unit = Some(scope.unit.clone());
        let holder = systemd::hold::start(&scope, id, limits)?;
        (cg, Some(holder))
    } else {
        let cg = Cgroup::resolve(linux.cgroups_path().as_deref(), id)?;
        cg.check_existing()?;
        cg.create()?;
        undo.cgroup = Some(cg.clone());
        (cg, None)
    };
    let fifo: OwnedFd = nix::fcntl::open(&fifo_path, OFlag::O_PATH | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(|e| err!("opening exec fifo: {e}"))?;
    let console = match &opts.console_socket {
        Some(p) => Some(UnixStream::connect(p).map_err(Error::io("connecting to console socket", p))?),
        None => None,
    };
    let (parent, child) = crate::channel::pair()?;
    // crius-runc is single-threaded; the child only runs our setup code and then _exits or execs.
    let stage1 = match crate::spawn::fork_into_cgroup(&cg)? {
        ForkResult::Child => {
            drop(parent);
            let e = stage1(id, &bundle, &child, &fifo, console, opts.preserve_fds).unwrap_err();
            let _ = child.send(&format!("error {e}"));
            // SAFETY: leave without running destructors that belong to the parent.
            unsafe { libc::_exit(1) }
        }
        ForkResult::Parent { child: pid } => pid,
    };
    drop(child);
    crate::log::debug(|| {
        format!(
            "create {id}: setup process {stage1} started in cgroup {} (runc: nsexec container setup)",
            cg.dir.display()
        )
    });
    let result = drive(&parent, stage1, (&bundle, &cg), id, &mut undo);
    // The container's processes are in the scope now: its holder may go.
    drop(holder);
    let _ = nix::sys::wait::waitpid(stage1, None);
    let pid = result?;
    let cgroup = (cg.dir.clone(), undo.unit.clone());
    let record = Record::save_new(root, id, pid, &bundle, cgroup, opts.pid_file.as_deref())?;
    undo.armed = false;
    Ok(record)
}

/// The runtime's side of the setup conversation. Returns the init pid once init reports "created".
///
/// The cgroup's limits are set when init asks for the hooks, as runc sets them: its rootfs is complete then,
/// so a device rule that denies `mknod` has not kept init from making the container's device nodes, and the
/// prestart hooks find the limits in place.
fn drive(
    ch: &Channel,
    stage1: Pid,
    (bundle, cg): (&Bundle, &Cgroup),
    id: &str,
    undo: &mut Undo,
) -> Result<i32> {
    let spec = &bundle.spec;
    let linux = spec.linux().as_ref().expect("checked");
    let mut pid = None;
    // A seccomp filter with a listener: init hands it over after "created", and create is done once the
    // agent has it.
    let seccomp = linux.seccomp().as_ref().filter(|s| crate::seccomp::notifies(s));
    // Stage 1 ("pid N") and init ("hooks") write to the same channel, so "hooks" may arrive first.
    let mut hooks_waiting = false;
    loop {
        let (msg, fd) = if hooks_waiting && pid.is_some() {
            hooks_waiting = false;
            ("hooks".to_string(), None)
        } else {
            ch.recv_with_fd()?
        };
        if msg == "hooks" && pid.is_none() {
            hooks_waiting = true;
            continue;
        }
        let (word, rest) = msg.split_once(' ').unwrap_or((&msg, ""));
        match word {
            "userns" => {
                crate::namespaces::write_maps(
                    stage1,
                    "uid_map",
                    linux.uid_mappings().as_deref().unwrap_or_default(),
                )?;
                crate::namespaces::write_maps(
                    stage1,
                    "gid_map",
                    linux.gid_mappings().as_deref().unwrap_or_default(),
                )?;
                ch.send("go")?;
            }
            "pid" => {
                let p: i32 = rest
                    .parse()
                    .map_err(|_| err!("protocol error: bad pid {rest:?}"))?;
                pid = Some(p);
                undo.pid = Some(p);
                crate::log::debug(|| {
                    format!(
                        "create {id}: namespaces made, the container's init is pid {p} (runc: child process in init())"
                    )
                });
                if let Some(adj) = spec.process().as_ref().and_then(|p| p.oom_score_adj()) {
                    set_oom_score_adj(p, adj);
                }
            }
            "hooks" => {
                let p = pid.ok_or_else(|| err!("protocol error: hooks before pid"))?;
                crate::log::debug(|| {
                    format!("create {id}: rootfs ready; setting cgroup limits, running hooks")
                });
                if let Some(res) = linux.resources() {
                    cg.apply(res)?;
                }
                if let Some(h) = spec.hooks() {
                    let state = crate::state::document(id, ContainerState::Creating, p, &bundle.dir, spec);
                    crate::hooks::run("prestart", h.prestart().as_deref().unwrap_or_default(), &state)?;
                    crate::hooks::run(
                        "createRuntime",
                        h.create_runtime().as_deref().unwrap_or_default(),
                        &state,
                    )?;
                }
                ch.send(&format!("go {p}"))?;
            }
            "created" => {
                crate::log::debug(|| {
                    format!(
                        "create {id}: init is ready and waits for start (runc: init: closing the pipe to signal completion)"
                    )
                });
                let p = pid.ok_or_else(|| err!("protocol error: created before pid"))?;
                if seccomp.is_none() {
                    return Ok(p);
                }
            }
            "seccomp" => {
                let (Some(profile), Some(p), Some(listener)) = (seccomp, pid, fd) else {
                    return Err(err!("protocol error: a seccomp listener that was not expected"));
                };
                let state = crate::state::document(id, ContainerState::Creating, p, &bundle.dir, spec);
                crate::notify::send_to_agent(profile, spec.version(), p, &state, &listener)?;
                drop(listener);
                crate::log::debug(|| format!("create {id}: the seccomp agent has the listener"));
                ch.send("go")?;
                return Ok(p);
            }
            "error" => return Err(Error::Msg(rest.to_string())),
            "" => return Err(err!("the container process exited during setup")),
            _ => return Err(err!("protocol error: unexpected {msg:?}")),
        }
    }
}

/// Sets oom_score_adj; lowering it needs CAP_SYS_RESOURCE, and without it the current value is kept with a warning
/// instead of failing the container.
fn set_oom_score_adj(pid: i32, adj: i32) {
    let path = format!("/proc/{pid}/oom_score_adj");
    if let Err(e) = std::fs::write(&path, adj.to_string()) {
        let cur = std::fs::read_to_string(&path).unwrap_or_default();
        crate::log::warn(&format!(
            "oom_score_adj {adj} refused ({e}; lowering it needs CAP_SYS_RESOURCE): keeping {}",
            cur.trim()
        ));
    }
}

fn stage1(
    id: &str,
    bundle: &Bundle,
    ch: &Channel,
    fifo: &OwnedFd,
    console: Option<UnixStream>,
    preserve_fds: u32,
) -> Result<()> {
    let linux = bundle.spec.linux().as_ref().expect("checked");
    let (join, new) = crate::namespaces::split(linux.namespaces().as_deref().unwrap_or_default());
    let joins_userns = join.iter().any(|(t, _)| *t == LinuxNamespaceType::User);
    let userns = new.contains(&LinuxNamespaceType::User) || joins_userns;
    // While still the host's root: the bind mounts (idmapped where asked) and the way to the rootfs.
    let sources = crate::rootfs::sources::open(&bundle.spec, &bundle.rootfs, &bundle.dir, userns)?;
    for (t, path) in &join {
        crate::namespaces::join(*t, path)?;
    }
    if new.contains(&LinuxNamespaceType::User) {
        crate::namespaces::create(CloneFlags::CLONE_NEWUSER)?;
        ch.send("userns")?;
        ch.expect("go")?;
    }
    if userns {
        // The user namespace's root (the host's root is not mapped in it).
        let root = (nix::unistd::Gid::from_raw(0), nix::unistd::Uid::from_raw(0));
        nix::unistd::setresgid(root.0, root.0, root.0)
            .map_err(|e| err!("setgid 0 in the user namespace: {e}"))?;
        nix::unistd::setresuid(root.1, root.1, root.1)
            .map_err(|e| err!("setuid 0 in the user namespace: {e}"))?;
    }
    let flags = new
        .iter()
        .filter(|t| **t != LinuxNamespaceType::User)
        .fold(CloneFlags::empty(), |f, t| f | crate::namespaces::flag(*t));
    crate::namespaces::create(flags)?;
    // SAFETY: single-threaded; the child runs init and never returns.
    match unsafe { fork() }.map_err(|e| err!("fork: {e}"))? {
        ForkResult::Child => {
            let e =
                crate::init::run(id, bundle, ch, fifo, console, (userns, sources), preserve_fds).unwrap_err();
            let _ = ch.send(&format!("error {e}"));
            // SAFETY: as above.
            unsafe { libc::_exit(1) }
        }
        ForkResult::Parent { child } => {
            ch.send(&format!("pid {child}"))?;
            // SAFETY: stage 1 is done; exit without destructors.
            unsafe { libc::_exit(0) }
        }
    }
}
