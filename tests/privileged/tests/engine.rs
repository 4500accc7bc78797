//! The pod engine (`crius run`) on criusd with a real CNI network: the seed manifests as written, on stand-in
//! images — the Job whose log-agent sidecar starts first and is stopped after its worker completes, the
//! Deployment that runs until it is told to stop — and a pod built to pin down the rules: startup probes gate
//! the next init container, sidecars restart, main containers stop first and sidecars after them in reverse
//! order, a failed regular init container fails a `Never` pod. Nothing is left behind.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crius_test_support::cni::Network;
use crius_test_support::daemon::{Daemon, built_binary};
use crius_test_support::image;
use crius_test_support::require_root;
use crius_test_support::shims::shim_pids;
use serde_json::Value;

fn manifest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests").join(name)
}

/// criusd on the test's network, with the seed stand-in images imported.
struct Setup {
    d: Daemon,
    net: Network,
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        require_root();
        let net = Network::new();
        let args = net.daemon_args();
        let d = Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let dir = tempfile::tempdir().unwrap();
        let layout = dir.path().join("layout");
        image::seed_images(&layout).unwrap();
        d.cli_ok(&["images", "import", &layout.display().to_string()]);
        Setup { d, net, dir }
    }

    /// Restarts criusd (SIGTERM; it must be gone within 10 s, open event streams or not).
    fn restart_daemon(&mut self) {
        let args = self.net.daemon_args();
        self.d
            .restart(&args.iter().map(String::as_str).collect::<Vec<_>>());
    }

    /// `crius run` arguments that keep the pods' files in the test's directory.
    fn run_args(&self, files: &[&Path], extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec!["run".into()];
        a.extend(files.iter().map(|f| f.display().to_string()));
        for (k, v) in [("--pods-dir", "pods"), ("--log-root", "logs")] {
            a.push(k.into());
            a.push(self.dir.path().join(v).display().to_string());
        }
        a.extend(["--pull", "missing", "-o", "json"].map(String::from));
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(built_binary("crius"));
        c.env("CRIUS_ADDRESS", self.d.socket()).args(args);
        c
    }

    /// Runs `crius run` to its end: (exit code, stdout, stderr).
    fn run(&self, files: &[&Path], extra: &[&str]) -> (i32, String, String) {
        let out = self.command(&self.run_args(files, extra)).output().unwrap();
        let (o, e) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        (out.status.code().unwrap_or(-1), o, e)
    }

    /// No pod, container, shim, volume or mount is left.
    fn assert_nothing_left(&self) {
        for sub in ["sandboxes", "containers"] {
            let left: Vec<_> = std::fs::read_dir(self.d.root().join(sub))
                .map(|d| d.flatten().collect())
                .unwrap_or_default();
            assert!(
                left.is_empty(),
                "{sub} left: {:?}",
                left.iter().map(|e| e.file_name()).collect::<Vec<_>>()
            );
        }
        let pods: Vec<_> = std::fs::read_dir(self.dir.path().join("pods"))
            .map(|d| d.flatten().collect())
            .unwrap_or_default();
        assert!(pods.is_empty(), "pod directories left");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let here = self.dir.path().display().to_string();
        assert!(!mounts.contains(&here), "mounts left under {here}");
        let deadline = Instant::now() + Duration::from_secs(10);
        let owner = self.d.socket().display().to_string();
        while !shim_pids(&owner).is_empty() {
            assert!(Instant::now() < deadline, "shims left: {:?}", shim_pids(&owner));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The JSON report after the log lines on stdout.
fn report(stdout: &str) -> Value {
    let at = stdout
        .find("\n[")
        .map(|i| i + 1)
        .unwrap_or_else(|| stdout.find('[').expect("a JSON report"));
    let all: Value = serde_json::from_str(&stdout[at..]).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    all[0].clone()
}

fn container<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {r}"))
}

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
    let s = Setup::new();
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
    let s = Setup::new();
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

    // A regular init container that fails under restartPolicy Never fails the pod; the main container never runs.
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
    let (code, out, err) = s.run(&[&failing], &[]);
    assert_eq!(code, 1, "{out}\n{err}");
    let r = report(&out);
    assert_eq!(r["phase"], "Failed");
    assert_eq!(container(&r, "migrate")["exit_code"].as_i64(), Some(1));
    assert_eq!(container(&r, "work")["reason"], "NotStarted", "{r}");
    s.assert_nothing_left();

    // A liveness probe that fails kills the container; OnFailure restarts it, and the next run exits 0.
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

    // An image that is not there, with pulls forbidden: refused before anything is made, naming it.
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
    let mut s = Setup::new();
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

/// A `crius run` in the background, its stderr read line by line.
struct Running {
    child: Option<std::process::Child>,
    lines: std::sync::mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<String>>,
}

impl Running {
    /// Spawns `crius run` with `args` and waits for `line` on its stderr.
    fn spawn(s: &Setup, args: &[String], line: &str) -> Running {
        let mut child = s
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for l in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(l.clone());
                all.push_str(&l);
                all.push('\n');
            }
            all
        });
        let mut r = Running {
            child: Some(child),
            lines,
            reader: Some(reader),
        };
        r.wait_for(line);
        r
    }

    /// Waits (up to 2 minutes: the VM is slow) for a stderr line containing `needle`; returns it.
    fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut seen = Vec::new();
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(l) if l.contains(needle) => return l,
                Ok(l) => seen.push(l),
                Err(e) => {
                    let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                    panic!(
                        "no {needle:?} from crius run ({e}; its exit status: {status:?}); it said:\n{}",
                        seen.join("\n")
                    )
                }
            }
        }
    }

    /// Stops it with SIGTERM: (exit code, stdout, stderr).
    fn stop(mut self) -> (i32, String, String) {
        let child = self.child.take().expect("running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = self.reader.take().map(|r| r.join().unwrap()).unwrap_or_default();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            err,
        )
    }
}

