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

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_cri::v1 as cri;
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::api::core::v1::ResourceRequirements;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::Error;
use crate::convert::{self, PodIdentity, Qos};
use crate::env::PodFields;
use crate::hooks;
use crate::manifest::{Manifest, PodDef, RestartPolicy};
use crate::report::{ContainerReport, Event, Phase, Report, Role};
use crate::volumes::Volumes;

mod probes;
mod resize;
mod stop;
#[cfg(test)]
mod tests;

/// What the caller can ask of a running pod.
#[derive(Debug, Clone)]
pub enum Control {
    /// Terminate it gracefully.
    Stop,
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
    /// How often container states are read (kubelet relists every second).
    pub poll: Duration,
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
        }
    }
}

const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long termination keeps trying a runtime that does not answer (criusd restarting).
const UNREACHABLE_FOR: Duration = Duration::from_secs(60);

/// Runs `call` again every half second while the runtime is unreachable (`Unavailable`: criusd restarting),
/// until `until`; its last answer.
async fn while_unreachable<T, F, Fut>(until: Instant, mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    loop {
        match call().await {
            Err(s) if s.code() == tonic::Code::Unavailable && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            r => return r,
        }
    }
}
/// How often states are read when the runtime's events say when something changed.
const EVENTED_POLL: Duration = Duration::from_secs(1);

/// The runtime's container events (GetContainerEvents) for one sandbox, as wake-ups; none from a runtime
/// that does not serve them (containerd 1.6), or once the stream broke: then the engine polls.
struct Events {
    notify: std::sync::Arc<tokio::sync::Notify>,
    alive: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Events {
    async fn subscribe(rt: &mut RuntimeServiceClient<Channel>, sandbox: &str) -> Events {
        let notify = std::sync::Arc::new(tokio::sync::Notify::new());
        let alive = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task = match rt.get_container_events(cri::GetEventsRequest {}).await {
            Ok(stream) => {
                alive.store(true, std::sync::atomic::Ordering::Relaxed);
                let (notify, alive, sandbox) = (notify.clone(), alive.clone(), sandbox.to_string());
                let mut stream = stream.into_inner();
                Some(tokio::spawn(async move {
                    while let Ok(Some(e)) = stream.message().await {
                        if e.pod_sandbox_status.is_some_and(|s| s.id == sandbox) {
                            notify.notify_one();
                        }
                    }
                    alive.store(false, std::sync::atomic::Ordering::Relaxed);
                    notify.notify_one();
                }))
            }
            Err(_) => None,
        };
        Events { notify, alive, task }
    }

    fn live(&self) -> bool {
        self.alive.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.alive.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}
const MIN_GRACE_S: i64 = 2;

/// One container of the pod and where it is in its life.
struct Slot {
    spec: Container,
    role: Role,
    image_ref: String,
    image_name: String,
    /// The current (or last) CRI container.
    id: Option<String>,
    /// Restarts so far.
    attempt: u32,
    running: bool,
    /// Startup complete (sidecars: probe passed).
    ready: bool,
    /// Finished for good (an init container that exited 0; a main container that will not restart).
    done: bool,
    exit: Option<(i32, String)>,
    restart_at: Option<Instant>,
    backoff: Duration,
    probe: hooks::ProbeState,
    liveness: hooks::ProbeState,
}

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
    qos: Qos,
    slots: Vec<Slot>,
    on: E,
}

/// Runs pod `def` (of `manifest`) on the CRI runtime at `channel` until it completes or `controls` asks it to
/// stop; `on` hears what happens. Whatever happens, the sandbox, its containers and the pod's volumes are removed
/// before this returns (log files stay).
pub async fn run(
    channel: Channel,
    opts: &Options,
    def: &PodDef,
    manifest: &Manifest,
    mut controls: mpsc::UnboundedReceiver<Control>,
    mut on: impl FnMut(Event),
) -> Result<Report, Error> {
    let mut rt = RuntimeServiceClient::new(channel.clone());
    let mut img = ImageServiceClient::new(channel);
    let uid = crate::node::uuid();
    let name = if def.generated {
        format!("{}{}", def.name, crate::node::name_suffix())
    } else {
        def.name.clone()
    };
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
                let r = ensure_image(&mut img, opts.pull, c, &image, &mut on).await?;
                pulled.insert(image.clone(), r.clone());
                r
            }
        };
        slots.push(Slot {
            spec: c.clone(),
            role,
            image_ref,
            image_name: named,
            id: None,
            attempt: 0,
            running: false,
            ready: false,
            done: false,
            exit: None,
            restart_at: None,
            backoff: opts.backoff,
            probe: Default::default(),
            liveness: Default::default(),
        });
    }

    let mut volumes = Volumes::prepare(def, manifest, &opts.pods_dir.join(&id.uid))?;
    let made = async {
        std::fs::create_dir_all(&id.log_directory)
            .map_err(Error::io(format!("creating {}", id.log_directory)))?;
        let sandbox_config = convert::sandbox_config(def, &id)?;
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
        qos,
        slots,
        on,
    };
    let phase = run.lead(&mut controls).await;
    run.terminate().await;
    let report = run.report(phase).await;
    run.events.stop();
    run.remove().await;
    Ok(report)
}

