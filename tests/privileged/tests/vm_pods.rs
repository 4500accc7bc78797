//! CRI container resources under a pure cgroup-v2 kernel: set at create, reported in the stats, updated live in
//! place, refused below usage, and an OOM kill reported. hack/test.sh runs this binary inside hack/vm.

use crius_privileged_tests::cri::{
    client, config, container, containers, create, cstatus, host_network, import_busybox, remove, run, start,
    wait_state,
};
use crius_test_support::daemon::Daemon;
use crius_test_support::require_pure_cgroup_v2;
use k8s_cri::v1 as cri;

fn cgroup_file(id: &str, file: &str) -> String {
    std::fs::read_to_string(format!("/sys/fs/cgroup/crius/{id}/{file}"))
        .unwrap_or_else(|e| panic!("/sys/fs/cgroup/crius/{id}/{file}: {e}"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs cgroup v2 with controllers: hack/test.sh runs it in the VM"]
async fn container_resources_are_set_and_updated_live() {
    require_pure_cgroup_v2();
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
