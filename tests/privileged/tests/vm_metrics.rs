//! The CRI's ListPodSandboxMetrics, ContainerStats and PodSandboxStats under a pure cgroup-v2 kernel, where
//! memory is charged to the container's cgroup and the kernel has PSI (on the hybrid host neither holds, so
//! tests/metrics.rs checks the rest there). hack/test.sh runs this binary inside hack/vm.

use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::cri::{Client, Pod, container, wait_state};
use crius_test_support::require_pure_cgroup_v2;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and pure cgroup v2: run through hack/test.sh (in the VM)"]
async fn a_containers_memory_and_processes_are_in_the_pod_metrics() {
    require_pure_cgroup_v2();
    let mut p = Pod::in_the_vm("metrics").await;
    // 16 MiB in the pod's /dev/shm (a tmpfs: charged to the container, never reclaimed).
    let fill = "head -c 16777216 /dev/zero > /dev/shm/fill && echo filled && sleep 1000";
    let id = p.started(container("fill", "busybox", fill)).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    p.wait_for_log("fill", "filled").await;
    let value = |ms: &[cri::Metric], name: &str| {
        ms.iter()
            .find(|m| m.name == name)
            .and_then(|m| m.value.as_ref())
            .unwrap_or_else(|| panic!("no {name} in {ms:?}"))
            .value
    };
    // The charge can trail the log line a little.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let all =
            p.c.list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {})
                .await
                .unwrap()
                .into_inner()
                .pod_metrics;
        let pod = all.iter().find(|m| m.pod_sandbox_id == p.id).expect("our pod");
        let ms = &pod.container_metrics[0].metrics;
        let working_set = value(ms, "container_memory_working_set_bytes");
        let usage = value(ms, "container_memory_usage_bytes");
        if working_set >= 16 << 20 {
            assert!(usage >= working_set, "usage {usage} < working set {working_set}");
            assert!(value(ms, "container_processes") >= 1, "{ms:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "working set {working_set} < the 16 MiB in /dev/shm after 20 s: {ms:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn stats(c: &mut Client, id: &str) -> cri::ContainerStats {
    c.container_stats(cri::ContainerStatsRequest {
        container_id: id.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .stats
    .expect("stats")
}

/// Sane pressure figures: averages are percentages, and no more tasks stall "full" than "some".
fn sane(what: &str, p: &Option<cri::PsiStats>) -> (u64, u64) {
    let p = p.as_ref().unwrap_or_else(|| panic!("no {what} psi"));
    let (some, full) = (
        p.some.as_ref().unwrap_or_else(|| panic!("no {what} some")),
        p.full.as_ref().unwrap_or_else(|| panic!("no {what} full")),
    );
    for d in [some, full] {
        for avg in [d.avg10, d.avg60, d.avg300] {
            assert!((0.0..=100.0).contains(&avg), "{what}: {d:?}");
        }
    }
    assert!(full.total <= some.total, "{what}: full {full:?} > some {some:?}");
    (some.total, full.total)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and pure cgroup v2: run through hack/test.sh (in the VM)"]
async fn a_busy_containers_pressure_is_in_its_stats_and_its_pods() {
    require_pure_cgroup_v2();
    let mut p = Pod::in_the_vm("psi").await;
    // One busy loop more than the VM has CPUs: the container's tasks wait for a CPU, which is cpu pressure.
    let busy = "n=$(grep -c ^processor /proc/cpuinfo); i=0; \
                while [ $i -le $n ]; do (while :; do :; done) & i=$((i+1)); done; echo busy; sleep 1000";
    let id = p.started(container("busy", "busybox", busy)).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    p.wait_for_log("busy", "busy").await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        let s = stats(&mut p.c, &id).await;
        let (cpu, _) = sane("cpu", &s.cpu.as_ref().expect("cpu").psi);
        sane("memory", &s.memory.as_ref().expect("memory").psi);
        sane("io", &s.io.as_ref().expect("io usage").psi);
        if cpu > 0 {
            break cpu;
        }
        assert!(Instant::now() < deadline, "no cpu stall after 20 s: {s:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = stats(&mut p.c, &id).await;
    let (later, _) = sane("cpu", &s.cpu.as_ref().unwrap().psi);
    assert!(later >= first, "cpu stall total went back: {first} then {later}");
    eprintln!("a PSI sample: {:?}", s.cpu.as_ref().unwrap().psi);

    // The pod's, from its pod cgroup (the test's cgroup parent).
    let pod =
        p.c.pod_sandbox_stats(cri::PodSandboxStatsRequest {
            pod_sandbox_id: p.id.clone(),
        })
        .await
        .unwrap()
        .into_inner()
        .stats
        .and_then(|s| s.linux)
        .expect("linux pod stats");
    let (pod_cpu, _) = sane("pod cpu", &pod.cpu.as_ref().expect("pod cpu").psi);
    assert!(pod_cpu > 0, "the pod's cpu stall: {pod:?}");
    sane("pod memory", &pod.memory.as_ref().expect("pod memory").psi);
    sane("pod io", &pod.io.as_ref().expect("pod io").psi);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root and pure cgroup v2: run through hack/test.sh (in the VM)"]
async fn a_containers_io_counters_are_in_the_pod_metrics() {
    require_pure_cgroup_v2();
    let mut p = Pod::in_the_vm("io").await;
    let id = p
        .started(container("io", "busybox", "echo up && sleep 1000"))
        .await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    p.wait_for_log("io", "up").await;
    let all =
        p.c.list_pod_sandbox_metrics(cri::ListPodSandboxMetricsRequest {})
            .await
            .unwrap()
            .into_inner()
            .pod_metrics;
    let pod = all.iter().find(|m| m.pod_sandbox_id == p.id).expect("our pod");
    let ms = &pod.container_metrics[0].metrics;
    let value = |name: &str| {
        ms.iter()
            .find(|m| m.name == name)
            .and_then(|m| m.value.as_ref())
            .unwrap_or_else(|| panic!("no {name} in {ms:?}"))
            .value
    };
    // Whether the guest's disks saw any of it depends on where the VM keeps its files: the counters must be
    // there, and an operation moves at least a byte.
    assert!(value("container_fs_reads_total") <= value("container_fs_reads_bytes_total"));
    assert!(value("container_fs_writes_total") <= value("container_fs_writes_bytes_total"));
}
