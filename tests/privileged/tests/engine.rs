//! The pod engine (`crius run`) on criusd with a real CNI network: the seed manifests as written, on stand-in
//! images — the Job whose log-agent sidecar starts first and is stopped after its worker completes, the
//! Deployment that runs until it is told to stop — and pods built to pin down the rules: startup probes gate
//! the next init container, sidecars restart, main containers stop first and sidecars after them in reverse
//! order, a failed regular init container fails a `Never` pod, a failing liveness probe restarts its container,
//! a pod that ignores SIGTERM is killed when its grace period ends (within 10%), downwardAPI and projected
//! volumes read as kubelet writes them.
//! Nothing is left behind. The seed resize Pod needs cgroup v2: it is in vm_engine.rs.

use std::process::Command;
use std::time::Duration;

use crius_privileged_tests::engine::{Running, Setup, container, manifest, report};
use crius_test_support::cni::Network;
use crius_test_support::daemon::built_binary;
use crius_test_support::image;
use crius_test_support::require_root;
use serde_json::Value;

fn ns(c: &Value, field: &str) -> i64 {
    let v = c[field].as_i64().unwrap();
    assert!(v > 0, "{field} of {c}");
    v
}

/// The position of the first line containing `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} in:\n{text}"))
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_seed_job_starts_its_sidecar_first_and_completes_with_its_worker() {
    let s = Setup::start();
    let (code, out, err) = s.run(&[&manifest("seed-job.yaml")], &["--logs"]);
    check_seed_job(code, &out, &err);
    s.assert_nothing_left();
}

/// The engine talks plain CRI: the same Job, with the same order, on containerd 1.6's CRI plugin and runc
/// (a pause stand-in as its sandbox image), which validates the engine against the reference runtime.
#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_seed_job_runs_the_same_on_containerds_cri() {
    require_root();
    let net = Network::new();
    let ctrd =
        crius_test_support::containerd::Containerd::start_cri(&net.conf_dir, "registry.k8s.io/pause:3.6");
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    image::seed_images(&layout).unwrap();
    image::pause(&layout, "registry.k8s.io/pause:3.6").unwrap();
    image::write_archive(&layout, &dir.path().join("seeds.tar")).unwrap();
    ctrd.ctr_ok(&[
        "-n",
        "k8s.io",
        "images",
        "import",
        &dir.path().join("seeds.tar").display().to_string(),
    ]);
    let p = |d: &str| dir.path().join(d).display().to_string();
    let out = Command::new(built_binary("crius"))
        .args(["--address", &ctrd.socket().display().to_string(), "run"])
        .arg(manifest("seed-job.yaml"))
        .args([
            "--pull",
            "never",
            "--logs",
            "-o",
            "json",
            "--pods-dir",
            &p("pods"),
            "--log-root",
            &p("logs"),
        ])
        .output()
        .unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    check_seed_job(out.status.code().unwrap_or(-1), &o, &e);
    let left = ctrd.ctr_ok(&["-n", "k8s.io", "containers", "ls", "-q"]);
    assert!(left.trim().is_empty(), "containerd still has containers: {left}");
}

