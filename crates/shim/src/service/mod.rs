//! The Task service (`containerd.task.v2.Task`): the containers of one pod, each run by the configured OCI
//! runtime, with their exec processes, exits, stdio and events.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use containerd_shim_protos as protos;
use protos::api::{self, Status};
use protos::shim::shim_ttrpc::Task;
use protos::ttrpc::{self, Code, TtrpcContext};

use crate::events::{Event, ns_since_epoch, timestamp, to_any};
use crate::oom::OomWatcher;
use crate::publisher::Publish;
use crate::reactor::Reactor;
use crate::reaper::{Exit, Reaper};
use crate::runtime::Runtime;
use crate::stdio::{self, ProcessIo};

/// The runtime options' type, as containerd's runc shims receive it.
const RUNC_OPTIONS: &str = "containerd.runc.v1.Options";
/// Where the shim notes, in each bundle, the runtime that runs the container (for `delete` after a crash).
pub(crate) const RUNTIME_FILE: &str = "crius-runtime.json";
/// How long a shim without containers waits for a new one before it exits.
pub(crate) const IDLE_EXIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a new shim waits for its first container (a caller that died between `start` and Create).
pub(crate) const FIRST_CREATE: std::time::Duration = std::time::Duration::from_secs(30);
/// Where the shim records, in each bundle, how the container's init ended.
pub(crate) const EXIT_FILE: &str = "crius-exit.json";

mod control;
mod prepare;

use prepare::run_with_stdio;
/// The `Any` type from the protobuf crate the protos use.
use protos::protobuf::well_known_types::any as protobuf_any;

type Result<T> = ttrpc::Result<T>;

/// A ttrpc error with `code` and a message naming the thing.
pub(crate) fn error(code: Code, msg: impl Into<String>) -> ttrpc::Error {
    ttrpc::Error::RpcStatus(ttrpc::get_status(code, msg.into()))
}

struct Proc {
    pid: u32,
    status: Status,
    exit: Option<Exit>,
    io: ProcessIo,
    terminal: bool,
    /// An exec's process spec (JSON), until it starts.
    spec: Vec<u8>,
    /// Wait calls to answer when it exits.
    waiters: Vec<Waiter>,
}

/// A Wait call's answer, sent once the process exits.
type Waiter = Box<dyn FnOnce(Exit) + Send>;

impl Proc {
    fn new(io: ProcessIo, terminal: bool) -> Proc {
        Proc {
            pid: 0,
            status: Status::CREATED,
            exit: None,
            io,
            terminal,
            spec: Vec::new(),
            waiters: Vec::new(),
        }
    }
}

struct Container {
    bundle: PathBuf,
    runtime: Runtime,
    init: Proc,
    execs: HashMap<String, Proc>,
    rootfs_mounted: bool,
}

struct Inner {
    namespace: String,
    reaper: Reaper,
    publisher: Arc<dyn Publish>,
    oom: Option<OomWatcher>,
    containers: Mutex<HashMap<String, Container>>,
    /// The shim's loop: stdio is pumped there, and stopping it ends the shim.
    reactor: Arc<Reactor>,
    /// Creates in progress (their container is not in `containers` yet): the shim is not idle.
    creating: AtomicUsize,
}

/// The service; cheap to clone.
#[derive(Clone)]
pub(crate) struct Service {
    inner: Arc<Inner>,
}

fn proc_mut<'a>(c: &'a mut Container, id: &str, exec_id: &str) -> Result<&'a mut Proc> {
    if exec_id.is_empty() {
        Ok(&mut c.init)
    } else {
        c.execs.get_mut(exec_id).ok_or_else(|| {
            error(
                Code::NOT_FOUND,
                format!("exec {exec_id:?} of container {id:?} not found"),
            )
        })
    }
}

fn status_name(s: Status) -> &'static str {
    match s {
        Status::CREATED => "created",
        Status::RUNNING => "running",
        Status::STOPPED => "stopped",
        Status::PAUSED => "paused",
        Status::PAUSING => "pausing",
        Status::UNKNOWN => "unknown",
    }
}

fn read_pid(path: &Path) -> Result<u32> {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| {
            error(
                Code::INTERNAL,
                format!("the runtime wrote no pid to {}", path.display()),
            )
        })
}

