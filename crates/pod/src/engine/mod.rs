//! One pod's life over CRI, as kubelet leads it (KEP-753 for sidecars):
//! - start: the sandbox, then the init containers in spec order, where a sidecar (`restartPolicy: Always`)
//!   only has to complete its startup (running, its postStart hook done and its exec startupProbe passed) and a
//!   regular init container has to exit 0; then every main container;
//! - while it runs: sidecars are restarted whenever they exit, main containers as the pod's restart policy
//!   says, with kubelet's doubling back-off; a pod whose restart policy is Never or OnFailure completes when its
//!   main containers have finished, and its sidecars do not hold it;
//! - termination (completion, or a stop from outside): preStop hooks, then the main containers are stopped
//!   together, then the sidecars one at a time in reverse start order, all within the pod's one
//!   terminationGracePeriodSeconds (at least 2 s each once it has run out: SIGTERM, then SIGKILL); then the
//!   sandbox is stopped and removed, and the pod's volumes with it.
//!
//! Here are the engine's API and a pod's set-up (images, volumes, the sandbox). Each stage has its own file:
//! `adopt` (a pod taken back after a restart of its caller), `slot` (a container's state), `images` (pulls), `lead` (the loop: exits decided, restarts, start order),
//! `start` (one container started), `probes`, `resize`, `observe` (what the runtime says: exits, the final
//! report), `events` (the runtime's wake-ups) and `stop` (termination, then the sandbox removed).

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;
use k8s_openapi::api::core::v1::ResourceRequirements;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::Error;
use crate::cgroups::PodCgroup;
use crate::convert::{self, PodIdentity, Qos};
use crate::env::PodFields;
use crate::manifest::{Manifest, PodDef};
use crate::report::{Event, Report};
use crate::volumes::Volumes;

mod adopt;
#[cfg(test)]
mod control_tests;
mod events;
mod images;
mod lead;
mod observe;
mod probes;
#[cfg(test)]
mod probes_tests;
mod resize;
#[cfg(test)]
mod restarts_tests;
mod slot;
mod start;
mod stop;
#[cfg(test)]
mod tests;

use events::Events;
use images::ensure_image;
use slot::{Slot, State};

/// What the caller can ask of a running pod.
#[derive(Debug, Clone)]
pub enum Control {
    /// Terminate it gracefully, within the pod's terminationGracePeriodSeconds.
    Stop,
    /// Terminate it gracefully within `grace_s` seconds instead (`kubectl delete --grace-period`).
    StopWithin {
        /// The grace period, seconds.
        grace_s: i64,
    },
    /// Give container `container` these resources, in place where its resizePolicy allows (KEP-1287).
    Resize {
        /// The container's name.
        container: String,
        /// Its new requests and limits.
        resources: ResourceRequirements,
    },
}

/// Which images to pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// Each container's `imagePullPolicy` (Kubernetes' default: Always for `:latest` or no tag, else
    /// IfNotPresent).
    #[default]
    Manifest,
    /// Pull every image.
    Always,
    /// Pull only images that are not there.
    Missing,
    /// Never pull: every image must be there.
    Never,
}

/// How pods are run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which images to pull.
    pub pull: PullPolicy,
    /// Image replacements: the manifest's name → the image to run instead.
    pub images: HashMap<String, String>,
    /// Where pods' own directories (volumes) go: `<pods_dir>/<uid>`.
    pub pods_dir: PathBuf,
    /// Where pods' log directories go: `<log_root>/<namespace>_<name>_<uid>`.
    pub log_root: PathBuf,
    /// The first restart back-off; it doubles up to 5 minutes (kubelet: 10 s).
    pub backoff: Duration,
    /// How often container states are read from a runtime that sends no container events (kubelet relists
    /// every second). With events, states are read when they say something changed, and once a second.
    pub poll: Duration,
    /// The cgroup under which pods get their own, as kubelet's `--cgroup-root` with cgroupfs
    /// (`/kubepods/burstable/pod<uid>`...); None: no pod cgroups, the runtime places containers where it will.
    pub cgroup_root: Option<String>,
    /// What the node offers pods: the downward API's value of a limit that is not set, and (in
    /// crius-workloads) the figure admission and resizes are measured against; one figure for both.
    pub allocatable: crate::node::Allocatable,
    /// When the caller started (kubelet's prober start): the probes of a pod added less than a period after
    /// it tick at a random phase of their period, so that pods taken up together at start-up (those of a
    /// manifest, those found again after a restart) do not all probe at once (`hooks::Ticks`).
    /// None: every probe ticks from when its pod was added.
    pub started: Option<Instant>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            pull: PullPolicy::Manifest,
            images: HashMap::new(),
            pods_dir: "/var/lib/crius/pods".into(),
            log_root: "/var/log/pods".into(),
            backoff: Duration::from_secs(10),
            poll: Duration::from_millis(100),
            cgroup_root: Some("/kubepods".into()),
            allocatable: crate::node::Allocatable::of_machine(),
            started: None,
        }
    }
}

