//! The Task service (`containerd.task.v2.Task`): the containers of one pod, each run by the configured OCI
//! runtime, with their exec processes, exits, stdio and events.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use containerd_shim_protos as protos;
use protos::api::{self, Status};
use protos::events::task as ev;
use protos::protobuf::{Message, MessageField};
use protos::shim::shim_ttrpc::Task;
use protos::topics;
use protos::ttrpc::{self, Code, TtrpcContext};

use crate::console::ConsoleSocket;
use crate::events::{Publisher, timestamp, to_any};
use crate::oom::OomWatcher;
use crate::reactor::Reactor;
use crate::reaper::{Exit, Reaper};
use crate::runtime::Runtime;
use crate::stdio::{self, ProcessIo};

/// The runtime options' type, as containerd's runc shims receive it.
const RUNC_OPTIONS: &str = "containerd.runc.v1.Options";
/// Where the shim notes, in each bundle, the runtime that runs the container (for `delete` after a crash).
pub const RUNTIME_FILE: &str = "crius-runtime.json";
/// How long a shim without containers waits for a new one before it exits.
pub const IDLE_EXIT: std::time::Duration = std::time::Duration::from_secs(2);
/// How long a new shim waits for its first container (a caller that died between `start` and Create).
pub const FIRST_CREATE: std::time::Duration = std::time::Duration::from_secs(30);
/// Where the shim records, in each bundle, how the container's init ended.
pub const EXIT_FILE: &str = "crius-exit.json";

type Result<T> = ttrpc::Result<T>;

/// A ttrpc error with `code` and a message naming the thing.
pub fn error(code: Code, msg: impl Into<String>) -> ttrpc::Error {
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
    publisher: Publisher,
    oom: Option<OomWatcher>,
    containers: Mutex<HashMap<String, Container>>,
    /// The shim's loop: stdio is pumped there, and stopping it ends the shim.
    reactor: Arc<Reactor>,
    /// Creates in progress (their container is not in `containers` yet): the shim is not idle.
    creating: AtomicUsize,
}

