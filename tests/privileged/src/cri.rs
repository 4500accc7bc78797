//! criusd's RuntimeService for the pods suites (pods, vm_pods): one wrapper per call, with the test's usual
//! arguments, and [`Pod`]: a criusd of the test's own with the busybox image and one pod sandbox in it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::leftovers::CgroupParent;
use crius_api::cri;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;
use crius_test_support::cni::Network;
use crius_test_support::daemon::Daemon;

/// A RuntimeService client.
pub type Client = RuntimeServiceClient<tonic::transport::Channel>;

/// A client of `d`.
pub async fn client(d: &Daemon) -> Client {
    let ch = crius_api::connect(&d.socket().display().to_string())
        .await
        .unwrap();
    RuntimeServiceClient::new(ch)
}

/// A pod sandbox config named `name`, with a label and an annotation, its hostname its name.
pub fn config(name: &str, uid: &str) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.into(),
            namespace: "default".into(),
            uid: uid.into(),
            attempt: 0,
        }),
        hostname: name.into(),
        labels: [("app".to_string(), name.to_string())].into(),
        annotations: [("note".to_string(), "kept verbatim".to_string())].into(),
        ..Default::default()
    }
}

/// `config` with the host's network namespace (no CNI needed).
pub fn host_network(mut config: cri::PodSandboxConfig) -> cri::PodSandboxConfig {
    config.linux = Some(cri::LinuxPodSandboxConfig {
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                network: cri::NamespaceMode::Node as i32,
                // As kubelet asks for a pod that does not share its process namespace.
                pid: cri::NamespaceMode::Container as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    });
    config
}

/// RunPodSandbox: the sandbox's id.
pub async fn run(c: &mut Client, config: cri::PodSandboxConfig) -> Result<String, tonic::Status> {
    c.run_pod_sandbox(cri::RunPodSandboxRequest {
        config: Some(config),
        runtime_handler: String::new(),
    })
    .await
    .map(|r| r.into_inner().pod_sandbox_id)
}

/// PodSandboxStatus.
pub async fn status(c: &mut Client, id: &str) -> Result<cri::PodSandboxStatus, tonic::Status> {
    c.pod_sandbox_status(cri::PodSandboxStatusRequest {
        pod_sandbox_id: id.into(),
        verbose: false,
    })
    .await
    .map(|r| r.into_inner().status.unwrap())
}

/// ListPodSandbox: the ids, sorted.
pub async fn list(c: &mut Client, filter: Option<cri::PodSandboxFilter>) -> Vec<String> {
    let mut ids: Vec<String> = c
        .list_pod_sandbox(cri::ListPodSandboxRequest { filter })
        .await
        .unwrap()
        .into_inner()
        .items
        .into_iter()
        .map(|s| s.id)
        .collect();
    ids.sort();
    ids
}

/// StopPodSandbox.
pub async fn stop(c: &mut Client, id: &str) -> Result<(), tonic::Status> {
    c.stop_pod_sandbox(cri::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .map(drop)
}

/// RemovePodSandbox.
pub async fn remove(c: &mut Client, id: &str) -> Result<(), tonic::Status> {
    c.remove_pod_sandbox(cri::RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .map(drop)
}

/// A container config: `sh -c script` in `image`, logging to `<name>/0.log`, labelled `role=<name>`.
pub fn container(name: &str, image: &str, script: &str) -> cri::ContainerConfig {
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        command: vec!["sh".into(), "-c".into(), script.into()],
        log_path: format!("{name}/0.log"),
        labels: [("role".to_string(), name.to_string())].into(),
        ..Default::default()
    }
}

/// CreateContainer in pod `pod`: the container's id.
pub async fn create(
    c: &mut Client,
    pod: &str,
    config: cri::ContainerConfig,
) -> Result<String, tonic::Status> {
    c.create_container(cri::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(config),
        sandbox_config: None,
    })
    .await
    .map(|r| r.into_inner().container_id)
}

/// StartContainer, which must succeed.
pub async fn start(c: &mut Client, id: &str) {
    c.start_container(cri::StartContainerRequest {
        container_id: id.into(),
    })
    .await
    .unwrap();
}

/// ContainerStatus.
pub async fn cstatus(c: &mut Client, id: &str) -> Result<cri::ContainerStatus, tonic::Status> {
    c.container_status(cri::ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    })
    .await
    .map(|r| r.into_inner().status.unwrap())
}

/// StopContainer with a grace period of `timeout` seconds, which must succeed.
pub async fn cstop(c: &mut Client, id: &str, timeout: i64) {
    c.stop_container(cri::StopContainerRequest {
        container_id: id.into(),
        timeout,
    })
    .await
    .unwrap();
}

/// RemoveContainer, which must succeed.
pub async fn cremove(c: &mut Client, id: &str) {
    c.remove_container(cri::RemoveContainerRequest {
        container_id: id.into(),
    })
    .await
    .unwrap();
}

