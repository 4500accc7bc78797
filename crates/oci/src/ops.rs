//! The verbs after `create`: start, state, kill, delete, pause, resume, ps, list, update, stats.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use oci_spec::runtime::{ContainerState, LinuxResources};

use crate::cgroup::Cgroup;
use crate::state::{EXEC_FIFO, Record, Status};
use crate::{Error, Result, err};

fn wrong(rec: &Record, status: Status, action: &str) -> Error {
    Error::WrongState {
        id: rec.id.clone(),
        status,
        action: action.into(),
    }
}

/// Loads `id` and its current status.
pub fn load(root: &Path, id: &str) -> Result<(Record, Status)> {
    let rec = Record::load(root, id)?;
    let status = rec.status(root);
    Ok((rec, status))
}

/// `start`: releases the init process of a created container so it execs the user's program.
pub fn start(root: &Path, id: &str) -> Result<()> {
    let (rec, status) = load(root, id)?;
    if status != Status::Created {
        return Err(wrong(
            &rec,
            status,
            "start it (only a created container can be started)",
        ));
    }
    crate::log::debug(|| format!("start {id}: releasing init {} through the exec fifo", rec.pid));
    let fifo_path = Record::dir(root, id).join(EXEC_FIFO);
    let mut fifo = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&fifo_path)
        .map_err(Error::io("opening", &fifo_path))?;
    let mut byte = [0u8; 1];
    loop {
        match fifo.read(&mut byte) {
            Ok(1) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(Error::io("reading", &fifo_path)(e)),
        }
        if !crate::state::process_alive(rec.pid, rec.pid_start) {
            // Released between the read and the check, and gone already (a program that exits at once): its
            // byte is in the FIFO, which this end keeps open.
            if matches!(fifo.read(&mut byte), Ok(1)) {
                break;
            }
            let _ = std::fs::remove_file(&fifo_path);
            return Err(err!("container {id:?}: its init process exited before start"));
        }
        let fd = std::os::fd::AsFd::as_fd(&fifo);
        let mut pfd = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        let _ = nix::poll::poll(&mut pfd, nix::poll::PollTimeout::from(100u8));
    }
    std::fs::remove_file(&fifo_path).map_err(Error::io("removing", &fifo_path))?;
    if let Some(h) = rec.spec.hooks().as_ref().and_then(|h| h.poststart().clone()) {
        let state = crate::state::document(id, ContainerState::Running, rec.pid, &rec.bundle, &rec.spec);
        if let Err(e) = crate::hooks::run("poststart", &h, &state) {
            crate::log::warn(&e.to_string());
        }
    }
    Ok(())
}

/// Parses a signal as runc accepts it: `KILL`, `SIGKILL` or `9`.
pub fn parse_signal(s: &str) -> Result<Option<Signal>> {
    if let Ok(n) = s.parse::<i32>() {
        // 0 sends nothing: it asks whether the process is there (kill(2)), as `runc kill ID 0` does.
        if n == 0 {
            return Ok(None);
        }
        return Signal::try_from(n)
            .map(Some)
            .map_err(|_| err!("unknown signal {s:?}"));
    }
    let upper = s.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse().map(Some).map_err(|_| err!("unknown signal {s:?}"))
}

/// `kill`: sends `sig` to the init process, or with `all` to every process of the container (None: signal 0,
/// which only checks that the process exists).
pub fn kill(root: &Path, id: &str, sig: Option<Signal>, all: bool) -> Result<()> {
    let (rec, status) = load(root, id)?;
    if status == Status::Stopped && !all {
        return Err(wrong(
            &rec,
            status,
            "send a signal (the container is not running)",
        ));
    }
    if all {
        let cg = Cgroup::at(&rec.cgroup)?;
        for pid in cg.procs()? {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
        }
        return Ok(());
    }
    nix::sys::signal::kill(Pid::from_raw(rec.pid), sig)
        .map_err(Error::sys(format!("kill {} of {id:?}", rec.pid)))
}

