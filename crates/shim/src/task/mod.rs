//! The containers of one pod and their processes: the domain behind the ttrpc Task service. Each container is
//! run by the configured OCI runtime; its init and its exec processes each move through the state machine
//! of `state.rs`, with their exits, stdio and events. No protobuf here: `service` converts.
//!
//! The table holds the containers and the ids being created. Create reserves its id there before it runs the
//! runtime, so of two Creates of one id exactly one makes the container and the other gets AlreadyExists;
//! a failed create releases the id.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::events::{Event, ns_since_epoch};
use crate::mounts::Mount;
use crate::oom::OomWatcher;
use crate::publisher::Publish;
use crate::reactor::Reactor;
use crate::reaper::{Exit, Reaper};
use crate::runtime::Runtime;
use crate::stdio::ProcessIo;

mod checkpoint;
#[cfg(test)]
mod checkpoint_tests;
mod control;
mod exec_sync;
#[cfg(test)]
mod exec_sync_tests;
mod prepare;
mod redeliver;
mod state;
#[cfg(test)]
mod tests;

pub(crate) use checkpoint::CheckpointTask;
use state::Lifecycle;
pub(crate) use state::State;

/// Where the shim notes, in each bundle, the runtime that runs the container (for `delete` after a crash).
pub(crate) const RUNTIME_FILE: &str = "crius-runtime.json";
/// How long a shim without containers waits for a new one before it exits.
pub(crate) const IDLE_EXIT: Duration = Duration::from_secs(2);
/// How long a new shim waits for its first container (a caller that died between `start` and Create).
pub(crate) const FIRST_CREATE: Duration = Duration::from_secs(30);
/// Where the shim records, in each bundle, how the container's init ended: for its own `delete` action,
/// which runs when the shim is gone. Nobody else reads it: exits reach the owner as events.
pub(crate) const EXIT_FILE: &str = "crius-exit.json";

/// A process's stdio as the caller names it: FIFO paths, a `crius-log://` CRI log for stdout, or empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StdioPaths {
    pub(crate) stdin: String,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// Which OCI runtime runs a container (`containerd.runc.v1.Options`); unset parts take the shim's defaults.
#[derive(Debug, Clone, Default)]
pub(crate) struct RuntimeChoice {
    /// The binary (else `CRIUS_SHIM_RUNTIME`, else crius-runc).
    pub(crate) binary: Option<PathBuf>,
    /// Its state root (else `/run/crius/shim/<binary name>/<namespace>`).
    pub(crate) root: Option<PathBuf>,
    /// Run it with `--systemd-cgroup` (`SystemdCgroup`): the container's cgroup is a systemd scope.
    pub(crate) systemd_cgroup: bool,
}

/// What Create asks for.
pub(crate) struct CreateTask {
    pub(crate) id: String,
    pub(crate) bundle: PathBuf,
    /// Mounted on `<bundle>/rootfs` first (empty: the bundle has its rootfs).
    pub(crate) rootfs: Vec<Mount>,
    pub(crate) stdio: StdioPaths,
    pub(crate) terminal: bool,
    /// A checkpoint (CRIU's image directory) to restore at Start instead of creating the container afresh.
    pub(crate) checkpoint: Option<PathBuf>,
    /// The runtime, or why the request's options were refused: refused after the id checks, as any failure
    /// to make the container is.
    pub(crate) runtime: Result<RuntimeChoice>,
}

/// A process as State reports it.
#[derive(Debug)]
pub(crate) struct ProcessState {
    pub(crate) bundle: PathBuf,
    pub(crate) pid: u32,
    pub(crate) state: State,
    pub(crate) exit: Option<Exit>,
    pub(crate) stdio: StdioPaths,
    pub(crate) terminal: bool,
}

/// What Delete answers: the process's pid and how it ended, if it did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Deleted {
    pub(crate) pid: u32,
    pub(crate) exit: Option<Exit>,
}

/// A Wait call's answer, sent once the process exits (dropped unsent if it is deleted first).
type Waiter = Box<dyn FnOnce(Exit) + Send>;

struct Process {
    pid: u32,
    life: Lifecycle,
    io: ProcessIo,
    terminal: bool,
    /// An exec's process spec (JSON), until it starts.
    spec: Vec<u8>,
    /// Wait calls to answer when it exits.
    waiters: Vec<Waiter>,
    /// An ExecSync's exec: no events (its caller hears its end in the answer).
    quiet: bool,
}

impl Process {
    fn new(what: String, io: ProcessIo, terminal: bool) -> Process {
        Process {
            pid: 0,
            life: Lifecycle::new(what),
            io,
            terminal,
            spec: Vec::new(),
            waiters: Vec::new(),
            quiet: false,
        }
    }

