//! The node one criusd serves: its pods ([`Pods`]) and their containers ([`Containers`]), wired to real
//! shims, CNI and the image store by [`Node::open`], and the calls that span both (creating a container in
//! a pod, stopping and removing a pod with its containers, the container events kubelet reads).

mod status;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock, Weak};

use crius_api::cri;

use crate::container::{self, Change, Containers};
use crate::error::{Error, Result};
use crate::handlers::Handlers;
use crate::network::{Cni, Pinner};
use crate::nri::PodEvent;
use crate::sandbox::{self, Pods};
use crate::shim::ttrpc::{self as shims, TtrpcShims};
use crate::store::intents::Intents;

/// Where a criusd keeps things and what it runs.
#[derive(Debug, Clone)]
pub struct Setup {
    /// `--root`: records (`sandboxes/`, `containers/`).
    pub root: PathBuf,
    /// `--state`: bundles, namespace pins, the sandboxes' files (hostname, hosts, resolv.conf), intents, the
    /// shims' events socket.
    pub state: PathBuf,
    /// The shim binary.
    pub shim: PathBuf,
    /// criusd's socket (the shims' owner address).
    pub owner: String,
    /// The CNI setup.
    pub cni: Cni,
    /// The runtime handlers pods pick from.
    pub handlers: Arc<Handlers>,
    /// The node's cgroup driver (`[runtime] cgroup_driver`).
    pub cgroup_driver: crate::cgroup_driver::Driver,
    /// Where every pod's `cgroup_parent` must lie (`[runtime] cgroup_parent_root`).
    pub cgroup_parent_root: crate::cgroup_driver::ParentRoot,
    /// Execs in crius-runc's containers start without a runtime command (`[runtime] direct_exec`).
    pub direct_exec: bool,
    /// Where CDI spec files are, in order (`[cdi] spec_dirs`).
    pub cdi_spec_dirs: Vec<PathBuf>,
}

/// The pods and containers of one criusd.
pub struct Node {
    /// The pod sandboxes.
    pub pods: Pods,
    /// The containers.
    pub containers: Arc<Containers>,
}

impl Node {
    /// The runtime `setup` describes, over image store `store`: records read, the shims' events served on
    /// `<state>/events.sock`, and the start-up pass run (`recover`: calls a crash cut short finished or
    /// undone, every unfinished container's state read from its shim once, leftovers removed).
    pub fn open(setup: &Setup, store: crius_image::Store) -> Result<Node> {
        let io = |what: &str| {
            let what = what.to_string();
            move |e| Error::io(what, e)
        };
        let intents =
            Arc::new(Intents::open(&setup.state.join("intents")).map_err(io("opening the intents"))?);
        let pods = Pods::open(
            &setup.root.join("sandboxes"),
            setup.state.join("ns"),
            setup.state.join("sandboxes"),
            Arc::new(setup.cni.clone()),
            Arc::new(Pinner::new(setup.shim.clone())),
            intents.clone(),
        )
        .map_err(io("opening the sandbox records"))?
        .with_handlers(setup.handlers.clone())
        .with_cgroups(setup.cgroup_driver, setup.cgroup_parent_root.clone());
        let events = setup.state.join("events.sock");
        // The shims' watcher reports a dead shim to the containers, which need the shims first.
        let containers_slot: Arc<OnceLock<Weak<Containers>>> = Arc::new(OnceLock::new());
        let slot = containers_slot.clone();
        let on_gone = Arc::new(move |sandbox: &str| {
            if let Some(c) = slot.get().and_then(Weak::upgrade) {
                c.shim_gone(sandbox);
            }
        });
        let bundles = setup.state.join("containers");
        let ttrpc = TtrpcShims::new(
            shims::Setup {
                shim: setup.shim.clone(),
                owner: setup.owner.clone(),
                events: events.clone(),
                bundles: bundles.clone(),
                cgroup_driver: setup.cgroup_driver,
                direct_exec: setup.direct_exec,
            },
            on_gone,
        )
        .map_err(io("starting the shim watcher"))?;
        let containers = Arc::new(
            Containers::open(
                container::Setup {
                    records: setup.root.join("containers"),
                    bundles,
                    intents: intents.clone(),
                },
                Arc::new(ttrpc),
                Arc::new(store),
            )?
            .with_cgroup_driver(setup.cgroup_driver)
            .with_cdi_dirs(setup.cdi_spec_dirs.clone()),
        );
        let _ = containers_slot.set(Arc::downgrade(&containers));
        crate::events::serve(&events, containers.clone())
            .map_err(io(&format!("serving shim events on {}", events.display())))?;
        let runtime = Node { pods, containers };
        // Intents an older criusd kept under its root are finished too, and their directory goes.
        let old = setup.root.join("intents");
        let older = old
            .is_dir()
            .then(|| Intents::open(&old))
            .transpose()
            .map_err(io("opening the old intents"))?;
        runtime.reconcile(&[&*intents].into_iter().chain(older.as_ref()).collect::<Vec<_>>());
        if older.is_some() {
            let _ = std::fs::remove_dir(&old);
        }
        Ok(runtime)
    }