/// kubelet's least grace period, for a stop whose time has run out.
const MIN_GRACE_S: i64 = 2;

/// A pod being run.
struct Run<'a, E: FnMut(Event)> {
    events: Events,
    rt: RuntimeServiceClient<Channel>,
    opts: &'a Options,
    def: &'a PodDef,
    manifest: &'a Manifest,
    id: PodIdentity,
    sandbox: String,
    sandbox_config: cri::PodSandboxConfig,
    fields: PodFields,
    volumes: Volumes,
    pod_cgroup: Option<PodCgroup>,
    qos: Qos,
    slots: Vec<Slot>,
    /// A grace period that overrides the pod's (a stop from outside that named one).
    grace_s: Option<i64>,
    /// When its probes tick.
    ticks: crate::hooks::Ticks,
    on: E,
}

impl<E: FnMut(Event)> Run<'_, E> {
    /// The runtime's containers of the pod's sandbox; None when the runtime cannot say now.
    async fn containers(&mut self) -> Option<Vec<cri::Container>> {
        let list = self
            .rt
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    pod_sandbox_id: self.sandbox.clone(),
                    ..Default::default()
                }),
            })
            .await
            .ok()?;
        Some(list.into_inner().containers)
    }
}

/// Who a pod is, when the caller keeps it (the pod service): its uid and name. A sandbox of that uid that
/// still runs is taken back with its containers (after a restart of the caller), instead of a new one made.
#[derive(Debug, Clone)]
pub struct Given {
    /// The pod's uid.
    pub uid: String,
    /// Its name (for a workload's pod, with its suffix).
    pub name: String,
}

/// Runs pod `def` (of `manifest`) on the CRI runtime at `channel` until it completes or `controls` asks it to
/// stop; `on` hears what happens. Whatever happens, the sandbox, its containers and the pod's volumes are removed
/// before this returns (log files stay).
pub async fn run(
    channel: Channel,
    opts: &Options,
    def: &PodDef,
    manifest: &Manifest,
    controls: mpsc::UnboundedReceiver<Control>,
    on: impl FnMut(Event),
) -> Result<Report, Error> {
    let name = if def.generated {
        format!("{}{}", def.name, crate::node::name_suffix())
    } else {
        def.name.clone()
    };
    let given = Given {
        uid: crate::node::uuid(),
        name,
    };
    run_as(channel, opts, def, manifest, given, controls, on).await
}

