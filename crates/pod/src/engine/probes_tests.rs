//! Exec probes against the fake CRI runtime: each one is an ExecSync of the probe's command with its
//! `timeoutSeconds`, every `periodSeconds`, and `failureThreshold` failures in a row turn the verdict, as
//! kubelet's prober does.

use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::Control;
use super::tests::Pod;
use crate::fake_cri::{Call, FakeCri};
use crate::report::Phase;

const PROBED: &str = "    readinessProbe: {exec: {command: [check]}, periodSeconds: 1}\n";

fn probes(calls: &[Call]) -> usize {
    calls.iter().filter(|c| **c == Call::Exec("app".into())).count()
}

/// With the runtime's events, the loop wakes for each probe without reading states (kubelet's prober does not
/// relist): at a 5 ms poll, ~2 s of probes read them a few times (the start's events, once a second), not 400.
/// An exit is still seen at once, from its event.
#[tokio::test]
async fn with_events_a_probe_reads_no_states_and_an_exit_is_seen_at_once() {
    let pod = Pod::app(PROBED).await;
    let (tx, rx) = mpsc::unbounded_channel();
    let script = async {
        pod.fake.called("three probes", |c| probes(c) >= 3).await;
        let lists = pod.fake.lists();
        assert!(lists <= 10, "{lists} ListContainers for three probes");
        let exited = Instant::now();
        pod.fake.exit("app", 1);
        pod.fake.running("app", 1).await;
        // Seen from its event: well before the once-a-second read (the back-off is 20 ms here).
        let seen = exited.elapsed();
        assert!(
            seen < Duration::from_millis(700),
            "restarted {seen:?} after its exit"
        );
        tx.send(Control::Stop).unwrap();
    };
    let r = pod.run(rx, script).await.unwrap();
    assert_eq!(r.phase, Phase::Stopped);
}

/// Without events (containerd 1.6), states are read on every tick, probes or not: that is how exits are seen.
#[tokio::test]
async fn without_events_states_are_read_every_tick() {
    let pod = Pod::on(
        FakeCri::without_events(),
        &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: app\n    image: x:1\n{PROBED}"),
    )
    .await;
    let (tx, rx) = mpsc::unbounded_channel();
    let script = async {
        pod.fake.called("two probes", |c| probes(c) >= 2).await;
        let lists = pod.fake.lists();
        assert!(lists >= 20, "{lists} ListContainers in a second at a 5 ms poll");
        pod.fake.exit("app", 0);
        pod.fake.running("app", 1).await;
        tx.send(Control::Stop).unwrap();
    };
    let r = pod.run(rx, script).await.unwrap();
    assert_eq!(r.phase, Phase::Stopped);
}

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
    // One a period, not one each time the engine looks (every few ms here): on the probe's ticks, the first
    // of which may come up to half a period after the run at the container's start.
    for (i, w) in asked.windows(2).enumerate() {
        let gap = w[1].at - w[0].at;
        let least = if i == 0 { 450 } else { 950 };
        assert!(gap >= Duration::from_millis(least), "probes {gap:?} apart");
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
            .called("a liveness probe after the startup probe", |c| probes(c) >= 2)
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
