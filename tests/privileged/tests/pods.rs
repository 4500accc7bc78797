//! criusd's RuntimeService so far: Version, Status (NetworkReady from the CNI config), RuntimeConfig, and pod
//! sandboxes: pinned namespaces with the pod's hostname, a real CNI network (Debian's bridge and host-local
//! plugins, on a bridge and subnet of the test's own), records that survive a criusd restart, idempotent Stop
//! and Remove, and nothing left behind. What needs cgroup v2 (resources) is in vm_pods.rs.

use std::path::Path;
use std::process::Command;

use crius_privileged_tests::cri::{
    Client, client, config, container, containers, create, cremove, cstatus, cstop, entries, eventually,
    host_network, import_busybox, in_20s, list, remove, run, start, status, stop, wait_state,
};
use crius_test_support::cni::Network;
use crius_test_support::daemon::Daemon;
use crius_test_support::require_root;
use crius_test_support::shims::shim_pids;
use k8s_cri::v1 as cri;
use tonic::Code;

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
