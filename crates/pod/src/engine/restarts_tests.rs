//! Restarts against the fake CRI runtime: the restart policies, the sidecars' back-off, failing init
//! containers, a create tried again, a failed post-start hook and a failing liveness probe.

use std::time::Duration;

use tokio::sync::mpsc;

use super::Control;
use super::tests::{JOB, Pod, container, in_sandbox, no_controls};
use crate::fake_cri::{Call, TERMINATED, create, remove, start, stop};
use crate::report::{Event, Phase};

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
