//! What criusd does with the CRI of Kubernetes 1.32–1.36 (its own `proto/cri`): a container's `stop_signal`
//! is what StopContainer sends first, UpdatePodSandboxResources checks its sandbox, and the request fields
//! crius does not act on yet are refused by name. (The pod cgroup it writes is checked in vm_pods.rs.)
//! Each case has a criusd of its own, its pod on the host's network.

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container, cstatus, cstop};
use crius_test_support::require_root;
use tonic::Code;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_stop_signal_of_sigusr1_reaches_the_process_before_sigterm() {
    require_root();
    let mut p = Pod::on_host_network("stop-signal").await;
    let mut c = container(
        "usr1",
        "busybox",
        "trap 'echo got-usr1; exit 7' USR1; trap 'echo got-term; exit 8' TERM; echo ready; \
         while :; do sleep 0.1; done",
    );
    c.stop_signal = cri::Signal::Sigusr1 as i32;
    let id = p.started(c).await;
    p.wait_for_log("usr1", "ready").await;
    let before = cstatus(&mut p.c, &id).await.unwrap();
    assert_eq!(before.stop_signal, cri::Signal::Sigusr1 as i32);
    cstop(&mut p.c, &id, 10).await;
    let after = cstatus(&mut p.c, &id).await.unwrap();
    assert_eq!(after.state, cri::ContainerState::ContainerExited as i32);
    let log = p.log_text("usr1");
    assert_eq!(after.exit_code, 7, "{log}");
    assert!(log.contains(" stdout F got-usr1"), "{log}");
    assert!(!log.contains("got-term"), "{log}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn request_fields_crius_does_not_act_on_are_refused_by_name() {
    require_root();
    let mut p = Pod::on_host_network("refusals").await;
    let mut image_volume = container("iv", "busybox", "true");
    image_volume.mounts.push(cri::Mount {
        container_path: "/data".into(),
        image: Some(cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let e = p.create(image_volume).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("mounts[0].image"), "{}", e.message());

    let mut bad_signal = container("bs", "busybox", "true");
    bad_signal.stop_signal = 1000;
    let e = p.create(bad_signal).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("stop_signal"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn update_pod_sandbox_resources_names_an_unknown_sandbox_and_leaves_kubelets_cgroup_to_it() {
    require_root();
    let mut p = Pod::on_host_network("pod-resources").await;
    let resources = cri::LinuxContainerResources {
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    };
    // No cgroup_parent of crius's to write: the answer is OK, kubelet resized the pod cgroup itself.
    p.c.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: p.id.clone(),
        overhead: None,
        resources: Some(resources.clone()),
    })
    .await
    .unwrap();
    let e =
        p.c.update_pod_sandbox_resources(cri::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: "nope".into(),
            overhead: None,
            resources: Some(resources),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound);
    assert!(e.message().contains("sandbox \"nope\""), "{}", e.message());
}
