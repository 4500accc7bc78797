//! CRI containers, run by the pod's shim through the [`ShimClient`] seam: CreateContainer mounts the image's
//! snapshot, writes the bundle (`<state>/containers/<id>/`, spec from [`crate::convert`]) and creates the task
//! with its output in the CRI log format at kubelet's log path; the other calls are in `lifecycle`
//! (start, stop, remove, update, reopen the log), [`status`] (ContainerStatus, ListContainers, the shim's
//! events), `exec` (ExecSync) and `stats`.
//!
//! State is kept, not asked: each record ([`crate::store::container`]) is brought up to date by the calls
//! here and by the shim's events, and read once from the shims at start-up ([`Containers::recover`]), so
//! listing containers makes no shim call. Everything here blocks: the gRPC layer runs it off the async
//! workers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crius_api::cri;

use crate::error::{Error, Kind, Result};
use crate::shim::{CreateTask, ShimClient};
use crate::snapshots::Snapshots;
use crate::store::container::{Container, ProcessUser, Record, Records, name_key};
use crate::store::intents::{Intent, Intents, Op};
use crate::store::names::{NameIndex, Taken};
use crate::store::sandbox::Sandbox;
use crate::store::{now_ns, random_id};

mod capture;
mod exec;
pub(crate) mod image_volumes;
mod lifecycle;
mod stats;
pub mod status;
pub mod stream;
#[cfg(test)]
mod tests;

pub use stats::list_stats;
pub use status::list;

/// Where a container's files go.
#[derive(Debug, Clone)]
pub struct Setup {
    /// `<root>/containers`: the records.
    pub records: PathBuf,
    /// `<state>/containers`: the bundles.
    pub bundles: PathBuf,
    /// Where CreateContainer says what it is about to make.
    pub intents: Arc<Intents>,
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

/// The containers of one criusd.
pub struct Containers {
    pub(crate) bundles: PathBuf,
    intents: Arc<Intents>,
    pub(crate) records: Records,
    names: NameIndex<cri::ContainerConfig>,
    /// Stop and Remove of one container run one after another.
    busy: crate::store::locks::IdLocks,
    pub(crate) shims: Arc<dyn ShimClient>,
    pub(crate) images: Arc<dyn Snapshots>,
    /// Changes of containers' lives, for GetContainerEvents.
    changes: tokio::sync::broadcast::Sender<Change>,
    /// The last CPU sample of each container (time, cumulative usage; both ns), for usage_nano_cores.
    cpu_samples: Mutex<HashMap<String, (i64, u64)>>,
}

impl Containers {
    /// The containers recorded under `setup.records`, run by `shims`, with snapshots from `images`. Their
    /// states are as recorded until [`Containers::recover`] reads them from the shims.
    pub fn open(setup: Setup, shims: Arc<dyn ShimClient>, images: Arc<dyn Snapshots>) -> Result<Containers> {
        let io = |what: &Path| {
            let what = format!("opening {}", what.display());
            move |e| Error::io(what, e)
        };
        crate::store::private_dir(&setup.bundles).map_err(io(&setup.bundles))?;
        let records = crate::store::container::open(&setup.records).map_err(io(&setup.records))?;
        let names = NameIndex::default();
        for c in records.list() {
            names.hold(&c.name_key(), &c.record.id, c.config.clone());
        }
        Ok(Containers {
            bundles: setup.bundles,
            intents: setup.intents,
            records,
            names,
            busy: Default::default(),
            shims,
            images,
            changes: tokio::sync::broadcast::channel(1024).0,
            cpu_samples: Mutex::new(HashMap::new()),
        })
    }

    /// For a container whose PID mode is TARGET: the PID namespace of its target, which must be running.
    fn pid_target(&self, config: &cri::ContainerConfig) -> Result<Option<PathBuf>> {
        let Some(ns) = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .filter(|o| o.pid == cri::NamespaceMode::Target as i32)
        else {
            return Ok(None);
        };
        const FIELD: &str = "linux.security_context.namespace_options.target_id";
        if ns.target_id.is_empty() {
            return Err(Error::invalid(
                "CreateContainer",
                FIELD,
                "is empty for PID mode TARGET",
            ));
        }
        let target = self
            .get(&ns.target_id)
            .filter(|c| c.record.pid > 0 && c.record.finished_at == 0);
        match target {
            Some(t) => Ok(Some(PathBuf::from(format!("/proc/{}/ns/pid", t.record.pid)))),
            None => Err(Error::invalid(
                "CreateContainer",
                FIELD,
                format!("{:?} is no running container", ns.target_id),
            )),
        }
    }

    /// The container whose id is `id`, or the only one whose id starts with it.
    pub fn get(&self, id: &str) -> Option<Container> {
        self.records.get(id)
    }