    fn stdio(&self) -> StdioPaths {
        StdioPaths {
            stdin: self.io.stdin_path.clone(),
            stdout: self.io.stdout_path.clone(),
            stderr: self.io.stderr_path.clone(),
        }
    }
}

/// How errors name a process: the init or an exec of container `id`.
fn process_name(id: &str, exec_id: &str) -> String {
    if exec_id.is_empty() {
        format!("the init process of container {id:?}")
    } else {
        format!("exec {exec_id:?} of container {id:?}")
    }
}

struct Container {
    bundle: PathBuf,
    runtime: Runtime,
    init: Process,
    execs: HashMap<String, Process>,
    rootfs_mounted: bool,
    /// The checkpoint its Start restores (`checkpoint.rs`); None once restored, or for a container made afresh.
    restore: Option<PathBuf>,
}

impl Container {
    fn process(&mut self, id: &str, exec_id: &str) -> Result<&mut Process> {
        if exec_id.is_empty() {
            return Ok(&mut self.init);
        }
        self.execs
            .get_mut(exec_id)
            .ok_or_else(|| Error::NotFound(format!("exec {exec_id:?} of container {id:?}")))
    }
}

#[derive(Default)]
struct Table {
    containers: HashMap<String, Container>,
    /// Ids whose Create runs (the container is not in `containers` yet): taken, and the shim is not idle.
    creating: HashSet<String>,
}

struct Inner {
    namespace: String,
    reaper: Reaper,
    publisher: Arc<dyn Publish>,
    oom: Option<OomWatcher>,
    table: Mutex<Table>,
    /// The shim's loop: stdio is pumped there, and stopping it ends the shim.
    reactor: Arc<Reactor>,
}

/// The containers of the pod; cheap to clone.
#[derive(Clone)]
pub(crate) struct Tasks {
    inner: Arc<Inner>,
}

/// An id reserved for a Create in progress; dropped without [`Reservation::commit`], it is free again.
struct Reservation<'a> {
    tasks: &'a Tasks,
    id: String,
}

impl Reservation<'_> {
    /// The container is made: it takes the id.
    fn commit(self, c: Container) {
        let mut t = self.tasks.lock();
        t.creating.remove(&self.id);
        t.containers.insert(self.id.clone(), c);
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.tasks.lock().creating.remove(&self.id);
    }
}