impl Drop for Running {
    /// A test that failed midway still stops its `crius run`, which removes its pod.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = crius_test_support::terminate(&mut child, Duration::from_secs(30));
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The cgroup of the one running container under criusd's default parent (`/crius/<id>`).
fn running_cgroup() -> PathBuf {
    let root = crius_test_support::cgroup2_mount().join("crius");
    std::fs::read_dir(&root)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| std::fs::read_to_string(p.join("cgroup.procs")).is_ok_and(|s| !s.trim().is_empty()))
        .expect("a running container's cgroup")
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs cgroup v2 with its controllers: run through hack/test.sh (in the VM)"]
fn vm_the_seed_resize_pod_runs_with_kubelets_limits_and_resizes_in_place() {
    let s = Setup::new();
    // A copy of the seed to edit while it runs, as one patches a pod's resources.
    let pod = s.dir.path().join("myapp.yaml");
    let seed = std::fs::read_to_string(manifest("seed-resize-pod.yaml")).unwrap();
    std::fs::write(&pod, &seed).unwrap();
    let args = s.run_args(&[&pod], &["--watch"]);
    let mut run = Running::spawn(&s, &args, "container app: started");
    // requests 500m/512Mi, limits 1000m/1Gi: shares 512 (weight 59), quota 100 ms per 100 ms, 1 GiB.
    let dir = running_cgroup();
    assert_eq!(read(&dir, "cpu.max"), "100000 100000");
    assert_eq!(read(&dir, "cpu.weight"), "59");
    assert_eq!(read(&dir, "memory.max"), (1u64 << 30).to_string());
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
    assert_eq!(main_pid(&dir), pid, "the same process");

    // memory: RestartContainer: a new container with the new limit.
    std::fs::write(&pod, cpu.replace("memory: \"1Gi\"", "memory: \"2Gi\"")).unwrap();
    let line = run.wait_for("app: restarted with its new resources");
    assert!(line.contains(&format!("memory limit {}", 2u64 << 30)), "{line}");
    let again = running_cgroup();
    assert_ne!(again, dir, "a new container");
    assert_eq!(read(&again, "memory.max"), (2u64 << 30).to_string());
    assert_eq!(read(&again, "cpu.max"), "150000 100000");

    let (code, out, err) = run.stop();
    assert_eq!(code, 0, "{out}\n{err}");
    let r = report(&out);
    assert_eq!(r["phase"], "Stopped");
    assert_eq!(container(&r, "app")["restarts"], 1, "{r}");
    s.assert_nothing_left();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_statefulsets_replicas_run_side_by_side() {
    let s = Setup::new();
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
