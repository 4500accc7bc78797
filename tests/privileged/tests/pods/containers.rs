//! Containers in pods: what a container sees, status, create's refusals, ExecSync, stats, listing, stop,
//! log reopening, /dev/shm, restarts, removal, events and concurrent calls.

use super::*;

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