/// ExecSync of `sh -c script` in container `id`, 10 s at most, which must be answered: (exit code, stdout,
/// stderr). [`Pod::sh`] for a pod's own client.
pub async fn sh(c: &mut Client, id: &str, script: &str) -> (i32, String, String) {
    let r = c
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.into(),
            cmd: vec!["sh".into(), "-c".into(), script.into()],
            timeout: 10,
        })
        .await
        .unwrap_or_else(|e| panic!("ExecSync sh -c {script:?} in {id}: {e}"))
        .into_inner();
    (
        r.exit_code,
        String::from_utf8_lossy(&r.stdout).into_owned(),
        String::from_utf8_lossy(&r.stderr).into_owned(),
    )
}

/// ListContainers: the ids, sorted.
pub async fn containers(c: &mut Client, filter: cri::ContainerFilter) -> Vec<String> {
    let mut ids: Vec<String> = c
        .list_containers(cri::ListContainersRequest { filter: Some(filter) })
        .await
        .unwrap()
        .into_inner()
        .containers
        .into_iter()
        .map(|c| c.id)
        .collect();
    ids.sort();
    ids
}

/// Imports the test busybox image into `d` (as `busybox:latest`), offline.
pub fn import_busybox(d: &Daemon) {
    let layout = crius_test_support::image::busybox_layout();
    d.cli_ok(&["images", "import", &layout.display().to_string()]);
}

/// A deadline 20 s from now.
pub fn in_20s() -> Instant {
    Instant::now() + Duration::from_secs(20)
}