/// What the seed Job's run must show: exit 0, Succeeded, KEP-753's order, the shared emptyDir.
fn check_seed_job(code: i32, out: &str, err: &str) {
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let r = report(out);
    assert_eq!(r["phase"], "Succeeded", "{r}");
    assert!(
        r["pod"]
            .as_str()
            .unwrap()
            .starts_with("default/data-processing-job-"),
        "{r}"
    );
    let (agent, migration, worker) = (
        container(&r, "log-agent"),
        container(&r, "db-migration"),
        container(&r, "worker"),
    );
    assert_eq!(
        (
            agent["role"].as_str(),
            migration["role"].as_str(),
            worker["role"].as_str()
        ),
        (Some("sidecar"), Some("init"), Some("main"))
    );
    // KEP-753's order: sidecar up, then the regular init container runs to completion, then the worker; the
    // worker's exit completes the Job's pod, and only then is the sidecar stopped.
    assert!(ns(agent, "started_at") < ns(migration, "started_at"), "{r}");
    assert!(ns(migration, "finished_at") <= ns(worker, "started_at"), "{r}");
    assert!(ns(worker, "finished_at") <= ns(agent, "finished_at"), "{r}");
    assert_eq!(
        (migration["exit_code"].as_i64(), worker["exit_code"].as_i64()),
        (Some(0), Some(0))
    );
    assert_eq!(worker["reason"], "Completed");
    assert_eq!(
        agent["exit_code"].as_i64(),
        Some(0),
        "the agent's SIGTERM trap ran: {r}"
    );
    // The emptyDir is shared: the agent shipped every record the worker wrote, the last ones at its SIGTERM.
    for i in 1..=5 {
        assert!(
            out.contains(&format!("log-agent | shipped: record {i} processed")),
            "{out}"
        );
    }
    assert!(
        out.contains("log-agent | fluent-bit: SIGTERM: flushed, 5 lines shipped"),
        "{out}"
    );
    assert!(
        out.contains("db-migration | flyway: successfully applied 3 migrations"),
        "{out}"
    );
    assert!(
        line_of(err, "sidecar log-agent: startup complete") < line_of(err, "init db-migration: started"),
        "{err}"
    );
    assert!(
        line_of(err, "container worker: exited 0") < line_of(err, "sidecar log-agent: stopping"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn probes_gate_init_containers_and_sidecars_stop_last_in_reverse_order() {
    let s = Setup::start();
    let shared = s.dir.path().join("shared");
    let pod = s.dir.path().join("order.yaml");
    std::fs::write(
        &pod,
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: order}}
spec:
  restartPolicy: Never
  terminationGracePeriodSeconds: 10
  volumes: [{{name: shared, hostPath: {{path: {shared}, type: DirectoryOrCreate}}}}]
  initContainers:
  - name: first
    image: myapp:latest
    restartPolicy: Always
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    command: [sh, -c, '[ -f /shared/crashed ] || {{ touch /shared/crashed; exit 1; }}; trap "echo first TERM >> /shared/order; exit 0" TERM; echo first up >> /shared/order; while :; do sleep 0.1 & wait $!; done']
  - name: second
    image: myapp:latest
    restartPolicy: Always
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    startupProbe: {{exec: {{command: [test, -f, /tmp/ready]}}, periodSeconds: 1, failureThreshold: 30}}
    command: [sh, -c, 'trap "sleep 1; echo second TERM >> /shared/order; exit 0" TERM; echo second up >> /shared/order; sleep 1; touch /tmp/ready; while :; do sleep 0.1 & wait $!; done']
  - name: setup
    image: myapp:latest
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    command: [sh, -c, 'echo setup ran >> /shared/order']
  containers:
  - name: a
    image: myapp:latest
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    command: [sh, -c, 'echo a ran >> /shared/order; sleep 0.5']
  - name: b
    image: myapp:latest
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    command: [sh, -c, 'echo b ran >> /shared/order; exit 3']
"#,
            shared = shared.display()
        ),
    )
    .unwrap();
    let (code, out, err) = s.run(&[&pod], &["--restart-backoff", "200ms"]);
    assert_eq!(
        code, 1,
        "b failed, so the pod did: stdout:\n{out}\nstderr:\n{err}"
    );
    let r = report(&out);
    assert_eq!(r["phase"], "Failed", "{r}");
    assert_eq!(
        container(&r, "first")["restarts"],
        1,
        "the sidecar that crashed was restarted: {r}"
    );
    assert_eq!(container(&r, "b")["exit_code"].as_i64(), Some(3));
    let order = std::fs::read_to_string(shared.join("order")).unwrap();
    let at = |l: &str| line_of(&order, l);
    assert!(at("second up") < at("setup ran"), "{order}");
    assert!(
        at("setup ran") < at("a ran") && at("setup ran") < at("b ran"),
        "{order}"
    );
    // second's TERM trap sleeps 1 s: first, stopped after it, writes later.
    assert!(
        at("a ran").max(at("b ran")) < at("second TERM") && at("second TERM") < at("first TERM"),
        "{order}"
    );
    let (second, setup) = (container(&r, "second"), container(&r, "setup"));
    assert!(
        ns(setup, "started_at") - ns(second, "started_at") >= 1_000_000_000,
        "the probe held setup back: {r}"
    );
    assert!(err.contains("first: restarting in 0.2s"), "{err}");
    s.assert_nothing_left();
}

