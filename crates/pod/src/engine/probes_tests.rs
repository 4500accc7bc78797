//! Exec probes against the fake CRI runtime: each one is an ExecSync of the probe's command with its
//! `timeoutSeconds`, every `periodSeconds`, and `failureThreshold` failures in a row turn the verdict, as
//! kubelet's prober does.

use std::time::Duration;

use tokio::sync::mpsc;

use super::Control;
use super::tests::Pod;
use crate::report::Phase;

#[tokio::test]
async fn a_readiness_exec_probe_is_an_exec_sync_every_period_and_turns_after_the_threshold() {
    let pod = Pod::app(
        "    readinessProbe: {exec: {command: [check, ready]}, periodSeconds: 1, timeoutSeconds: 4, failureThreshold: 2}\n",
    )
    .await;
    // Fails twice (unready at the second, the threshold), then passes (ready again).
    pod.fake.execs("app", [1, 1]);
    let (tx, rx) = mpsc::unbounded_channel();
    let script = async {
        pod.event("app: not ready (readiness probe)").await;
        pod.event("app: ready").await;
        tx.send(Control::Stop).unwrap();
    };
    let r = pod.run(rx, script).await.unwrap();
    assert_eq!(r.phase, Phase::Stopped);
    let asked = pod.fake.exec_requests();
    assert!(asked.len() >= 3, "{asked:?}");
    for a in &asked {
        assert_eq!(a.name, "app");
        assert_eq!(a.cmd, ["check", "ready"]);
        assert_eq!(a.timeout, 4);
    }
    // One a period, not one each time the engine looks (every few ms here).
    for w in asked.windows(2) {
        let gap = w[1].at - w[0].at;
        assert!(gap >= Duration::from_millis(950), "probes {gap:?} apart");
    }
    let lines = pod.lines();
    let unready = lines.iter().position(|l| l == "app: not ready (readiness probe)");
    let ready = lines.iter().rposition(|l| l == "app: ready");
    assert!(unready.is_some() && ready > unready, "{lines:?}");
}

#[tokio::test]
async fn startup_and_liveness_exec_probes_are_exec_syncs_with_their_timeouts() {
    let pod = Pod::app(concat!(
        "    startupProbe: {exec: {command: [started]}, periodSeconds: 1, timeoutSeconds: 2}\n",
        "    livenessProbe: {exec: {command: [alive]}, periodSeconds: 1, timeoutSeconds: 3}\n",
    ))
    .await;
    let (tx, rx) = mpsc::unbounded_channel();
    let script = async {
        pod.fake
            .called("a liveness probe after the startup probe", |c| {
                c.iter()
                    .filter(|c| **c == crate::fake_cri::Call::Exec("app".into()))
                    .count()
                    >= 2
            })
            .await;
        tx.send(Control::Stop).unwrap();
    };
    pod.run(rx, script).await.unwrap();
    let asked = pod.fake.exec_requests();
    assert_eq!(
        (asked[0].cmd.as_slice(), asked[0].timeout),
        (&["started".to_string()][..], 2)
    );
    assert_eq!(
        (asked[1].cmd.as_slice(), asked[1].timeout),
        (&["alive".to_string()][..], 3)
    );
}