impl Service {
    /// A service publishing through `publisher`, reaping with `reaper`, its stdio and OOM watch in `reactor`.
    pub(crate) fn new(
        namespace: &str,
        reaper: Reaper,
        publisher: Arc<dyn Publish>,
        reactor: Arc<Reactor>,
    ) -> Service {
        Service {
            inner: Arc::new(Inner {
                namespace: namespace.to_string(),
                reaper,
                oom: OomWatcher::start(publisher.clone(), &reactor).ok(),
                publisher,
                containers: Mutex::new(HashMap::new()),
                reactor,
                creating: AtomicUsize::new(0),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, Container>> {
        self.inner.containers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets the shim exit if it holds no container (and is making none); returns whether it will.
    pub(crate) fn finish_if_empty(&self) -> bool {
        if !self.lock().is_empty() || self.inner.creating.load(Ordering::SeqCst) > 0 {
            return false;
        }
        self.inner.reactor.stop();
        true
    }

    /// Exits after `grace` if the shim then holds no container.
    pub(crate) fn exit_when_idle(&self, grace: std::time::Duration) {
        if !self.lock().is_empty() {
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
            let mut all = me.lock();
            let Some(c) = all.get_mut(&id) else { return };
            let bundle = c.bundle.clone();
            let Ok(p) = proc_mut(c, &id, &exec_id) else { return };
            if p.pid != pid {
                return;
            }
            p.exit = Some(exit);
            p.status = Status::STOPPED;
            let waiters = std::mem::take(&mut p.waiters);
            drop(all);
            for w in waiters {
                w(exit);
            }
            if exec_id.is_empty() {
                let at = exit.at.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
                let rec = serde_json::json!({"pid": pid, "status": exit.status,
                    "exited_at_ns": at.as_nanos() as u64});
                let _ = std::fs::write(bundle.join(EXIT_FILE), rec.to_string());
            }
            me.inner.publisher.publish(Event::Exit {
                container_id: id,
                exec_id,
                pid,
                exit_status: exit.status,
                exited_at_ns: ns_since_epoch(exit.at),
            });
        });
    }

    fn state_of(id: &str, exec_id: &str, bundle: &Path, p: &Proc) -> api::StateResponse {
        api::StateResponse {
            id: if exec_id.is_empty() {
                id.into()
            } else {
                exec_id.into()
            },
            bundle: bundle.display().to_string(),
            pid: p.pid,
            status: p.status.into(),
            stdin: p.io.stdin_path.clone(),
            stdout: p.io.stdout_path.clone(),
            stderr: p.io.stderr_path.clone(),
            terminal: p.terminal,
            exit_status: p.exit.map(|e| e.status).unwrap_or(0),
            exited_at: p.exit.map(|e| timestamp(e.at)).into(),
            exec_id: exec_id.into(),
            ..Default::default()
        }
    }

    fn with<T>(&self, id: &str, f: impl FnOnce(&mut Container) -> Result<T>) -> Result<T> {
        let mut all = self.lock();
        let c = all
            .get_mut(id)
            .ok_or_else(|| error(Code::NOT_FOUND, format!("container {id:?} not found")))?;
        f(c)
    }
}

impl Task for Service {
    fn create(&self, _: &TtrpcContext, req: api::CreateTaskRequest) -> Result<api::CreateTaskResponse> {
        if req.id.is_empty() {
            return Err(error(Code::INVALID_ARGUMENT, "Create: id is empty"));
        }
        if self.lock().contains_key(&req.id) {
            return Err(error(
                Code::ALREADY_EXISTS,
                format!("container {:?} already exists", req.id),
            ));
        }
        self.inner.creating.fetch_add(1, Ordering::SeqCst);
        let made = self.create_container(&req);
        self.inner.creating.fetch_sub(1, Ordering::SeqCst);
        // A shim whose only container failed to be made holds nothing: it goes, as after a last delete.
        let c = made.inspect_err(|_| self.exit_when_idle(IDLE_EXIT))?;
        let pid = c.init.pid;
        self.lock().insert(req.id.clone(), c);
        self.watch(&req.id, "", pid);
        if let Some(oom) = &self.inner.oom {
            oom.watch(&req.id, pid);
        }
        self.inner.publisher.publish(Event::Create {
            container_id: req.id.clone(),
            bundle: req.bundle.clone(),
            rootfs: req.rootfs.iter().map(mount_of).collect(),
            stdin: req.stdin.clone(),
            stdout: req.stdout.clone(),
            stderr: req.stderr.clone(),
            terminal: req.terminal,
            pid,
        });
        Ok(api::CreateTaskResponse {
            pid,
            ..Default::default()
        })
    }

    fn start(&self, _: &TtrpcContext, req: api::StartRequest) -> Result<api::StartResponse> {
        let (id, exec_id) = (req.id.as_str(), req.exec_id.as_str());
        let (runtime, bundle, status, spec, io_paths, terminal) = self.with(id, |c| {
            let rt = c.runtime.clone();
            let bundle = c.bundle.clone();
            let p = proc_mut(c, id, exec_id)?;
            let paths = (
                p.io.stdin_path.clone(),
                p.io.stdout_path.clone(),
                p.io.stderr_path.clone(),
            );
            Ok((rt, bundle, p.status, p.spec.clone(), paths, p.terminal))
        })?;
        if status != Status::CREATED {
            return Err(error(
                Code::FAILED_PRECONDITION,
                format!(
                    "{} of container {id:?} is {}: only a created process starts",
                    what(exec_id),
                    status_name(status)
                ),
            ));
        }
        let pid = if exec_id.is_empty() {
            runtime
                .run(&["start", id], None, &bundle)
                .map_err(|e| error(Code::INTERNAL, e))?;
            self.with(id, |c| {
                // A process quick to exit may have been reaped already: its exit stands.
                if c.init.exit.is_none() {
                    c.init.status = Status::RUNNING;
                }
                Ok(c.init.pid)
            })?
        } else {
            let spec_file = bundle.join(format!(".exec-{exec_id}.json"));
            let pid_file = bundle.join(format!(".exec-{exec_id}.pid"));
            std::fs::write(&spec_file, &spec)
                .map_err(|e| error(Code::INTERNAL, format!("writing {}: {e}", spec_file.display())))?;
            let (s, p) = (spec_file.display().to_string(), pid_file.display().to_string());
            let io = run_with_stdio(
                &self.inner.reactor,
                &runtime,
                &["exec", "--process", &s, "--detach", "--pid-file", &p],
                id,
                (&io_paths.0, &io_paths.1, &io_paths.2),
                terminal,
                &bundle,
                |e| error(Code::INTERNAL, e),
            );
            let _ = std::fs::remove_file(&spec_file);
            let io = io?;
            let pid = read_pid(&pid_file)?;
            let _ = std::fs::remove_file(&pid_file);
            self.with(id, |c| {
                let p = proc_mut(c, id, exec_id)?;
                p.pid = pid;
                p.status = Status::RUNNING;
                p.io = io;
                Ok(())
            })?;
            self.watch(id, exec_id, pid);
            pid
        };
        self.inner.publisher.publish(if exec_id.is_empty() {
            Event::Start {
                container_id: id.into(),
                pid,
            }
        } else {
            Event::ExecStarted {
                container_id: id.into(),
                exec_id: exec_id.into(),
                pid,
            }
        });
        Ok(api::StartResponse {
            pid,
            ..Default::default()
        })
    }

    fn state(&self, _: &TtrpcContext, req: api::StateRequest) -> Result<api::StateResponse> {
        self.with(&req.id, |c| {
            let bundle = c.bundle.clone();
            let p = proc_mut(c, &req.id, &req.exec_id)?;
            Ok(Self::state_of(&req.id, &req.exec_id, &bundle, p))
        })
    }

    fn exec(&self, _: &TtrpcContext, req: api::ExecProcessRequest) -> Result<api::Empty> {
        if req.exec_id.is_empty() {
            return Err(error(Code::INVALID_ARGUMENT, "Exec: exec_id is empty"));
        }
        self.with(&req.id, |c| {
            if c.init.status != Status::RUNNING {
                return Err(error(
                    Code::FAILED_PRECONDITION,
                    format!(
                        "container {:?} is {}: exec needs a running container",
                        req.id,
                        status_name(c.init.status)
                    ),
                ));
            }
            if c.execs.contains_key(&req.exec_id) {
                return Err(error(
                    Code::ALREADY_EXISTS,
                    format!("exec {:?} already exists", req.exec_id),
                ));
            }
            let mut p = Proc::new(
                ProcessIo {
                    stdin_path: req.stdin.clone(),
                    stdout_path: req.stdout.clone(),
                    stderr_path: req.stderr.clone(),
                    ..Default::default()
                },
                req.terminal,
            );
            p.spec = req.spec.as_ref().map(|a| a.value.clone()).unwrap_or_default();
            c.execs.insert(req.exec_id.clone(), p);
            Ok(())
        })?;
        self.inner.publisher.publish(Event::ExecAdded {
            container_id: req.id.clone(),
            exec_id: req.exec_id.clone(),
        });
        Ok(api::Empty::new())
    }

    fn kill(&self, _: &TtrpcContext, req: api::KillRequest) -> Result<api::Empty> {
        let (runtime, bundle, pid, status) = self.with(&req.id, |c| {
            let (rt, b) = (c.runtime.clone(), c.bundle.clone());
            let p = proc_mut(c, &req.id, &req.exec_id)?;
            Ok((rt, b, p.pid, p.status))
        })?;
        if status == Status::STOPPED {
            return Err(error(
                Code::NOT_FOUND,
                format!("{} of {:?}: process already finished", what(&req.exec_id), req.id),
            ));
        }
        if req.exec_id.is_empty() {
            let sig = req.signal.to_string();
            let mut args = vec!["kill"];
            if req.all {
                args.push("--all");
            }
            args.extend([req.id.as_str(), sig.as_str()]);
            runtime
                .run(&args, None, &bundle)
                .map_err(|e| error(Code::INTERNAL, e))?;
        } else if pid != 0 {
            let sig = nix::sys::signal::Signal::try_from(req.signal as i32)
                .map_err(|e| error(Code::INVALID_ARGUMENT, format!("signal {}: {e}", req.signal)))?;
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), sig).map_err(|e| {
                error(
                    Code::INTERNAL,
                    format!("signalling exec {:?} (pid {pid}): {e}", req.exec_id),
                )
            })?;
        }
        Ok(api::Empty::new())
    }

    fn delete(&self, _: &TtrpcContext, req: api::DeleteRequest) -> Result<api::DeleteResponse> {
        let (id, exec_id) = (req.id.as_str(), req.exec_id.as_str());
        if !exec_id.is_empty() {
            return self.with(id, |c| {
                let p = proc_mut(c, id, exec_id)?;
                if matches!(p.status, Status::RUNNING | Status::PAUSED) {
                    return Err(error(
                        Code::FAILED_PRECONDITION,
                        format!("exec {exec_id:?} is running: kill it first"),
                    ));
                }
                let resp = delete_response(p);
                c.execs.remove(exec_id);
                Ok(resp)
            });
        }
        let (runtime, bundle, status, mounted) = self.with(id, |c| {
            Ok((
                c.runtime.clone(),
                c.bundle.clone(),
                c.init.status,
                c.rootfs_mounted,
            ))
        })?;
        if matches!(status, Status::RUNNING | Status::PAUSED) {
            return Err(error(
                Code::FAILED_PRECONDITION,
                format!(
                    "container {id:?} is {}: kill it before delete",
                    status_name(status)
                ),
            ));
        }
        runtime
            .run(&["delete", "--force", id], None, &bundle)
            .map_err(|e| error(Code::INTERNAL, e))?;
        if mounted {
            crate::mounts::unmount_all(&bundle.join("rootfs"));
        }
        let c = self.lock().remove(id);
        if let Some(oom) = &self.inner.oom {
            oom.unwatch(id);
        }
        let resp = c.as_ref().map(|c| delete_response(&c.init)).unwrap_or_default();
        let init_exit = c.as_ref().and_then(|c| c.init.exit);
        self.inner.publisher.publish(Event::Delete {
            container_id: id.into(),
            pid: resp.pid,
            exit_status: resp.exit_status,
            exited_at_ns: init_exit.map(|e| ns_since_epoch(e.at)),
        });
        // The pod's last container is gone: the shim goes too, unless a new container of the pod arrives
        // meanwhile (its `start` may have found this shim a moment ago). containerd also calls Shutdown.
        self.exit_when_idle(IDLE_EXIT);
        Ok(resp)
    }

    fn pids(&self, _: &TtrpcContext, req: api::PidsRequest) -> Result<api::PidsResponse> {
        let (runtime, bundle) = self.with(&req.id, |c| Ok((c.runtime.clone(), c.bundle.clone())))?;
        let out = runtime
            .run(&["ps", "--format", "json", &req.id], None, &bundle)
            .map_err(|e| error(Code::INTERNAL, e))?;
        let pids: Vec<u32> = serde_json::from_str(out.trim())
            .map_err(|e| error(Code::INTERNAL, format!("runtime ps output {out:?}: {e}")))?;
        Ok(api::PidsResponse {
            processes: pids
                .into_iter()
                .map(|pid| api::ProcessInfo {
                    pid,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    fn pause(&self, _: &TtrpcContext, req: api::PauseRequest) -> Result<api::Empty> {
        self.pause_resume(&req.id, true)
    }

    fn resume(&self, _: &TtrpcContext, req: api::ResumeRequest) -> Result<api::Empty> {
        self.pause_resume(&req.id, false)
    }

    fn close_io(&self, _: &TtrpcContext, req: api::CloseIORequest) -> Result<api::Empty> {
        self.with(&req.id, |c| {
            let p = proc_mut(c, &req.id, &req.exec_id)?;
            if req.stdin {
                p.io.stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
            }
            Ok(api::Empty::new())
        })
    }

    fn resize_pty(&self, _: &TtrpcContext, req: api::ResizePtyRequest) -> Result<api::Empty> {
        let console = self.with(&req.id, |c| {
            let p = proc_mut(c, &req.id, &req.exec_id)?;
            Ok(p.io.console.clone())
        })?;
        let Some(master) = console else {
            return Err(error(
                Code::FAILED_PRECONDITION,
                format!("{} of {:?} has no terminal", what(&req.exec_id), req.id),
            ));
        };
        crate::console::resize(&master, req.width, req.height).map_err(|e| error(Code::INTERNAL, e))?;
        Ok(api::Empty::new())
    }

    fn update(&self, _: &TtrpcContext, req: api::UpdateTaskRequest) -> Result<api::Empty> {
        let (runtime, bundle, logs) = self.with(&req.id, |c| {
            let mut logs: Vec<_> = c.init.io.log.iter().cloned().collect();
            logs.extend(c.execs.values().filter_map(|p| p.io.log.clone()));
            Ok((c.runtime.clone(), c.bundle.clone(), logs))
        })?;
        if req.annotations.contains_key(stdio::REOPEN_ANNOTATION) {
            for l in logs {
                l.reopen().map_err(|e| error(Code::INTERNAL, e))?;
            }
        }
        if let Some(res) = req.resources.as_ref() {
            let file = bundle.join(".update.json");
            std::fs::write(&file, &res.value)
                .map_err(|e| error(Code::INTERNAL, format!("writing {}: {e}", file.display())))?;
            let f = file.display().to_string();
            let r = runtime.run(&["update", "--resources", &f, &req.id], None, &bundle);
            let _ = std::fs::remove_file(&file);
            r.map_err(|e| error(Code::INTERNAL, e))?;
        }
        Ok(api::Empty::new())
    }

    fn wait(&self, _: &TtrpcContext, req: api::WaitRequest) -> Result<api::WaitResponse> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.wait_then(&req, move |r| {
            let _ = tx.send(r);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(error(
                Code::NOT_FOUND,
                format!(
                    "{} of {:?} was deleted before it exited",
                    what(&req.exec_id),
                    req.id
                ),
            ))
        })
    }

    fn stats(&self, _: &TtrpcContext, req: api::StatsRequest) -> Result<api::StatsResponse> {
        let (runtime, bundle) = self.with(&req.id, |c| Ok((c.runtime.clone(), c.bundle.clone())))?;
        let out = runtime
            .run(&["events", "--stats", &req.id], None, &bundle)
            .map_err(|e| error(Code::INTERNAL, e))?;
        let v: serde_json::Value = serde_json::from_str(out.trim())
            .map_err(|e| error(Code::INTERNAL, format!("runtime stats output: {e}")))?;
        Ok(api::StatsResponse {
            stats: Some(to_any(&crate::stats::metrics(&v["data"]))).into(),
            ..Default::default()
        })
    }

    fn connect(&self, _: &TtrpcContext, req: api::ConnectRequest) -> Result<api::ConnectResponse> {
        let task_pid = self.lock().get(&req.id).map(|c| c.init.pid).unwrap_or(0);
        Ok(api::ConnectResponse {
            shim_pid: std::process::id(),
            task_pid,
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        })
    }

    fn shutdown(&self, _: &TtrpcContext, _: api::ShutdownRequest) -> Result<api::Empty> {
        // Containers of the pod still here keep the shim alive.
        let _ = self.finish_if_empty();
        Ok(api::Empty::new())
    }
}

fn what(exec_id: &str) -> String {
    if exec_id.is_empty() {
        "the init process".into()
    } else {
        format!("exec {exec_id:?}")
    }
}

fn delete_response(p: &Proc) -> api::DeleteResponse {
    api::DeleteResponse {
        pid: p.pid,
        exit_status: p.exit.map(|e| e.status).unwrap_or(0),
        exited_at: p.exit.map(|e| timestamp(e.at)).into(),
        ..Default::default()
    }
}

fn mount_of(m: &api::Mount) -> crate::mounts::Mount {
    crate::mounts::Mount {
        kind: m.type_.clone(),
        source: m.source.clone(),
        target: m.target.clone(),
        options: m.options.clone(),
    }
}
