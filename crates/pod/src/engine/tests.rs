//! The engine against the in-process fake CRI runtime ([`crate::fake_cri`]): the order of the CRI calls it
//! makes for start-up, restarts, completion and termination, without root and without processes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ResourceRequirements;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use super::{Control, Options, PullPolicy, run};
use crate::Error;
use crate::fake_cri::{Call, FakeCri, TERMINATED, create, remove, start, stop};
use crate::manifest::Manifest;
use crate::report::{ContainerReport, Event, Phase, Report, Role};

/// One pod of a manifest on its own fake runtime, with its files in a temporary directory.
pub(super) struct Pod {
    pub(super) fake: Arc<FakeCri>,
    channel: Channel,
    manifest: Manifest,
    opts: Options,
    events: Arc<Mutex<Vec<Event>>>,
    _dir: tempfile::TempDir,
}

impl Pod {
    pub(super) async fn new(yaml: &str) -> Pod {
        Pod::on(FakeCri::new(), yaml).await
    }

    /// Pod `p` of one container, `app` (image `x:1`), with `fields` (YAML lines of the container, e.g. its
    /// probes, each indented 4).
    pub(super) async fn app(fields: &str) -> Pod {
        let yaml = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: app\n    image: x:1\n{fields}"
        );
        Pod::new(&yaml).await
    }

    pub(super) async fn on(fake: Arc<FakeCri>, yaml: &str) -> Pod {
        let dir = tempfile::tempdir().unwrap();
        let channel = fake.serve(dir.path()).await;
        let opts = Options {
            pull: PullPolicy::Missing,
            pods_dir: dir.path().join("pods"),
            log_root: dir.path().join("logs"),
            // Short enough for tests, long enough that the order of a restart's calls is plain.
            backoff: Duration::from_millis(20),
            poll: Duration::from_millis(5),
            cgroup_root: None,
            ..Options::default()
        };
        Pod {
            fake,
            channel,
            manifest: crate::manifest::parse(yaml, "test.yaml").unwrap(),
            opts,
            events: Arc::default(),
            _dir: dir,
        }
    }

    /// Runs the pod while `script` plays the containers' and the caller's part; what `run` returned.
    pub(super) async fn run(
        &self,
        controls: mpsc::UnboundedReceiver<Control>,
        script: impl Future<Output = ()>,
    ) -> Result<Report, Error> {
        let events = self.events.clone();
        let engine = run(
            self.channel.clone(),
            &self.opts,
            &self.manifest.pods[0],
            &self.manifest,
            controls,
            move |e| events.lock().unwrap().push(e),
        );
        let both = async { tokio::join!(engine, script) };
        let (report, ()) = tokio::time::timeout(Duration::from_secs(30), both)
            .await
            .unwrap_or_else(|_| panic!("the pod did not end in 30 s; calls: {:?}", self.fake.calls()));
        report
    }

    /// The events so far, as `crius run` prints them.
    pub(super) fn lines(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Waits (at most 10 s) for an event whose line contains `needle`.
    pub(super) async fn event(&self, needle: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.lines().iter().any(|l| l.contains(needle)) {
            assert!(
                Instant::now() < deadline,
                "no event {needle:?} in {:?}",
                self.lines()
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// Controls nobody sends: the pod runs until it completes.
fn no_controls() -> mpsc::UnboundedReceiver<Control> {
    mpsc::unbounded_channel().1
}

fn container<'a>(r: &'a Report, name: &str) -> &'a ContainerReport {
    r.containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} in {r:?}"))
}

/// `calls` with the ones of the pod's sandbox around them.
fn in_sandbox(calls: impl IntoIterator<Item = Call>) -> Vec<Call> {
    let mut all = vec![Call::RunPodSandbox];
    all.extend(calls);
    all.extend([Call::StopPodSandbox, Call::RemovePodSandbox]);
    all
}

const ORDER: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: order}
spec:
  restartPolicy: Never
  initContainers:
  - {name: s1, image: x:1, restartPolicy: Always}
  - {name: s2, image: x:1, restartPolicy: Always}
  - {name: i1, image: x:1}
  - {name: i2, image: x:1}
  containers:
  - {name: a, image: x:1}
  - {name: b, image: x:1}
"#;