/// A Job whose regular init container fails, under restartPolicy Never.
fn write_failing_job(s: &Setup) -> std::path::PathBuf {
    let failing = s.dir.path().join("failing.yaml");
    std::fs::write(
        &failing,
        r#"
apiVersion: batch/v1
kind: Job
metadata: {name: broken}
spec:
  template:
    spec:
      restartPolicy: Never
      initContainers: [{name: migrate, image: flyway:latest, command: [flyway, rollback]}]
      containers: [{name: work, image: data-worker:latest}]
"#,
    )
    .unwrap();
    failing
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_failed_init_container_fails_a_never_pod_whose_main_container_never_runs() {
    let s = Setup::start();
    let failing = write_failing_job(&s);
    let (code, out, err) = s.run(&[&failing], &[]);
    assert_eq!(code, 1, "{out}\n{err}");
    let r = report(&out);
    assert_eq!(r["phase"], "Failed");
    assert_eq!(container(&r, "migrate")["exit_code"].as_i64(), Some(1));
    assert_eq!(container(&r, "work")["reason"], "NotStarted", "{r}");
    s.assert_nothing_left();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_failing_liveness_probe_kills_the_container_and_on_failure_restarts_it() {
    let s = Setup::start();
    let shared = s.dir.path().join("shared");
    let alive = s.dir.path().join("alive.yaml");
    std::fs::write(
        &alive,
        format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: alive}}
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 2
  volumes: [{{name: shared, hostPath: {{path: {shared}/alive, type: DirectoryOrCreate}}}}]
  containers:
  - name: app
    image: myapp:latest
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    livenessProbe: {{exec: {{command: [sh, -c, "! test -f /tmp/sick"]}}, periodSeconds: 1, failureThreshold: 2}}
    command: [sh, -c, 'if [ -f /shared/healed ]; then echo healthy; exit 0; fi; touch /shared/healed; sleep 1; touch /tmp/sick; sleep 60']
"#,
            shared = shared.display()
        ),
    )
    .unwrap();
    let (code, out, err) = s.run(&[&alive], &["--restart-backoff", "200ms"]);
    assert_eq!(code, 0, "{out}\n{err}");
    let r = report(&out);
    assert_eq!(r["phase"], "Succeeded", "{r}");
    assert_eq!(container(&r, "app")["restarts"], 1, "{r}");
    assert!(
        err.contains("container app: liveness probe failed; killing it"),
        "{err}"
    );
    s.assert_nothing_left();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn an_absent_image_with_pulls_forbidden_is_refused_before_anything_is_made() {
    let s = Setup::start();
    let failing = write_failing_job(&s);
    let (code, _, err) = s.run(
        &[&failing],
        &["--pull", "never", "--image", "flyway:latest=nothere:1"],
    );
    assert_eq!(code, 1);
    assert!(
        err.contains("image nothere:1 is not present and may not be pulled"),
        "{err}"
    );
    s.assert_nothing_left();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_seed_deployment_runs_until_stopped_then_stops_app_before_sidecar() {
    let mut s = Setup::start();
    let deployment = s.dir.path().join("deployment.yaml");
    let seed = std::fs::read_to_string(manifest("seed-deployment.yaml")).unwrap();
    std::fs::write(&deployment, &seed).unwrap();
    let args = s.run_args(
        &[&deployment, &manifest("fluent-bit-config.yaml")],
        &["--logs", "--watch"],
    );
    let mut run = Running::spawn(&s, &args, "container app: started");
    // criusd restarts under the running pod (the engine's event stream must not hold its shutdown); the
    // engine goes on with the new one.
    s.restart_daemon();
    // A BestEffort pod cannot become Burstable in place (kubelet refuses a QoS change too).
    let limited = seed.replace(
        "        image: myapp:latest\n",
        "        image: myapp:latest\n        resources: {limits: {cpu: 500m}}\n",
    );
    assert_ne!(limited, seed);
    std::fs::write(&deployment, limited).unwrap();
    run.wait_for("resize of app: the pod's QoS class would change from BestEffort to Burstable");
    std::thread::sleep(Duration::from_millis(1000));
    let (code, stdout, err) = run.stop();
    assert_eq!(code, 0, "{stdout}\n{err}");
    let r = report(&stdout);
    assert_eq!(r["phase"], "Stopped", "{r}");
    assert!(r["ip"].as_str().unwrap().starts_with("10.213."), "{r}");
    let (agent, app) = (container(&r, "fluent-bit"), container(&r, "app"));
    assert_eq!(
        (app["exit_code"].as_i64(), agent["exit_code"].as_i64()),
        (Some(0), Some(0)),
        "both trapped SIGTERM: {r}"
    );
    assert!(ns(app, "finished_at") <= ns(agent, "finished_at"), "{r}");
    assert!(stdout.contains("app | myapp: SIGTERM: shutting down"), "{stdout}");
    assert!(
        stdout.contains("fluent-bit | fluent-bit: SIGTERM: flushed"),
        "{stdout}"
    );
    assert!(
        line_of(&err, "container app: stopping") < line_of(&err, "sidecar fluent-bit: stopping"),
        "{err}"
    );
    s.assert_nothing_left();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_statefulsets_replicas_run_side_by_side() {
    let s = Setup::start();
    let sts = s.dir.path().join("sts.yaml");
    std::fs::write(
        &sts,
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: web}
spec:
  replicas: 2
  template:
    spec:
      terminationGracePeriodSeconds: 5
      containers: [{name: app, image: myapp:latest}]
"#,
    )
    .unwrap();
    let args = s.run_args(&[&sts], &[]);
    let mut run = Running::spawn(&s, &args, "container app: started");
    run.wait_for("container app: started");
    let (code, out, err) = run.stop();
    assert_eq!(code, 0, "{out}\n{err}");
    let all: Value = serde_json::from_str(&out[out.find('[').unwrap()..]).unwrap();
    let pods = all.as_array().unwrap();
    let names: Vec<_> = pods.iter().map(|p| p["pod"].as_str().unwrap()).collect();
    assert_eq!(names, ["default/web-0", "default/web-1"]);
    let ips: Vec<_> = pods.iter().map(|p| p["ip"].as_str().unwrap()).collect();
    assert!(
        ips[0].starts_with("10.213.") && ips[1].starts_with("10.213.") && ips[0] != ips[1],
        "{ips:?}"
    );
    assert!(pods.iter().all(|p| p["phase"] == "Stopped"));
    s.assert_nothing_left();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_pods_grace_period_is_kept_within_10_percent() {
    let s = Setup::start();
    let pod = s.dir.path().join("stubborn.yaml");
    std::fs::write(
        &pod,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: stubborn}
spec:
  terminationGracePeriodSeconds: 3
  containers:
  - name: stubborn
    image: myapp:latest
    command: [sh, -c, "trap '' TERM; while :; do sleep 1; done"]
"#,
    )
    .unwrap();
    let args = s.run_args(&[&pod], &[]);
    let run = Running::spawn(&s, &args, "container stubborn: started");
    let asked = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    let (code, stdout, err) = run.stop();
    assert_eq!(code, 0, "{stdout}\n{err}");
    let r = report(&stdout);
    let c = container(&r, "stubborn");
    assert_eq!(
        c["exit_code"].as_i64(),
        Some(137),
        "SIGKILLed once its grace ran out: {r}"
    );
    let took = Duration::from_nanos((ns(c, "finished_at") - asked) as u64);
    assert!(
        took >= Duration::from_millis(2900) && took <= Duration::from_millis(3300),
        "a grace period of 3 s took {took:?}"
    );
    s.assert_nothing_left();
}

/// A downwardAPI volume and a projected one (a ConfigMap, a Secret and the downward API merged), as the
/// container sees them: kubelet's file contents and modes (a cpu limit not set read as the node's
/// allocatable cpu), read-only.
#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_container_reads_its_downward_api_and_projected_files() {
    let s = Setup::start();
    let pod = s.dir.path().join("downward.yaml");
    std::fs::write(
        &pod,
        r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: app-config}
data: {app.conf: "mode=fast"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {token: s3cr3t}
---
apiVersion: v1
kind: Pod
metadata:
  name: downward
  labels: {app: web, tier: "front end"}
  annotations: {note: 'say "hi"'}
spec:
  restartPolicy: Never
  containers:
  - name: show
    image: myapp:latest
    resources: {requests: {memory: 96Mi}}
    volumeMounts:
    - {name: info, mountPath: /info}
    - {name: all, mountPath: /all}
    command:
    - sh
    - -c
    - |
      cat /info/labels; echo
      cat /info/annotations; echo
      echo "name=$(cat /info/name) ns=$(cat /info/namespace) uid=$(cat /info/uid)"
      echo "cpu=$(cat /info/cpu_m) mem=$(cat /info/mem_mi)"
      echo "conf=$(cat /all/app.conf) token=$(cat /all/auth/token) app=$(cat /all/app)"
      stat -c 'mode %a %n' /info/labels /all/auth/token /all/app.conf
      touch /all/x 2>/dev/null && echo projected writable || echo projected read-only
      touch /info/x 2>/dev/null && echo downward writable || echo downward read-only
  volumes:
  - name: info
    downwardAPI:
      items:
      - {path: labels, fieldRef: {fieldPath: metadata.labels}}
      - {path: annotations, fieldRef: {fieldPath: metadata.annotations}}
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: namespace, fieldRef: {fieldPath: metadata.namespace}}
      - {path: uid, fieldRef: {fieldPath: metadata.uid}}
      - {path: cpu_m, resourceFieldRef: {containerName: show, resource: limits.cpu, divisor: 1m}}
      - {path: mem_mi, resourceFieldRef: {containerName: show, resource: requests.memory, divisor: 1Mi}}
  - name: all
    projected:
      defaultMode: 0440
      sources:
      - configMap: {name: app-config}
      - secret: {name: creds, items: [{key: token, path: auth/token, mode: 0400}]}
      - downwardAPI: {items: [{path: app, fieldRef: {fieldPath: "metadata.labels['app']"}}]}
"#,
    )
    .unwrap();
    let (code, out, err) = s.run(&[&pod], &["--logs"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let r = report(&out);
    assert_eq!(r["phase"], "Succeeded", "{r}");
    let uid = r["uid"].as_str().unwrap();
    // No cpu limit: the node's allocatable cpu, as kubelet gives it: the machine less crius's 100m reserve
    // (no limits here: this host's cgroups may lack the controllers).
    let cpus = std::thread::available_parallelism().unwrap().get() as u64;
    let node_cpu = (cpus * 1000).saturating_sub(100).max(100);
    let lines: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("show | ")).collect();
    assert_eq!(
        lines,
        [
            "app=\"web\"",
            "tier=\"front end\"",
            "note=\"say \\\"hi\\\"\"",
            &format!("name=downward ns=default uid={uid}"),
            &format!("cpu={node_cpu} mem=96"),
            "conf=mode=fast token=s3cr3t app=web",
            "mode 644 /info/labels",
            "mode 400 /all/auth/token",
            "mode 440 /all/app.conf",
            "projected read-only",
            "downward read-only",
        ],
        "{out}"
    );
    s.assert_nothing_left();
}

