//! The systemd cgroup driver, in the VM booted with systemd as PID 1 (`RUN_IN_VM_INIT=systemd`; hack/test.sh
//! runs this binary so): a container of a pod under `kubepods.slice` is a transient scope in the pod's slice,
//! delegated, with its limits as unit properties; a live update keeps the pid and outlasts `systemctl
//! daemon-reload` (systemd writes every unit's properties again then); removal leaves no unit.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container, wait_state};
use crius_test_support::{cgroup2_mount, require_pure_cgroup_v2};

const UID: &str = "5d1c0a2e_7b3f";

fn systemctl(args: &[&str]) -> String {
    let out = Command::new("systemctl").args(args).output().expect("systemctl");
    assert!(
        out.status.success(),
        "systemctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `systemctl show UNIT -p P` of each property, as `P=value` lines.
fn show(unit: &str, props: &[&str]) -> Vec<String> {
    let mut args = vec!["show", unit];
    for p in props {
        args.extend(["-p", p]);
    }
    systemctl(&args).lines().map(str::to_string).collect()
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
        .trim()
        .to_string()
}

fn resources(memory: i64, quota: i64) -> cri::LinuxContainerResources {
    cri::LinuxContainerResources {
        memory_limit_in_bytes: memory,
        cpu_quota: quota,
        cpu_period: 100_000,
        cpu_shares: 512,
        ..Default::default()
    }
}

fn units_of(id: &str) -> String {
    systemctl(&[
        "list-units",
        "--all",
        "--no-legend",
        "--plain",
        &format!("crius-{id}*"),
    ])
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, pure cgroup v2 and systemd as PID 1: run through hack/test.sh (RUN_IN_VM_INIT=systemd)"]
async fn a_container_is_a_scope_in_its_pod_slice_and_a_live_update_outlasts_daemon_reload() {
    require_pure_cgroup_v2();
    assert!(
        Path::new("/run/systemd/private").exists(),
        "systemd is not PID 1 here: run this binary with RUN_IN_VM_INIT=systemd hack/vm/run-in-vm.sh"
    );
    let slice = format!("kubepods-besteffort-pod{UID}.slice");
    let mut p = Pod::under_systemd("sd", &slice).await;
    let rc =
        p.c.runtime_config(cri::RuntimeConfigRequest {})
            .await
            .unwrap()
            .into_inner();
    assert_eq!(rc.linux.unwrap().cgroup_driver, cri::CgroupDriver::Systemd as i32);

    let mut config = container("app", "busybox", "echo up && sleep 1000");
    config.linux.get_or_insert_default().resources = Some(resources(64 << 20, 50_000));
    let id = p.started(config).await;
    wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    let unit = format!("crius-{id}.scope");
    let dir: PathBuf = cgroup2_mount()
        .join("kubepods.slice/kubepods-besteffort.slice")
        .join(&slice)
        .join(&unit);
    let procs = read(&dir, "cgroup.procs");
    let pid: u32 = procs
        .lines()
        .next()
        .and_then(|l| l.parse().ok())
        .expect("a pid in the scope");
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(cgroup.trim().ends_with(&format!("/{slice}/{unit}")), "{cgroup}");
    let shown = show(
        &unit,
        &[
            "ActiveState",
            "Slice",
            "Delegate",
            "MemoryMax",
            "CPUQuotaPerSecUSec",
        ],
    );
    for want in [
        "ActiveState=active".to_string(),
        format!("Slice={slice}"),
        "Delegate=yes".into(),
        format!("MemoryMax={}", 64 << 20),
        "CPUQuotaPerSecUSec=500ms".into(),
    ] {
        assert!(shown.contains(&want), "{want} not in {shown:?}");
    }
    assert_eq!(read(&dir, "memory.max"), (64u64 << 20).to_string());
    assert_eq!(read(&dir, "cpu.max"), "50000 100000");

    // A live update: the files and the unit's properties both change, the process stays.
    p.c.update_container_resources(cri::UpdateContainerResourcesRequest {
        container_id: id.clone(),
        linux: Some(resources(128 << 20, 80_000)),
        ..Default::default()
    })
    .await
    .unwrap();
    let updated = |dir: &Path| {
        assert_eq!(read(dir, "memory.max"), (128u64 << 20).to_string());
        assert_eq!(read(dir, "cpu.max"), "80000 100000");
    };
    updated(&dir);
    let mut shown = show(&unit, &["MemoryMax", "CPUQuotaPerSecUSec"]);
    shown.sort();
    assert_eq!(
        shown,
        [
            "CPUQuotaPerSecUSec=800ms".to_string(),
            format!("MemoryMax={}", 128 << 20)
        ]
    );

    // systemd writes every unit's cgroup properties again on a reload: the updated values must be its own.
    systemctl(&["daemon-reload"]);
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        updated(&dir);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        read(&dir, "cgroup.procs").lines().any(|l| l == pid.to_string()),
        "pid {pid} left the scope"
    );
    let status = wait_state(&mut p.c, &id, cri::ContainerState::ContainerRunning).await;
    let applied = status
        .resources
        .and_then(|r| r.linux)
        .expect("the applied resources");
    assert_eq!(
        (applied.memory_limit_in_bytes, applied.cpu_quota),
        (128 << 20, 80_000)
    );

    // Removal: no unit, no cgroup.
    p.c.stop_container(cri::StopContainerRequest {
        container_id: id.clone(),
        timeout: 0,
    })
    .await
    .unwrap();
    p.c.remove_container(cri::RemoveContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    assert_eq!(units_of(&id).trim(), "", "a unit is left");
    assert!(!dir.exists(), "{} is left", dir.display());
    drop(p);
    // The pod's slices are kubelet's under a real node; here systemd made them for the scope: stop them.
    systemctl(&["stop", "kubepods.slice"]);
}

/// `crius apply` under the systemd driver: the pod engine gives the pod a slice of its own, named as kubelet's
/// systemd driver names it, with its limits as the slice's properties; the containers' scopes are in it; both
/// go with the pod.
#[test]
#[ignore = "needs root, pure cgroup v2 and systemd as PID 1: run through hack/test.sh (RUN_IN_VM_INIT=systemd)"]
fn an_applied_pod_gets_its_own_slice_under_kubepods_slice() {
    use crius_privileged_tests::engine::manifest;
    use crius_privileged_tests::service::{cid, json, setup, wait_for};
    require_pure_cgroup_v2();
    let s = setup("allocatable_milli_cpu = 4000\n\n[runtime]\ncgroup_driver = \"systemd\"\n");
    s.d.cli_ok(&[
        "apply",
        "-f",
        &manifest("seed-resize-pod.yaml").display().to_string(),
    ]);
    let pod = || json(&s, &["get", "pod", "myapp", "-o", "json"]);
    wait_for("myapp to run", Duration::from_secs(60), || {
        pod()["status"]["phase"] == "Running"
    });
    let p = pod();
    let uid = p["metadata"]["uid"].as_str().unwrap().replace('-', "_");
    let slice = format!("kubepods-burstable-pod{uid}.slice");
    let dir = cgroup2_mount()
        .join("kubepods.slice/kubepods-burstable.slice")
        .join(&slice);
    // requests 500m/512Mi, limits 1/1Gi.
    let mut shown = show(&slice, &["ActiveState", "MemoryMax", "CPUQuotaPerSecUSec"]);
    shown.sort();
    assert_eq!(
        shown,
        [
            "ActiveState=active".to_string(),
            "CPUQuotaPerSecUSec=1s".into(),
            format!("MemoryMax={}", 1u64 << 30)
        ]
    );
    assert_eq!(read(&dir, "memory.max"), (1u64 << 30).to_string());
    let id = cid(&p, "containerStatuses", "app");
    let id = id.rsplit('/').next().unwrap();
    let scope = dir.join(format!("crius-{id}.scope"));
    assert_eq!(read(&scope, "memory.max"), (1u64 << 30).to_string());

    s.d.cli_ok(&["delete", "pod", "myapp"]);
    wait_for("myapp's slice to go", Duration::from_secs(60), || !dir.exists());
    assert_eq!(units_of(id).trim(), "", "a scope is left");
    let left = systemctl(&["list-units", "--all", "--no-legend", "--plain", &slice]);
    assert_eq!(left.trim(), "", "the pod's slice is left");
    drop(s);
    systemctl(&["stop", "kubepods.slice"]);
}