#[tokio::test]
async fn sidecars_start_first_in_order_then_init_containers_run_to_completion_then_the_mains() {
    let pod = Pod::new(ORDER).await;
    pod.fake.script("i2", [0]);
    pod.fake.script("a", [0]);
    pod.fake.script("b", [0]);
    let script = async {
        pod.fake.running("i1", 0).await;
        // i1 still runs: nothing after it starts until it has exited 0.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !pod.fake.calls().contains(&create("i2")),
            "{:?}",
            pod.fake.calls()
        );
        pod.fake.exit("i1", 0);
    };
    let r = pod.run(no_controls(), script).await.unwrap();
    assert_eq!(r.phase, Phase::Succeeded);
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([
            create("s1"),
            start("s1"),
            create("s2"),
            start("s2"),
            create("i1"),
            start("i1"),
            create("i2"),
            start("i2"),
            create("a"),
            start("a"),
            create("b"),
            start("b"),
            // The pod completed: its sidecars are stopped in reverse order.
            stop("s2"),
            stop("s1"),
        ])
    );
    let lines = pod.lines();
    let at = |l: &str| {
        lines
            .iter()
            .position(|x| x == l)
            .unwrap_or_else(|| panic!("{l} in {lines:?}"))
    };
    assert!(at("sidecar s1: startup complete") < at("sidecar s2: started"));
    assert!(at("init i1: exited 0 (Completed)") < at("init i2: started"));
}

#[tokio::test]
async fn a_sidecars_startup_probe_holds_back_the_next_init_container() {
    let pod = Pod::new(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: probe}
spec:
  restartPolicy: Never
  initContainers:
  - name: s
    image: x:1
    restartPolicy: Always
    startupProbe: {exec: {command: [test, -f, /ready]}, periodSeconds: 1, failureThreshold: 5}
  - {name: i, image: x:1}
  containers: [{name: a, image: x:1}]
"#,
    )
    .await;
    pod.fake.execs("s", [1]);
    pod.fake.script("i", [0]);
    pod.fake.script("a", [0]);
    let r = pod.run(no_controls(), async {}).await.unwrap();
    assert_eq!(r.phase, Phase::Succeeded);
    let exec = Call::Exec("s".into());
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([
            create("s"),
            start("s"),
            exec.clone(),
            // A second after the failed probe, the next one passes: only then does i start.
            exec,
            create("i"),
            start("i"),
            create("a"),
            start("a"),
            stop("s"),
        ])
    );
}

const SIDECARS_AND_MAINS: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: app}
spec:
  initContainers:
  - {name: s1, image: x:1, restartPolicy: Always}
  - {name: s2, image: x:1, restartPolicy: Always}
  containers:
  - {name: a, image: x:1}
  - {name: b, image: x:1}
"#;

#[tokio::test]
async fn termination_stops_the_mains_first_then_the_sidecars_in_reverse_order() {
    let pod = Pod::new(SIDECARS_AND_MAINS).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let script = async {
        pod.fake.running("a", 0).await;
        pod.fake.running("b", 0).await;
        tx.send(Control::Stop).unwrap();
    };
    let r = pod.run(rx, script).await.unwrap();
    assert_eq!(r.phase, Phase::Stopped);
    let calls = pod.fake.calls();
    assert_eq!(
        calls[..9],
        [
            Call::RunPodSandbox,
            create("s1"),
            start("s1"),
            create("s2"),
            start("s2"),
            create("a"),
            start("a"),
            create("b"),
            start("b"),
        ]
    );
    // The main containers are stopped together, in either order.
    let mut mains = calls[9..11].to_vec();
    mains.sort_by_key(|c| format!("{c:?}"));
    assert_eq!(mains, [stop("a"), stop("b")]);
    assert_eq!(
        calls[11..],
        [
            stop("s2"),
            stop("s1"),
            Call::StopPodSandbox,
            Call::RemovePodSandbox
        ]
    );
    for name in ["s1", "s2", "a", "b"] {
        let c = container(&r, name);
        assert_eq!((c.exit_code, c.restarts), (Some(TERMINATED), 0), "{c:?}");
    }
}

const JOB: &str = r#"
apiVersion: batch/v1
kind: Job
metadata: {name: job}
spec:
  template:
    spec:
      restartPolicy: Never
      initContainers: [{name: agent, image: x:1, restartPolicy: Always}]
      containers: [{name: worker, image: x:1}]
"#;

