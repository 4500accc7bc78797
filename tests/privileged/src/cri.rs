//! criusd's RuntimeService for the pods suites (pods, vm_pods): one wrapper per call, with the test's usual
//! arguments.

use std::path::Path;
use std::time::{Duration, Instant};

use crius_test_support::daemon::Daemon;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;

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