#[test]
#[ignore = "needs root: hack/test.sh runs it"]
fn an_image_volume_is_mounted_from_its_image_with_its_sub_path() {
    let s = Setup::start();
    let pod = s.dir.path().join("image-volume.yaml");
    std::fs::write(
        &pod,
        r#"
apiVersion: v1
kind: Pod
metadata: {name: tools}
spec:
  restartPolicy: Never
  containers:
  - name: show
    image: myapp:latest
    volumeMounts:
    - {name: agent, mountPath: /agent}
    - {name: agent, mountPath: /agent-bin, subPath: bin}
    command:
    - sh
    - -c
    - |
      test -e /agent/bin/busybox && test -e /agent-bin/busybox && echo both there
      touch /agent/x 2>/dev/null && echo writable || echo read-only
  volumes:
  - name: agent
    image: {reference: "fluent/fluent-bit:3.2", pullPolicy: IfNotPresent}
"#,
    )
    .unwrap();
    let (code, out, err) = s.run(&[&pod], &["--logs"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let lines: Vec<&str> = out.lines().filter_map(|l| l.strip_prefix("show | ")).collect();
    assert_eq!(lines, ["both there", "read-only"], "{out}");
    s.assert_nothing_left();
    let snapshots = crius_privileged_tests::cri::entries(&s.d.root().join("images/snapshots"));
    assert!(snapshots.is_empty(), "snapshots left: {snapshots:?}");
}