#[tokio::test]
async fn a_job_completes_when_its_worker_finishes_while_its_sidecar_runs() {
    // With the runtime's events (criusd) and without them (containerd 1.6: the engine polls).
    for fake in [FakeCri::new(), FakeCri::without_events()] {
        let pod = Pod::on(fake, JOB).await;
        let script = async {
            pod.fake.running("worker", 0).await;
            pod.fake.exit("worker", 0);
        };
        let r = pod.run(no_controls(), script).await.unwrap();
        assert_eq!(r.phase, Phase::Succeeded);
        assert_eq!(
            pod.fake.calls(),
            in_sandbox([
                create("agent"),
                start("agent"),
                create("worker"),
                start("worker"),
                stop("agent"),
            ])
        );
        let (agent, worker) = (container(&r, "agent"), container(&r, "worker"));
        assert_eq!((worker.exit_code, worker.reason.as_str()), (Some(0), "Completed"));
        assert_eq!((agent.role, agent.exit_code), (Role::Sidecar, Some(TERMINATED)));
        assert!(worker.finished_at <= agent.finished_at, "{r:?}");
    }
}

#[tokio::test]
async fn restart_policies_decide_on_exits_0_and_non_zero() {
    // (restartPolicy, first exit code, whether it is restarted, the pod's phase)
    let cases = [
        ("Always", 0, true, Phase::Stopped),
        ("Always", 1, true, Phase::Stopped),
        ("OnFailure", 0, false, Phase::Succeeded),
        ("OnFailure", 1, true, Phase::Succeeded),
        ("Never", 0, false, Phase::Succeeded),
        ("Never", 1, false, Phase::Failed),
    ];
    for (policy, code, restarted, phase) in cases {
        let pod = Pod::new(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  restartPolicy: {policy}\n  containers: [{{name: app, image: x:1}}]\n"
        ))
        .await;
        pod.fake.script("app", [code]);
        let (tx, rx) = mpsc::unbounded_channel();
        let script = async {
            if !restarted {
                return;
            }
            pod.fake.running("app", 1).await;
            match policy {
                "Always" => tx.send(Control::Stop).unwrap(),
                _ => pod.fake.exit("app", 0),
            }
        };
        let r = pod.run(rx, script).await.unwrap();
        let case = format!("{policy}, exit {code}");
        assert_eq!(r.phase, phase, "{case}");
        let first = [create("app"), start("app")];
        let expected = if restarted {
            let mut again = vec![remove("app"), Call::Create("app".into(), 1), start("app")];
            if policy == "Always" {
                again.push(stop("app"));
            }
            in_sandbox(first.into_iter().chain(again))
        } else {
            in_sandbox(first)
        };
        assert_eq!(pod.fake.calls(), expected, "{case}");
        assert_eq!(container(&r, "app").restarts, u32::from(restarted), "{case}");
        if restarted {
            assert!(
                pod.lines().contains(&"app: restarting in 0.0s".to_string()),
                "{case}"
            );
        }
    }
}

#[tokio::test]
async fn sidecars_restart_whatever_the_policy_with_a_doubling_back_off() {
    let pod = Pod::new(JOB).await;
    pod.fake.script("agent", [0, 1]);
    pod.fake.script("worker", [0]);
    let r = pod.run(no_controls(), async {}).await.unwrap();
    assert_eq!(r.phase, Phase::Succeeded);
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([
            create("agent"),
            start("agent"),
            remove("agent"),
            Call::Create("agent".into(), 1),
            start("agent"),
            remove("agent"),
            Call::Create("agent".into(), 2),
            start("agent"),
            create("worker"),
            start("worker"),
            stop("agent"),
        ])
    );
    let after: Vec<Duration> = pod
        .events
        .lock()
        .unwrap()
        .iter()
        .filter_map(|e| match e {
            Event::Restarting { after, .. } => Some(*after),
            _ => None,
        })
        .collect();
    assert_eq!(after, [Duration::from_millis(20), Duration::from_millis(40)]);
    assert_eq!(container(&r, "agent").restarts, 2);
}

const FAILING_INIT: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  restartPolicy: POLICY
  initContainers: [{name: migrate, image: x:1}]
  containers: [{name: work, image: x:1}]
"#;

#[tokio::test]
async fn a_failing_init_container_fails_a_never_pod_before_any_main_starts() {
    let pod = Pod::new(&FAILING_INIT.replace("POLICY", "Never")).await;
    pod.fake.script("migrate", [1]);
    let r = pod.run(no_controls(), async {}).await.unwrap();
    assert_eq!(r.phase, Phase::Failed);
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([create("migrate"), start("migrate")])
    );
    let (migrate, work) = (container(&r, "migrate"), container(&r, "work"));
    assert_eq!((migrate.exit_code, migrate.reason.as_str()), (Some(1), "Error"));
    assert_eq!((work.exit_code, work.reason.as_str()), (None, "NotStarted"));
}