    /// RunPodSandbox; NRI (when on) is told of the pod made.
    pub fn run_pod(&self, config: cri::PodSandboxConfig, handler: String) -> Result<String> {
        let id = self.pods.run(config, handler)?;
        if let (Some(nri), Some(s)) = (self.containers.nri(), self.pods.sandboxes.get(&id)) {
            nri.pod(PodEvent::Run, &s);
        }
        Ok(id)
    }

    /// UpdatePodSandboxResources; NRI plugins (when on) hear of it before (UpdatePodSandbox) and after
    /// (PostUpdatePodSandbox).
    pub fn update_pod(
        &self,
        id: &str,
        overhead: Option<&cri::LinuxContainerResources>,
        resources: Option<&cri::LinuxContainerResources>,
    ) -> Result<()> {
        let Some(nri) = self.containers.nri() else {
            return self.pods.update_pod_resources(id, overhead, resources);
        };
        let s = self.pods.get("UpdatePodSandboxResources", id)?;
        nri.update_pod(&s, overhead, resources);
        self.pods.update_pod_resources(id, overhead, resources)?;
        nri.pod(PodEvent::PostUpdate, &s);
        Ok(())
    }

    /// CreateContainer in sandbox `pod_id`.
    pub fn create_container(&self, pod_id: &str, config: cri::ContainerConfig) -> Result<String> {
        let s = self.pods.get("CreateContainer", pod_id)?;
        let files = self.pods.files_of(&s.record.id);
        self.containers.create(&s, &files, config)
    }

    /// ContainerStatus; `verbose` adds `info["info"]` ([`container::status::verbose_info`]).
    pub fn container_status(&self, id: &str, verbose: bool) -> Result<cri::ContainerStatusResponse> {
        let c = self.containers.get_or_not_found("ContainerStatus", id)?;
        let info = if verbose {
            let spec = std::fs::read(self.containers.bundle(&c.record.id).join("config.json")).ok();
            container::status::verbose_info(&c, spec.as_deref())
        } else {
            Default::default()
        };
        Ok(cri::ContainerStatusResponse {
            status: Some(container::status::status(&c)),
            info,
        })
    }

    /// StopPodSandbox: its containers killed, then the sandbox stopped. An unknown id is fine.
    pub fn stop_pod(&self, id: &str) -> Result<()> {
        crate::validate::id("StopPodSandbox", "pod_sandbox_id", id)?;
        // Stopping what does not exist is done (kubelet and critest count on it).
        let Some(s) = self.pods.sandboxes.get(id) else {
            return Ok(());
        };
        for c in self.containers.of_sandbox(&s.record.id) {
            self.containers.stop(&c.record.id, 0)?;
        }
        self.pods.stop(&s.record.id)?;
        // Told once, when it stops being ready (kubelet stops a pod more than once).
        if let Some(nri) = self.containers.nri().filter(|_| s.record.ready) {
            nri.pod(PodEvent::Stop, &s);
        }
        Ok(())
    }

    /// RemovePodSandbox: its containers removed, then the sandbox.
    pub fn remove_pod(&self, id: &str) -> Result<()> {
        crate::validate::id("RemovePodSandbox", "pod_sandbox_id", id)?;
        let Some(s) = self.pods.sandboxes.get(id) else {
            return Ok(());
        };
        for c in self.containers.of_sandbox(&s.record.id) {
            self.containers.remove(&c.record.id)?;
        }
        self.pods.remove(&s.record.id)?;
        if let Some(nri) = self.containers.nri() {
            nri.pod(PodEvent::Remove, &s);
        }
        Ok(())
    }

    /// The CRI event of a container change: with its sandbox's status and the statuses of the sandbox's
    /// containers, from the records (no shim calls).
    pub fn event(&self, ch: Change) -> cri::ContainerEventResponse {
        let sandbox = self.pods.sandboxes.get(&ch.sandbox_id);
        cri::ContainerEventResponse {
            container_id: ch.container_id,
            container_event_type: ch.kind as i32,
            created_at: crate::store::now_ns(),
            pod_sandbox_status: sandbox.as_ref().and_then(|s| sandbox::status_of(s, false).status),
            containers_statuses: self
                .containers
                .of_sandbox(&ch.sandbox_id)
                .iter()
                .map(container::status::status)
                .collect(),
        }
    }
}
