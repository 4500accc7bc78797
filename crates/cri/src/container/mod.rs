//! CRI containers, run by the pod's shim through the [`ShimClient`] seam: CreateContainer (`create`, named
//! steps under a rollback guard) mounts the image's snapshot, writes the bundle (`<state>/containers/<id>/`,
//! spec from [`crate::convert`], changed only in the `adjust` step: image volumes, CDI, NRI plugins)
//! and creates the task with its output in the CRI log format at kubelet's log path; the other calls are in
//! `lifecycle` (start, stop, remove, update, reopen the log), [`status`] (ContainerStatus, ListContainers,
//! the shim's events), `exec` (ExecSync, with `process_cache`: each container's process settings) and
//! `stats`.
//!
//! State is kept, not asked: each record ([`crate::store::container`]) is brought up to date by the calls
//! here and by the shim's events, and read once from the shims at start-up ([`Containers::recover`]), so
//! listing containers makes no shim call. Everything here blocks (the gRPC layer runs it off the async
//! workers), except ExecSync, a future that holds no thread while the command runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crius_api::cri;

use crate::error::{Error, Kind, Result};
use crate::image_store::ImageStore;
use crate::shim::ShimClient;
use crate::store::container::{Container, Records};
use crate::store::intents::Intents;
use crate::store::names::NameIndex;

pub(crate) mod adjust;
pub(crate) mod checkpoint;
mod create;
mod exec;
pub(crate) mod image_volumes;
mod lifecycle;
mod process_cache;
pub(crate) mod stats;
pub mod status;
pub mod stream;
#[cfg(test)]
pub(crate) mod tests;

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
    pub(crate) images: Arc<dyn ImageStore>,
    /// The node's cgroup driver, which names containers' cgroups.
    cgroup_driver: crate::cgroup_driver::Driver,
    /// What changes a new container's spec besides its request ([`adjust`]).
    adjusters: Vec<Box<dyn adjust::Adjust>>,
    /// The node's NRI, once started (empty: off): told of every container's events.
    nri: crate::nri::Slot,
    /// Where CDI spec files are (for the CDI devices NRI plugins add).
    pub(crate) cdi_dirs: Vec<PathBuf>,
    /// Changes of containers' lives, for GetContainerEvents.
    changes: tokio::sync::broadcast::Sender<Change>,
    /// The last CPU sample of each container (time, cumulative usage; both ns), for usage_nano_cores.
    cpu_samples: Mutex<HashMap<String, (i64, u64)>>,
    /// Each container's process settings, from its config.json (the base of an exec's process).
    processes: process_cache::ProcessCache,
    /// Tests: CreateContainer's record step fails (no fake can make the records' journal fail).
    #[cfg(test)]
    fail_record: std::sync::atomic::AtomicBool,
}

impl Containers {
    /// The containers recorded under `setup.records`, run by `shims`, with snapshots from `images`. Their
    /// states are as recorded until [`Containers::recover`] reads them from the shims.
    pub fn open(setup: Setup, shims: Arc<dyn ShimClient>, images: Arc<dyn ImageStore>) -> Result<Containers> {
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
        let nri = crate::nri::Slot::default();
        Ok(Containers {
            bundles: setup.bundles,
            intents: setup.intents,
            records,
            names,
            busy: Default::default(),
            shims,
            images,
            cgroup_driver: Default::default(),
            adjusters: adjust::defaults(crate::cdi::Devices::default().dirs, nri.clone()),
            nri,
            cdi_dirs: crate::cdi::Devices::default().dirs,
            changes: tokio::sync::broadcast::channel(1024).0,
            cpu_samples: Mutex::new(HashMap::new()),
            processes: Default::default(),
            #[cfg(test)]
            fail_record: Default::default(),
        })
    }

    /// These containers with their cgroups named in `driver`'s form (else cgroupfs's).
    pub fn with_cgroup_driver(self, driver: crate::cgroup_driver::Driver) -> Containers {
        Containers {
            cgroup_driver: driver,
            ..self
        }
    }

    /// These containers with CDI spec files read from `dirs` (in order, later overriding earlier) rather
    /// than [`crate::cdi::DEFAULT_SPEC_DIRS`].
    pub fn with_cdi_dirs(self, dirs: Vec<PathBuf>) -> Containers {
        Containers {
            adjusters: adjust::defaults(dirs.clone(), self.nri.clone()),
            cdi_dirs: dirs,
            ..self
        }
    }