/// Makes sure `image` is there as `policy` (or the container's own policy) wants; returns its id.
async fn ensure_image(
    img: &mut ImageServiceClient<Channel>,
    policy: PullPolicy,
    c: &Container,
    image: &str,
    on: &mut impl FnMut(Event),
) -> Result<String, Error> {
    let policy = match policy {
        PullPolicy::Manifest => match c.image_pull_policy.as_deref() {
            Some("Always") => PullPolicy::Always,
            Some("Never") => PullPolicy::Never,
            Some("IfNotPresent") => PullPolicy::Missing,
            _ => {
                let last = image.rsplit('/').next().unwrap_or(image);
                if image.contains('@') || last.contains(':') && !last.ends_with(":latest") {
                    PullPolicy::Missing
                } else {
                    PullPolicy::Always
                }
            }
        },
        p => p,
    };
    let spec = cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    };
    if policy != PullPolicy::Always {
        let present = img
            .image_status(cri::ImageStatusRequest {
                image: Some(spec.clone()),
                verbose: false,
            })
            .await
            .map_err(Error::cri(format!("ImageStatus of {image}")))?
            .into_inner()
            .image;
        match present {
            Some(i) => return Ok(i.id),
            None if policy == PullPolicy::Never => {
                return Err(Error::ImageNotPresent {
                    container: c.name.clone(),
                    image: image.to_string(),
                });
            }
            None => {}
        }
    }
    on(Event::Pulling(image.to_string()));
    let r = img
        .pull_image(cri::PullImageRequest {
            image: Some(spec),
            auth: None,
            sandbox_config: None,
        })
        .await
        .map_err(Error::cri(format!("container {:?}: pulling {image}", c.name)))?;
    Ok(r.into_inner().image_ref)
}

