//! containerd-shim-crius-v2 under a pure cgroup-v2 kernel: an OOM kill is reported (137 and a /tasks/oom
//! event), a live update changes a running task's limits and keeps its pid (over ttrpc, and under a
//! containerd 1.6 started in the VM), and stats carry the cgroup v2 metrics. hack/test.sh runs this binary
//! inside hack/vm.

use std::path::PathBuf;

use containerd_shim_protos as protos;
use crius_privileged_tests::shim::{
    Cleanup, EventServer, Events, create, delete, pod_bundle, shim, start, state, wait, wait_until,
};
use crius_shim::client;
use crius_test_support::containerd::Containerd;
use crius_test_support::{image, require_pure_cgroup_v2, unique};
use protos::api;
use protos::protobuf::Message;

/// The cgroup v2 directory of process `pid`.
fn cgroup_of(pid: u32) -> PathBuf {
    let rel = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let rel = rel
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap()
        .to_string();
    crius_test_support::cgroup2_mount().join(rel.trim_start_matches('/'))
}

fn read_cg(pid: u32, file: &str) -> String {
    std::fs::read_to_string(cgroup_of(pid).join(file))
        .unwrap()
        .trim()
        .to_string()
}

fn update_memory(
    c: &client::TaskClient,
    id: &str,
    resources: serde_json::Value,
) -> client::Result<api::Empty> {
    let req = api::UpdateTaskRequest {
        id: id.into(),
        resources: Some(protos::protobuf::well_known_types::any::Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources".into(),
            value: resources.to_string().into_bytes(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    c.update(client::ctx(20), &req)
}

const MIB: u64 = 1024 * 1024;

#[test]
#[ignore = "needs cgroup v2: hack/test.sh runs it in the VM"]
fn oom_kills_are_reported_and_updates_are_live() {
    require_pure_cgroup_v2();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let events_sock = dir.path().join("events.sock");
    let events = Events::default();
    let _server = EventServer::start(&events_sock, &events);
    let pod = unique("pod");
    let (hog, idle) = (unique("hog"), unique("idle"));
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![hog.clone(), idle.clone()],
        needle: owner.clone(),
    };
    let limit = json_limit(32 * MIB);
    let mut b1 = pod_bundle(
        &[
            "sh",
            "-c",
            // One 200 MB buffer, filled by a single read: over the limit at once, without the minutes of
            // reclaim a slowly growing shell string spends near it under a busy host.
            "dd if=/dev/zero of=/dev/null bs=200M count=1",
        ],
        &pod,
    );
    b1.config["linux"]["resources"] = limit.clone();
    b1.write();
    let mut b2 = pod_bundle(&["sleep", "1000"], &pod);
    b2.config["linux"]["resources"] = limit;
    b2.write();
    let ev = events_sock.display().to_string();
    let addr = client::start_shim(&shim(), "test", &owner, &ev, &hog, b1.path()).unwrap();
    let c = client::connect(&addr).unwrap();

    // Over its limit: killed by the kernel, 137, and a /tasks/oom event for it.
    create(&c, &hog, &b1, "").unwrap();
    start(&c, &hog).unwrap();
    assert_eq!(wait(&c, &hog), 137);
    wait_until("the OOM event", || {
        events.0.lock().unwrap().iter().any(|(t, v)| {
            t == "/tasks/oom"
                && protos::events::task::TaskOOM::parse_from_bytes(v)
                    .unwrap()
                    .container_id
                    == hog
        })
    });

    // A live update of a running task: new limits, same pid.
    let addr2 = client::start_shim(&shim(), "test", &owner, &ev, &idle, b2.path()).unwrap();
    assert_eq!(addr2, addr);
    let pid = create(&c, &idle, &b2, "").unwrap();
    start(&c, &idle).unwrap();
    assert_eq!(read_cg(pid, "memory.max"), (32 * MIB).to_string());
    update_memory(
        &c,
        &idle,
        serde_json::json!({"memory": {"limit": 128 * MIB, "swap": 128 * MIB},
        "cpu": {"quota": 50000, "period": 100000}}),
    )
    .unwrap();
    assert_eq!(read_cg(pid, "memory.max"), (128 * MIB).to_string());
    assert_eq!(read_cg(pid, "cpu.max"), "50000 100000");
    let st = state(&c, &idle).unwrap();
    assert_eq!((st.pid, st.status), (pid, api::Status::RUNNING.into()));
    // Stats: cgroup v2 metrics with this container's memory and pids.
    let stats = c
        .stats(
            client::ctx(10),
            &api::StatsRequest {
                id: idle.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    let m = protos::cgroups_v2::metrics::Metrics::parse_from_bytes(&stats.stats.value).unwrap();
    assert_eq!(m.memory.usage_limit, 128 * MIB);
    assert_eq!(m.pids.current, 1);
    assert!(m.memory.usage > 0 && m.cpu.usage_usec > 0, "{m:?}");

    c.kill(
        client::ctx(10),
        &api::KillRequest {
            id: idle.clone(),
            signal: 9,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(wait(&c, &idle), 137);
    delete(&c, &hog).unwrap();
    delete(&c, &idle).unwrap();
    let _ = c.shutdown(client::ctx(10), &api::ShutdownRequest::default());
}

fn json_limit(bytes: u64) -> serde_json::Value {
    serde_json::json!({"memory": {"limit": bytes, "swap": bytes}})
}

#[test]
#[ignore = "needs cgroup v2 and containerd: hack/test.sh runs it in the VM"]
fn under_containerd_a_live_update_keeps_the_pid() {
    require_pure_cgroup_v2();
    let ctrd = Containerd::start();
    let _cleanup = Cleanup {
        namespace: "default",
        ids: vec!["live".into()],
        needle: format!("-address {}", ctrd.socket().display()),
    };
    let dir = tempfile::tempdir().unwrap();
    image::busybox(&dir.path().join("layout"), "docker.io/library/busybox:latest").unwrap();
    image::write_archive(&dir.path().join("layout"), &dir.path().join("bb.tar")).unwrap();
    ctrd.ctr_ok(&["images", "import", dir.path().join("bb.tar").to_str().unwrap()]);
    let shim = shim();
    let limit = (64 * MIB).to_string();
    ctrd.ctr_ok(&[
        "run",
        "-d",
        "--runtime",
        shim.to_str().unwrap(),
        "--memory-limit",
        &limit,
        "docker.io/library/busybox:latest",
        "live",
        "sleep",
        "1000",
    ]);
    let pid: u32 = ctrd
        .ctr_ok(&["task", "ls"])
        .lines()
        .find(|l| l.starts_with("live "))
        .and_then(|l| l.split_whitespace().nth(1).map(|p| p.parse().unwrap()))
        .unwrap();
    assert_eq!(read_cg(pid, "memory.max"), limit);
    // ctr 1.6 has no `task update`: send containerd's UpdateTaskRequest to the shim containerd started.
    let bundle = ctrd
        .dir()
        .join("state/io.containerd.runtime.v2.task/default/live");
    let addr = std::fs::read_to_string(bundle.join("address")).unwrap();
    let c = client::connect(&addr).unwrap();
    update_memory(
        &c,
        "live",
        serde_json::json!({"memory": {"limit": 96 * MIB}, "pids": {"limit": 50}}),
    )
    .unwrap();
    assert_eq!(read_cg(pid, "memory.max"), (96 * MIB).to_string());
    assert_eq!(read_cg(pid, "pids.max"), "50");
    let row = ctrd.ctr_ok(&["task", "ls"]);
    assert!(
        row.contains(&format!("live    {pid}")) && row.contains("RUNNING"),
        "same pid, running: {row}"
    );
    ctrd.ctr_ok(&["task", "kill", "-s", "KILL", "live"]);
    wait_until("live stopped", || {
        ctrd.task_status("live").as_deref() == Some("STOPPED")
    });
    ctrd.ctr_ok(&["task", "delete", "live"]);
    ctrd.ctr_ok(&["container", "delete", "live"]);
}
