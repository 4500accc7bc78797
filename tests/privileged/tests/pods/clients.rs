//! Other clients and the shims: a Python grpcio client, a killed shim, verbose status as containerd gives
//! it, and pod sandbox stats.

use super::*;

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
