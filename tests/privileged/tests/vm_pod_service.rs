//! In-place resize through the pod service under a pure cgroup-v2 kernel, as the seed article does it: the seed
//! resize Pod applied with `crius apply`, then `crius patch pod myapp --subresource=resize` with the seed's body.
//! At each step `crius get pod -o yaml` shows spec, allocatedResources, resources and conditions, and the
//! container's cgroup and the pod's (`/kubepods/burstable/pod<uid>`) hold what kubelet would write. A resize that
//! fits later is Deferred until another pod goes; one past the node is Infeasible; a memory limit below what the
//! container uses is the runtime's Error, and nothing changes. hack/test.sh runs this binary inside hack/vm.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crius_privileged_tests::engine::{Setup, manifest};
use crius_privileged_tests::service::{cid, json, setup, wait_for, write};
use serde_json::Value;

/// The seed's own patch body, as the article writes it.
const SEED_PATCH: &str = r#"{
  "spec": {
    "containers": [{
      "name": "app",
      "resources": {
        "requests": {"cpu": "800m", "memory": "768Mi"},
        "limits": {"cpu": "1500m", "memory": "1.5Gi"}
      }
    }]
  }
}"#;

fn pod(s: &Setup, name: &str) -> Value {
    json(s, &["get", "pod", name, "-o", "json"])
}

fn uid(p: &Value) -> String {
    p["metadata"]["uid"].as_str().unwrap().to_string()
}

/// The pod's cgroup and its container `id`'s.
fn cgroups(p: &Value, ctr: &str) -> (PathBuf, PathBuf) {
    let pod = crius_test_support::cgroup2_mount().join(format!("kubepods/burstable/pod{}", uid(p)));
    let id = ctr.rsplit("://").next().unwrap();
    let c = pod.join(id);
    assert!(
        c.is_dir(),
        "the container's cgroup {} is in its pod's",
        c.display()
    );
    (pod, c)
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("{}/{file}: {e}", dir.display()))
        .trim()
        .to_string()
}

fn condition(p: &Value, kind: &str) -> Option<(String, String)> {
    p["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .map(|c| {
            (
                c["reason"].as_str().unwrap_or("").to_string(),
                c["message"].as_str().unwrap_or("").to_string(),
            )
        })
}

/// `crius get pod NAME -o yaml` shows the three views of the resources and the conditions.
fn yaml_shows(s: &Setup, name: &str, wanted: &[&str]) -> String {
    let y = s.d.cli_ok(&["get", "pod", name, "-o", "yaml"]);
    for w in ["allocatedResources:", "resources:", "conditions:"]
        .iter()
        .chain(wanted)
    {
        assert!(y.contains(w), "get -o yaml lacks {w:?}:\n{y}");
    }
    y
}

fn status0(p: &Value) -> &Value {
    &p["status"]["containerStatuses"][0]
}

fn patch(s: &Setup, name: &str, body: &str) {
    let out =
        s.d.cli_ok(&["patch", "pod", name, "--subresource=resize", "-p", body]);
    assert!(out.contains(&format!("pod/{name} patched")), "{out}");
}

