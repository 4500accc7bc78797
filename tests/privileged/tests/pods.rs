//! criusd's RuntimeService so far: Version, Status (NetworkReady from the CNI config), RuntimeConfig, and pod
//! sandboxes: pinned namespaces with the pod's hostname, a real CNI network (Debian's bridge and host-local
//! plugins, on a bridge and subnet of the test's own), records that survive a criusd restart, idempotent Stop
//! and Remove, and nothing left behind.

use std::path::Path;
use std::process::Command;

use crius_test_support::cni::Network;
use crius_test_support::daemon::Daemon;
use crius_test_support::require_root;
use crius_test_support::shims::shim_pids;
use k8s_cri::v1 as cri;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use tonic::Code;

type Client = RuntimeServiceClient<tonic::transport::Channel>;

async fn client(d: &Daemon) -> Client {
    let ch = crius_api::connect(&d.socket().display().to_string())
        .await
        .unwrap();
    RuntimeServiceClient::new(ch)
}

fn config(name: &str, uid: &str) -> cri::PodSandboxConfig {
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
fn host_network(mut config: cri::PodSandboxConfig) -> cri::PodSandboxConfig {
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

async fn run(c: &mut Client, config: cri::PodSandboxConfig) -> Result<String, tonic::Status> {
    c.run_pod_sandbox(cri::RunPodSandboxRequest {
        config: Some(config),
        runtime_handler: String::new(),
    })
    .await
    .map(|r| r.into_inner().pod_sandbox_id)
}

async fn status(c: &mut Client, id: &str) -> Result<cri::PodSandboxStatus, tonic::Status> {
    c.pod_sandbox_status(cri::PodSandboxStatusRequest {
        pod_sandbox_id: id.into(),
        verbose: false,
    })
    .await
    .map(|r| r.into_inner().status.unwrap())
}

async fn list(c: &mut Client, filter: Option<cri::PodSandboxFilter>) -> Vec<String> {
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

async fn stop(c: &mut Client, id: &str) -> Result<(), tonic::Status> {
    c.stop_pod_sandbox(cri::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .map(drop)
}

async fn remove(c: &mut Client, id: &str) -> Result<(), tonic::Status> {
    c.remove_pod_sandbox(cri::RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .map(drop)
}

async fn network_ready(c: &mut Client) -> cri::RuntimeCondition {
    let st = c
        .status(cri::StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    st.status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.r#type == "NetworkReady")
        .unwrap()
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn nsenter(args: &[&str]) -> String {
    let out = Command::new("nsenter").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "nsenter {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn version_status_and_a_pod_without_a_network_config() {
    require_root();
    let empty = tempfile::tempdir().unwrap();
    let d = Daemon::start(&["--cni-conf-dir", &empty.path().display().to_string()]);
    let mut c = client(&d).await;
    let v = c
        .version(cri::VersionRequest {
            version: "0.1.0".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            v.version.as_str(),
            v.runtime_name.as_str(),
            v.runtime_api_version.as_str()
        ),
        ("0.1.0", "crius", "v1")
    );
    let rc = c
        .runtime_config(cri::RuntimeConfigRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        rc.linux.unwrap().cgroup_driver,
        cri::CgroupDriver::Cgroupfs as i32
    );
    let st = c
        .status(cri::StatusRequest { verbose: true })
        .await
        .unwrap()
        .into_inner();
    let conds = st.status.unwrap().conditions;
    assert!(conds.iter().any(|c| c.r#type == "RuntimeReady" && c.status));
    let net = conds.iter().find(|c| c.r#type == "NetworkReady").unwrap();
    assert!(!net.status);
    assert_eq!(net.reason, "NetworkPluginNotReady");
    assert!(
        net.message.contains(&empty.path().display().to_string()),
        "{}",
        net.message
    );
    assert!(st.info["config"].contains("cniConfDir"), "{:?}", st.info);

    // A pod needs the network: refused, naming why, and nothing is left.
    let e = run(&mut c, config("web", "u1")).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("no network config"), "{}", e.message());
    assert!(entries(&d.root().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("ns")).is_empty());
    // A host-network pod needs none.
    let host = host_network(config("host", "u2"));
    let id = run(&mut c, host).await.unwrap();
    let s = status(&mut c, &id).await.unwrap();
    assert_eq!(s.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(s.network.unwrap().ip, "");
    // Its own IPC namespace (and /dev/shm), the host's network and UTS.
    let mut pinned = entries(&d.state().join("ns").join(&id));
    pinned.sort();
    assert_eq!(pinned, ["ipc", "shm"]);
    remove(&mut c, &id).await.unwrap();
    assert!(entries(&d.state().join("ns")).is_empty());

    // Bad requests are named.
    let mut nameless = config("", "u3");
    nameless.metadata.as_mut().unwrap().name.clear();
    let e = run(&mut c, nameless).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    let e = c
        .create_container(cri::CreateContainerRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("config is missing"), "{}", e.message());
    let e = c.exec(cri::ExecRequest::default()).await.unwrap_err();
    assert_eq!(e.code(), Code::Unimplemented);
    assert!(e.message().contains("Exec"), "{}", e.message());
    let e = status(&mut c, "nope").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("\"nope\""));
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn pods_get_pinned_namespaces_and_a_cni_network() {
    require_root();
    let net = Network::new();
    let args = net.daemon_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut d = Daemon::start(&args);
    let mut c = client(&d).await;
    let ready = network_ready(&mut c).await;
    assert!(ready.status, "{ready:?}");

    let mut a_conf = config("pod-a", "ua");
    a_conf.dns_config = Some(cri::DnsConfig {
        servers: vec!["10.96.0.10".into()],
        searches: vec!["default.svc.cluster.local".into()],
        options: vec!["ndots:5".into()],
    });
    let a = run(&mut c, a_conf.clone()).await.unwrap();
    let b = run(&mut c, config("pod-b", "ub")).await.unwrap();
    assert_eq!(a.len(), 64);
    let sa = status(&mut c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(sa.metadata.as_ref().unwrap().name, "pod-a");
    assert_eq!(sa.annotations["note"], "kept verbatim");
    let ip_a = sa.network.unwrap().ip;
    let ip_b = status(&mut c, &b).await.unwrap().network.unwrap().ip;
    assert!(ip_a.starts_with(&net.subnet_prefix), "{ip_a}");
    assert!(ip_b.starts_with(&net.subnet_prefix) && ip_a != ip_b, "{ip_b}");

    // The namespaces: the pod's hostname, lo up, eth0 with the reported address; pods reach each other.
    let pins = d.state().join("ns").join(&a);
    let netns = format!("--net={}", pins.join("net").display());
    let uts = format!("--uts={}", pins.join("uts").display());
    assert_eq!(nsenter(&[&uts, "hostname"]).trim(), "pod-a");
    assert!(nsenter(&[&netns, "ip", "-o", "link", "show", "lo"]).contains("UP"));
    assert!(nsenter(&[&netns, "ip", "-o", "-4", "addr", "show", "eth0"]).contains(&format!("{ip_a}/24")));
    nsenter(&[&netns, "busybox", "ping", "-c", "1", "-W", "5", &ip_b]);
    // The files its containers will mount.
    let files = d.root().join("sandboxes").join(&a);
    assert_eq!(
        std::fs::read_to_string(files.join("resolv.conf")).unwrap(),
        "search default.svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
    );
    assert_eq!(
        std::fs::read_to_string(files.join("hostname")).unwrap(),
        "pod-a\n"
    );

    // One sandbox per pod attempt.
    let e = run(&mut c, a_conf).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists);
    assert!(e.message().contains(&a), "{}", e.message());

    // Listing, with filters.
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(list(&mut c, None).await, both);
    let by_label = cri::PodSandboxFilter {
        label_selector: [("app".to_string(), "pod-b".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(list(&mut c, Some(by_label)).await, vec![b.clone()]);
    let by_prefix = cri::PodSandboxFilter {
        id: a[..12].to_string(),
        ..Default::default()
    };
    assert_eq!(list(&mut c, Some(by_prefix)).await, vec![a.clone()]);
    assert_eq!(
        status(&mut c, &a[..12]).await.unwrap().id,
        a,
        "a unique prefix finds it"
    );

    // A criusd restart keeps the pods as they were.
    drop(c);
    d.restart(&args);
    let mut c = client(&d).await;
    let sa = status(&mut c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(sa.network.unwrap().ip, ip_a);

    // Stop: the network and namespaces go, the address is released; stopping again is fine.
    stop(&mut c, &a).await.unwrap();
    let sa = status(&mut c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxNotready as i32);
    assert!(!pins.exists(), "namespace pins left behind");
    assert!(
        !net.ipam_dir().join(&ip_a).exists(),
        "address {ip_a} not released"
    );
    stop(&mut c, &a).await.unwrap();
    let ready_only = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue {
            state: cri::PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    };
    assert_eq!(list(&mut c, Some(ready_only)).await, vec![b.clone()]);
    // Stopping an unknown sandbox is done, as kubelet and critest expect.
    stop(&mut c, "nope").await.unwrap();

    // As after a reboot, b's namespaces are gone: its Remove still has CNI release its address.
    for n in ["net", "ipc", "uts", "shm"] {
        let p = d.state().join("ns").join(&b).join(n);
        nix::mount::umount2(&p, nix::mount::MntFlags::MNT_DETACH).unwrap();
    }
    // Remove (b without a Stop first); removing again, or an unknown id, is fine.
    remove(&mut c, &a).await.unwrap();
    remove(&mut c, &b).await.unwrap();
    remove(&mut c, &b).await.unwrap();
    remove(&mut c, "nope").await.unwrap();
    assert!(list(&mut c, None).await.is_empty());
    assert!(entries(&d.root().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("ns")).is_empty());
    assert!(!net.ipam_dir().join(&ip_b).exists());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&d.state().display().to_string()),
        "mounts left under the state dir"
    );
}

fn container(name: &str, image: &str, script: &str) -> cri::ContainerConfig {
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

async fn create(c: &mut Client, pod: &str, config: cri::ContainerConfig) -> Result<String, tonic::Status> {
    c.create_container(cri::CreateContainerRequest {
        pod_sandbox_id: pod.into(),
        config: Some(config),
        sandbox_config: None,
    })
    .await
    .map(|r| r.into_inner().container_id)
}

async fn start(c: &mut Client, id: &str) {
    c.start_container(cri::StartContainerRequest {
        container_id: id.into(),
    })
    .await
    .unwrap();
}

async fn cstatus(c: &mut Client, id: &str) -> Result<cri::ContainerStatus, tonic::Status> {
    c.container_status(cri::ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    })
    .await
    .map(|r| r.into_inner().status.unwrap())
}

async fn cstop(c: &mut Client, id: &str, timeout: i64) {
    c.stop_container(cri::StopContainerRequest {
        container_id: id.into(),
        timeout,
    })
    .await
    .unwrap();
}

async fn cremove(c: &mut Client, id: &str) {
    c.remove_container(cri::RemoveContainerRequest {
        container_id: id.into(),
    })
    .await
    .unwrap();
}

async fn containers(c: &mut Client, filter: cri::ContainerFilter) -> Vec<String> {
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
fn import_busybox(d: &Daemon) {
    let layout = d.dir().join("layout");
    let archive = d.dir().join("busybox.tar");
    crius_test_support::image::busybox(&layout, "busybox:latest").unwrap();
    crius_test_support::image::write_archive(&layout, &archive).unwrap();
    d.cli_ok(&["images", "import", archive.to_str().unwrap()]);
}

/// A deadline 20 s from now.
fn in_20s() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(20)
}

/// Waits until `done`, failing with `what` once `deadline` passes.
async fn eventually(deadline: std::time::Instant, what: impl Fn() -> String, mut done: impl FnMut() -> bool) {
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{}", what());
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

async fn wait_state(c: &mut Client, id: &str, state: cri::ContainerState) -> cri::ContainerStatus {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let s = cstatus(c, id).await.unwrap();
        if s.state == state as i32 {
            return s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{id} never reached {state:?}: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn containers_run_in_their_pod_through_its_shim() {
    require_root();
    let net = Network::new();
    let args = net.daemon_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut d = Daemon::start(&args);
    import_busybox(&d);
    let mut c = client(&d).await;
    let logs = d.dir().join("logs");
    let data = d.dir().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("file"), "from the host").unwrap();
    let mut pod_conf = config("pod-c", "uc");
    pod_conf.log_directory = logs.display().to_string();
    let pod = run(&mut c, pod_conf).await.unwrap();
    let ip = status(&mut c, &pod).await.unwrap().network.unwrap().ip;

    // c1: the pod's hostname and network, env, a read-only host mount; SIGTERM ends it with 3.
    let mut c1 = container(
        "c1",
        "busybox",
        "echo shared > /dev/shm/hello; head -c 100000 /dev/zero > /big; echo hi from $(hostname); echo $FOO; cat /data/file; echo; \
         ip -o -4 addr show eth0; \
         touch /data/x 2>/dev/null || echo read-only; trap 'echo bye; exit 3' TERM; while :; do sleep 0.1; done",
    );
    c1.envs = vec![cri::KeyValue {
        key: "FOO".into(),
        value: "bar".into(),
    }];
    c1.mounts = vec![cri::Mount {
        container_path: "/data".into(),
        host_path: data.display().to_string(),
        readonly: true,
        ..Default::default()
    }];
    let c1_id = create(&mut c, &pod, c1.clone()).await.unwrap();
    assert_eq!(
        cstatus(&mut c, &c1_id).await.unwrap().state,
        cri::ContainerState::ContainerCreated as i32
    );
    let c2_id = create(&mut c, &pod, container("c2", "busybox", "exit 4"))
        .await
        .unwrap();
    let c3_id = create(
        &mut c,
        &pod,
        container("c3", "busybox", "trap '' TERM; while :; do sleep 0.1; done"),
    )
    .await
    .unwrap();

    // Refusals name what is wrong.
    let e = create(&mut c, &pod, c1).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    let e = create(&mut c, &pod, container("x", "nosuch:image", "true"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("pull it first"), "{}", e.message());
    let mut group_only = container("x", "busybox", "true");
    group_only.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            run_as_group: Some(cri::Int64Value { value: 5 }),
            ..Default::default()
        }),
        ..Default::default()
    });
    let e = create(&mut c, &pod, group_only).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("run_as_group"), "{}", e.message());
    let e = create(&mut c, "nope", container("x", "busybox", "true"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("sandbox \"nope\""), "{}", e.message());

    for id in [&c1_id, &c2_id, &c3_id] {
        start(&mut c, id).await;
    }
    let s1 = wait_state(&mut c, &c1_id, cri::ContainerState::ContainerRunning).await;
    assert!(s1.started_at >= s1.created_at && s1.created_at > 0);
    assert_eq!(s1.log_path, logs.join("c1/0.log").display().to_string());
    assert!(s1.image_ref.starts_with("sha256:"));
    let s2 = wait_state(&mut c, &c2_id, cri::ContainerState::ContainerExited).await;
    assert_eq!((s2.exit_code, s2.reason.as_str()), (4, "Error"));
    assert!(s2.finished_at >= s2.started_at);

    let log1 = logs.join("c1/0.log");
    eventually(
        in_20s(),
        || format!("c1's log: {:?}", std::fs::read_to_string(&log1)),
        || {
            std::fs::read_to_string(&log1)
                .unwrap_or_default()
                .contains("read-only")
        },
    )
    .await;
    let text = std::fs::read_to_string(&log1).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .map(|l| l.splitn(4, ' ').nth(3).unwrap_or(""))
        .collect();
    assert_eq!(lines[..3], ["hi from pod-c", "bar", "from the host"], "{text}");
    assert!(
        lines[3].contains(&format!("inet {ip}/24")),
        "the pod's network: {text}"
    );
    assert_eq!(lines[4], "read-only");

    // ExecSync: output, exit code, the container's environment; a timeout kills the process.
    let exec = |cmd: &[&str], timeout: i64| cri::ExecSyncRequest {
        container_id: c1_id.clone(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout,
    };
    let r = c
        .exec_sync(exec(&["sh", "-c", "echo out $FOO; echo err >&2; exit 5"], 10))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (r.stdout.as_slice(), r.stderr.as_slice(), r.exit_code),
        (&b"out bar\n"[..], &b"err\n"[..], 5)
    );
    let e = c.exec_sync(exec(&["sleep", "37"], 1)).await.unwrap_err();
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    let ps = c.exec_sync(exec(&["ps"], 10)).await.unwrap().into_inner();
    assert!(
        !String::from_utf8_lossy(&ps.stdout).contains("sleep 37"),
        "the timed-out process lives on"
    );
    let e = c.exec_sync(exec(&[], 10)).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);

    // Stats: cpu (cumulative, then per second from the second sample), the writable layer.
    let stats = |c: &mut Client| {
        let id = c1_id.clone();
        let mut c = c.clone();
        async move {
            c.container_stats(cri::ContainerStatsRequest { container_id: id })
                .await
                .unwrap()
                .into_inner()
                .stats
                .unwrap()
        }
    };
    let first = stats(&mut c).await;
    assert_eq!(
        first.attributes.as_ref().unwrap().metadata.as_ref().unwrap().name,
        "c1"
    );
    assert!(
        first
            .cpu
            .as_ref()
            .unwrap()
            .usage_core_nano_seconds
            .as_ref()
            .unwrap()
            .value
            > 0,
        "{first:?}"
    );
    let layer = first.writable_layer.unwrap();
    assert!(layer.used_bytes.unwrap().value >= 100_000, "{layer:?}");
    assert!(layer.inodes_used.unwrap().value >= 1);
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let second = stats(&mut c).await;
    assert!(second.cpu.unwrap().usage_nano_cores.is_some());
    let listed = c
        .list_container_stats(cri::ListContainerStatsRequest {
            filter: Some(cri::ContainerStatsFilter {
                pod_sandbox_id: pod.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .stats;
    let mut ids: Vec<String> = listed
        .iter()
        .map(|s| s.attributes.as_ref().unwrap().id.clone())
        .collect();
    ids.sort();
    let mut running_ids = vec![c1_id.clone(), c3_id.clone()];
    running_ids.sort();
    assert_eq!(ids, running_ids, "the running containers of the pod");

    // Listing.
    let running = cri::ContainerFilter {
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    let mut both = vec![c1_id.clone(), c3_id.clone()];
    both.sort();
    assert_eq!(containers(&mut c, running).await, both);
    let by_label = cri::ContainerFilter {
        label_selector: [("role".to_string(), "c2".to_string())].into(),
        pod_sandbox_id: pod.clone(),
        ..Default::default()
    };
    assert_eq!(containers(&mut c, by_label).await, vec![c2_id.clone()]);

    // Stop: SIGTERM and the grace period (c1's trap exits 3); c3 ignores SIGTERM and gets SIGKILL.
    cstop(&mut c, &c1_id, 10).await;
    let s1 = cstatus(&mut c, &c1_id).await.unwrap();
    assert_eq!(s1.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(s1.exit_code, 3);
    assert!(std::fs::read_to_string(&log1).unwrap().contains(" stdout F bye"));
    cstop(&mut c, &c3_id, 1).await;
    assert_eq!(cstatus(&mut c, &c3_id).await.unwrap().exit_code, 137);
    cstop(&mut c, &c3_id, 1).await;
    cstop(&mut c, "nope", 1).await;

    // A privileged container gets every capability criusd holds (these machines lack CAP_SYS_RESOURCE).
    let mut privileged = container("priv", "busybox", "grep CapEff /proc/self/status; sleep 1000");
    privileged.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let priv_id = create(&mut c, &pod, privileged).await.unwrap();
    start(&mut c, &priv_id).await;
    wait_state(&mut c, &priv_id, cri::ContainerState::ContainerRunning).await;
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    let bounding = ours
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap()
        .trim()
        .to_string();
    let log = logs.join("priv/0.log");
    eventually(
        in_20s(),
        || "priv logged nothing".into(),
        || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("CapEff")
        },
    )
    .await;
    assert!(
        std::fs::read_to_string(&log)
            .unwrap()
            .contains(&format!("CapEff:\t{bounding}"))
    );
    cremove(&mut c, &priv_id).await;

    // kubelet's log rotation: rename, then ReopenContainerLog; a stopped container's log cannot be reopened.
    let c5_id = create(
        &mut c,
        &pod,
        container("c5", "busybox", "while :; do echo tick; sleep 0.1; done"),
    )
    .await
    .unwrap();
    start(&mut c, &c5_id).await;
    let log5 = logs.join("c5/0.log");
    let has_tick = |p: &Path| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .contains(" stdout F tick")
    };
    let deadline = in_20s();
    eventually(deadline, || "c5 logged nothing".into(), || has_tick(&log5)).await;
    std::fs::rename(&log5, logs.join("c5/0.log.1")).unwrap();
    // The pod's containers share /dev/shm (c1 wrote there).
    let shm = c
        .exec_sync(cri::ExecSyncRequest {
            container_id: c5_id.clone(),
            cmd: vec!["cat".into(), "/dev/shm/hello".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&shm.stdout), "shared\n");
    c.reopen_container_log(cri::ReopenContainerLogRequest {
        container_id: c5_id.clone(),
    })
    .await
    .unwrap();
    eventually(
        deadline,
        || "nothing in the reopened log".into(),
        || has_tick(&log5),
    )
    .await;
    let e = c
        .reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: c1_id.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = c.exec_sync(exec(&["true"], 10)).await.unwrap_err();
    assert_eq!(
        e.code(),
        Code::FailedPrecondition,
        "exec in a stopped container: {e:?}"
    );

    // A criusd restart keeps what it knew.
    drop(c);
    d.restart(&args);
    let mut c = client(&d).await;
    let s1 = cstatus(&mut c, &c1_id).await.unwrap();
    assert_eq!(
        (s1.state, s1.exit_code),
        (cri::ContainerState::ContainerExited as i32, 3)
    );

    // Remove is idempotent; the pod's Stop kills what still runs; its Remove removes the rest.
    cremove(&mut c, &c1_id).await;
    cremove(&mut c, &c1_id).await;
    assert_eq!(cstatus(&mut c, &c1_id).await.unwrap_err().code(), Code::NotFound);
    let c4_id = create(&mut c, &pod, container("c4", "busybox", "sleep 1000"))
        .await
        .unwrap();
    start(&mut c, &c4_id).await;
    wait_state(&mut c, &c4_id, cri::ContainerState::ContainerRunning).await;
    stop(&mut c, &pod).await.unwrap();
    assert_eq!(cstatus(&mut c, &c4_id).await.unwrap().exit_code, 137);
    remove(&mut c, &pod).await.unwrap();
    assert!(
        containers(&mut c, cri::ContainerFilter::default())
            .await
            .is_empty()
    );
    let owner = d.socket().display().to_string();
    eventually(
        in_20s(),
        || "the pod's shim did not exit".into(),
        || shim_pids(&owner).is_empty(),
    )
    .await;
    assert!(entries(&d.root().join("containers")).is_empty());
    assert!(entries(&d.state().join("containers")).is_empty());
    assert!(entries(&d.root().join("images/snapshots")).is_empty());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&d.dir().display().to_string()),
        "mounts left under the daemon's dir"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn container_events_follow_create_start_exit_and_remove() {
    require_root();
    let d = Daemon::start(&[]);
    import_busybox(&d);
    let mut c = client(&d).await;
    let mut events = c
        .get_container_events(cri::GetEventsRequest {})
        .await
        .unwrap()
        .into_inner();
    let pod_conf = host_network(config("events", "ue"));
    let pod = run(&mut c, pod_conf).await.unwrap();
    let id = create(&mut c, &pod, container("brief", "busybox", "sleep 0.3; exit 4"))
        .await
        .unwrap();
    start(&mut c, &id).await;
    wait_state(&mut c, &id, cri::ContainerState::ContainerExited).await;
    cremove(&mut c, &id).await;
    use cri::ContainerEventType as T;
    let mut seen = Vec::new();
    for want in [
        T::ContainerCreatedEvent,
        T::ContainerStartedEvent,
        T::ContainerStoppedEvent,
        T::ContainerDeletedEvent,
    ] {
        let e = tokio::time::timeout(std::time::Duration::from_secs(10), events.message())
            .await
            .expect("an event within 10 s")
            .unwrap()
            .unwrap();
        assert_eq!(
            (e.container_id.as_str(), e.container_event_type),
            (id.as_str(), want as i32),
            "after {seen:?}"
        );
        assert_eq!(
            e.pod_sandbox_status.as_ref().map(|s| s.id.as_str()),
            Some(pod.as_str())
        );
        assert!(e.created_at > 0);
        seen.push(want);
        let statuses = &e.containers_statuses;
        if want == T::ContainerStoppedEvent {
            // The statuses come with the event: kubelet's evented PLEG reads them instead of listing.
            let s = statuses.iter().find(|s| s.id == id).expect("its status");
            assert_eq!(
                (s.state, s.exit_code),
                (cri::ContainerState::ContainerExited as i32, 4)
            );
        }
        if want == T::ContainerDeletedEvent {
            assert!(
                statuses.iter().all(|s| s.id != id),
                "deleted: not among the statuses"
            );
        }
    }
    stop(&mut c, &pod).await.unwrap();
    remove(&mut c, &pod).await.unwrap();
}

fn cgroup_file(id: &str, file: &str) -> String {
    std::fs::read_to_string(format!("/sys/fs/cgroup/crius/{id}/{file}"))
        .unwrap_or_else(|e| panic!("/sys/fs/cgroup/crius/{id}/{file}: {e}"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs cgroup v2 with controllers: hack/test.sh runs the vm_* tests inside hack/vm"]
async fn vm_container_resources_are_set_and_updated_live() {
    require_root();
    assert!(
        crius_test_support::pure_cgroup_v2(),
        "needs a pure cgroup v2 host: hack/test.sh runs the vm_* tests inside hack/vm"
    );
    let d = Daemon::start(&[]);
    import_busybox(&d);
    let mut c = client(&d).await;
    // A host-network pod: no CNI needed in the VM.
    let pod_conf = host_network(config("resize", "ur"));
    let pod = run(&mut c, pod_conf).await.unwrap();
    let mut conf = container("app", "busybox", "sleep 1000");
    conf.linux = Some(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 64 << 20,
            unified: [("memory.oom.group".to_string(), "1".to_string())].into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let id = create(&mut c, &pod, conf).await.unwrap();
    start(&mut c, &id).await;
    wait_state(&mut c, &id, cri::ContainerState::ContainerRunning).await;
    assert_eq!(cgroup_file(&id, "cpu.max"), "50000 100000");
    assert_eq!(cgroup_file(&id, "memory.max"), (64u64 << 20).to_string());
    // shares 512 → weight 59 (the quadratic shares-to-weight formula).
    assert_eq!(cgroup_file(&id, "cpu.weight"), "59");
    assert_eq!(cgroup_file(&id, "memory.oom.group"), "1");
    let procs = cgroup_file(&id, "cgroup.procs");
    let st = c
        .container_stats(cri::ContainerStatsRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    let mem = st.memory.unwrap();
    let (used, avail) = (mem.usage_bytes.unwrap().value, mem.available_bytes.unwrap().value);
    assert!(
        used > 0 && avail > 0 && avail + mem.working_set_bytes.unwrap().value == 64 << 20,
        "{mem:?}"
    );

    // In-place resize: kubelet sends the new values; the same process gets them.
    let update = |r: cri::LinuxContainerResources| cri::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(r),
        ..Default::default()
    };
    c.update_container_resources(update(cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 150_000,
        memory_limit_in_bytes: 128 << 20,
        ..Default::default()
    }))
    .await
    .unwrap();
    assert_eq!(cgroup_file(&id, "cpu.max"), "150000 100000");
    assert_eq!(cgroup_file(&id, "memory.max"), (128u64 << 20).to_string());
    assert_eq!(cgroup_file(&id, "cgroup.procs"), procs, "the same process");
    let reported = cstatus(&mut c, &id)
        .await
        .unwrap()
        .resources
        .unwrap()
        .linux
        .unwrap();
    assert_eq!(
        (
            reported.cpu_period,
            reported.cpu_quota,
            reported.cpu_shares,
            reported.memory_limit_in_bytes
        ),
        (100_000, 150_000, 512, 128 << 20),
        "the applied values, merged over the created ones"
    );
    assert_eq!(reported.unified["memory.oom.group"], "1");

    // A memory limit below what the container uses is refused, naming why; nothing changes.
    let e = c
        .update_container_resources(update(cri::LinuxContainerResources {
            memory_limit_in_bytes: 4096,
            ..Default::default()
        }))
        .await
        .unwrap_err();
    assert!(e.message().contains("below its current usage"), "{e:?}");
    assert_eq!(cgroup_file(&id, "memory.max"), (128u64 << 20).to_string());
    let reported = cstatus(&mut c, &id)
        .await
        .unwrap()
        .resources
        .unwrap()
        .linux
        .unwrap();
    assert_eq!(reported.memory_limit_in_bytes, 128 << 20);

    // Over its memory limit, a container is OOM-killed, and says so.
    let mut hog = container(
        "hog",
        "busybox",
        "x=$(head -c 200000000 /dev/zero | tr '\\0' x); echo ${#x}",
    );
    hog.linux = Some(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources {
            memory_limit_in_bytes: 32 << 20,
            ..Default::default()
        }),
        ..Default::default()
    });
    let hog_id = create(&mut c, &pod, hog).await.unwrap();
    start(&mut c, &hog_id).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let s = cstatus(&mut c, &hog_id).await.unwrap();
        if s.reason == "OOMKilled" {
            assert_eq!(
                (s.state, s.exit_code),
                (cri::ContainerState::ContainerExited as i32, 137)
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no OOM kill reported: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }

    remove(&mut c, &pod).await.unwrap();
    assert!(
        containers(&mut c, cri::ContainerFilter::default())
            .await
            .is_empty()
    );
}