#[tokio::test]
async fn a_failing_init_container_is_run_again_under_on_failure() {
    let pod = Pod::new(&FAILING_INIT.replace("POLICY", "OnFailure")).await;
    pod.fake.script("migrate", [1, 0]);
    pod.fake.script("work", [0]);
    let r = pod.run(no_controls(), async {}).await.unwrap();
    assert_eq!(r.phase, Phase::Succeeded);
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([
            create("migrate"),
            start("migrate"),
            remove("migrate"),
            Call::Create("migrate".into(), 1),
            start("migrate"),
            create("work"),
            start("work"),
        ])
    );
}

#[tokio::test]
async fn a_stop_before_start_up_starts_nothing() {
    let pod = Pod::new(ORDER).await;
    let (tx, rx) = mpsc::unbounded_channel();
    // As a signal during the image pulls: it waits in the queue until the sandbox is made.
    tx.send(Control::Stop).unwrap();
    let r = pod.run(rx, async {}).await.unwrap();
    assert_eq!(r.phase, Phase::Stopped);
    assert_eq!(pod.fake.calls(), in_sandbox([]));
    assert!(r.containers.iter().all(|c| c.reason == "NotStarted"), "{r:?}");
}

#[tokio::test]
async fn a_stop_mid_start_stops_what_runs_and_starts_nothing_more() {
    let pod = Pod::new(ORDER).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let script = async {
        pod.fake.running("i1", 0).await;
        tx.send(Control::Stop).unwrap();
    };
    let r = pod.run(rx, script).await.unwrap();
    assert_eq!(r.phase, Phase::Stopped);
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([
            create("s1"),
            start("s1"),
            create("s2"),
            start("s2"),
            create("i1"),
            start("i1"),
            // The running regular init container goes first, as main containers do; then the sidecars.
            stop("i1"),
            stop("s2"),
            stop("s1"),
        ])
    );
    for name in ["i2", "a", "b"] {
        assert_eq!(container(&r, name).reason, "NotStarted");
    }
}

#[tokio::test]
async fn a_container_that_cannot_be_created_is_tried_again_and_start_up_waits_for_it() {
    let pod = Pod::new(JOB).await;
    pod.fake.fail_creates("agent", 1);
    pod.fake.script("worker", [0]);
    let r = pod.run(no_controls(), async {}).await.unwrap();
    assert_eq!(r.phase, Phase::Succeeded);
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([
            // Nothing was made, so there is nothing to remove before the next attempt.
            create("agent"),
            Call::Create("agent".into(), 1),
            start("agent"),
            create("worker"),
            start("worker"),
            stop("agent"),
        ])
    );
    assert!(
        pod.lines()
            .contains(&"agent: CreateContainer: Internal: the fake was told to fail this create".to_string()),
        "{:?}",
        pod.lines()
    );
    assert_eq!(container(&r, "agent").restarts, 1);
}

#[tokio::test]
async fn a_failed_post_start_hook_kills_its_container() {
    let pod = Pod::new(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  restartPolicy: Never
  containers:
  - name: app
    image: x:1
    lifecycle: {postStart: {exec: {command: [setup]}}}
"#,
    )
    .await;
    pod.fake.execs("app", [1]);
    let r = pod.run(no_controls(), async {}).await.unwrap();
    assert_eq!(r.phase, Phase::Failed);
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([create("app"), start("app"), Call::Exec("app".into()), stop("app")])
    );
    assert!(
        pod.lines()
            .contains(&"app: postStart hook: exited 1: the fake says no".to_string()),
        "{:?}",
        pod.lines()
    );
    // The runtime's own account of the end wins in the report.
    assert_eq!(container(&r, "app").exit_code, Some(TERMINATED));
}