/// [`run`] for a pod whose identity the caller keeps: when the runtime still has a ready sandbox of
/// `given.uid` (the caller restarted), the pod is taken back as it is: its running containers keep running,
/// those that exited meanwhile are restarted as the spec says, the rest start in order.
pub async fn run_as(
    channel: Channel,
    opts: &Options,
    def: &PodDef,
    manifest: &Manifest,
    given: Given,
    mut controls: mpsc::UnboundedReceiver<Control>,
    mut on: impl FnMut(Event),
) -> Result<Report, Error> {
    let ticks = crate::hooks::Ticks {
        added: Instant::now(),
        since_start: opts.started.map(|s| s.elapsed()),
    };
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let mut img = ImageServiceClient::new(channel);
    let Given { uid, name } = given;
    let id = PodIdentity {
        log_directory: opts
            .log_root
            .join(format!("{}_{}_{uid}", def.namespace, name))
            .to_string_lossy()
            .into(),
        name,
        uid,
    };
    let qos = convert::qos(&def.spec)?;

    // Images first: nothing is made for a pod whose images are missing.
    let mut slots = Vec::new();
    let mut pulled: HashMap<String, String> = HashMap::new();
    for (c, role) in def.containers() {
        let named = c.image.clone().unwrap_or_default();
        let image = opts.images.get(&named).cloned().unwrap_or_else(|| named.clone());
        let image_ref = match pulled.get(&image) {
            Some(r) => r.clone(),
            None => {
                let wanted = images::Wanted {
                    of: format!("container {:?}", c.name),
                    pull_policy: c.image_pull_policy.as_deref(),
                };
                let r = ensure_image(&mut img, opts.pull, wanted, &image, &mut on).await?;
                pulled.insert(image.clone(), r.clone());
                r
            }
        };
        slots.push(Slot {
            spec: c.clone(),
            role,
            image_ref,
            image_name: named,
            attempt: 0,
            backoff: opts.backoff,
            state: State::NotStarted,
        });
    }

    // Image volumes' images (KEP-4639), which the runtime mounts read-only.
    for v in def.spec.volumes.iter().flatten() {
        let Some(source) = &v.image else { continue };
        let named = source.reference.clone().unwrap_or_default();
        let image = opts.images.get(&named).cloned().unwrap_or_else(|| named.clone());
        if !pulled.contains_key(&image) {
            let wanted = images::Wanted {
                of: format!("volume {:?}", v.name),
                pull_policy: source.pull_policy.as_deref(),
            };
            let r = ensure_image(&mut img, opts.pull, wanted, &image, &mut on).await?;
            pulled.insert(image.clone(), r);
        }
        pulled.insert(named, pulled[&image].clone());
    }

    let kept = adopt::find(&mut rt, &id.uid).await;
    let mut volumes = Volumes::prepare(def, manifest, &id, &opts.pods_dir.join(&id.uid), opts.allocatable)?;
    volumes.resolve_images(&pulled);
    let mut pod_cgroup = None;
    let made = async {
        std::fs::create_dir_all(&id.log_directory)
            .map_err(Error::io(format!("creating {}", id.log_directory)))?;
        let mut sandbox_config = convert::sandbox_config(def, &id)?;
        if let Some(root) = &opts.cgroup_root {
            let cg = pod_cgroup.insert(PodCgroup::create(root, def, qos, &id.uid)?);
            if let Some(l) = sandbox_config.linux.as_mut() {
                l.cgroup_parent = cg.path.clone();
            }
        }
        if let Some(sandbox) = kept {
            return Ok((sandbox_config, sandbox));
        }
        let sandbox = rt
            .run_pod_sandbox(cri::RunPodSandboxRequest {
                config: Some(sandbox_config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .map_err(Error::cri("RunPodSandbox"))?
            .into_inner()
            .pod_sandbox_id;
        Ok::<_, Error>((sandbox_config, sandbox))
    }
    .await;
    let (sandbox_config, sandbox) = match made {
        Ok(x) => x,
        Err(e) => {
            volumes.remove();
            if let Some(cg) = &pod_cgroup {
                let _ = cg.remove();
            }
            return Err(e);
        }
    };
    let ip = rt
        .pod_sandbox_status(cri::PodSandboxStatusRequest {
            pod_sandbox_id: sandbox.clone(),
            verbose: false,
        })
        .await
        .ok()
        .and_then(|r| r.into_inner().status)
        .and_then(|s| s.network)
        .map(|n| n.ip)
        .unwrap_or_default();
    on(Event::Sandbox {
        pod: id.name.clone(),
        id: sandbox.clone(),
        ip: ip.clone(),
    });
    let node_name = crate::node::hostname();
    let fields = PodFields {
        name: id.name.clone(),
        namespace: def.namespace.clone(),
        uid: id.uid.clone(),
        host_ip: if def.spec.host_network == Some(true) {
            ip.clone()
        } else {
            String::new()
        },
        pod_ip: ip,
        node_name,
        allocatable: opts.allocatable,
    };
    let events = Events::subscribe(&mut rt, &sandbox).await;
    let mut run = Run {
        events,
        rt,
        opts,
        def,
        manifest,
        id,
        sandbox,
        sandbox_config,
        fields,
        volumes,
        pod_cgroup,
        qos,
        slots,
        grace_s: None,
        ticks,
        on,
    };
    run.adopt().await;
    let phase = run.lead(&mut controls).await;
    run.terminate().await;
    let report = run.report(phase).await;
    run.events.stop();
    run.remove().await;
    Ok(report)
}
