//! The pod engine (`crius run`) under a pure cgroup-v2 kernel: the seed resize Pod runs with the cgroup values
//! kubelet would give it and is resized in place. hack/test.sh runs this binary inside hack/vm.

use std::path::{Path, PathBuf};

use crius_privileged_tests::engine::{Running, Setup, container, manifest, report};

/// The pod cgroup kubelet would make for the one Burstable pod (`/kubepods/burstable/pod<uid>`), and the
/// cgroup of its one running container below it.
fn running_cgroup() -> (PathBuf, PathBuf) {
    let root = crius_test_support::cgroup2_mount().join("kubepods/burstable");
    let pods: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("pod"))
        .collect();
    assert_eq!(pods.len(), 1, "one pod cgroup: {pods:?}");
    let ctr = std::fs::read_dir(&pods[0])
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p.join("cgroup.procs")).is_ok_and(|s| !s.trim().is_empty()))
        .expect("a running container's cgroup");
    (pods[0].clone(), ctr)
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs cgroup v2 with its controllers: hack/test.sh runs it in the VM"]
fn the_seed_resize_pod_runs_with_kubelets_limits_and_resizes_in_place() {
    crius_test_support::require_pure_cgroup_v2();
    let s = Setup::start();
    // A copy of the seed to edit while it runs, as one patches a pod's resources.
    let pod = s.dir.path().join("myapp.yaml");
    let seed = std::fs::read_to_string(manifest("seed-resize-pod.yaml")).unwrap();
    std::fs::write(&pod, &seed).unwrap();
    let args = s.run_args(&[&pod], &["--watch"]);
    let mut run = Running::spawn(&s, &args, "container app: started");
    // requests 500m/512Mi, limits 1000m/1Gi: shares 512 (weight 59), quota 100 ms per 100 ms, 1 GiB.
    let (pod_dir, dir) = running_cgroup();
    assert_eq!(read(&dir, "cpu.max"), "100000 100000");
    assert_eq!(read(&dir, "cpu.weight"), "59");
    assert_eq!(read(&dir, "memory.max"), (1u64 << 30).to_string());
    // The pod's cgroup holds the sum of its one container's.
    assert_eq!(read(&pod_dir, "cpu.max"), "100000 100000");
    assert_eq!(read(&pod_dir, "cpu.weight"), "59");
    assert_eq!(read(&pod_dir, "memory.max"), (1u64 << 30).to_string());
    // The app's own process (its `sleep 1` children come and go).
    let main_pid = |dir: &Path| read(dir, "cgroup.procs").lines().next().unwrap_or("").to_string();
    let pid = main_pid(&dir);

    // cpu: NotRequired: in place, same process.
    let cpu = seed.replace("cpu: \"1000m\"", "cpu: \"1500m\"");
    assert_ne!(cpu, seed);
    std::fs::write(&pod, &cpu).unwrap();
    let line = run.wait_for("app: resized in place");
    assert!(line.contains("cpu quota 150000/100000 shares 512"), "{line}");
    assert_eq!(read(&dir, "cpu.max"), "150000 100000");
    assert_eq!(read(&pod_dir, "cpu.max"), "150000 100000");
    assert_eq!(main_pid(&dir), pid, "the same process");

    // memory: RestartContainer: a new container with the new limit.
    std::fs::write(&pod, cpu.replace("memory: \"1Gi\"", "memory: \"2Gi\"")).unwrap();
    let line = run.wait_for("app: restarted with its new resources");
    assert!(line.contains(&format!("memory limit {}", 2u64 << 30)), "{line}");
    let (same_pod, again) = running_cgroup();
    assert_eq!(same_pod, pod_dir);
    assert_ne!(again, dir, "a new container");
    assert_eq!(read(&again, "memory.max"), (2u64 << 30).to_string());
    assert_eq!(read(&pod_dir, "memory.max"), (2u64 << 30).to_string());
    assert_eq!(read(&again, "cpu.max"), "150000 100000");

    let (code, out, err) = run.stop();
    assert_eq!(code, 0, "{out}\n{err}");
    let r = report(&out);
    assert_eq!(r["phase"], "Stopped");
    assert_eq!(container(&r, "app")["restarts"], 1, "{r}");
    s.assert_nothing_left();
    assert!(!pod_dir.exists(), "the pod cgroup is removed with the pod");
}