/// Waits until `done`, failing with `what` once `deadline` passes.
pub async fn eventually(deadline: Instant, what: impl Fn() -> String, mut done: impl FnMut() -> bool) {
    while !done() {
        assert!(Instant::now() < deadline, "{}", what());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (20 s at most) until container `id` is in `state`; its status then.
pub async fn wait_state(c: &mut Client, id: &str, state: cri::ContainerState) -> cri::ContainerStatus {
    let deadline = in_20s();
    loop {
        let s = cstatus(c, id).await.unwrap();
        if s.state == state as i32 {
            return s;
        }
        assert!(Instant::now() < deadline, "{id} never reached {state:?}: {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The records criusd holds in record directory `dir` (`<root>/containers`, `<root>/sandboxes`): the keys of
/// its journal, and anything else in the directory (which should not be there).
pub fn records(dir: &Path) -> Vec<String> {
    let journal = dir.join(crius_cri::store::JOURNAL);
    let mut left: Vec<String> = crius_cri::store::journal::keys(&journal)
        .unwrap_or_else(|e| vec![format!("an unreadable journal: {e}")])
        .into_iter()
        .map(|k| format!("record {k}"))
        .collect();
    left.extend(
        entries(dir)
            .into_iter()
            .filter(|e| e != crius_cri::store::JOURNAL),
    );
    left
}

/// The names in `dir` (none if it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A criusd of the test's own with the busybox image imported, and one pod sandbox in it whose containers log
/// under [`Pod::logs`]. Dropping it stops criusd and cleans up what its containers left (see [`Daemon`]).
pub struct Pod {
    /// A client of the daemon.
    pub c: Client,
    /// The sandbox's id.
    pub id: String,
    /// The sandbox's log directory.
    pub logs: PathBuf,
    /// The daemon.
    pub d: Daemon,
    // Dropped after the daemon: the bridge and the cgroup parent go once the pod's containers have.
    net: Option<Network>,
    cgroup_parent: Option<CgroupParent>,
    args: Vec<String>,
}

impl Pod {
    /// Pod `name` on a CNI network of the test's own.
    pub async fn on_network(name: &str) -> Pod {
        let net = Network::new();
        let args = net.daemon_args();
        Pod::start(config(name, &format!("uid-{name}")), args, Some(net), None).await
    }

    /// Pod `conf` (as the test made it) on a CNI network of the test's own.
    pub async fn on_network_with(conf: cri::PodSandboxConfig) -> Pod {
        let net = Network::new();
        let args = net.daemon_args();
        Pod::start(conf, args, Some(net), None).await
    }

    /// Pod `name` in the host's network namespace (no CNI needed), in criusd's default cgroup parent.
    pub async fn on_host_network(name: &str) -> Pod {
        let conf = host_network(config(name, &format!("uid-{name}")));
        Pod::start(conf, Vec::new(), None, None).await
    }

    /// Pod `name` in the host's network namespace, its criusd started with `args` added.
    pub async fn on_host_network_with(name: &str, args: Vec<String>) -> Pod {
        let conf = host_network(config(name, &format!("uid-{name}")));
        Pod::start(conf, args, None, None).await
    }

    /// Pod `name` for the VM: in the host's network namespace (the VM has no CNI), and in a cgroup parent of its
    /// own (see [`Pod::cgroup`]).
    pub async fn in_the_vm(name: &str) -> Pod {
        Pod::in_the_vm_with(name, Vec::new()).await
    }

    /// Pod `name` for the VM ([`Pod::in_the_vm`]), its criusd started with `args` added.
    pub async fn in_the_vm_with(name: &str, args: Vec<String>) -> Pod {
        let parent = CgroupParent::new("crius-test-pod");
        let mut conf = host_network(config(name, &format!("uid-{name}")));
        conf.linux.as_mut().expect("set by host_network").cgroup_parent = parent.0.clone();
        Pod::start(conf, args, None, Some(parent)).await
    }

    /// Pod `name` for the VM booted with systemd as PID 1: criusd runs with the systemd cgroup driver, and the
    /// pod's `cgroup_parent` is `slice` (a name such as `kubepods-besteffort-pod<uid>.slice`).
    pub async fn under_systemd(name: &str, slice: &str) -> Pod {
        let mut conf = host_network(config(name, &format!("uid-{name}")));
        conf.linux.as_mut().expect("set by host_network").cgroup_parent = slice.into();
        let args = vec!["--cgroup-driver".to_string(), "systemd".to_string()];
        Pod::start(conf, args, None, None).await
    }

    async fn start(
        mut conf: cri::PodSandboxConfig,
        args: Vec<String>,
        net: Option<Network>,
        cgroup_parent: Option<CgroupParent>,
    ) -> Pod {
        let d = Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        import_busybox(&d);
        let mut c = client(&d).await;
        let logs = d.dir().join("logs");
        conf.log_directory = logs.display().to_string();
        let id = run(&mut c, conf).await.unwrap();
        Pod {
            c,
            id,
            logs,
            d,
            net,
            cgroup_parent,
            args,
        }
    }

    /// The cgroup directory of the pod's container `id`, for a pod [`Pod::in_the_vm`].
    pub fn cgroup(&self, id: &str) -> PathBuf {
        let parent = self.cgroup_parent.as_ref().expect("a pod in_the_vm");
        crius_test_support::cgroup2_mount()
            .join(parent.0.trim_start_matches('/'))
            .join(id)
    }

    /// The pod's network, if it has one of its own.
    pub fn net(&self) -> Option<&Network> {
        self.net.as_ref()
    }

    /// ExecSync of `sh -c script` in container `id`, 10 s at most: (exit code, stdout, stderr) (see [`sh`]).
    pub async fn sh(&mut self, id: &str, script: &str) -> (i32, String, String) {
        sh(&mut self.c, id, script).await
    }

    /// Traffic on the pod's eth0: container `id` pings the bridge of the pod's own network once, which must
    /// answer.
    pub async fn ping_gateway(&mut self, id: &str) {
        let gateway = format!("{}1", self.net().expect("a pod on_network").subnet_prefix);
        let (code, out, err) = self.sh(id, &format!("ping -c1 -W2 {gateway}")).await;
        assert_eq!(code, 0, "ping {gateway}: {out}{err}");
    }

    /// Creates container `config` in the pod.
    pub async fn create(&mut self, config: cri::ContainerConfig) -> Result<String, tonic::Status> {
        create(&mut self.c, &self.id, config).await
    }

    /// Creates and starts container `config` in the pod: its id.
    pub async fn started(&mut self, config: cri::ContainerConfig) -> String {
        let id = self.create(config).await.unwrap();
        start(&mut self.c, &id).await;
        id
    }

    /// The log of the pod's container `name` (see [`container`]).
    pub fn log(&self, name: &str) -> PathBuf {
        self.logs.join(name).join("0.log")
    }

    /// What container `name` logged so far.
    pub fn log_text(&self, name: &str) -> String {
        std::fs::read_to_string(self.log(name)).unwrap_or_default()
    }

    /// Waits (20 s at most) until container `name`'s log contains `needle`.
    pub async fn wait_for_log(&self, name: &str, needle: &str) {
        eventually(
            in_20s(),
            || format!("{name}'s log has no {needle:?}: {:?}", self.log_text(name)),
            || self.log_text(name).contains(needle),
        )
        .await;
    }

    /// Restarts criusd on the same directories and connects again.
    pub async fn restart_daemon(&mut self) {
        restart(&mut self.d, &mut self.c, &self.args).await;
    }
}

/// Restarts criusd `d` with `args` on the same directories and connects `c` to it again.
pub async fn restart(d: &mut Daemon, c: &mut Client, args: &[String]) {
    // Hang up before criusd stops, as a kubelet's connection would break: a channel that never connects stands
    // in until the new one.
    *c = RuntimeServiceClient::new(
        tonic::transport::Endpoint::from_static("http://unused.invalid").connect_lazy(),
    );
    d.restart(&args.iter().map(String::as_str).collect::<Vec<_>>());
    *c = client(d).await;
}