    /// The container `id` names: InvalidArgument if it is empty, NotFound if there is none.
    pub(crate) fn get_or_not_found(&self, call: &'static str, id: &str) -> Result<Container> {
        crate::validate::id(call, "container_id", id)?;
        self.get(id).ok_or_else(|| Error::NotFound {
            call,
            kind: Kind::Container,
            id: id.to_string(),
        })
    }

    /// `c` is running, or call `call` is refused with FailedPrecondition.
    fn running(call: &'static str, c: &Container) -> Result<()> {
        if c.record.state() == crate::store::container::State::Running {
            return Ok(());
        }
        Err(Error::FailedPrecondition {
            call,
            kind: Kind::Container,
            id: c.record.id.clone(),
            reason: "is not running".into(),
        })
    }

    /// Every container.
    pub fn list_all(&self) -> Vec<Container> {
        self.records.list()
    }

    /// The containers of sandbox `sandbox_id`.
    pub fn of_sandbox(&self, sandbox_id: &str) -> Vec<Container> {
        let mut v: Vec<Container> = self
            .records
            .list()
            .into_iter()
            .filter(|c| c.record.sandbox_id == sandbox_id)
            .collect();
        v.sort_by_key(|c| c.record.created_at);
        v
    }

    pub(crate) fn bundle(&self, id: &str) -> PathBuf {
        self.bundles.join(id)
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

    /// Takes apart what a CreateContainer that failed (or was cut short by a crash) made of container `id` in
    /// `sandbox`: its task in the shim (when `task`: it may have been created), its snapshot and its bundle.
    pub(crate) fn undo_create(&self, sandbox: &str, id: &str, task: bool) {
        if let Some(Err(e)) = task.then(|| self.shims.delete(sandbox, id, "")) {
            tracing::warn!(container = %id, "deleting its task: {e}");
        }
        if let Err(e) = self.images.remove_snapshot(id) {
            tracing::warn!(container = %id, "removing its snapshot: {e}");
        }
        if let Err(e) = image_volumes::remove(&*self.images, id) {
            tracing::warn!(container = %id, "removing its image volumes: {e}");
        }
        let _ = std::fs::remove_dir_all(self.bundle(id));
    }

    /// CreateContainer in `sandbox` (READY), whose files (hostname, hosts, resolv.conf) are in
    /// `sandbox_files`; returns the new id.
    pub fn create(
        &self,
        sandbox: &Sandbox,
        sandbox_files: &Path,
        config: cri::ContainerConfig,
    ) -> Result<String> {
        const CALL: &str = "CreateContainer";
        let meta = config
            .metadata
            .clone()
            .ok_or_else(|| Error::invalid(CALL, "config.metadata", "is missing"))?;
        if meta.name.is_empty() {
            return Err(Error::invalid(CALL, "metadata.name", "is empty"));
        }
        crate::validate::container_config(&config)?;
        if !sandbox.record.ready {
            return Err(Error::FailedPrecondition {
                call: CALL,
                kind: Kind::Sandbox,
                id: sandbox.record.id.clone(),
                reason: "is not ready".into(),
            });
        }
        // The pod's sysctls go into every container's config.json: judged again against the namespaces the
        // container joins (a pod recorded before RunPodSandbox judged them).
        if let Some(l) = &sandbox.config.linux {
            let pins = &sandbox.record.namespaces;
            let own = crate::validate::Own {
                net: pins.net.is_some(),
                ipc: pins.ipc.is_some(),
                uts: pins.uts.is_some(),
            };
            crate::validate::sysctls(CALL, &l.sysctls, own)?;
        }
        let id = random_id().map_err(|e| Error::io("reading /dev/urandom", e))?;
        // The name is taken here, before anything is made: a concurrent create of the same name with another
        // config fails now, and a retry of this one (the same config) gets the container the first call makes.
        let reservation = match self.names.reserve(
            &name_key(&sandbox.record.id, &config),
            &id,
            config.clone(),
        ) {
            Ok(r) => r,
            Err(Taken::Same(made)) => {
                tracing::info!(container = %made, name = %meta.name, "CreateContainer retried: the container made");
                return Ok(made);
            }
            Err(Taken::By(holder)) => {
                return Err(Error::AlreadyExists {
                    call: CALL,
                    kind: Kind::Container,
                    name: format!(
                        "{} (attempt {}) in sandbox {}",
                        meta.name, meta.attempt, sandbox.record.id
                    ),
                    holder,
                });
            }
        };
        let image_ref = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        let image = self.images.find(&image_ref).map_err(|e| match e {
            crius_image::Error::NotFound(_) => Error::ImageNotPulled {
                call: CALL,
                reference: image_ref.clone(),
            },
            source => Error::Image { call: CALL, source },
        })?;
        let image_config = self.images.config(&image.id);
        let bundle = self.bundle(&id);
        // From here on a crash leaves the intent, and the next start undoes what was made.
        let intent = self.intents.begin(&Intent {
            op: Op::CreateContainer,
            id: id.clone(),
            sandbox_id: sandbox.record.id.clone(),
        })?;
        let undo = |task: bool| {
            self.undo_create(&sandbox.record.id, &id, task);
        };
        let rootfs = match self.images.prepare_rootfs(&id, &image) {
            Ok(r) => r,
            Err(source) => {
                undo(false);
                intent.done();
                return Err(Error::Image { call: CALL, source });
            }
        };
        if let Err(e) = crate::sandbox::userns::idmap_rootfs(&rootfs, sandbox) {
            undo(false);
            intent.done();
            return Err(e);
        }
        let pid_target = self.pid_target(&config)?;
        let image_volumes = match image_volumes::prepare(&*self.images, &id, &config.mounts, &|root| {
            crate::sandbox::userns::idmap_rootfs(root, sandbox)
        }) {
            Ok(v) => v,
            Err(e) => {
                undo(false);
                intent.done();
                return Err(e);
            }
        };
        let log_path = match (&sandbox.config.log_directory, &config.log_path) {
            (d, l) if !d.is_empty() && !l.is_empty() => Path::new(d).join(l).display().to_string(),
            _ => String::new(),
        };
        let made = (|| -> Result<ProcessUser> {
            let input = crate::convert::Input {
                id: &id,
                config: &config,
                sandbox,
                sandbox_files,
                image_config: &image_config,
                rootfs: &rootfs,
                image_volumes: &image_volumes,
                pid_target: pid_target.as_deref(),
            };
            let spec = crate::convert::spec(&input, &crate::convert::Host::probe(&input)?)?;
            let user = spec.process().as_ref().map(|p| p.user()).map(|u| ProcessUser {
                uid: u.uid(),
                gid: u.gid(),
                groups: u.additional_gids().clone().unwrap_or_default(),
            });
            crate::convert::create_mount_sources(&config)?;
            let spec =
                serde_json::to_vec(&spec).map_err(|e| Error::io("serializing config.json", e.into()))?;
            let io = |what: String| move |e| Error::io(what, e);
            crate::store::private_dir(&bundle).map_err(io(format!("creating {}", bundle.display())))?;
            crate::store::write_private(&bundle.join("config.json"), &spec)
                .map_err(io(format!("writing {}/config.json", bundle.display())))?;
            // The log's directories are made beneath log_directory, a symlink planted on the way or in the
            // file's place refused; the shim opens it the same way (`log_directory//log_path`).
            let log_dir = &sandbox.config.log_directory;
            if !log_path.is_empty() {
                std::fs::create_dir_all(log_dir).map_err(io(format!("creating log dir {log_dir}")))?;
                crius_shim::beneath::prepare(Path::new(log_dir), Path::new(&config.log_path), 0o755)
                    .map_err(|e| match e.kind() {
                        std::io::ErrorKind::InvalidInput => Error::invalid(CALL, "log_path", e.to_string()),
                        _ => Error::io(format!("preparing the log under {log_dir}"), e),
                    })?;
            }
            let task = CreateTask {
                id: id.clone(),
                bundle: bundle.clone(),
                terminal: config.tty,
                // No log file of its own: output goes to a capped one of criusd's, which attach follows.
                log_path: Some(if log_path.is_empty() {
                    bundle.join(stream::ATTACH_LOG)
                } else {
                    PathBuf::from(format!("{}//{}", log_dir.trim_end_matches('/'), config.log_path))
                }),
                capped_log: log_path.is_empty(),
                stdin: if config.stdin {
                    Some(stream::make_stdin_fifo(&bundle)?)
                } else {
                    None
                },
                runtime: sandbox.record.runtime.clone(),
            };
            self.shims
                .create(&sandbox.record.id, &task)
                .map_err(|source| Error::Shim {
                    call: CALL,
                    id: id.clone(),
                    source,
                })?;
            Ok(user.unwrap_or_default())
        })();
        let user = match made {
            Ok(u) => u,
            Err(e) => {
                undo(false);
                intent.done();
                return Err(e);
            }
        };
        let c = Container {
            record: Record {
                id: id.clone(),
                sandbox_id: sandbox.record.id.clone(),
                image_id: image.id.to_string(),
                created_at: now_ns(),
                log_path,
                user: Some(user),
                ..Default::default()
            },
            config,
        };
        if let Err(e) = self.records.insert(&c) {
            undo(true);
            intent.done();
            return Err(e);
        }
        intent.done();
        reservation.commit();
        tracing::info!(container = %id, sandbox = %sandbox.record.id, name = %meta.name, "container created");
        self.emit(&c, cri::ContainerEventType::ContainerCreatedEvent);
        Ok(id)
    }
}