#[tokio::test]
async fn a_failing_liveness_probe_kills_the_container_and_it_is_restarted() {
    let pod = Pod::app("    livenessProbe: {exec: {command: [check]}, failureThreshold: 1}\n").await;
    pod.fake.execs("app", [1]);
    let (tx, rx) = mpsc::unbounded_channel();
    let script = async {
        pod.fake
            .called("the second liveness probe", |c| {
                c.iter().filter(|c| **c == Call::Exec("app".into())).count() == 2
            })
            .await;
        tx.send(Control::Stop).unwrap();
    };
    let r = pod.run(rx, script).await.unwrap();
    assert_eq!(r.phase, Phase::Stopped);
    let exec = Call::Exec("app".into());
    let calls = pod.fake.calls();
    assert_eq!(
        calls[..9],
        [
            Call::RunPodSandbox,
            create("app"),
            start("app"),
            exec.clone(),
            stop("app"),
            remove("app"),
            Call::Create("app".into(), 1),
            start("app"),
            exec.clone(),
        ]
    );
    // Probes that pass go on until the stop is taken; then the pod ends.
    let end = calls.len() - 3;
    assert!(calls[9..end].iter().all(|c| *c == exec), "{calls:?}");
    assert_eq!(
        calls[end..],
        [stop("app"), Call::StopPodSandbox, Call::RemovePodSandbox]
    );
    assert!(
        pod.lines()
            .contains(&"container app: liveness probe failed; killing it".to_string())
    );
}

#[tokio::test]
async fn images_are_pulled_once_before_anything_is_made_and_a_forbidden_pull_makes_nothing() {
    let yaml = r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  restartPolicy: Never
  initContainers: [{name: i, image: "y:1"}]
  containers: [{name: a, image: "y:1"}, {name: b, image: "x:1"}]
"#;
    let pod = Pod::new(yaml).await;
    pod.fake.missing_image("y:1");
    for c in ["i", "a", "b"] {
        pod.fake.script(c, [0]);
    }
    let r = pod.run(no_controls(), async {}).await.unwrap();
    assert_eq!(r.phase, Phase::Succeeded);
    assert_eq!(
        pod.fake.calls()[..2],
        [Call::Pull("y:1".into()), Call::RunPodSandbox]
    );
    assert_eq!(pod.lines()[0], "pulling y:1");

    let mut pod = Pod::new(yaml).await;
    pod.opts.pull = PullPolicy::Never;
    pod.fake.missing_image("x:1");
    let e = pod.run(no_controls(), async {}).await.unwrap_err();
    assert!(
        matches!(&e, Error::ImageNotPresent { of, .. } if of == "container \"b\""),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "container \"b\": image x:1 is not present and may not be pulled (pull policy Never)"
    );
    assert_eq!(pod.fake.calls(), []);
}

#[tokio::test]
async fn resizes_in_place_by_a_restart_or_not_at_all() {
    let pod = Pod::new(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  initContainers: [{name: i, image: x:1}]
  containers:
  - name: app
    image: x:1
    resources: {requests: {cpu: 100m}, limits: {cpu: "1", memory: 1Gi}}
    resizePolicy: [{resourceName: memory, restartPolicy: RestartContainer}]
"#,
    )
    .await;
    pod.fake.script("i", [0]);
    let resources = |cpu: &str, memory: &str| -> ResourceRequirements {
        serde_json::from_value(serde_json::json!({
            "requests": {"cpu": "100m"}, "limits": {"cpu": cpu, "memory": memory}
        }))
        .unwrap()
    };
    let (tx, rx) = mpsc::unbounded_channel();
    let resize = |container: &str, resources| {
        tx.send(Control::Resize {
            container: container.into(),
            resources,
        })
        .unwrap();
    };
    let script = async {
        pod.fake.running("app", 0).await;
        resize("app", resources("2", "1Gi"));
        pod.event("app: resized in place: cpu quota 200000/100000").await;
        resize("app", resources("2", "2Gi"));
        pod.event("app: restarted with its new resources (resizePolicy)")
            .await;
        resize("i", resources("2", "2Gi"));
        pod.event("resize of i: regular init containers cannot be resized")
            .await;
        resize("app", ResourceRequirements::default());
        pod.event("resize of app: the pod's QoS class would change from Burstable to BestEffort")
            .await;
        resize("nope", ResourceRequirements::default());
        pod.event("resize of nope: the pod has no container \"nope\"")
            .await;
        tx.send(Control::Stop).unwrap();
    };
    let r = pod.run(rx, script).await.unwrap();
    assert_eq!(r.phase, Phase::Stopped);
    assert_eq!(
        pod.fake.calls(),
        in_sandbox([
            create("i"),
            start("i"),
            create("app"),
            start("app"),
            Call::Update("app".into()),
            stop("app"),
            remove("app"),
            Call::Create("app".into(), 1),
            start("app"),
            stop("app"),
        ])
    );
    assert_eq!(container(&r, "app").restarts, 1);
}
