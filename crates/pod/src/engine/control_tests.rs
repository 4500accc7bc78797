//! What the caller and the manifest change while the pod runs, against the fake CRI runtime: a stop before
//! or during start-up, the image pulls and their policy, in-place resizes.

use k8s_openapi::api::core::v1::ResourceRequirements;
use tokio::sync::mpsc;

use super::tests::{ORDER, Pod, container, in_sandbox, no_controls};
use super::{Control, PullPolicy};
use crate::Error;
use crate::fake_cri::{Call, create, remove, start, stop};
use crate::report::Phase;

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