#[test]
#[ignore = "needs cgroup v2 with its controllers: hack/test.sh runs it in the VM"]
fn the_seed_resize_pod_is_resized_through_the_pod_service_as_kubernetes_shows_it() {
    crius_test_support::require_pure_cgroup_v2();
    let s = setup("allocatable_milli_cpu = 4000\nallocatable_memory = 4294967296\n");
    let seed = manifest("seed-resize-pod.yaml").display().to_string();
    s.d.cli_ok(&["apply", "-f", &seed]);
    wait_for("myapp to run", Duration::from_secs(30), || {
        pod(&s, "myapp")["status"]["phase"] == "Running"
    });
    let p = pod(&s, "myapp");
    let first = cid(&p, "containerStatuses", "app");
    let (pod_cg, ctr_cg) = cgroups(&p, &first);
    // requests 500m/512Mi, limits 1/1Gi: the container and the pod alike.
    for dir in [&pod_cg, &ctr_cg] {
        assert_eq!(read(dir, "cpu.max"), "100000 100000", "{}", dir.display());
        assert_eq!(read(dir, "memory.max"), (1u64 << 30).to_string());
        assert_eq!(read(dir, "cpu.weight"), "59");
    }
    assert_eq!(status0(&p)["allocatedResources"]["cpu"], "500m", "{p}");
    assert_eq!(status0(&p)["resources"]["limits"]["memory"], "1Gi", "{p}");
    yaml_shows(&s, "myapp", &["resizePolicy:", "cpu: 500m"]);
    let pid = read(&ctr_cg, "cgroup.procs").lines().next().unwrap().to_string();

    // cpu alone: NotRequired, in place: the same process, new cpu.max in the container and the pod.
    patch(
        &s,
        "myapp",
        r#"{"spec":{"containers":[{"name":"app","resources":{"limits":{"cpu":"1200m"}}}]}}"#,
    );
    wait_for("the cpu resize", Duration::from_secs(20), || {
        status0(&pod(&s, "myapp"))["resources"]["limits"]["cpu"] == "1200m"
    });
    let p = pod(&s, "myapp");
    assert_eq!(cid(&p, "containerStatuses", "app"), first, "the same container");
    assert_eq!(status0(&p)["restartCount"], 0);
    assert_eq!(
        read(&ctr_cg, "cgroup.procs").lines().next().unwrap(),
        pid,
        "the same process"
    );
    assert_eq!(read(&ctr_cg, "cpu.max"), "120000 100000");
    assert_eq!(read(&pod_cg, "cpu.max"), "120000 100000");
    assert!(condition(&p, "PodResizeInProgress").is_none(), "{p}");
    yaml_shows(&s, "myapp", &["cpu: 1200m"]);

    // The seed's body: memory is RestartContainer, so the container restarts with the new limits.
    patch(&s, "myapp", SEED_PATCH);
    wait_for("the seed's resize", Duration::from_secs(30), || {
        let p = pod(&s, "myapp");
        status0(&p)["restartCount"] == 1 && status0(&p)["state"]["running"].is_object()
    });
    let p = pod(&s, "myapp");
    let second = cid(&p, "containerStatuses", "app");
    assert_ne!(second, first, "a new container");
    assert_eq!(status0(&p)["restartCount"], 1, "{p}");
    assert_eq!(status0(&p)["allocatedResources"]["cpu"], "800m", "{p}");
    assert_eq!(status0(&p)["allocatedResources"]["memory"], "768Mi", "{p}");
    let (same, ctr_cg) = cgroups(&p, &second);
    assert_eq!(same, pod_cg);
    for dir in [&pod_cg, &ctr_cg] {
        assert_eq!(
            read(dir, "memory.max"),
            (3u64 << 29).to_string(),
            "{}",
            dir.display()
        );
        assert_eq!(read(dir, "cpu.max"), "150000 100000");
    }
    yaml_shows(&s, "myapp", &["cpu: 800m", "memory: 768Mi"]);

    // Past what is free beside another pod: Deferred; the other pod deleted, it is actuated.
    let filler = write(
        &s,
        "filler.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: filler}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         containers:\n  - name: app\n    image: docker.io/library/myapp:latest\n    command: [sleep, '1000']\n    \
         resources: {requests: {cpu: '3'}}\n",
    );
    s.d.cli_ok(&["apply", "-f", &filler]);
    let weight = read(&pod_cg, "cpu.weight");
    patch(
        &s,
        "myapp",
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"1500m"}}}]}}"#,
    );
    let p = pod(&s, "myapp");
    let (reason, message) = condition(&p, "PodResizePending").expect("PodResizePending");
    assert_eq!(reason, "Deferred", "{message}");
    yaml_shows(&s, "myapp", &["PodResizePending", "Deferred"]);
    assert_eq!(
        read(&pod_cg, "cpu.weight"),
        weight,
        "nothing actuated while deferred"
    );
    s.d.cli_ok(&["delete", "pod", "filler", "--now"]);
    wait_for("the deferred resize", Duration::from_secs(20), || {
        status0(&pod(&s, "myapp"))["allocatedResources"]["cpu"] == "1500m"
    });
    wait_for("its actuation", Duration::from_secs(20), || {
        status0(&pod(&s, "myapp"))["resources"]["requests"]["cpu"] == "1500m"
    });
    assert_ne!(
        read(&pod_cg, "cpu.weight"),
        weight,
        "the pod's weight follows its requests"
    );
    assert!(condition(&pod(&s, "myapp"), "PodResizePending").is_none());

    // Past the node: Infeasible, nothing changes.
    patch(
        &s,
        "myapp",
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"5"},"limits":{"cpu":"5"}}}]}}"#,
    );
    let (reason, message) = condition(&pod(&s, "myapp"), "PodResizePending").expect("Infeasible");
    assert_eq!(reason, "Infeasible", "{message}");
    assert_eq!(read(&pod_cg, "cpu.max"), "150000 100000");
    s.d.cli_ok(&["delete", "pod", "myapp", "--now"]);

    // A memory limit below what the container uses: the runtime refuses, the pod shows its Error.
    let hog = write(
        &s,
        "hog.yaml",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: hog}\nspec:\n  terminationGracePeriodSeconds: 1\n  \
         containers:\n  - name: app\n    image: docker.io/library/myapp:latest\n    \
         command: [sh, -c, 'head -c 40m /dev/zero > /dev/shm/fill && touch /tmp/full && exec sleep 1000']\n    \
         resources: {requests: {cpu: 100m, memory: 100Mi}, limits: {memory: 100Mi}}\n",
    );
    s.d.cli_ok(&["apply", "-f", &hog]);
    wait_for("hog to fill its memory", Duration::from_secs(30), || {
        s.d.cli(&["exec", "hog", "--", "test", "-e", "/tmp/full"])
            .status
            .success()
    });
    let p = pod(&s, "hog");
    let (hog_cg, hog_ctr) = cgroups(&p, &cid(&p, "containerStatuses", "app"));
    let used: u64 = read(&hog_ctr, "memory.current").parse().unwrap();
    assert!(used > 40 << 20, "the hog uses {used} bytes");
    patch(
        &s,
        "hog",
        r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"memory":"20Mi"},"limits":{"memory":"20Mi"}}}]}}"#,
    );
    wait_for("the runtime's refusal", Duration::from_secs(20), || {
        condition(&pod(&s, "hog"), "PodResizeInProgress").is_some_and(|(r, _)| r == "Error")
    });
    let p = pod(&s, "hog");
    let (_, message) = condition(&p, "PodResizeInProgress").unwrap();
    assert!(message.contains("below its current usage"), "{message}");
    yaml_shows(&s, "hog", &["PodResizeInProgress", "below its current usage"]);
    for dir in [&hog_cg, &hog_ctr] {
        assert_eq!(
            read(dir, "memory.max"),
            (100u64 << 20).to_string(),
            "{}",
            dir.display()
        );
    }
    assert_eq!(status0(&p)["resources"]["limits"]["memory"], "100Mi", "{p}");
    assert_eq!(status0(&p)["restartCount"], 0);
    s.d.cli_ok(&["delete", "pod", "hog", "--now"]);
    wait_for("the pods to go", Duration::from_secs(20), || {
        s.d.cli_ok(&["get", "pods", "-o", "name"]).trim().is_empty()
    });
    assert!(
        !pod_cg.exists() && !hog_cg.exists(),
        "pod cgroups removed with their pods"
    );
}
