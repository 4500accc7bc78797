//! The engine against the in-process fake CRI runtime ([`crate::fake_cri`]), without root and without
//! processes: the shared fixtures ([`Pod`], the manifests) and the order of the CRI calls for start-up,
//! completion and termination. Restarts are in `restarts_tests.rs`, stops, pulls and resizes in
//! `control_tests.rs`, probes in `probes_tests.rs`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tonic::transport::Channel;

use super::{Control, Options, PullPolicy, run};
use crate::Error;
use crate::fake_cri::{Call, FakeCri, TERMINATED, create, start, stop};
use crate::manifest::Manifest;
use crate::report::{ContainerReport, Event, Phase, Report, Role};

/// One pod of a manifest on its own fake runtime, with its files in a temporary directory.
pub(super) struct Pod {
    pub(super) fake: Arc<FakeCri>,
    channel: Channel,
    manifest: Manifest,
    pub(super) opts: Options,
    pub(super) events: Arc<Mutex<Vec<Event>>>,
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
pub(super) fn no_controls() -> mpsc::UnboundedReceiver<Control> {
    mpsc::unbounded_channel().1
}

pub(super) fn container<'a>(r: &'a Report, name: &str) -> &'a ContainerReport {
    r.containers
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no {name} in {r:?}"))
}

/// `calls` with the ones of the pod's sandbox around them.
pub(super) fn in_sandbox(calls: impl IntoIterator<Item = Call>) -> Vec<Call> {
    let mut all = vec![Call::RunPodSandbox];
    all.extend(calls);
    all.extend([Call::StopPodSandbox, Call::RemovePodSandbox]);
    all
}

pub(super) const ORDER: &str = r#"
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

pub(super) const JOB: &str = r#"
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
