//! criusd keeps the times it is given, against real shims and containers: StopContainer of a process that
//! ignores SIGTERM takes its grace period (then SIGKILL), and ExecSync of a command that outlives its timeout
//! answers DeadlineExceeded after that timeout — within 10%, not twice it (a deadline is an answer, not a
//! broken connection to retry on).

use std::time::{Duration, Instant};

use crius_test_support::daemon::Daemon;
use crius_test_support::require_root;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::Code;

type Client = RuntimeServiceClient<tonic::transport::Channel>;

/// A host-network pod (no CNI needed) with one running busybox container that runs `script`.
async fn running(d: &Daemon, c: &mut Client, name: &str, script: &str) -> String {
    let pod = c
        .run_pod_sandbox(cri::RunPodSandboxRequest {
            config: Some(cri::PodSandboxConfig {
                metadata: Some(cri::PodSandboxMetadata {
                    name: name.into(),
                    namespace: "default".into(),
                    uid: format!("uid-{name}"),
                    attempt: 0,
                }),
                linux: Some(cri::LinuxPodSandboxConfig {
                    security_context: Some(cri::LinuxSandboxSecurityContext {
                        namespace_options: Some(cri::NamespaceOption {
                            network: cri::NamespaceMode::Node as i32,
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                log_directory: d.dir().join("logs").display().to_string(),
                ..Default::default()
            }),
            runtime_handler: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
        .pod_sandbox_id;
    let id = c
        .create_container(cri::CreateContainerRequest {
            pod_sandbox_id: pod,
            config: Some(cri::ContainerConfig {
                metadata: Some(cri::ContainerMetadata {
                    name: name.into(),
                    attempt: 0,
                }),
                image: Some(cri::ImageSpec {
                    image: "busybox:latest".into(),
                    ..Default::default()
                }),
                command: vec!["sh".into(), "-c".into(), script.into()],
                log_path: format!("{name}.log"),
                ..Default::default()
            }),
            sandbox_config: None,
        })
        .await
        .unwrap()
        .into_inner()
        .container_id;
    c.start_container(cri::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    id
}

async fn setup() -> (Daemon, Client) {
    require_root();
    let d = Daemon::start(&[]);
    let layout = d.dir().join("layout");
    let archive = d.dir().join("busybox.tar");
    crius_test_support::image::busybox(&layout, "busybox:latest").unwrap();
    crius_test_support::image::write_archive(&layout, &archive).unwrap();
    d.cli_ok(&["images", "import", archive.to_str().unwrap()]);
    let ch = crius_api::connect(&d.socket().display().to_string())
        .await
        .unwrap();
    (d, RuntimeServiceClient::new(ch))
}

fn within_10_percent(what: &str, took: Duration, asked: Duration) {
    assert!(
        took >= asked && took < asked + asked / 10,
        "{what}: asked for {asked:?}, took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn stop_container_keeps_its_grace_period() {
    let (d, mut c) = setup().await;
    // The trap is set before the marker line, so once the line is in the log, SIGTERM is ignored.
    let id = running(
        &d,
        &mut c,
        "stubborn",
        "trap '' TERM; echo trapped; while :; do sleep 1; done",
    )
    .await;
    let log = d.dir().join("logs/stubborn.log");
    let until = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("trapped")
    {
        assert!(Instant::now() < until, "the container never trapped SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let t = Instant::now();
    c.stop_container(cri::StopContainerRequest {
        container_id: id.clone(),
        timeout: 3,
    })
    .await
    .unwrap();
    within_10_percent("StopContainer", t.elapsed(), Duration::from_secs(3));
    let st = c
        .container_status(cri::ContainerStatusRequest {
            container_id: id,
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner()
        .status
        .unwrap();
    assert_eq!(
        (st.state, st.exit_code),
        (cri::ContainerState::ContainerExited as i32, 137)
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn exec_sync_keeps_its_timeout() {
    let (d, mut c) = setup().await;
    let id = running(&d, &mut c, "sleeper", "sleep 600").await;
    let t = Instant::now();
    let e = c
        .exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "60".into()],
            timeout: 3,
        })
        .await
        .unwrap_err();
    within_10_percent("ExecSync", t.elapsed(), Duration::from_secs(3));
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    // The command was killed, and the container runs on.
    let out = c
        .exec_sync(cri::ExecSyncRequest {
            container_id: id,
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "ps -o args | grep -cx 'sleep 60' || true".into(),
            ],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{out:?}");
}
