//! An in-memory CRI runtime for the engine's unit tests: RuntimeService and ImageService served with tonic on a
//! unix socket, as criusd serves them, but with no processes. Containers "run" from StartContainer until the
//! test says they exit, or until a script given beforehand ends each start at once; StopContainer and
//! StopPodSandbox end them as SIGTERM would (143). Every call that changes something is recorded, by container
//! name, so a test asserts the order in which the engine made them.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_api::cri::image_service_server::ImageServiceServer;
use crius_api::cri::runtime_service_server::RuntimeServiceServer;
use tonic::Status;
use tonic::transport::Channel;

mod service;

/// A call that changed something, as the fake saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    RunPodSandbox,
    StopPodSandbox,
    RemovePodSandbox,
    /// CreateContainer of this container name, with its attempt (restart count).
    Create(String, u32),
    Start(String),
    Stop(String),
    Remove(String),
    /// ExecSync in this container (hooks and probes).
    Exec(String),
    /// UpdateContainerResources of this container.
    Update(String),
    /// PullImage of this image.
    Pull(String),
}

/// CreateContainer of `name`, first attempt.
pub fn create(name: &str) -> Call {
    Call::Create(name.into(), 0)
}

/// StartContainer of `name`.
pub fn start(name: &str) -> Call {
    Call::Start(name.into())
}

/// StopContainer of `name`.
pub fn stop(name: &str) -> Call {
    Call::Stop(name.into())
}

/// RemoveContainer of `name`.
pub fn remove(name: &str) -> Call {
    Call::Remove(name.into())
}

/// The exit code of a container that SIGTERM ended (128 + 15).
pub const TERMINATED: i32 = 143;

const SANDBOX: &str = "sandbox-1";
const POD_IP: &str = "10.88.0.2";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Created,
    Running,
    Exited(i32),
}

#[derive(Debug)]
struct Ctr {
    name: String,
    attempt: u32,
    run: Run,
    created_at: i64,
    started_at: i64,
    finished_at: i64,
    resources: Option<cri::LinuxContainerResources>,
}

#[derive(Debug, Default)]
struct World {
    calls: Vec<Call>,
    containers: BTreeMap<String, Ctr>,
    made: u32,
    /// Per container name: the exit codes that end its next starts at once.
    scripts: HashMap<String, VecDeque<i32>>,
    /// Per container name: how many of its next CreateContainer calls fail.
    failing_creates: HashMap<String, u32>,
    /// Per container name: the exit codes of its next ExecSync calls (then 0).
    execs: HashMap<String, VecDeque<i32>>,
    /// Every ExecSync asked for, in order.
    exec_requests: Vec<ExecAsked>,
    missing_images: HashSet<String>,
    /// ListContainers calls so far.
    lists: u32,
}

/// One ExecSync as the fake received it.
#[derive(Debug, Clone)]
pub struct ExecAsked {
    /// The container's name.
    pub name: String,
    /// The command.
    pub cmd: Vec<String>,
    /// The request's timeout, in seconds.
    pub timeout: i64,
    /// When it came.
    pub at: Instant,
}

/// The fake runtime. Tests hold it in an `Arc` beside the server that serves it.
pub struct FakeCri {
    world: Mutex<World>,
    events: Option<tokio::sync::broadcast::Sender<cri::ContainerEventResponse>>,
}

fn now_ns() -> i64 {
    crius_common::time::now_ns()
}

impl FakeCri {
    /// A fake that streams container events, as criusd does.
    pub fn new() -> Arc<FakeCri> {
        Arc::new(FakeCri {
            world: Mutex::default(),
            events: Some(tokio::sync::broadcast::channel(1024).0),
        })
    }

    /// A fake without GetContainerEvents, as containerd 1.6: the engine polls.
    pub fn without_events() -> Arc<FakeCri> {
        Arc::new(FakeCri {
            world: Mutex::default(),
            events: None,
        })
    }

