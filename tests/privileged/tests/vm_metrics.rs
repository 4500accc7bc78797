//! The CRI's ListPodSandboxMetrics under a pure cgroup-v2 kernel, where memory is charged to the container's
//! cgroup (on the hybrid host it is not, so tests/metrics.rs checks the rest there). hack/test.sh runs this
//! binary inside hack/vm.

use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container, wait_state};
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
