//! CRI containers, run by the pod's shim (`containerd-shim-crius-v2`, one per pod, found next to criusd or
//! configured): CreateContainer mounts the image's snapshot, writes the bundle (`<state>/containers/<id>/`,
//! [`crate::spec`]) and creates the task with its output in the CRI log format at kubelet's log path;
//! Start starts it; Stop sends SIGTERM (or the image's StopSignal), waits the grace period, then SIGKILL, and
//! returns once the process is gone; Remove deletes the task, the snapshot and the bundle. A record per
//! container (`<root>/containers/<id>/`) keeps what the CRI reports; its state comes from the shim, and from
//! the exit the shim's events reported if the shim is gone. Everything here blocks: the gRPC layer runs it
//! off the async workers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use containerd_shim_protos::api as task;
use containerd_shim_protos::ttrpc;
use crius_image::Store;
use crius_shim::client::{self, TaskClient};
use k8s_cri::v1 as cri;
use prost::Message;
use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::records::{by_id_or_prefix, now_ns, ns_of, write_atomic};
use crate::sandbox::Sandbox;

mod exec;
mod stats;

pub use stats::list_stats;

/// The containerd namespace criusd's shims run in.
pub const NAMESPACE: &str = "k8s.io";

/// What criusd records of a container.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    /// The container id (64 hex digits).
    pub id: String,
    /// Its pod's sandbox id.
    pub sandbox_id: String,
    /// The image id (config digest) it runs.
    pub image_id: String,
    /// Creation time, ns since the epoch.
    pub created_at: i64,
    /// Start time (0: not started).
    pub started_at: i64,
    /// When it exited (0: not known to have).
    pub finished_at: i64,
    /// Its exit code, once finished.
    pub exit_code: i32,
    /// The log file (absolute; empty: none).
    pub log_path: String,
    /// The kernel OOM-killed a process of it (the shim said so).
    #[serde(default)]
    pub oom_killed: bool,
}

/// A container: its record and the ContainerConfig it was created with.
#[derive(Debug, Clone)]
pub struct Container {
    /// The record.
    pub record: Record,
    /// kubelet's config.
    pub config: cri::ContainerConfig,
}

/// Where things are and how shims are reached.
pub struct Setup {
    /// `<root>/containers`: the records.
    pub records: PathBuf,
    /// `<state>/containers`: the bundles.
    pub bundles: PathBuf,
    /// The shim binary.
    pub shim: PathBuf,
    /// criusd's socket, the shims' owner address.
    pub owner: String,
    /// Where shims send their events ([`crate::events`]).
    pub events: PathBuf,
}

/// The containers of one criusd.
pub struct Containers {
    setup: Setup,
    /// Changes of containers' lives, for GetContainerEvents.
    changes: tokio::sync::broadcast::Sender<Change>,
    all: Mutex<HashMap<String, Container>>,
    /// Connections to pod shims, by sandbox id.
    shims: Mutex<HashMap<String, TaskClient>>,
    /// The last CPU sample of each container (time, cumulative usage; both ns), for usage_nano_cores.
    cpu_samples: Mutex<HashMap<String, (i64, u64)>>,
}

/// A ttrpc error as a gRPC status.
fn shim_status(what: &str, e: ttrpc::Error) -> Status {
    match e {
        ttrpc::Error::RpcStatus(s) => {
            let msg = format!("{what}: {}", s.message());
            match s.code() {
                ttrpc::Code::NOT_FOUND => Status::not_found(msg),
                ttrpc::Code::ALREADY_EXISTS => Status::already_exists(msg),
                ttrpc::Code::FAILED_PRECONDITION => Status::failed_precondition(msg),
                ttrpc::Code::INVALID_ARGUMENT => Status::invalid_argument(msg),
                _ => Status::internal(msg),
            }
        }
        other => Status::unavailable(format!("{what}: the pod's shim: {other}")),
    }
}