    fn world(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Serves the fake on a socket in `dir`; a channel to it.
    pub async fn serve(self: &Arc<Self>, dir: &Path) -> Channel {
        let path = dir.join("cri.sock");
        let listener = tokio::net::UnixListener::bind(&path).unwrap();
        let server = tonic::transport::Server::builder()
            .add_service(RuntimeServiceServer::from_arc(self.clone()))
            .add_service(ImageServiceServer::from_arc(self.clone()))
            .serve_with_incoming(tokio_stream::wrappers::UnixListenerStream::new(listener));
        tokio::spawn(server);
        crius_api::connect(&path.display().to_string()).await.unwrap()
    }

    /// Each of the next starts of container `name` ends at once with the next of `codes`.
    pub fn script(&self, name: &str, codes: impl IntoIterator<Item = i32>) {
        self.world().scripts.entry(name.into()).or_default().extend(codes);
    }

    /// The next `n` CreateContainer calls of `name` fail.
    pub fn fail_creates(&self, name: &str, n: u32) {
        self.world().failing_creates.insert(name.into(), n);
    }

    /// The next ExecSync calls in `name` exit with `codes`, in order; later ones exit 0.
    pub fn execs(&self, name: &str, codes: impl IntoIterator<Item = i32>) {
        self.world().execs.entry(name.into()).or_default().extend(codes);
    }

    /// The ExecSync calls received so far.
    pub fn exec_requests(&self) -> Vec<ExecAsked> {
        self.world().exec_requests.clone()
    }

    /// Image `image` is not on the node.
    pub fn missing_image(&self, image: &str) {
        self.world().missing_images.insert(image.into());
    }

    /// How many ListContainers calls the fake answered so far.
    pub fn lists(&self) -> u32 {
        self.world().lists
    }

    /// What the engine asked for so far.
    pub fn calls(&self) -> Vec<Call> {
        self.world().calls.clone()
    }

    /// Waits (at most 10 s) until the `attempt`-th container of `name` runs.
    pub async fn running(&self, name: &str, attempt: u32) {
        self.until(&format!("{name} (attempt {attempt}) running"), |w| {
            w.containers
                .values()
                .any(|c| c.name == name && c.attempt == attempt && c.run == Run::Running)
        })
        .await;
    }

    /// Waits (at most 10 s) until `done` holds for the calls made.
    pub async fn called(&self, what: &str, done: impl Fn(&[Call]) -> bool) {
        self.until(what, |w| done(&w.calls)).await;
    }

    async fn until(&self, what: &str, done: impl Fn(&World) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done(&self.world()) {
            assert!(
                Instant::now() < deadline,
                "waited 10 s for {what}; calls: {:?}",
                self.calls()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The running container `name` exits with `code`.
    pub fn exit(&self, name: &str, code: i32) {
        let mut w = self.world();
        let id = w
            .containers
            .iter()
            .find(|(_, c)| c.name == name && c.run == Run::Running)
            .map(|(id, _)| id.clone())
            .unwrap_or_else(|| panic!("{name} is not running"));
        Self::end(&mut w, &id, code);
        drop(w);
        self.event(&id, cri::ContainerEventType::ContainerStoppedEvent);
    }

    fn end(w: &mut World, id: &str, code: i32) {
        if let Some(c) = w.containers.get_mut(id)
            && c.run == Run::Running
        {
            c.run = Run::Exited(code);
            c.finished_at = now_ns();
        }
    }

    fn event(&self, id: &str, kind: cri::ContainerEventType) {
        if let Some(tx) = &self.events {
            let _ = tx.send(cri::ContainerEventResponse {
                container_id: id.into(),
                container_event_type: kind as i32,
                created_at: now_ns(),
                pod_sandbox_status: Some(cri::PodSandboxStatus {
                    id: SANDBOX.into(),
                    ..Default::default()
                }),
                containers_statuses: Vec::new(),
            });
        }
    }

    /// The name of container `id`, for the record; NotFound for an id the fake never made.
    fn name_of(w: &World, id: &str) -> Result<String, Status> {
        w.containers
            .get(id)
            .map(|c| c.name.clone())
            .ok_or_else(|| Status::not_found(format!("container {id}")))
    }
}