/// `delete`: removes a stopped or created container; `force` also kills a running or paused one.
pub fn delete(root: &Path, id: &str, force: bool) -> Result<()> {
    let (rec, status) = match load(root, id) {
        Err(Error::NotFound(_)) if force => return Ok(()),
        r => r?,
    };
    if matches!(status, Status::Running | Status::Paused) && !force {
        return Err(wrong(&rec, status, "delete it without --force (stop it first)"));
    }
    let cg = Cgroup::at(&rec.cgroup)?;
    if status != Status::Stopped {
        let _ = nix::sys::signal::kill(Pid::from_raw(rec.pid), Signal::SIGKILL);
    }
    cg.kill_all()?;
    if status == Status::Paused {
        let _ = cg.freeze(false);
    }
    if let Some(unit) = &rec.systemd_unit {
        // The scope is empty now; systemd would collect it by itself, but the caller expects it gone on return.
        crate::cgroup::systemd::dbus::Systemd::connect()?.stop(unit)?;
    }
    // The init process may be a zombie of its parent for a moment; it has left the cgroup already.
    cg.remove()?;
    crate::create::remove_default_parent(&cg);
    if let Some(h) = rec.spec.hooks().as_ref().and_then(|h| h.poststop().clone()) {
        let state = crate::state::document(id, ContainerState::Stopped, rec.pid, &rec.bundle, &rec.spec);
        if let Err(e) = crate::hooks::run("poststop", &h, &state) {
            crate::log::warn(&e.to_string());
        }
    }
    let dir = Record::dir(root, id);
    std::fs::remove_dir_all(&dir).map_err(Error::io("removing", &dir))
}

/// `pause` (`frozen` = true) and `resume`.
pub fn freeze(root: &Path, id: &str, frozen: bool) -> Result<()> {
    let (rec, status) = load(root, id)?;
    let ok = if frozen {
        status == Status::Running
    } else {
        status == Status::Paused
    };
    if !ok {
        return Err(wrong(
            &rec,
            status,
            if frozen {
                "pause it (it is not running)"
            } else {
                "resume it (it is not paused)"
            },
        ));
    }
    Cgroup::at(&rec.cgroup)?.freeze(frozen)
}

/// `ps`: the host pids of the container's processes.
pub fn pids(root: &Path, id: &str) -> Result<Vec<i32>> {
    let (rec, _) = load(root, id)?;
    Cgroup::at(&rec.cgroup)?.procs()
}

/// `list`: every container under `root`, sorted by id. Unreadable entries are skipped.
pub fn list(root: &Path) -> Result<Vec<(Record, Status)>> {
    let entries = match std::fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("reading", root)(e)),
    };
    let mut out: Vec<_> = entries
        .flatten()
        .filter_map(|e| load(root, &e.file_name().to_string_lossy()).ok())
        .collect();
    out.sort_by(|a, b| a.0.id.cmp(&b.0.id));
    Ok(out)
}

/// `events --stats`: current usage figures.
pub fn stats(root: &Path, id: &str) -> Result<crate::cgroup::Stats> {
    let (rec, status) = load(root, id)?;
    if status == Status::Stopped {
        return Err(wrong(&rec, status, "read stats (the container is stopped)"));
    }
    Ok(Cgroup::at(&rec.cgroup)?.stats())
}

/// `update`: merges `new` into the container's resources and applies them live. A memory limit below current
/// usage is refused (cgroup v2 would OOM-kill instead).
pub fn update(root: &Path, id: &str, new: &LinuxResources) -> Result<()> {
    let (mut rec, status) = load(root, id)?;
    if status == Status::Stopped {
        return Err(wrong(&rec, status, "update it (the container is stopped)"));
    }
    let cg = Cgroup::at(&rec.cgroup)?;
    cg.check_memory_decrease(new, id)?;
    let mut linux = rec.spec.linux().clone().unwrap_or_default();
    let merged = crate::merge::resources(linux.resources().clone().unwrap_or_default(), new);
    if let Some(unit) = &rec.systemd_unit {
        // The unit's properties first, as runc does: systemd writes them to the files itself, and writes them
        // again on a daemon-reload, so a limit set in the files alone would not last.
        let props = crate::cgroup::systemd::props::of_resources(&merged)?;
        crate::cgroup::systemd::dbus::Systemd::connect()?.set(unit, &props)?;
    }
    cg.apply(&merged)?;
    linux.set_resources(Some(merged));
    rec.spec.set_linux(Some(linux));
    rec.save(root)
}

/// Waits until the init process of `rec` is gone (for `run`, which is its subreaper).
pub fn wait_gone(rec: &Record, timeout: Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while crate::state::process_alive(rec.pid, rec.pid_start) {
        if std::time::Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}