/// The signal that stops a container of image `image_id`: the image's StopSignal (`SIGQUIT`, `QUIT`, `3`),
/// else SIGTERM.
fn stop_signal(store: &Store, image_id: &str) -> u32 {
    let config: serde_json::Value = crius_image::Digest::parse(image_id)
        .ok()
        .and_then(|d| store.read_blob(&d).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let name = config["config"]["StopSignal"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_uppercase();
    if let Ok(n) = name.parse::<u32>() {
        return n;
    }
    let full = if name.starts_with("SIG") {
        name
    } else {
        format!("SIG{name}")
    };
    full.parse::<nix::sys::signal::Signal>()
        .map(|s| s as u32)
        .unwrap_or(libc::SIGTERM as u32)
}

/// The container's state as the shim reports it.
pub struct Observed {
    /// CRI state.
    pub state: cri::ContainerState,
    /// Exit code, when exited.
    pub exit_code: i32,
    /// Exit time, when exited.
    pub finished_at: i64,
}

/// A change in a container's life: created, started, stopped (its process exited), deleted.
#[derive(Debug, Clone)]
pub struct Change {
    /// The container.
    pub container_id: String,
    /// Its sandbox.
    pub sandbox_id: String,
    /// What happened.
    pub kind: cri::ContainerEventType,
}

impl Containers {
    /// The containers recorded under `setup.records`.
    pub fn open(setup: Setup) -> std::io::Result<Containers> {
        std::fs::create_dir_all(&setup.records)?;
        std::fs::create_dir_all(&setup.bundles)?;
        let mut all = HashMap::new();
        for e in std::fs::read_dir(&setup.records)?.flatten() {
            let read = || -> Result<Container, String> {
                let rec = std::fs::read(e.path().join("container.json")).map_err(|e| e.to_string())?;
                let record: Record = serde_json::from_slice(&rec).map_err(|e| e.to_string())?;
                let pb = std::fs::read(e.path().join("config.pb")).map_err(|e| e.to_string())?;
                let config = cri::ContainerConfig::decode(&pb[..]).map_err(|e| e.to_string())?;
                Ok(Container { record, config })
            };
            match read() {
                Ok(c) => {
                    all.insert(c.record.id.clone(), c);
                }
                Err(err) => tracing::warn!(path = %e.path().display(), "skipping a container record: {err}"),
            }
        }
        Ok(Containers {
            setup,
            changes: tokio::sync::broadcast::channel(1024).0,
            all: Mutex::new(all),
            shims: Mutex::new(HashMap::new()),
            cpu_samples: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Container>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `c`'s files; the caller holds the map's lock, so writers never race.
    fn write(&self, c: &Container) -> Result<(), Status> {
        let dir = self.setup.records.join(&c.record.id);
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            write_atomic(&dir.join("config.pb"), &c.config.encode_to_vec())?;
            let rec = serde_json::to_vec_pretty(&c.record).map_err(std::io::Error::other)?;
            write_atomic(&dir.join("container.json"), &rec)
        };
        write().map_err(|e| Status::internal(format!("recording container {}: {e}", c.record.id)))
    }

    /// Records a new container.
    fn save(&self, c: &Container) -> Result<(), Status> {
        let mut all = self.lock();
        self.write(c)?;
        all.insert(c.record.id.clone(), c.clone());
        Ok(())
    }

    /// Changes container `id` with `f` and records it; false if it is gone (removed meanwhile).
    fn modify(&self, id: &str, f: impl FnOnce(&mut Container)) -> Result<bool, Status> {
        let mut all = self.lock();
        let Some(c) = all.get_mut(id) else {
            return Ok(false);
        };
        f(c);
        self.write(c)?;
        Ok(true)
    }

    /// The container whose id is `id`, or the only one whose id starts with it.
    pub fn get(&self, id: &str) -> Option<Container> {
        by_id_or_prefix(&self.lock(), id).cloned()
    }

    fn get_or_not_found(&self, id: &str) -> Result<Container, Status> {
        self.get(id)
            .ok_or_else(|| Status::not_found(format!("container {id:?} not found")))
    }

    /// Every container.
    pub fn list(&self) -> Vec<Container> {
        self.lock().values().cloned().collect()
    }

    fn bundle(&self, id: &str) -> PathBuf {
        self.setup.bundles.join(id)
    }

    /// A connection to the shim of sandbox `sandbox_id`; `start_for` (a container id and bundle) starts the
    /// shim if it is not running.
    fn shim(&self, sandbox_id: &str, start_for: Option<(&str, &Path)>) -> Result<TaskClient, Status> {
        if let Some(c) = self
            .shims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(sandbox_id)
        {
            return Ok(c.clone());
        }
        let address = match start_for {
            Some((id, bundle)) => {
                let events = self.setup.events.display().to_string();
                client::start_shim(
                    &self.setup.shim,
                    NAMESPACE,
                    &self.setup.owner,
                    &events,
                    id,
                    bundle,
                )
                .map_err(|e| Status::internal(format!("starting the pod's shim: {e}")))?
            }
            None => client::socket_address(&self.setup.owner, NAMESPACE, sandbox_id),
        };
        let c = client::connect(&address).map_err(Status::unavailable)?;
        self.shims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(sandbox_id.to_string(), c.clone());
        Ok(c)
    }

    fn forget_shim(&self, sandbox_id: &str) {
        self.shims
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(sandbox_id);
    }

    /// Calls the pod's shim, reconnecting once if the connection broke (a shim restarted, criusd restarted).
    fn call<T>(
        &self,
        sandbox_id: &str,
        f: impl Fn(&TaskClient) -> Result<T, ttrpc::Error>,
    ) -> Result<T, ttrpc::Error> {
        let first = self
            .shim(sandbox_id, None)
            .map_err(|e| ttrpc::Error::Others(e.message().to_string()))
            .and_then(|c| f(&c));
        match first {
            Err(ttrpc::Error::RpcStatus(s)) => Err(ttrpc::Error::RpcStatus(s)),
            Err(_) => {
                self.forget_shim(sandbox_id);
                let c = self
                    .shim(sandbox_id, None)
                    .map_err(|e| ttrpc::Error::Others(e.message().to_string()))?;
                f(&c)
            }
            ok => ok,
        }
    }

    /// CreateContainer in `sandbox` (READY) from `image` (found in `store`); returns the new id.
    pub fn create(
        &self,
        sandbox: &Sandbox,
        sandbox_files: &Path,
        config: cri::ContainerConfig,
        store: &Store,
    ) -> Result<String, Status> {
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| Status::invalid_argument("CreateContainer: config.metadata is missing"))?;
        if meta.name.is_empty() {
            return Err(Status::invalid_argument(
                "CreateContainer: metadata.name is empty",
            ));
        }
        if !sandbox.record.ready {
            return Err(Status::failed_precondition(format!(
                "CreateContainer: sandbox {} is not ready",
                sandbox.record.id
            )));
        }
        let taken = self
            .lock()
            .values()
            .find(|c| {
                c.record.sandbox_id == sandbox.record.id
                    && c.config
                        .metadata
                        .as_ref()
                        .is_some_and(|m| m.name == meta.name && m.attempt == meta.attempt)
            })
            .map(|c| c.record.id.clone());
        if let Some(other) = taken {
            return Err(Status::already_exists(format!(
                "CreateContainer: {} (attempt {}) already exists in sandbox {} as {other}",
                meta.name, meta.attempt, sandbox.record.id
            )));
        }
        let image_ref = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        let image = store.find(&image_ref).map_err(|e| match e {
            crius_image::Error::NotFound(_) => Status::not_found(format!(
                "CreateContainer: image {image_ref:?} not found: pull it first"
            )),
            other => crate::status(other),
        })?;
        let image_config: serde_json::Value = store
            .read_blob(&image.id)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let id = crate::pod::random_id()?;
        let bundle = self.bundle(&id);
        let undo = |snapshot: bool| {
            if snapshot {
                let _ = store.remove_snapshot(&id);
            }
            let _ = std::fs::remove_dir_all(&bundle);
        };
        let rootfs = store.prepare_snapshot(&id, &image).map_err(crate::status)?;
        let log_path = match (&sandbox.config.log_directory, &config.log_path) {
            (d, l) if !d.is_empty() && !l.is_empty() => Path::new(d).join(l).display().to_string(),
            _ => String::new(),
        };
        let made = (|| -> Result<(), Status> {
            let spec = crate::spec::build(&crate::spec::Input {
                id: &id,
                config: &config,
                sandbox,
                sandbox_files,
                image_config: &image_config,
                rootfs: &rootfs,
            })?;
            std::fs::create_dir_all(&bundle)
                .map_err(|e| Status::internal(format!("creating {}: {e}", bundle.display())))?;
            std::fs::write(bundle.join("config.json"), spec.to_string())
                .map_err(|e| Status::internal(format!("writing {}/config.json: {e}", bundle.display())))?;
            if let Some(dir) = Path::new(&log_path).parent().filter(|_| !log_path.is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Status::internal(format!("creating log dir {}: {e}", dir.display())))?;
            }
            let shim = self.shim(&sandbox.record.id, Some((&id, &bundle)))?;
            let req = task::CreateTaskRequest {
                id: id.clone(),
                bundle: bundle.display().to_string(),
                terminal: config.tty,
                stdout: if log_path.is_empty() {
                    String::new()
                } else {
                    format!("{}{log_path}", client::CRI_LOG_SCHEME)
                },
                ..Default::default()
            };
            let call = |c: &TaskClient| c.create(client::ctx(60), &req);
            call(&shim)
                .or_else(|e| match e {
                    ttrpc::Error::RpcStatus(s) => Err(ttrpc::Error::RpcStatus(s)),
                    _ => {
                        // A shim of this pod that went away: start another and try once more.
                        self.forget_shim(&sandbox.record.id);
                        let shim = self
                            .shim(&sandbox.record.id, Some((&id, &bundle)))
                            .map_err(|e| ttrpc::Error::Others(e.message().to_string()))?;
                        call(&shim)
                    }
                })
                .map_err(|e| shim_status(&format!("CreateContainer {id}"), e))?;
            Ok(())
        })();
        if let Err(e) = made {
            undo(true);
            return Err(e);
        }
        let c = Container {
            record: Record {
                id: id.clone(),
                sandbox_id: sandbox.record.id.clone(),
                image_id: image.id.to_string(),
                created_at: now_ns(),
                log_path,
                ..Default::default()
            },
            config,
        };
        if let Err(e) = self.save(&c) {
            let _ = self.delete_task(&c);
            undo(true);
            return Err(e);
        }
        tracing::info!(container = %id, sandbox = %sandbox.record.id, name = %meta.name, "container created");
        self.emit(&c, cri::ContainerEventType::ContainerCreatedEvent);
        Ok(id)
    }

    /// StartContainer.
    pub fn start(&self, id: &str) -> Result<(), Status> {
        let c = self.get_or_not_found(id)?;
        let req = task::StartRequest {
            id: c.record.id.clone(),
            ..Default::default()
        };
        // Taken before: a process quick to exit may be gone before Start returns.
        let at = now_ns();
        self.call(&c.record.sandbox_id, |s| s.start(client::ctx(60), &req))
            .map_err(|e| shim_status(&format!("StartContainer {}", c.record.id), e))?;
        self.modify(&c.record.id, |c| c.record.started_at = at)?;
        tracing::info!(container = %c.record.id, "container started");
        self.emit(&c, cri::ContainerEventType::ContainerStartedEvent);
        Ok(())
    }

    /// The container's state now: from its shim, else from the exit its events brought.
    pub fn observe(&self, c: &Container) -> Observed {
        let req = task::StateRequest {
            id: c.record.id.clone(),
            ..Default::default()
        };
        match self.call(&c.record.sandbox_id, |s| s.state(client::ctx(10), &req)) {
            Ok(st) => {
                let state = match st.status.enum_value_or_default() {
                    task::Status::CREATED => cri::ContainerState::ContainerCreated,
                    task::Status::RUNNING | task::Status::PAUSED | task::Status::PAUSING => {
                        cri::ContainerState::ContainerRunning
                    }
                    task::Status::STOPPED => cri::ContainerState::ContainerExited,
                    task::Status::UNKNOWN => cri::ContainerState::ContainerUnknown,
                };
                let finished_at = st.exited_at.as_ref().map(ns_of).unwrap_or(0);
                Observed {
                    state,
                    exit_code: st.exit_status as i32,
                    finished_at,
                }
            }
            // The shim is gone: the exit its events reported (recorded by `mark_exit`), else unknown.
            Err(_) if c.record.finished_at != 0 => Observed {
                state: cri::ContainerState::ContainerExited,
                exit_code: c.record.exit_code,
                finished_at: c.record.finished_at,
            },
            Err(_) => Observed {
                state: cri::ContainerState::ContainerUnknown,
                exit_code: 0,
                finished_at: 0,
            },
        }
    }

    fn kill(&self, c: &Container, signal: u32) -> Result<(), Status> {
        let req = task::KillRequest {
            id: c.record.id.clone(),
            signal,
            all: signal == 9,
            ..Default::default()
        };
        match self.call(&c.record.sandbox_id, |s| s.kill(client::ctx(10), &req)) {
            // Already gone: what Stop wanted.
            Err(ttrpc::Error::RpcStatus(s)) if s.code() == ttrpc::Code::NOT_FOUND => Ok(()),
            r => r
                .map(drop)
                .map_err(|e| shim_status(&format!("signalling container {}", c.record.id), e)),
        }
    }

    /// Waits at most `secs` for the container's exit; true once it exited.
    fn wait(&self, c: &Container, secs: u64) -> bool {
        let req = task::WaitRequest {
            id: c.record.id.clone(),
            ..Default::default()
        };
        self.call(&c.record.sandbox_id, |s| s.wait(client::ctx(secs.max(1)), &req))
            .is_ok()
    }

    /// StopContainer: SIGTERM (or the image's StopSignal), `timeout` seconds, then SIGKILL; returns once the
    /// process is gone. Stopping a container that is not running, or unknown, is fine.
    pub fn stop(&self, id: &str, timeout: i64, store: &Store) -> Result<(), Status> {
        // Stopping what does not exist is done (kubelet and critest count on it).
        let Some(c) = self.get(id) else { return Ok(()) };
        if self.observe(&c).state != cri::ContainerState::ContainerRunning {
            return Ok(());
        }
        if timeout > 0 {
            self.kill(&c, stop_signal(store, &c.record.image_id))?;
            if self.wait(&c, timeout as u64) {
                return self.finished(c);
            }
        }
        self.kill(&c, 9)?;
        if !self.wait(&c, 60) {
            return Err(Status::deadline_exceeded(format!(
                "StopContainer {}: still running 60 s after SIGKILL",
                c.record.id
            )));
        }
        self.finished(c)
    }

    fn finished(&self, c: Container) -> Result<(), Status> {
        let o = self.observe(&c);
        tracing::info!(container = %c.record.id, exit_code = o.exit_code, "container stopped");
        self.modify(&c.record.id, |c| {
            c.record.exit_code = o.exit_code;
            c.record.finished_at = o.finished_at;
        })
        .map(drop)
    }

    fn delete_task(&self, c: &Container) -> Result<(), Status> {
        let req = task::DeleteRequest {
            id: c.record.id.clone(),
            ..Default::default()
        };
        match self.call(&c.record.sandbox_id, |s| s.delete(client::ctx(60), &req)) {
            Ok(_) => Ok(()),
            Err(ttrpc::Error::RpcStatus(s)) if s.code() == ttrpc::Code::NOT_FOUND => Ok(()),
            Err(ttrpc::Error::RpcStatus(s)) => Err(shim_status(
                &format!("removing container {}", c.record.id),
                ttrpc::Error::RpcStatus(s),
            )),
            // No shim: clean up as containerd does after a shim died; its last exit, if no event brought it.
            Err(_) => client::delete_shim(
                &self.setup.shim,
                NAMESPACE,
                &self.setup.owner,
                &c.record.id,
                &self.bundle(&c.record.id),
            )
            .map(|exit| {
                if c.record.finished_at == 0 {
                    self.mark_exit(&c.record.id, exit.exit_status as i32, exit.exited_at_ns);
                }
            })
            .map_err(Status::internal),
        }
    }

    /// RemoveContainer: killed if running, its task deleted, its snapshot, bundle and record removed.
    /// Idempotent; an unknown id is fine.
    pub fn remove(&self, id: &str, store: &Store) -> Result<(), Status> {
        let Some(c) = self.get(id) else { return Ok(()) };
        if self.observe(&c).state == cri::ContainerState::ContainerRunning {
            self.stop(&c.record.id, 0, store)?;
        }
        self.delete_task(&c)?;
        store.remove_snapshot(&c.record.id).map_err(crate::status)?;
        let _ = std::fs::remove_dir_all(self.bundle(&c.record.id));
        let mut all = self.lock();
        all.remove(&c.record.id);
        let _ = std::fs::remove_dir_all(self.setup.records.join(&c.record.id));
        drop(all);
        tracing::info!(container = %c.record.id, "container removed");
        self.emit(&c, cri::ContainerEventType::ContainerDeletedEvent);
        Ok(())
    }

    /// UpdateContainerResources: `new` merged over the container's resources ([`crate::spec::merge_resources`]),
    /// applied live by the runtime (same process; a memory limit below current usage is refused), and kept
    /// for ContainerStatus.
    pub fn update(&self, id: &str, new: &cri::LinuxContainerResources) -> Result<(), Status> {
        let c = self.get_or_not_found(id)?;
        let old = c
            .config
            .linux
            .as_ref()
            .and_then(|l| l.resources.clone())
            .unwrap_or_default();
        let merged = crate::spec::merge_resources(&old, new);
        let mut oci = crate::spec::resources(Some(&merged));
        if let Some(o) = oci.as_object_mut() {
            o.remove("devices");
        }
        let req = task::UpdateTaskRequest {
            id: c.record.id.clone(),
            resources: Some(containerd_shim_protos::protobuf::well_known_types::any::Any {
                type_url: "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources".into(),
                value: oci.to_string().into_bytes(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        };
        self.call(&c.record.sandbox_id, |s| s.update(client::ctx(30), &req))
            .map_err(|e| shim_status(&format!("UpdateContainerResources {}", c.record.id), e))?;
        self.modify(&c.record.id, |c| {
            c.config.linux.get_or_insert_with(Default::default).resources = Some(merged);
        })?;
        tracing::info!(container = %c.record.id, "container resources updated");
        Ok(())
    }

    /// ReopenContainerLog: the shim reopens the log file at its path (kubelet renamed the old one).
    pub fn reopen_log(&self, id: &str) -> Result<(), Status> {
        let c = self.get_or_not_found(id)?;
        if self.observe(&c).state != cri::ContainerState::ContainerRunning {
            return Err(Status::failed_precondition(format!(
                "ReopenContainerLog {}: the container is not running",
                c.record.id
            )));
        }
        let req = task::UpdateTaskRequest {
            id: c.record.id.clone(),
            annotations: [(client::REOPEN_ANNOTATION.to_string(), String::new())].into(),
            ..Default::default()
        };
        self.call(&c.record.sandbox_id, |s| s.update(client::ctx(30), &req))
            .map_err(|e| shim_status(&format!("ReopenContainerLog {}", c.record.id), e))?;
        Ok(())
    }

    /// The shim reported an OOM kill in container `id`.
    pub fn mark_oom(&self, id: &str) {
        if let Err(e) = self.modify(id, |c| c.record.oom_killed = true) {
            tracing::warn!("{}", e.message());
        }
    }

    /// The shim reported container `id`'s exit.
    pub fn mark_exit(&self, id: &str, code: i32, at: i64) {
        let mut first = None;
        let noted = self.modify(id, |c| {
            if c.record.finished_at == 0 {
                first = Some(c.clone());
            }
            c.record.exit_code = code;
            c.record.finished_at = at;
        });
        if let Err(e) = noted {
            tracing::warn!("{}", e.message());
        }
        if let Some(c) = first {
            self.emit(&c, cri::ContainerEventType::ContainerStoppedEvent);
        }
    }

    /// Tells GetContainerEvents listeners (if any) that `c` changed.
    fn emit(&self, c: &Container, kind: cri::ContainerEventType) {
        let _ = self.changes.send(Change {
            container_id: c.record.id.clone(),
            sandbox_id: c.record.sandbox_id.clone(),
            kind,
        });
    }

    /// The changes from now on.
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// The containers of sandbox `sandbox_id`.
    pub fn of_sandbox(&self, sandbox_id: &str) -> Vec<Container> {
        self.lock()
            .values()
            .filter(|c| c.record.sandbox_id == sandbox_id)
            .cloned()
            .collect()
    }

    /// ContainerStatus.
    pub fn status(&self, c: &Container) -> cri::ContainerStatus {
        let o = self.observe(c);
        let reason = match o.state {
            cri::ContainerState::ContainerExited if c.record.oom_killed => "OOMKilled",
            cri::ContainerState::ContainerExited if o.exit_code == 0 => "Completed",
            cri::ContainerState::ContainerExited => "Error",
            _ => "",
        };
        cri::ContainerStatus {
            id: c.record.id.clone(),
            metadata: c.config.metadata.clone(),
            state: o.state as i32,
            created_at: c.record.created_at,
            started_at: c.record.started_at,
            finished_at: o.finished_at,
            exit_code: o.exit_code,
            image: c.config.image.clone(),
            image_ref: c.record.image_id.clone(),
            reason: reason.into(),
            labels: c.config.labels.clone(),
            annotations: c.config.annotations.clone(),
            mounts: c.config.mounts.clone(),
            log_path: c.record.log_path.clone(),
            image_id: c.record.image_id.clone(),
            resources: Some(cri::ContainerResources {
                linux: Some(
                    c.config
                        .linux
                        .as_ref()
                        .and_then(|l| l.resources.clone())
                        .unwrap_or_default(),
                ),
                windows: None,
            }),
            ..Default::default()
        }
    }
}

/// Whether `c` is selected by a filter's id prefix, sandbox id prefix and labels (each empty: any), as
/// ListContainers and ListContainerStats filter.
fn selected(c: &Container, id: &str, sandbox_id: &str, labels: &HashMap<String, String>) -> bool {
    c.record.id.starts_with(id)
        && c.record.sandbox_id.starts_with(sandbox_id)
        && labels.iter().all(|(k, v)| c.config.labels.get(k) == Some(v))
}

/// ListContainers: the containers `filter` selects (id prefix, sandbox, state, labels).
pub fn list(all: &Containers, filter: Option<&cri::ContainerFilter>) -> Vec<cri::Container> {
    all.list()
        .into_iter()
        .filter(|c| filter.is_none_or(|f| selected(c, &f.id, &f.pod_sandbox_id, &f.label_selector)))
        .filter_map(|c| {
            let state = all.observe(&c).state as i32;
            if filter
                .and_then(|f| f.state.as_ref())
                .is_some_and(|s| s.state != state)
            {
                return None;
            }
            Some(cri::Container {
                id: c.record.id.clone(),
                pod_sandbox_id: c.record.sandbox_id.clone(),
                metadata: c.config.metadata.clone(),
                image: c.config.image.clone(),
                image_ref: c.record.image_id.clone(),
                state,
                created_at: c.record.created_at,
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
                ..Default::default()
            })
        })
        .collect()
}