    /// From now on NRI is told of these containers' events (and their pods', through [`Containers::nri`]).
    /// Set once: a second call is ignored.
    pub(crate) fn set_nri(&self, nri: Arc<dyn crate::nri::Events>) {
        let _ = self.nri.set(nri);
    }

    /// The node's NRI, if it is on.
    pub(crate) fn nri(&self) -> Option<&Arc<dyn crate::nri::Events>> {
        self.nri.get()
    }

    /// The container whose id is `id`, or the only one whose id starts with it.
    pub fn get(&self, id: &str) -> Option<Container> {
        self.records.get(id)
    }

    /// The container `id` names: InvalidArgument if it is empty, NotFound if there is none.
    pub(crate) fn get_or_not_found(&self, call: &'static str, id: &str) -> Result<Container> {
        self.read_or_not_found(call, id, Container::clone)
    }

    /// What `f` takes of the container `id` names, read in place (see [`Containers::get_or_not_found`]).
    pub(crate) fn read_or_not_found<T>(
        &self,
        call: &'static str,
        id: &str,
        f: impl FnOnce(&Container) -> T,
    ) -> Result<T> {
        crate::validate::id(call, "container_id", id)?;
        self.records.read(id, f).ok_or_else(|| Error::NotFound {
            call,
            kind: Kind::Container,
            id: id.to_string(),
        })
    }

    /// `c` is running, or call `call` is refused with FailedPrecondition.
    fn running(call: &'static str, c: &Container) -> Result<()> {
        Self::running_state(call, &c.record.id, c.record.state())
    }

    /// A container `id` in `state` is running, or call `call` is refused with FailedPrecondition.
    fn running_state(call: &'static str, id: &str, state: crate::store::container::State) -> Result<()> {
        if state == crate::store::container::State::Running {
            return Ok(());
        }
        Err(Error::FailedPrecondition {
            call,
            kind: Kind::Container,
            id: id.to_string(),
            reason: "is not running".into(),
        })
    }

    /// Every container.
    pub fn list_all(&self) -> Vec<Container> {
        self.records.list()
    }

    /// The containers `keep` selects (only those are cloned).
    pub fn list_where(&self, keep: impl Fn(&Container) -> bool) -> Vec<Container> {
        self.records.list_where(keep)
    }

    /// What `f` makes of each container `keep` selects, read in place.
    pub fn map_where<T>(&self, keep: impl Fn(&Container) -> bool, f: impl Fn(&Container) -> T) -> Vec<T> {
        self.records.map_where(keep, f)
    }

    /// The containers of sandbox `sandbox_id`.
    pub fn of_sandbox(&self, sandbox_id: &str) -> Vec<Container> {
        let mut v = self.list_where(|c| c.record.sandbox_id == sandbox_id);
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
    /// `sandbox`: its task in the shim (when `task`: it may have been created), its snapshots and its bundle.
    pub(crate) fn undo_create(&self, sandbox: &str, id: &str, task: bool) {
        if task {
            self.delete_task(sandbox, id);
        }
        self.remove_snapshots(id);
        self.remove_bundle(id);
    }

    /// Deletes container `id`'s task in `sandbox`'s shim; a failure is logged.
    fn delete_task(&self, sandbox: &str, id: &str) {
        if let Err(e) = self.shims.delete(sandbox, id, "") {
            tracing::warn!(container = %id, "deleting its task: {e}");
        }
    }

    /// Removes container `id`'s snapshot and its image volumes' (none is fine); a failure is logged.
    fn remove_snapshots(&self, id: &str) {
        if let Err(e) = self.images.remove_snapshot(id) {
            tracing::warn!(container = %id, "removing its snapshot: {e}");
        }
        if let Err(e) = image_volumes::remove(&*self.images, id) {
            tracing::warn!(container = %id, "removing its image volumes: {e}");
        }
    }

    /// Removes container `id`'s bundle directory (none is fine).
    fn remove_bundle(&self, id: &str) {
        let _ = std::fs::remove_dir_all(self.bundle(id));
    }
}
