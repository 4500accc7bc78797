//! criusd's RuntimeService: Version, Status (NetworkReady from the CNI config), RuntimeConfig; pod sandboxes:
//! pinned namespaces with the pod's hostname, a real CNI network (Debian's bridge and host-local plugins, on a
//! bridge and subnet of the test's own), records that survive a criusd restart, idempotent Stop and Remove, and
//! nothing left behind; and containers in them, through the pod's shim: status, logs, ExecSync, stats, listing,
//! stop, log reopening, events. Each case has a criusd of its own. What needs cgroup v2 (resources) is in
//! vm_pods.rs.

use std::path::Path;
use std::process::Command;

use crius_api::cri;
use crius_privileged_tests::cri::{
    Client, Pod, client, config, container, containers, create, cremove, cstatus, cstop, entries, eventually,
    host_network, import_busybox, in_20s, list, records, remove, restart, run, start, status, stop,
    wait_state,
};
use crius_test_support::cni::Network;
use crius_test_support::daemon::Daemon;
use crius_test_support::require_root;
use crius_test_support::shims::shim_pids;
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

/// criusd with an empty CNI config directory (the directory goes with the value).
fn without_a_network_config() -> (Daemon, tempfile::TempDir) {
    require_root();
    let empty = tempfile::tempdir().unwrap();
    let d = Daemon::start(&["--cni-conf-dir", &empty.path().display().to_string()]);
    (d, empty)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn version_runtime_config_and_status_name_the_missing_network_config() {
    let (d, empty) = without_a_network_config();
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
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn without_a_network_config_only_a_host_network_pod_runs() {
    let (d, _empty) = without_a_network_config();
    let mut c = client(&d).await;
    // A pod needs the network: refused, naming why, and nothing is left.
    let e = run(&mut c, config("web", "u1")).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert!(e.message().contains("no network config"), "{}", e.message());
    assert!(records(&d.root().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("sandboxes")).is_empty());
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
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn bad_requests_are_refused_with_their_code_and_what_is_wrong() {
    let (d, _empty) = without_a_network_config();
    let mut c = client(&d).await;
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
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(
        e.message().contains("Exec: stdin, stdout and stderr"),
        "{}",
        e.message()
    );
    let e = status(&mut c, "nope").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("\"nope\""));
}

/// criusd on a CNI network of the test's own, with two pods: a (with a DNS config) and b.
struct TwoPods {
    c: Client,
    a: String,
    b: String,
    a_conf: cri::PodSandboxConfig,
    d: Daemon,
    args: Vec<String>,
    net: Network,
}

impl TwoPods {
    async fn start() -> TwoPods {
        require_root();
        let net = Network::new();
        let args = net.daemon_args();
        let d = Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let mut c = client(&d).await;
        let mut a_conf = config("pod-a", "ua");
        a_conf.dns_config = Some(cri::DnsConfig {
            servers: vec!["10.96.0.10".into()],
            searches: vec!["default.svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        });
        let a = run(&mut c, a_conf.clone()).await.unwrap();
        let b = run(&mut c, config("pod-b", "ub")).await.unwrap();
        TwoPods {
            c,
            a,
            b,
            a_conf,
            d,
            args,
            net,
        }
    }

    async fn ip(&mut self, id: &str) -> String {
        status(&mut self.c, id).await.unwrap().network.unwrap().ip
    }

    /// Where pod `id`'s namespaces are pinned.
    fn pins(&self, id: &str) -> std::path::PathBuf {
        self.d.state().join("ns").join(id)
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn pods_get_pinned_namespaces_an_address_each_and_reach_each_other() {
    let mut p = TwoPods::start().await;
    let ready = network_ready(&mut p.c).await;
    assert!(ready.status, "{ready:?}");
    let (a, b) = (p.a.clone(), p.b.clone());
    assert_eq!(a.len(), 64);
    let sa = status(&mut p.c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(sa.metadata.as_ref().unwrap().name, "pod-a");
    assert_eq!(sa.annotations["note"], "kept verbatim");
    let ip_a = sa.network.unwrap().ip;
    let ip_b = p.ip(&b).await;
    assert!(ip_a.starts_with(&p.net.subnet_prefix), "{ip_a}");
    assert!(ip_b.starts_with(&p.net.subnet_prefix) && ip_a != ip_b, "{ip_b}");

    // The namespaces: the pod's hostname, lo up, eth0 with the reported address; pods reach each other.
    let pins = p.pins(&a);
    let netns = format!("--net={}", pins.join("net").display());
    let uts = format!("--uts={}", pins.join("uts").display());
    assert_eq!(nsenter(&[&uts, "hostname"]).trim(), "pod-a");
    assert!(nsenter(&[&netns, "ip", "-o", "link", "show", "lo"]).contains("UP"));
    assert!(nsenter(&[&netns, "ip", "-o", "-4", "addr", "show", "eth0"]).contains(&format!("{ip_a}/24")));
    nsenter(&[&netns, "busybox", "ping", "-c", "1", "-W", "5", &ip_b]);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_pods_resolv_conf_and_hostname_are_written_for_its_containers() {
    let p = TwoPods::start().await;
    let files = p.d.state().join("sandboxes").join(&p.a);
    assert_eq!(
        std::fs::read_to_string(files.join("resolv.conf")).unwrap(),
        "search default.svc.cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
    );
    assert_eq!(
        std::fs::read_to_string(files.join("hostname")).unwrap(),
        "pod-a\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_second_sandbox_of_one_pod_attempt_is_refused() {
    let mut p = TwoPods::start().await;
    // Another config for the same pod attempt is refused, naming the sandbox that holds it.
    let mut other = p.a_conf.clone();
    other.hostname = "another".into();
    let e = run(&mut p.c, other).await.unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists);
    assert!(e.message().contains(&p.a), "{}", e.message());
    // The same request again is kubelet's retry: it gets the sandbox made.
    assert_eq!(run(&mut p.c, p.a_conf.clone()).await.unwrap(), p.a);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn pods_are_listed_by_label_id_prefix_and_state() {
    let mut p = TwoPods::start().await;
    let (a, b) = (p.a.clone(), p.b.clone());
    let c = &mut p.c;
    let mut both = vec![a.clone(), b.clone()];
    both.sort();
    assert_eq!(list(c, None).await, both);
    let by_label = cri::PodSandboxFilter {
        label_selector: [("app".to_string(), "pod-b".to_string())].into(),
        ..Default::default()
    };
    assert_eq!(list(c, Some(by_label)).await, vec![b.clone()]);
    let by_prefix = cri::PodSandboxFilter {
        id: a[..12].to_string(),
        ..Default::default()
    };
    assert_eq!(list(c, Some(by_prefix)).await, vec![a.clone()]);
    assert_eq!(
        status(c, &a[..12]).await.unwrap().id,
        a,
        "a unique prefix finds it"
    );
    stop(c, &a).await.unwrap();
    let ready_only = cri::PodSandboxFilter {
        state: Some(cri::PodSandboxStateValue {
            state: cri::PodSandboxState::SandboxReady as i32,
        }),
        ..Default::default()
    };
    assert_eq!(list(c, Some(ready_only)).await, vec![b.clone()]);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_criusd_restart_keeps_the_pods_as_they_were() {
    let mut p = TwoPods::start().await;
    let a = p.a.clone();
    let ip_a = p.ip(&a).await;
    restart(&mut p.d, &mut p.c, &p.args).await;
    let sa = status(&mut p.c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxReady as i32);
    assert_eq!(sa.network.unwrap().ip, ip_a);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn stopping_a_pod_releases_its_network_and_namespaces_and_may_be_repeated() {
    let mut p = TwoPods::start().await;
    let a = p.a.clone();
    let ip_a = p.ip(&a).await;
    let pins = p.pins(&a);
    // Stop: the network and namespaces go, the address is released; stopping again is fine.
    stop(&mut p.c, &a).await.unwrap();
    let sa = status(&mut p.c, &a).await.unwrap();
    assert_eq!(sa.state, cri::PodSandboxState::SandboxNotready as i32);
    assert!(!pins.exists(), "namespace pins left behind");
    assert!(
        !p.net.ipam_dir().join(&ip_a).exists(),
        "address {ip_a} not released"
    );
    stop(&mut p.c, &a).await.unwrap();
    // Stopping an unknown sandbox is done, as kubelet and critest expect.
    stop(&mut p.c, "nope").await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn removing_pods_releases_their_addresses_even_with_their_namespaces_gone_and_leaves_nothing() {
    let mut p = TwoPods::start().await;
    let (a, b) = (p.a.clone(), p.b.clone());
    let ip_b = p.ip(&b).await;
    stop(&mut p.c, &a).await.unwrap();
    // As after a reboot, b's namespaces are gone: its Remove still has CNI release its address.
    for n in ["net", "ipc", "uts", "shm"] {
        nix::mount::umount2(&p.pins(&b).join(n), nix::mount::MntFlags::MNT_DETACH).unwrap();
    }
    // Remove (b without a Stop first); removing again, or an unknown id, is fine.
    let (c, d) = (&mut p.c, &p.d);
    remove(c, &a).await.unwrap();
    remove(c, &b).await.unwrap();
    remove(c, &b).await.unwrap();
    remove(c, "nope").await.unwrap();
    assert!(list(c, None).await.is_empty());
    assert!(records(&d.root().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("sandboxes")).is_empty());
    assert!(entries(&d.state().join("ns")).is_empty());
    assert!(!p.net.ipam_dir().join(&ip_b).exists());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&d.state().display().to_string()),
        "mounts left under the state dir"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_container_sees_its_pods_hostname_and_network_its_env_and_a_read_only_host_mount() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let ip = status(&mut p.c, &p.id).await.unwrap().network.unwrap().ip;
    let data = p.d.dir().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::write(data.join("file"), "from the host").unwrap();
    let mut c1 = container(
        "c1",
        "busybox",
        "echo hi from $(hostname); echo $FOO; cat /data/file; echo; ip -o -4 addr show eth0; \
         touch /data/x 2>/dev/null || echo read-only",
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
    p.started(c1).await;
    p.wait_for_log("c1", "read-only").await;
    let text = p.log_text("c1");
    // Records to lines, as kubelet reads them: partial (P) records joined up to the full (F) one.
    let mut lines: Vec<String> = Vec::new();
    let mut partial = String::new();
    for l in text.lines() {
        let mut f = l.splitn(4, ' ');
        let (tag, body) = (f.nth(2).unwrap_or(""), f.next().unwrap_or(""));
        partial.push_str(body);
        if tag != "P" {
            lines.push(std::mem::take(&mut partial));
        }
    }
    assert_eq!(lines[..3], ["hi from pod-c", "bar", "from the host"], "{text}");
    assert!(
        lines[3].contains(&format!("inet {ip}/24")),
        "the pod's network: {text}"
    );
    assert_eq!(lines[4], "read-only");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn container_status_shows_created_running_and_exited_with_times_log_path_and_image() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let c1_id = p.create(container("c1", "busybox", "sleep 1000")).await.unwrap();
    assert_eq!(
        cstatus(&mut p.c, &c1_id).await.unwrap().state,
        cri::ContainerState::ContainerCreated as i32
    );
    let c2_id = p.create(container("c2", "busybox", "exit 4")).await.unwrap();
    for id in [&c1_id, &c2_id] {
        start(&mut p.c, id).await;
    }
    let s1 = wait_state(&mut p.c, &c1_id, cri::ContainerState::ContainerRunning).await;
    assert!(s1.started_at >= s1.created_at && s1.created_at > 0);
    assert_eq!(s1.log_path, p.log("c1").display().to_string());
    assert!(s1.image_ref.starts_with("sha256:"));
    let s2 = wait_state(&mut p.c, &c2_id, cri::ContainerState::ContainerExited).await;
    assert_eq!((s2.exit_code, s2.reason.as_str()), (4, "Error"));
    assert!(s2.finished_at >= s2.started_at);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn create_refuses_a_taken_name_an_absent_image_a_group_without_a_user_and_an_unknown_pod() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let c1 = container("c1", "busybox", "sleep 1000");
    let id = p.create(c1.clone()).await.unwrap();
    let e = p
        .create(container("c1", "busybox", "sleep 999"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains(&id), "names the holder: {}", e.message());
    assert_eq!(
        p.create(c1).await.unwrap(),
        id,
        "the same request again is a retry"
    );
    let e = p
        .create(container("x", "nosuch:image", "true"))
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
    let e = p.create(group_only).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("run_as_group"), "{}", e.message());
    let e = create(&mut p.c, "nope", container("x", "busybox", "true"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("sandbox \"nope\""), "{}", e.message());
}

/// A container whose SIGTERM trap exits 3 after logging `bye`; it has logged `ready` once the trap is set.
fn trapping(name: &str) -> cri::ContainerConfig {
    container(
        name,
        "busybox",
        "trap 'echo bye; exit 3' TERM; echo ready; while :; do sleep 0.1; done",
    )
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn exec_sync_returns_output_and_exit_code_and_kills_what_times_out() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let mut c1 = trapping("c1");
    c1.envs = vec![cri::KeyValue {
        key: "FOO".into(),
        value: "bar".into(),
    }];
    let c1_id = p.started(c1).await;
    p.wait_for_log("c1", "ready").await;
    let c = &mut p.c;
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
    // A command that cannot run is an answer with a shell's exit code (kubelet's exec probes read it).
    for (cmd, code) in [("/nonexistent", 127), ("nonexistent", 127), ("/etc/passwd", 126)] {
        let r = c.exec_sync(exec(&[cmd], 10)).await.unwrap().into_inner();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.exit_code, code, "{cmd}: {err}");
        assert!(err.contains(cmd), "{cmd}: the message names it: {err}");
    }

    cstop(c, &c1_id, 10).await;
    let e = c.exec_sync(exec(&["true"], 10)).await.unwrap_err();
    assert_eq!(
        e.code(),
        Code::FailedPrecondition,
        "exec in a stopped container: {e:?}"
    );
}

/// Three containers of the pod: c1 and c3 run (c1 has written 100 kB to its writable layer), c2 has exited.
async fn two_running_and_one_exited(p: &mut Pod) -> (String, String, String) {
    let c1 = p
        .started(container(
            "c1",
            "busybox",
            "head -c 100000 /dev/zero > /big; echo written; while :; do sleep 0.1; done",
        ))
        .await;
    let c2 = p.started(container("c2", "busybox", "exit 4")).await;
    let c3 = p
        .started(container(
            "c3",
            "busybox",
            "trap '' TERM; while :; do sleep 0.1; done",
        ))
        .await;
    p.wait_for_log("c1", "written").await;
    wait_state(&mut p.c, &c2, cri::ContainerState::ContainerExited).await;
    wait_state(&mut p.c, &c3, cri::ContainerState::ContainerRunning).await;
    (c1, c2, c3)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn container_stats_show_cpu_and_the_writable_layer_and_list_the_pods_running_containers() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let (c1_id, _, c3_id) = two_running_and_one_exited(&mut p).await;
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
    let first = stats(&mut p.c).await;
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
    let second = stats(&mut p.c).await;
    assert!(second.cpu.unwrap().usage_nano_cores.is_some());
    let listed =
        p.c.list_container_stats(cri::ListContainerStatsRequest {
            filter: Some(cri::ContainerStatsFilter {
                pod_sandbox_id: p.id.clone(),
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
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn list_containers_filters_by_state_and_by_label_in_a_pod() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let (c1_id, c2_id, c3_id) = two_running_and_one_exited(&mut p).await;
    let running = cri::ContainerFilter {
        state: Some(cri::ContainerStateValue {
            state: cri::ContainerState::ContainerRunning as i32,
        }),
        ..Default::default()
    };
    let mut both = vec![c1_id.clone(), c3_id.clone()];
    both.sort();
    assert_eq!(containers(&mut p.c, running).await, both);
    let by_label = cri::ContainerFilter {
        label_selector: [("role".to_string(), "c2".to_string())].into(),
        pod_sandbox_id: p.id.clone(),
        ..Default::default()
    };
    assert_eq!(containers(&mut p.c, by_label).await, vec![c2_id.clone()]);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn stop_container_sends_sigterm_then_sigkill_after_the_grace_period() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let c1_id = p.started(trapping("c1")).await;
    let c3_id = p
        .started(container(
            "c3",
            "busybox",
            "trap '' TERM; echo ready; while :; do sleep 0.1; done",
        ))
        .await;
    p.wait_for_log("c1", "ready").await;
    p.wait_for_log("c3", "ready").await;
    let log1 = p.log("c1");
    let c = &mut p.c;
    // Stop: SIGTERM and the grace period (c1's trap exits 3); c3 ignores SIGTERM and gets SIGKILL.
    cstop(c, &c1_id, 10).await;
    let s1 = cstatus(c, &c1_id).await.unwrap();
    assert_eq!(s1.state, cri::ContainerState::ContainerExited as i32);
    assert_eq!(s1.exit_code, 3);
    assert!(std::fs::read_to_string(&log1).unwrap().contains(" stdout F bye"));
    cstop(c, &c3_id, 1).await;
    assert_eq!(cstatus(c, &c3_id).await.unwrap().exit_code, 137);
    cstop(c, &c3_id, 1).await;
    cstop(c, "nope", 1).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_privileged_container_gets_every_capability_criusd_holds() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    // These machines lack CAP_SYS_RESOURCE: the container has what criusd has, not the full set.
    let mut privileged = container("priv", "busybox", "grep CapEff /proc/self/status; sleep 1000");
    privileged.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    let priv_id = p.started(privileged).await;
    wait_state(&mut p.c, &priv_id, cri::ContainerState::ContainerRunning).await;
    let ours = std::fs::read_to_string("/proc/self/status").unwrap();
    let bounding = ours
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap()
        .trim()
        .to_string();
    p.wait_for_log("priv", "CapEff").await;
    assert!(p.log_text("priv").contains(&format!("CapEff:\t{bounding}")));
    cremove(&mut p.c, &priv_id).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn reopen_container_log_follows_kubelets_rotation_and_refuses_a_stopped_container() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let exited = p.started(container("c1", "busybox", "exit 3")).await;
    // kubelet's log rotation: rename, then ReopenContainerLog; a stopped container's log cannot be reopened.
    let c5_id = p
        .started(container(
            "c5",
            "busybox",
            "while :; do echo tick; sleep 0.1; done",
        ))
        .await;
    let log5 = p.log("c5");
    let has_tick = |f: &Path| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .contains(" stdout F tick")
    };
    let deadline = in_20s();
    eventually(deadline, || "c5 logged nothing".into(), || has_tick(&log5)).await;
    std::fs::rename(&log5, p.logs.join("c5/0.log.1")).unwrap();
    p.c.reopen_container_log(cri::ReopenContainerLogRequest {
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
    wait_state(&mut p.c, &exited, cri::ContainerState::ContainerExited).await;
    let e =
        p.c.reopen_container_log(cri::ReopenContainerLogRequest {
            container_id: exited.clone(),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn the_containers_of_a_pod_share_its_dev_shm() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let writer = p
        .started(container("c1", "busybox", "echo shared > /dev/shm/hello"))
        .await;
    wait_state(&mut p.c, &writer, cri::ContainerState::ContainerExited).await;
    let c5_id = p.started(container("c5", "busybox", "sleep 1000")).await;
    wait_state(&mut p.c, &c5_id, cri::ContainerState::ContainerRunning).await;
    let shm =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: c5_id.clone(),
            cmd: vec!["cat".into(), "/dev/shm/hello".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&shm.stdout), "shared\n");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_criusd_restart_keeps_what_it_knew_of_a_pods_containers() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let c1_id = p.started(trapping("c1")).await;
    p.wait_for_log("c1", "ready").await;
    cstop(&mut p.c, &c1_id, 10).await;
    p.restart_daemon().await;
    let s1 = cstatus(&mut p.c, &c1_id).await.unwrap();
    assert_eq!(
        (s1.state, s1.exit_code),
        (cri::ContainerState::ContainerExited as i32, 3)
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn remove_container_may_be_repeated_and_leaves_the_container_unknown() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let c1_id = p.started(container("c1", "busybox", "exit 3")).await;
    wait_state(&mut p.c, &c1_id, cri::ContainerState::ContainerExited).await;
    cremove(&mut p.c, &c1_id).await;
    cremove(&mut p.c, &c1_id).await;
    assert_eq!(
        cstatus(&mut p.c, &c1_id).await.unwrap_err().code(),
        Code::NotFound
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn stopping_a_pod_kills_its_containers_and_removing_it_leaves_nothing_behind() {
    require_root();
    let mut p = Pod::on_network("pod-c").await;
    let c2_id = p.started(container("c2", "busybox", "exit 4")).await;
    wait_state(&mut p.c, &c2_id, cri::ContainerState::ContainerExited).await;
    let c4_id = p.started(container("c4", "busybox", "sleep 1000")).await;
    wait_state(&mut p.c, &c4_id, cri::ContainerState::ContainerRunning).await;
    // The pod's Stop kills what still runs; its Remove removes the rest.
    let (c, d) = (&mut p.c, &p.d);
    stop(c, &p.id).await.unwrap();
    assert_eq!(cstatus(c, &c4_id).await.unwrap().exit_code, 137);
    remove(c, &p.id).await.unwrap();
    assert!(containers(c, cri::ContainerFilter::default()).await.is_empty());
    let owner = d.socket().display().to_string();
    eventually(
        in_20s(),
        || "the pod's shim did not exit".into(),
        || shim_pids(&owner).is_empty(),
    )
    .await;
    assert!(records(&d.root().join("containers")).is_empty());
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

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn concurrent_stops_and_removes_of_one_container_succeed_and_a_retried_create_gets_its_id() {
    require_root();
    let mut p = Pod::on_host_network("racing").await;
    for round in 0..3 {
        let id = p.started(container("r", "busybox", "sleep 600")).await;
        let calls: Vec<_> = (0..6)
            .map(|i| {
                let (mut c, id) = (p.c.clone(), id.clone());
                tokio::spawn(async move {
                    if i % 2 == 0 {
                        c.stop_container(cri::StopContainerRequest {
                            container_id: id,
                            timeout: 0,
                        })
                        .await
                        .map(drop)
                    } else {
                        c.remove_container(cri::RemoveContainerRequest { container_id: id })
                            .await
                            .map(drop)
                    }
                })
            })
            .collect();
        for call in calls {
            if let Err(e) = call.await.unwrap() {
                assert_eq!(e.code(), Code::NotFound, "round {round}: {e:?}");
            }
        }
        assert_eq!(cstatus(&mut p.c, &id).await.unwrap_err().code(), Code::NotFound);
    }
    // Two identical CreateContainer calls at once (a kubelet retry): one container, one id for both.
    let config = container("twice", "busybox", "sleep 600");
    let (mut c1, mut c2) = (p.c.clone(), p.c.clone());
    let (a, b) = tokio::join!(
        create(&mut c1, &p.id, config.clone()),
        create(&mut c2, &p.id, config.clone())
    );
    assert_eq!(a.unwrap(), b.unwrap());
    let listed = containers(
        &mut p.c,
        cri::ContainerFilter {
            pod_sandbox_id: p.id.clone(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(listed.len(), 1, "{listed:?}");
}

/// A directory holding the project's CRI proto as `v1.proto` (the stubs' module name the client imports).
fn cri_proto_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let proto = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../proto/cri/runtime/v1/api.proto");
    std::fs::copy(&proto, d.path().join("v1.proto")).unwrap();
    d
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and Debian's python3-grpcio: run through hack/test.sh"]
async fn a_python_grpcio_client_runs_a_pod_over_the_unix_socket() {
    let (d, _empty) = without_a_network_config();
    // gRPC C-core through Python (Debian's python3-grpcio), with its own unix-socket channel and its default
    // :authority; the stubs are generated from the CRI's proto by Debian's grpc_tools.
    let stubs = tempfile::tempdir().unwrap();
    let python = "/usr/bin/python3";
    let protos = cri_proto_dir();
    let protoc = Command::new(python)
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(protos.path())
        .arg(format!("--python_out={}", stubs.path().display()))
        .arg(format!("--grpc_python_out={}", stubs.path().display()))
        .arg("v1.proto")
        .output()
        .unwrap();
    assert!(
        protoc.status.success(),
        "{}",
        String::from_utf8_lossy(&protoc.stderr)
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/cri_client.py");
    let out = Command::new(python)
        .arg(script)
        .arg(stubs.path())
        .arg(d.socket())
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        said.lines().collect::<Vec<_>>(),
        [
            "version crius v1",
            "sandbox 64",
            "containers 0",
            "sandboxes ['py']",
            "empty id INVALID_ARGUMENT",
            "removed"
        ]
    );
}

/// Pids of processes whose command line is `cmd`.
fn pids_running(cmd: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).replace('\0', " ").trim() == cmd)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_shim_killed_under_a_running_container_leaves_it_not_running_and_stop_and_remove_clean_up() {
    require_root();
    let mut p = Pod::on_host_network("shimkill").await;
    // A command line of this test's own, to find the container's process by.
    let sleeper = format!("sleep {}", 600 + std::process::id() % 1000);
    let id = p.started(container("victim", "busybox", &sleeper)).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    let owner = p.d.socket().display().to_string();
    let shims = shim_pids(&owner);
    assert_eq!(shims.len(), 1, "one shim for the pod: {shims:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(shims[0]),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Never Running again: the shim's death is seen, and without a known exit the state is Unknown.
    let deadline = in_20s();
    loop {
        let st = cstatus(&mut p.c, &id).await.unwrap();
        if st.state != cri::ContainerState::ContainerRunning as i32 {
            assert!(
                st.state == cri::ContainerState::ContainerUnknown as i32
                    || (st.state == cri::ContainerState::ContainerExited as i32 && st.exit_code == 137),
                "{st:?}"
            );
            break;
        }
        assert!(std::time::Instant::now() < deadline, "still Running: {st:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Stop and Remove still work, and take the orphaned process, its mounts and files with them.
    cstop(&mut p.c, &id, 0).await;
    cremove(&mut p.c, &id).await;
    assert_eq!(cstatus(&mut p.c, &id).await.unwrap_err().code(), Code::NotFound);
    eventually(
        in_20s(),
        || format!("{sleeper} still runs"),
        || pids_running(&sleeper).is_empty(),
    )
    .await;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&id), "a mount of the container is left");
    assert!(entries(&p.d.state().join("containers")).is_empty());
    assert!(records(&p.d.root().join("containers")).is_empty());
    assert!(entries(&p.d.root().join("images/snapshots")).is_empty());
    let socket = crius_shim::client::socket_address(&owner, "k8s.io", &p.id);
    let socket = socket.trim_start_matches("unix://");
    assert!(
        !Path::new(socket).exists(),
        "the dead shim's socket {socket} is left"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn verbose_container_status_gives_the_pid_spec_and_sandbox_as_containerd_does() {
    require_root();
    let mut p = Pod::on_host_network("verbose").await;
    let sleeper = format!("sleep {}", 2000 + std::process::id() % 1000);
    let id = p.started(container("inspected", "busybox", &sleeper)).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    // Running comes as the shell starts; its cmdline reads `sleep N` once it has exec'd sleep (same pid).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while pids_running(&sleeper).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no `{sleeper}` after 10 s");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let r =
        p.c.container_status(cri::ContainerStatusRequest {
            container_id: id.clone(),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(&r.info["info"]).unwrap();
    let pid = info["pid"].as_u64().unwrap();
    assert_eq!(
        pids_running(&sleeper),
        vec![pid as i32],
        "info.pid is the container's process: {info}"
    );
    assert_eq!(info["sandboxID"], p.id.as_str());
    assert_eq!(
        info["runtimeSpec"]["process"]["args"][2],
        sleeper.as_str(),
        "{info}"
    );
    assert_eq!(info["runtimeType"], "io.containerd.crius.v2");
    let plain = cstatus(&mut p.c, &id).await.unwrap();
    assert_eq!(plain.id, id);
    cstop(&mut p.c, &id, 0).await;
    cremove(&mut p.c, &id).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn pod_sandbox_stats_sum_the_containers_and_count_the_pods_network() {
    require_root();
    let mut p = Pod::on_network("statsp").await;
    let id = p.started(container("busy", "busybox", "sleep 3600")).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    // Traffic on the pod's eth0: a ping of the bridge.
    p.ping_gateway(&id).await;
    let stats =
        p.c.pod_sandbox_stats(cri::PodSandboxStatsRequest {
            pod_sandbox_id: p.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .unwrap();
    assert_eq!(stats.attributes.as_ref().unwrap().id, p.id);
    let linux = stats.linux.unwrap();
    assert_eq!(linux.containers.len(), 1);
    assert_eq!(linux.containers[0].attributes.as_ref().unwrap().id, id);
    let eth0 = linux.network.unwrap().default_interface.unwrap();
    assert_eq!(eth0.name, "eth0");
    assert!(
        eth0.tx_bytes.unwrap().value > 0 && eth0.rx_bytes.unwrap().value > 0,
        "{eth0:?}"
    );
    assert!(linux.process.unwrap().process_count.unwrap().value >= 1);
    // Memory is charged on cgroup v2 only (a hybrid host keeps it on v1): the VM suites check the figures.
    assert!(linux.memory.is_some() && linux.cpu.is_some());
    let listed =
        p.c.list_pod_sandbox_stats(cri::ListPodSandboxStatsRequest {
            filter: Some(cri::PodSandboxStatsFilter {
                id: p.id.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .stats;
    assert_eq!(listed.len(), 1);
    let unknown =
        p.c.pod_sandbox_stats(cri::PodSandboxStatsRequest {
            pod_sandbox_id: "f".repeat(64),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound, "{unknown:?}");
}

/// A directory of the test's own made a shared mount (as kubelet's Bidirectional volumes must be), unmounted
/// with what was mounted under it when dropped.
struct SharedDir(tempfile::TempDir);

impl SharedDir {
    fn new() -> SharedDir {
        let d = tempfile::tempdir().unwrap();
        let run = |args: &[&str]| {
            let out = Command::new("mount").args(args).output().unwrap();
            assert!(
                out.status.success(),
                "mount {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let p = d.path().to_str().unwrap().to_string();
        run(&["--bind", &p, &p]);
        run(&["--make-shared", &p]);
        SharedDir(d)
    }
}

impl Drop for SharedDir {
    fn drop(&mut self) {
        for m in crius_test_support::containerd::mounts_under(self.0.path()) {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_bidirectional_mount_propagates_both_ways_and_host_to_container_one_way() {
    require_root();
    let mut p = Pod::on_host_network("propagation").await;
    let (shared, slave) = (SharedDir::new(), SharedDir::new());
    let mount = |host: &Path, at: &str, prop: cri::MountPropagation| cri::Mount {
        container_path: at.into(),
        host_path: host.display().to_string(),
        propagation: prop as i32,
        ..Default::default()
    };
    let mut c = container(
        "mounter",
        "busybox",
        "mount -t tmpfs tmpfs /shared/from-container && mount -t tmpfs tmpfs /slave/from-container && \
         echo mounted; sleep 3600",
    );
    c.mounts = vec![
        mount(
            shared.0.path(),
            "/shared",
            cri::MountPropagation::PropagationBidirectional,
        ),
        mount(
            slave.0.path(),
            "/slave",
            cri::MountPropagation::PropagationHostToContainer,
        ),
    ];
    c.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        }),
        ..Default::default()
    });
    for d in [&shared, &slave] {
        std::fs::create_dir(d.0.path().join("from-container")).unwrap();
        std::fs::create_dir(d.0.path().join("from-host")).unwrap();
    }
    let id = p.started(c).await;
    p.wait_for_log("mounter", "mounted").await;
    let host_mounts = || crius_test_support::containerd::mounts_under(Path::new("/"));
    let on_host =
        |d: &SharedDir| host_mounts().contains(&d.0.path().join("from-container").display().to_string());
    assert!(
        on_host(&shared),
        "the container's mount reached the host through the Bidirectional mount"
    );
    assert!(!on_host(&slave), "a HostToContainer mount carries nothing back");
    for d in [&shared, &slave] {
        let to = d.0.path().join("from-host");
        nix::mount::mount(
            Some("tmpfs"),
            &to,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
    }
    let r =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["cat".into(), "/proc/mounts".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let inside = String::from_utf8_lossy(&r.stdout);
    for at in ["/shared/from-host", "/slave/from-host"] {
        assert!(
            inside.contains(&format!(" {at} ")),
            "the host's mount reaches {at}: {inside}"
        );
    }
    cstop(&mut p.c, &id, 0).await;
    cremove(&mut p.c, &id).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_pod_sharing_its_pid_namespace_has_an_init_of_its_own_and_sees_every_container() {
    require_root();
    let mut conf = host_network(config("sharepid", "uid-sharepid"));
    let ns = conf
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut())
        .unwrap();
    ns.pid = cri::NamespaceMode::Pod as i32;
    let d = Daemon::start(&[]);
    import_busybox(&d);
    let mut c = client(&d).await;
    conf.log_directory = d.dir().join("logs").display().to_string();
    let pod = run(&mut c, conf).await.unwrap();
    let sleeper = format!("sleep {}", 3000 + std::process::id() % 1000);
    let ids = [
        create(&mut c, &pod, container("first", "busybox", &sleeper))
            .await
            .unwrap(),
        create(&mut c, &pod, container("second", "busybox", "sleep 3600"))
            .await
            .unwrap(),
    ];
    for id in &ids {
        start(&mut c, id).await;
        wait_state(&mut c, id, cri::ContainerState::ContainerRunning).await;
    }
    let exec = |id: &str, cmd: &[&str]| cri::ExecSyncRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout: 10,
    };
    let out = |r: cri::ExecSyncResponse| String::from_utf8_lossy(&r.stdout).into_owned();
    let init = out(c
        .exec_sync(exec(&ids[1], &["cat", "/proc/1/cmdline"]))
        .await
        .unwrap()
        .into_inner());
    assert!(
        init.contains("pid-init"),
        "pid 1 is the pod's init, not a container's process: {init:?}"
    );
    let ps = out(c
        .exec_sync(exec(&ids[1], &["ps", "-o", "args"]))
        .await
        .unwrap()
        .into_inner());
    assert!(
        ps.contains(&sleeper),
        "the second container sees the first's process: {ps}"
    );
    let holder = shim_pids("pid-init");
    assert_eq!(holder.len(), 1, "one init for the pod: {holder:?}");
    stop(&mut c, &pod).await.unwrap();
    remove(&mut c, &pod).await.unwrap();
    eventually(
        in_20s(),
        || format!("the pod's init and {sleeper} are gone"),
        || shim_pids("pid-init").is_empty() && pids_running(&sleeper).is_empty(),
    )
    .await;
    assert!(entries(&d.state().join("ns")).is_empty());
}

/// Pids of the shim binary's processes whose command line has `needle` (crius-test-support looks for shims).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn seccomp_localhost_and_runtime_default_profiles_apply_and_a_missing_one_is_refused_naming_it() {
    require_root();
    let mut p = Pod::on_host_network("seccomp").await;
    let profile = p.d.dir().join("block-chmod.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["chmod", "fchmodat", "fchmodat2"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let with = |name: &str, profile: Option<cri::SecurityProfile>| {
        let mut c = container(name, "busybox", "sleep 3600");
        c.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                seccomp: profile,
                ..Default::default()
            }),
            ..Default::default()
        });
        c
    };
    let localhost = |path: &Path| cri::SecurityProfile {
        profile_type: cri::security_profile::ProfileType::Localhost as i32,
        localhost_ref: path.display().to_string(),
    };
    let confined = p.started(with("confined", Some(localhost(&profile)))).await;
    let free = p.started(with("free", None)).await;
    let default = p
        .started(with(
            "default",
            Some(cri::SecurityProfile {
                profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
                localhost_ref: String::new(),
            }),
        ))
        .await;
    let run = |id: &str, cmd: &[&str]| cri::ExecSyncRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout: 10,
    };
    for (id, mode, chmod_ok) in [(&confined, "2", false), (&free, "0", true), (&default, "2", true)] {
        wait_state(&mut p.c, id, cri::ContainerState::ContainerRunning).await;
        let st =
            p.c.exec_sync(run(id, &["grep", "Seccomp:", "/proc/self/status"]))
                .await
                .unwrap()
                .into_inner();
        let st = String::from_utf8_lossy(&st.stdout);
        assert!(st.contains(&format!("Seccomp:\t{mode}")), "{st}");
        let r =
            p.c.exec_sync(run(id, &["chmod", "400", "/tmp"]))
                .await
                .unwrap()
                .into_inner();
        assert_eq!(
            r.exit_code == 0,
            chmod_ok,
            "{}",
            String::from_utf8_lossy(&r.stderr)
        );
        if !chmod_ok {
            assert!(String::from_utf8_lossy(&r.stderr).contains("Operation not permitted"));
        }
    }
    // RuntimeDefault: ordinary work goes on; a new user namespace (no capability needed) is refused.
    let r =
        p.c.exec_sync(run(
            &default,
            &["sh", "-c", "ls / >/dev/null && date >/dev/null && echo fine"],
        ))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "fine\n",
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let r =
        p.c.exec_sync(run(&default, &["unshare", "-U", "true"]))
            .await
            .unwrap()
            .into_inner();
    assert_ne!(r.exit_code, 0, "RuntimeDefault refuses unshare");
    assert!(
        String::from_utf8_lossy(&r.stderr).contains("Operation not permitted"),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );
    let gone = p.d.dir().join("no-such-profile.json");
    let e = p
        .create(with("missing", Some(localhost(&gone))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains(&gone.display().to_string()), "{e:?}");
    std::fs::write(&gone, "{not json").unwrap();
    let e = p
        .create(with("invalid", Some(localhost(&gone))))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    for id in [&confined, &free, &default] {
        cstop(&mut p.c, id, 0).await;
        cremove(&mut p.c, id).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and the CNI plugins: run through hack/test.sh"]
async fn a_localhost_seccomp_profile_blocking_sethostname_stops_even_cap_sys_admin() {
    require_root();
    // A pod of its own network, so its containers have a UTS namespace of their own: the control container's
    // sethostname changes only that, never the host's name.
    let mut p = Pod::on_network("pod-uts").await;
    let profile = p.d.dir().join("block-sethostname.json");
    std::fs::write(
        &profile,
        r#"{"defaultAction": "SCMP_ACT_ALLOW",
            "syscalls": [{"names": ["sethostname"], "action": "SCMP_ACT_ERRNO"}]}"#,
    )
    .unwrap();
    let with = |name: &str, seccomp: Option<cri::SecurityProfile>| {
        let mut c = container(name, "busybox", "sleep 3600");
        c.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_capabilities: vec!["SYS_ADMIN".into()],
                    ..Default::default()
                }),
                seccomp,
                ..Default::default()
            }),
            ..Default::default()
        });
        c
    };
    let blocked = p
        .started(with(
            "blocked",
            Some(cri::SecurityProfile {
                profile_type: cri::security_profile::ProfileType::Localhost as i32,
                localhost_ref: profile.display().to_string(),
            }),
        ))
        .await;
    let control = p.started(with("control", None)).await;
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    for (id, allowed) in [(&blocked, false), (&control, true)] {
        wait_state(&mut p.c, id, cri::ContainerState::ContainerRunning).await;
        let r =
            p.c.exec_sync(cri::ExecSyncRequest {
                container_id: id.clone(),
                cmd: ["hostname", "renamed-by-test"].map(String::from).to_vec(),
                timeout: 10,
            })
            .await
            .unwrap()
            .into_inner();
        let err = String::from_utf8_lossy(&r.stderr);
        assert_eq!(r.exit_code == 0, allowed, "{id}: {err}");
        if !allowed {
            assert!(err.contains("Operation not permitted"), "{err}");
        }
    }
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap(),
        host_name,
        "the host's name is untouched"
    );
    for id in [&blocked, &control] {
        cstop(&mut p.c, id, 0).await;
        cremove(&mut p.c, id).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn shims_run_the_runtime_from_criusds_sealed_copy() {
    require_root();
    let mut p = Pod::on_host_network("sealed").await;
    let id = p.started(container("sealed", "busybox", "sleep 3600")).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    // criusd made one copy of the runtime (named crius-runtime) and handed it to the pod's shim, which ran
    // `create` and `start` through it.
    let shims = shim_pids(&id);
    assert_eq!(shims.len(), 1, "{shims:?}");
    let holds = |pid: i32| {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .flatten()
            .any(|e| {
                std::fs::read_link(e.path())
                    .is_ok_and(|l| l.display().to_string() == "/memfd:crius-runtime (deleted)")
            })
    };
    assert!(holds(p.d.pid() as i32), "criusd holds the sealed copy");
    assert!(holds(shims[0]), "the shim holds the sealed copy");
    let log = std::fs::read_to_string(p.d.state().join("containers").join(&id).join("shim.log")).unwrap();
    assert!(log.contains("runs from criusd's sealed copy"), "{log}");
    // An exec goes through it too, and works.
    let r =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["echo".into(), "through the copy".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&r.stdout), "through the copy\n");
    cstop(&mut p.c, &id, 0).await;
    cremove(&mut p.c, &id).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_container_with_pid_mode_target_sees_its_targets_processes() {
    require_root();
    let mut p = Pod::on_host_network("pidtarget").await;
    let sleeper = format!("sleep {}", 4000 + std::process::id() % 1000);
    let target = p
        .started(container("app", "busybox", &format!("exec {sleeper}")))
        .await;
    wait_state(&mut p.c, &target, cri::ContainerState::ContainerRunning).await;
    let mut debug = container("debug", "busybox", "sleep 3600");
    let sc = debug
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default);
    sc.namespace_options = Some(cri::NamespaceOption {
        pid: cri::NamespaceMode::Target as i32,
        target_id: target.clone(),
        ..Default::default()
    });
    let mut refused = debug.clone();
    refused.metadata.as_mut().unwrap().name = "debug-nowhere".into();
    if let Some(o) = refused
        .linux
        .as_mut()
        .and_then(|l| l.security_context.as_mut())
        .and_then(|s| s.namespace_options.as_mut())
    {
        o.target_id = "nosuchcontainer".into();
    }
    let e = p.create(refused).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("target_id"), "{}", e.message());
    let id = p.started(debug).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    let r =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["cat".into(), "/proc/1/cmdline".into()],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    let init = String::from_utf8_lossy(&r.stdout).replace('\0', " ");
    assert_eq!(init.trim(), sleeper, "pid 1 is the target's process");
}