impl Tasks {
    /// The pod's containers, publishing through `publisher`, reaping with `reaper`, with their stdio and OOM
    /// watch in `reactor`.
    pub(crate) fn new(
        namespace: &str,
        reaper: Reaper,
        publisher: Arc<dyn Publish>,
        reactor: Arc<Reactor>,
    ) -> Tasks {
        Tasks {
            inner: Arc::new(Inner {
                namespace: namespace.to_string(),
                reaper,
                oom: OomWatcher::start(publisher.clone(), &reactor).ok(),
                publisher,
                table: Mutex::new(Table::default()),
                reactor,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.inner.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, e: Event) {
        self.inner.publisher.publish(e);
    }

    /// Runs `f` on container `id` under the table's lock.
    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Container) -> Result<T>) -> Result<T> {
        let mut t = self.lock();
        let c = t
            .containers
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("container {id:?}")))?;
        f(c)
    }

    /// Runs `f` on process `exec_id` (empty: the init) of container `id` under the table's lock.
    fn with_process<T>(
        &self,
        id: &str,
        exec_id: &str,
        f: impl FnOnce(&mut Process) -> Result<T>,
    ) -> Result<T> {
        self.with(id, |c| f(c.process(id, exec_id)?))
    }

    /// Takes `id` for a Create, or says who has it.
    fn reserve(&self, id: &str) -> Result<Reservation<'_>> {
        let mut t = self.lock();
        if t.containers.contains_key(id) || !t.creating.insert(id.to_string()) {
            return Err(Error::AlreadyExists(format!("container {id:?}")));
        }
        Ok(Reservation {
            tasks: self,
            id: id.to_string(),
        })
    }

    /// Lets the shim exit if it holds no container (and is making none); returns whether it will.
    pub(crate) fn finish_if_empty(&self) -> bool {
        {
            let t = self.lock();
            if !t.containers.is_empty() || !t.creating.is_empty() {
                return false;
            }
        }
        self.inner.reactor.stop();
        true
    }

    /// Exits after `grace` if the shim then holds no container.
    pub(crate) fn exit_when_idle(&self, grace: Duration) {
        if !self.lock().containers.is_empty() {
            return;
        }
        let me = self.clone();
        let _ = self.inner.reactor.after(grace, move |_| {
            let _ = me.finish_if_empty();
        });
    }

    /// Watches `pid` of container `id` (exec `exec_id`): records its exit, durably for an init, and publishes it.
    fn watch(&self, id: &str, exec_id: &str, pid: u32) {
        let me = self.clone();
        let (id, exec_id) = (id.to_string(), exec_id.to_string());
        self.inner.reaper.on_exit(pid as i32, move |exit| {
            let mut t = me.lock();
            let Some(c) = t.containers.get_mut(&id) else {
                return;
            };
            let bundle = c.bundle.clone();
            let Ok(p) = c.process(&id, &exec_id) else { return };
            if p.pid != pid {
                return;
            }
            let quiet = p.quiet;
            p.life.exited(exit);
            let waiters = std::mem::take(&mut p.waiters);
            drop(t);
            for w in waiters {
                w(exit);
            }
            if exec_id.is_empty() {
                let rec = serde_json::json!({"pid": pid, "status": exit.status,
                    "exited_at_ns": ns_since_epoch(exit.at) as u64});
                let _ = crius_common::private::write(&bundle.join(EXIT_FILE), rec.to_string().as_bytes());
            }
            if quiet {
                return;
            }
            me.publish(Event::Exit {
                container_id: id,
                exec_id,
                pid,
                exit_status: exit.status,
                exited_at_ns: ns_since_epoch(exit.at),
            });
        });
    }

    /// Create: the runtime makes the container (its init waits for Start); returns the init's pid.
    pub(crate) fn create(&self, req: CreateTask) -> Result<u32> {
        if req.id.is_empty() {
            return Err(Error::InvalidArgument("Create: id is empty".into()));
        }
        let reservation = self.reserve(&req.id)?;
        let c = match self.make_container(&req) {
            Ok(c) => c,
            Err(e) => {
                drop(reservation);
                // A shim whose only container failed to be made holds nothing: it goes, as after a last delete.
                self.exit_when_idle(IDLE_EXIT);
                return Err(e);
            }
        };
        let pid = c.init.pid;
        reservation.commit(c);
        // A container to restore has no process before its Start.
        if pid != 0 {
            self.watch_init(&req.id, pid);
        }
        self.publish(Event::Create {
            container_id: req.id,
            bundle: req.bundle.display().to_string(),
            rootfs: req.rootfs,
            stdin: req.stdio.stdin,
            stdout: req.stdio.stdout,
            stderr: req.stdio.stderr,
            terminal: req.terminal,
            pid,
        });
        Ok(pid)
    }

    /// The init's exit and OOM kills are watched once it has a pid.
    fn watch_init(&self, id: &str, pid: u32) {
        self.watch(id, "", pid);
        if let Some(oom) = &self.inner.oom {
            oom.watch(id, pid);
        }
    }

    /// Start: the container's init (`exec_id` empty; restored from its checkpoint if it was created with
    /// one) or a defined exec process; returns its pid.
    pub(crate) fn start(&self, id: &str, exec_id: &str) -> Result<u32> {
        let (runtime, bundle, exec, restore) = self.with(id, |c| {
            let restore = c.restore.clone().filter(|_| exec_id.is_empty());
            let p = c.process(id, exec_id)?;
            p.life.start()?;
            let exec = (!exec_id.is_empty()).then(|| (p.spec.clone(), p.stdio(), p.terminal));
            let restore = restore.map(|r| (r, p.stdio(), p.terminal));
            Ok((c.runtime.clone(), c.bundle.clone(), exec, restore))
        })?;
        let restoring = restore.is_some();
        let ran = match (exec, restore) {
            (Some((spec, stdio, terminal)), _) => self
                .run_exec(&runtime, &bundle, id, exec_id, &spec, &stdio, terminal)
                .map(Some),
            (None, Some((image, stdio, terminal))) => self
                .run_restore(&runtime, &bundle, id, &image, &stdio, terminal)
                .map(Some),
            (None, None) => runtime.run(&["start", id], None, &bundle).map(|_| None),
        };
        let (pid, quiet) = self.with_process(id, exec_id, |p| match ran {
            Err(e) => {
                p.life.start_failed();
                Err(e)
            }
            Ok(exec) => {
                if let Some((pid, io)) = exec {
                    p.pid = pid;
                    p.io = io;
                }
                // A process quick to exit may have been reaped already: its exit stands.
                p.life.started();
                Ok((p.pid, p.quiet))
            }
        })?;
        if restoring {
            let _ = self.with(id, |c| {
                c.restore = None;
                Ok(())
            });
            self.watch_init(id, pid);
        }
        if exec_id.is_empty() {
            self.publish(Event::Start {
                container_id: id.into(),
                pid,
            });
        } else if quiet {
            self.watch(id, exec_id, pid);
        } else {
            self.watch(id, exec_id, pid);
            self.publish(Event::ExecStarted {
                container_id: id.into(),
                exec_id: exec_id.into(),
                pid,
            });
        }
        Ok(pid)
    }

    /// State of process `exec_id` (empty: the init) of container `id`.
    pub(crate) fn state(&self, id: &str, exec_id: &str) -> Result<ProcessState> {
        self.with(id, |c| {
            let bundle = c.bundle.clone();
            let p = c.process(id, exec_id)?;
            Ok(ProcessState {
                bundle,
                pid: p.pid,
                state: p.life.state(),
                exit: p.life.exit(),
                stdio: p.stdio(),
                terminal: p.terminal,
            })
        })
    }

    /// Kill: sends `signal` to the container's init (through the runtime; `all`: to every process of it) or
    /// to an exec process. A process that exited cannot be signalled. A signal the kernel drops (the init is
    /// its PID namespace's PID 1 and has no handler yet) is sent again until it is caught (`redeliver.rs`).
    pub(crate) fn kill(&self, id: &str, exec_id: &str, signal: u32, all: bool) -> Result<()> {
        let (runtime, bundle, pid) = self.with(id, |c| {
            let (rt, b) = (c.runtime.clone(), c.bundle.clone());
            let p = c.process(id, exec_id)?;
            p.life.signal()?;
            Ok((rt, b, p.pid))
        })?;
        if exec_id.is_empty() {
            // Read before the signal goes: a handler installed after it would not have had it.
            let dropped = redeliver::needs_watch(pid, signal);
            let sig = signal.to_string();
            let mut args = vec!["kill"];
            if all {
                args.push("--all");
            }
            args.extend([id, sig.as_str()]);
            if let Err(e) = runtime.run(&args, None, &bundle) {
                // The runtime found it stopped before the reaper saw the exit: finished, not a failure.
                return Err(if redeliver::has_ended(pid) {
                    Error::Finished(format!("the init process of {id:?}"))
                } else {
                    e
                });
            }
            if let Some(sig) = dropped {
                self.redeliver(id, pid, sig);
            }
        } else if pid != 0 {
            let sig = nix::sys::signal::Signal::try_from(signal as i32)
                .map_err(|e| Error::InvalidArgument(format!("signal {signal}: {e}")))?;
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).map_err(|e| Error::Io {
                context: format!("signalling exec {exec_id:?} (pid {pid})"),
                source: e.into(),
            })?;
        }
        Ok(())
    }

    /// Delete: an exec process that is not running, or the container (its init created or exited) with its
    /// runtime state and rootfs mounts. The pod's last container gone, the shim goes too.
    pub(crate) fn delete(&self, id: &str, exec_id: &str) -> Result<Deleted> {
        if !exec_id.is_empty() {
            return self.with(id, |c| {
                let p = c.process(id, exec_id)?;
                p.life.delete()?;
                let d = Deleted {
                    pid: p.pid,
                    exit: p.life.exit(),
                };
                c.execs.remove(exec_id);
                Ok(d)
            });
        }
        let (runtime, bundle, mounted) = self.with(id, |c| {
            c.init.life.delete()?;
            Ok((c.runtime.clone(), c.bundle.clone(), c.rootfs_mounted))
        })?;
        if let Err(e) = runtime.run(&["delete", "--force", id], None, &bundle) {
            let _ = self.with(id, |c| {
                c.init.life.delete_failed();
                Ok(())
            });
            return Err(e);
        }
        if mounted {
            crate::mounts::unmount_all(&bundle.join("rootfs"));
        }
        let c = self.lock().containers.remove(id);
        if let Some(oom) = &self.inner.oom {
            oom.unwatch(id);
        }
        let d = c
            .map(|c| Deleted {
                pid: c.init.pid,
                exit: c.init.life.exit(),
            })
            .unwrap_or_default();
        self.publish(Event::Delete {
            container_id: id.into(),
            pid: d.pid,
            exit_status: d.exit.map(|e| e.status).unwrap_or(0),
            exited_at_ns: d.exit.map(|e| ns_since_epoch(e.at)),
        });
        // The pod's last container is gone: the shim goes too, unless a new container of the pod arrives
        // meanwhile (its `start` may have found this shim a moment ago). containerd also calls Shutdown.
        self.exit_when_idle(IDLE_EXIT);
        Ok(d)
    }

    /// The pid of container `id`'s init (0: no such container), for Connect.
    pub(crate) fn init_pid(&self, id: &str) -> u32 {
        self.lock().containers.get(id).map(|c| c.init.pid).unwrap_or(0)
    }

    /// The runtime and bundle of container `id`.
    fn runtime_of(&self, id: &str) -> Result<(Runtime, PathBuf)> {
        self.with(id, |c| Ok((c.runtime.clone(), c.bundle.clone())))
    }
}

/// Reads the pid the runtime wrote to `path`.
fn read_pid(path: &Path) -> Result<u32> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| Error::Runtime(format!("the runtime wrote no pid to {}", path.display())))
}