impl<E: FnMut(Event)> Run<'_, E> {
    /// Starts the pod and keeps it as its spec says until it completes, or is stopped, and says which.
    async fn lead(&mut self, controls: &mut mpsc::UnboundedReceiver<Control>) -> Phase {
        let first_main = self
            .slots
            .iter()
            .position(|s| s.role == Role::Main)
            .unwrap_or(self.slots.len());
        let mut next_init = 0;
        let mut open = true;
        loop {
            // What arrived meanwhile first: a stop during image pulls or a long call starts nothing more.
            while open {
                match controls.try_recv() {
                    Ok(Control::Stop) => return Phase::Stopped,
                    Ok(Control::Resize { container, resources }) => self.resize(&container, resources).await,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => open = false,
                }
            }
            self.observe().await;
            if let Some(phase) = self.react() {
                return phase;
            }
            self.restart_due().await;
            // Start-up, one init container at a time.
            while next_init < first_main {
                let s = &self.slots[next_init];
                if s.id.is_none() && s.restart_at.is_none() {
                    self.start(next_init).await;
                    continue;
                }
                let passed = match s.role {
                    Role::Sidecar => s.ready,
                    _ => s.done,
                };
                if !passed {
                    break;
                }
                next_init += 1;
            }
            if next_init == first_main {
                for i in first_main..self.slots.len() {
                    if self.slots[i].id.is_none() && self.slots[i].restart_at.is_none() && !self.slots[i].done
                    {
                        self.start(i).await;
                    }
                }
                next_init += 1;
            }
            self.probe().await;
            if next_init > first_main
                && self.def.restart_policy != RestartPolicy::Always
                && self.slots[first_main..].iter().all(|s| s.done)
            {
                let ok = self.slots[first_main..]
                    .iter()
                    .all(|s| s.exit.as_ref().is_some_and(|e| e.0 == 0));
                return if ok { Phase::Succeeded } else { Phase::Failed };
            }
            // With the runtime's events, a state change wakes the loop and reads are rarer (kubelet's
            // evented PLEG); restarts and probes still need the short tick.
            let evented = self.events.live();
            let wait = if evented && !self.busy() {
                EVENTED_POLL
            } else {
                self.opts.poll
            };
            let events = self.events.notify.clone();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = events.notified(), if evented => {}
                c = controls.recv(), if open => match c {
                    None => open = false,
                    Some(Control::Stop) => return Phase::Stopped,
                    Some(Control::Resize { container, resources }) => self.resize(&container, resources).await,
                },
            }
        }
    }

    /// Whether something needs the short tick: a restart due, a startup still pending, a liveness probe.
    fn busy(&self) -> bool {
        self.slots.iter().any(|s| {
            s.restart_at.is_some()
                || (s.running && !s.ready && s.role != Role::Init && s.spec.startup_probe.is_some())
                || (s.running && s.spec.liveness_probe.is_some())
        })
    }

    /// Reads the state of every container of the pod; notes exits.
    async fn observe(&mut self) {
        let Ok(list) = self
            .rt
            .list_containers(cri::ListContainersRequest {
                filter: Some(cri::ContainerFilter {
                    pod_sandbox_id: self.sandbox.clone(),
                    ..Default::default()
                }),
            })
            .await
        else {
            return;
        };
        let states: HashMap<String, i32> = list
            .into_inner()
            .containers
            .into_iter()
            .map(|c| (c.id, c.state))
            .collect();
        for i in 0..self.slots.len() {
            let Some(id) = self.slots[i].id.clone() else {
                continue;
            };
            let exited = states
                .get(&id)
                .is_none_or(|s| *s == cri::ContainerState::ContainerExited as i32);
            if self.slots[i].running && exited {
                let (code, reason) = self.exit_of(&id).await;
                let s = &mut self.slots[i];
                s.running = false;
                s.exit = Some((code, reason.clone()));
                (self.on)(Event::Exited {
                    name: s.spec.name.clone(),
                    role: s.role,
                    code,
                    reason,
                });
            }
        }
    }

    async fn exit_of(&mut self, id: &str) -> (i32, String) {
        match self
            .rt
            .container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await
        {
            Ok(r) => r
                .into_inner()
                .status
                .map(|s| (s.exit_code, s.reason))
                .unwrap_or((-1, "Unknown".into())),
            Err(e) => (-1, format!("status unknown: {}", e.message())),
        }
    }

    /// Decides what exits mean: restarts to schedule, init and main containers finished, a failed pod.
    fn react(&mut self) -> Option<Phase> {
        let policy = self.def.restart_policy;
        for s in &mut self.slots {
            if s.running || s.done || s.restart_at.is_some() {
                continue;
            }
            let Some((code, _)) = &s.exit else { continue };
            let restart = match s.role {
                Role::Sidecar => true,
                Role::Init => *code != 0 && policy != RestartPolicy::Never,
                Role::Main => match policy {
                    RestartPolicy::Always => true,
                    RestartPolicy::OnFailure => *code != 0,
                    RestartPolicy::Never => false,
                },
            };
            if restart {
                let after = s.backoff;
                s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
                s.restart_at = Some(Instant::now() + after);
                s.ready = false;
                (self.on)(Event::Restarting {
                    name: s.spec.name.clone(),
                    after,
                });
            } else {
                s.done = true;
                if s.role == Role::Init && *code != 0 {
                    return Some(Phase::Failed);
                }
            }
        }
        None
    }

    async fn restart_due(&mut self) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            if self.slots[i].restart_at.is_some_and(|t| t <= now) {
                self.slots[i].restart_at = None;
                self.slots[i].attempt += 1;
                if let Some(old) = self.slots[i].id.take().filter(|id| !id.is_empty()) {
                    let _ = self
                        .rt
                        .remove_container(cri::RemoveContainerRequest { container_id: old })
                        .await;
                }
                self.start(i).await;
            }
        }
    }

    /// Creates and starts slot `i`'s container (attempt `attempt`), then runs its postStart hook. A failure
    /// counts as a failed run.
    async fn start(&mut self, i: usize) {
        match self.create_and_start(i).await {
            Ok(()) => {}
            Err(error) => {
                let error = error.to_string();
                let s = &mut self.slots[i];
                (self.on)(Event::Failed {
                    name: s.spec.name.clone(),
                    error: error.clone(),
                });
                s.running = false;
                s.exit = Some((-1, error));
                if s.id.is_none() {
                    // Nothing to remove: mark the attempt with a placeholder so start-up waits for the restart.
                    s.id = Some(String::new());
                }
            }
        }
    }

    /// The CRI resources of container `c` in role `role`.
    fn cri_resources(&self, role: Role, c: &Container) -> Result<cri::LinuxContainerResources, Error> {
        let capacity = crate::node::memory_bytes();
        let mut resources = convert::resources(c, self.qos, capacity)?;
        if role == Role::Sidecar {
            // KEP-753: a sidecar is no likelier to be OOM-killed than the main containers.
            for m in self.slots.iter().filter(|m| m.role == Role::Main) {
                let r = convert::resources(&m.spec, self.qos, capacity)?;
                resources.oom_score_adj = resources.oom_score_adj.min(r.oom_score_adj);
            }
        }
        Ok(resources)
    }

    async fn create_and_start(&mut self, i: usize) -> Result<(), Error> {
        let s = &self.slots[i];
        let c = &s.spec;
        let env = crate::env::build(self.def, self.manifest, c, &self.fields)?;
        let mounts = self.volumes.mounts(c)?;
        let resources = self.cri_resources(s.role, c)?;
        let config = convert::container_config(
            self.def,
            &self.id,
            c,
            convert::ContainerInputs {
                image_ref: &s.image_ref,
                image_name: &s.image_name,
                attempt: s.attempt,
                env: &env,
                mounts,
                resources,
            },
        );
        let (name, role, attempt) = (c.name.clone(), s.role, s.attempt);
        let post_start = c.lifecycle.as_ref().and_then(|l| l.post_start.clone());
        let id = self
            .rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: self.sandbox.clone(),
                config: Some(config),
                sandbox_config: Some(self.sandbox_config.clone()),
            })
            .await
            .map_err(Error::cri("CreateContainer"))?
            .into_inner()
            .container_id;
        self.slots[i].id = Some(id.clone());
        self.rt
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
            .map_err(Error::cri("StartContainer"))?;
        let s = &mut self.slots[i];
        s.running = true;
        s.exit = None;
        s.probe = Default::default();
        s.liveness = Default::default();
        let log_path = format!("{}/{name}/{attempt}.log", self.id.log_directory);
        (self.on)(Event::Started {
            name: name.clone(),
            role,
            attempt,
            log_path,
        });
        if let Some(h) = post_start
            && let Err(e) = hooks::handler(&mut self.rt, &id, "postStart", &h, Duration::from_secs(30)).await
        {
            // kubelet kills a container whose postStart hook failed.
            let _ = self
                .rt
                .stop_container(cri::StopContainerRequest {
                    container_id: id,
                    timeout: MIN_GRACE_S,
                })
                .await;
            return Err(e);
        }
        Ok(())
    }

    /// The final report, from the runtime's statuses.
    async fn report(&mut self, phase: Phase) -> Report {
        let mut containers = Vec::new();
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            let mut r = ContainerReport {
                name: s.spec.name.clone(),
                role: s.role,
                restarts: s.attempt,
                exit_code: s.exit.as_ref().map(|e| e.0),
                reason: match (&s.exit, s.id.as_deref()) {
                    (Some(e), _) => e.1.clone(),
                    (None, None | Some("")) => "NotStarted".into(),
                    (None, Some(_)) => "Unknown: the runtime did not say".into(),
                },
                started_at: 0,
                finished_at: 0,
            };
            if let Some(id) = s.id.clone().filter(|id| !id.is_empty())
                && let Ok(st) = self
                    .rt
                    .container_status(cri::ContainerStatusRequest {
                        container_id: id,
                        verbose: false,
                    })
                    .await
                && let Some(st) = st.into_inner().status
            {
                r.started_at = st.started_at;
                r.finished_at = st.finished_at;
                if st.finished_at > 0 {
                    r.exit_code = Some(st.exit_code);
                    r.reason = st.reason;
                }
            }
            containers.push(r);
        }
        Report {
            pod: format!("{}/{}", self.def.namespace, self.id.name),
            uid: self.id.uid.clone(),
            sandbox: self.sandbox.clone(),
            ip: self.fields.pod_ip.clone(),
            phase,
            containers,
        }
    }

    async fn remove(&mut self) {
        let id = self.sandbox.clone();
        let until = Instant::now() + UNREACHABLE_FOR;
        for stop in [true, false] {
            let rt = self.rt.clone();
            let done = while_unreachable(until, || {
                let (mut rt, pod_sandbox_id) = (rt.clone(), id.clone());
                async move {
                    if stop {
                        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id })
                            .await
                            .map(drop)
                    } else {
                        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id })
                            .await
                            .map(drop)
                    }
                }
            })
            .await;
            if let Err(e) = done {
                let call = if stop {
                    "StopPodSandbox"
                } else {
                    "RemovePodSandbox"
                };
                (self.on)(Event::Note(format!(
                    "{call} {id}: {:?}: {}",
                    e.code(),
                    e.message()
                )));
            }
        }
        self.volumes.remove();
    }
}