/// The service; cheap to clone.
#[derive(Clone)]
pub struct Service {
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
    pub fn new(namespace: &str, reaper: Reaper, publisher: Publisher, reactor: Arc<Reactor>) -> Service {
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
    pub fn finish_if_empty(&self) -> bool {
        if !self.lock().is_empty() || self.inner.creating.load(Ordering::SeqCst) > 0 {
            return false;
        }
        self.inner.reactor.stop();
        true
    }

    /// Exits after `grace` if the shim then holds no container.
    pub fn exit_when_idle(&self, grace: std::time::Duration) {
        if !self.lock().is_empty() {
            return;
        }
        let me = self.clone();
        let _ = self.inner.reactor.after(grace, move |_| {
            let _ = me.finish_if_empty();
        });
    }

    /// The runtime for a new container: `containerd.runc.v1.Options.binary_name`/`root` when given, else
    /// `CRIUS_SHIM_RUNTIME` from the environment, else crius-runc.
    fn runtime_for(&self, options: &MessageField<protobuf_any::Any>) -> Result<Runtime> {
        let mut binary = std::env::var_os("CRIUS_SHIM_RUNTIME")
            .map(PathBuf::from)
            .unwrap_or_else(crate::runtime::default_binary);
        let mut root = PathBuf::new();
        if let Some(any) = options.as_ref()
            && any.type_url.ends_with(RUNC_OPTIONS)
        {
            let o = protos::shim::oci::Options::parse_from_bytes(&any.value)
                .map_err(|e| error(Code::INVALID_ARGUMENT, format!("runtime options: {e}")))?;
            if !o.binary_name.is_empty() {
                binary = PathBuf::from(o.binary_name);
            }
            if !o.root.is_empty() {
                root = PathBuf::from(o.root);
            }
        }
        if root.as_os_str().is_empty() {
            let name = binary
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            root = Path::new("/run/crius/shim")
                .join(name)
                .join(&self.inner.namespace);
        }
        std::fs::create_dir_all(&root)
            .map_err(|e| error(Code::INTERNAL, format!("creating {}: {e}", root.display())))?;
        Ok(Runtime::new(binary, root, self.inner.reaper.clone()))
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
            me.inner.publisher.publish(
                topics::TASK_EXIT_EVENT_TOPIC,
                &ev::TaskExit {
                    container_id: id.clone(),
                    id: if exec_id.is_empty() {
                        id.clone()
                    } else {
                        exec_id.clone()
                    },
                    pid,
                    exit_status: exit.status,
                    exited_at: Some(timestamp(exit.at)).into(),
                    ..Default::default()
                },
            );
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

    fn create_container(&self, req: &api::CreateTaskRequest) -> Result<Container> {
        let bundle = PathBuf::from(&req.bundle);
        let runtime = self.runtime_for(&req.options)?;
        let rootfs = bundle.join("rootfs");
        if !req.rootfs.is_empty() {
            std::fs::create_dir_all(&rootfs)
                .map_err(|e| error(Code::INTERNAL, format!("creating {}: {e}", rootfs.display())))?;
            crate::mounts::mount_all(&req.rootfs, &rootfs).map_err(|e| {
                crate::mounts::unmount_all(&rootfs);
                error(Code::INTERNAL, e)
            })?;
        }
        let fail = |e: ttrpc::Error| {
            if !req.rootfs.is_empty() {
                crate::mounts::unmount_all(&rootfs);
            }
            e
        };
        let pid_file = bundle.join("init.pid");
        let _ = std::fs::remove_file(&pid_file);
        let (b, p) = (bundle.display().to_string(), pid_file.display().to_string());
        let undo = |e: String| {
            // The runtime may have left a half-made container behind.
            let _ = runtime.run(&["delete", "--force", &req.id], None, &bundle);
            error(Code::INTERNAL, e)
        };
        let io = run_with_stdio(
            &self.inner.reactor,
            &runtime,
            &["create", "--bundle", &b, "--pid-file", &p],
            &req.id,
            (&req.stdin, &req.stdout, &req.stderr),
            req.terminal,
            &bundle,
            undo,
        )
        .map_err(fail)?;
        let pid = read_pid(&pid_file).map_err(fail)?;
        let note = serde_json::json!({"binary": runtime.binary, "root": runtime.root});
        let _ = std::fs::write(bundle.join(RUNTIME_FILE), note.to_string());
        let mut init = Proc::new(io, req.terminal);
        init.pid = pid;
        Ok(Container {
            bundle,
            runtime,
            init,
            execs: HashMap::new(),
            rootfs_mounted: !req.rootfs.is_empty(),
        })
    }
}

/// The `Any` type from the protobuf crate the protos use.
use protos::protobuf::well_known_types::any as protobuf_any;

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
        self.inner.publisher.publish(
            topics::TASK_CREATE_EVENT_TOPIC,
            &ev::TaskCreate {
                container_id: req.id.clone(),
                bundle: req.bundle.clone(),
                rootfs: req.rootfs.clone(),
                io: Some(ev::TaskIO {
                    stdin: req.stdin.clone(),
                    stdout: req.stdout.clone(),
                    stderr: req.stderr.clone(),
                    terminal: req.terminal,
                    ..Default::default()
                })
                .into(),
                pid,
                ..Default::default()
            },
        );
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
        if exec_id.is_empty() {
            self.inner.publisher.publish(
                topics::TASK_START_EVENT_TOPIC,
                &ev::TaskStart {
                    container_id: id.into(),
                    pid,
                    ..Default::default()
                },
            );
        } else {
            self.inner.publisher.publish(
                topics::TASK_EXEC_STARTED_EVENT_TOPIC,
                &ev::TaskExecStarted {
                    container_id: id.into(),
                    exec_id: exec_id.into(),
                    pid,
                    ..Default::default()
                },
            );
        }
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
        self.inner.publisher.publish(
            topics::TASK_EXEC_ADDED_EVENT_TOPIC,
            &ev::TaskExecAdded {
                container_id: req.id.clone(),
                exec_id: req.exec_id.clone(),
                ..Default::default()
            },
        );
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
        self.inner.publisher.publish(
            topics::TASK_DELETE_EVENT_TOPIC,
            &ev::TaskDelete {
                container_id: id.into(),
                id: id.into(),
                pid: resp.pid,
                exit_status: resp.exit_status,
                exited_at: resp.exited_at.clone(),
                ..Default::default()
            },
        );
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

/// Runs `<args> [--console-socket S] <id>` (a create or an exec) with the process's stdio: pipes copied to
/// the given paths, or a terminal whose master the runtime sends back over a console socket. Returns what
/// the shim keeps of the stdio; a failure of the runtime, or of taking its terminal, goes through
/// `runtime_failed`.
#[allow(clippy::too_many_arguments)]
fn run_with_stdio(
    reactor: &Reactor,
    runtime: &Runtime,
    args: &[&str],
    id: &str,
    (stdin, stdout, stderr): (&str, &str, &str),
    terminal: bool,
    bundle: &Path,
    runtime_failed: impl Fn(String) -> ttrpc::Error,
) -> Result<ProcessIo> {
    let console = if terminal {
        Some(ConsoleSocket::new().map_err(|e| error(Code::INTERNAL, e))?)
    } else {
        None
    };
    let (child, mut io) = if terminal {
        (Default::default(), stdio::terminal_paths(stdin, stdout, stderr))
    } else {
        stdio::setup(reactor, stdin, stdout, stderr).map_err(|e| error(Code::INVALID_ARGUMENT, e))?
    };
    let console_path = console.as_ref().map(|c| c.path()).unwrap_or_default();
    let mut args = args.to_vec();
    if console.is_some() {
        args.extend(["--console-socket", &console_path]);
    }
    args.push(id);
    runtime.run(&args, Some(child), bundle).map_err(&runtime_failed)?;
    if let Some(console) = &console {
        let master = console.receive().map_err(&runtime_failed)?;
        stdio::attach_terminal(reactor, &mut io, master).map_err(&runtime_failed)?;
    }
    Ok(io)
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

impl Service {
    /// Answers a Wait through `reply`: now if the process has exited (or is unknown), else when it exits.
    /// Nothing blocks meanwhile; `reply` is dropped unanswered if the process is deleted first.
    pub fn wait_then(
        &self,
        req: &api::WaitRequest,
        reply: impl FnOnce(Result<api::WaitResponse>) + Send + 'static,
    ) {
        let answer = |e: Exit| api::WaitResponse {
            exit_status: e.status,
            exited_at: Some(timestamp(e.at)).into(),
            ..Default::default()
        };
        let mut all = self.lock();
        let found = all
            .get_mut(&req.id)
            .ok_or_else(|| error(Code::NOT_FOUND, format!("container {:?} not found", req.id)))
            .and_then(|c| proc_mut(c, &req.id, &req.exec_id));
        match found {
            Ok(p) if p.exit.is_none() => p.waiters.push(Box::new(move |e| reply(Ok(answer(e))))),
            Ok(p) => {
                let e = p.exit.expect("exited");
                drop(all);
                reply(Ok(answer(e)));
            }
            Err(e) => {
                drop(all);
                reply(Err(e));
            }
        }
    }

    fn pause_resume(&self, id: &str, pause: bool) -> Result<api::Empty> {
        let (runtime, bundle, status) =
            self.with(id, |c| Ok((c.runtime.clone(), c.bundle.clone(), c.init.status)))?;
        let (want, verb) = if pause {
            (Status::RUNNING, "pause")
        } else {
            (Status::PAUSED, "resume")
        };
        if status != want {
            return Err(error(
                Code::FAILED_PRECONDITION,
                format!("container {id:?} is {}: cannot {verb}", status_name(status)),
            ));
        }
        runtime
            .run(&[verb, id], None, &bundle)
            .map_err(|e| error(Code::INTERNAL, e))?;
        self.with(id, |c| {
            if c.init.status == want {
                c.init.status = if pause { Status::PAUSED } else { Status::RUNNING };
            }
            Ok(())
        })?;
        if pause {
            self.inner.publisher.publish(
                topics::TASK_PAUSED_EVENT_TOPIC,
                &ev::TaskPaused {
                    container_id: id.into(),
                    ..Default::default()
                },
            );
        } else {
            self.inner.publisher.publish(
                topics::TASK_RESUMED_EVENT_TOPIC,
                &ev::TaskResumed {
                    container_id: id.into(),
                    ..Default::default()
                },
            );
        }
        Ok(api::Empty::new())
    }
}
