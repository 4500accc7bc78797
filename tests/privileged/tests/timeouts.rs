//! criusd keeps the times it is given, against real shims and containers: StopContainer of a process that
//! ignores SIGTERM takes its grace period (then SIGKILL), and ExecSync of a command that outlives its timeout
//! answers DeadlineExceeded after that timeout — within 10%, not twice it (a deadline is an answer, not a
//! broken connection to retry on), on the shim's direct exec path and through `crius-runc exec`.

use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container, cstatus, cstop};
use crius_test_support::require_root;
use tonic::Code;

fn within_10_percent(what: &str, took: Duration, asked: Duration) {
    assert!(
        took >= asked && took < asked + asked / 10,
        "{what}: asked for {asked:?}, took {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn stop_container_keeps_its_grace_period() {
    require_root();
    let mut p = Pod::on_host_network("stubborn").await;
    // The trap is set before the marker line, so once the line is in the log, SIGTERM is ignored.
    let script = "trap '' TERM; echo trapped; while :; do sleep 1; done";
    let id = p.started(container("stubborn", "busybox:latest", script)).await;
    p.wait_for_log("stubborn", "trapped").await;
    let t = Instant::now();
    cstop(&mut p.c, &id, 3).await;
    within_10_percent("StopContainer", t.elapsed(), Duration::from_secs(3));
    let st = cstatus(&mut p.c, &id).await.unwrap();
    assert_eq!(
        (st.state, st.exit_code),
        (cri::ContainerState::ContainerExited as i32, 137)
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn exec_sync_keeps_its_timeout() {
    exec_sync_timeout(true).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn exec_sync_keeps_its_timeout_through_crius_runc_exec() {
    exec_sync_timeout(false).await;
}

/// ExecSync's timeout, on the shim's direct exec path or (`direct` false) through `crius-runc exec`.
async fn exec_sync_timeout(direct: bool) {
    require_root();
    let args = vec!["--direct-exec".to_string(), direct.to_string()];
    let mut p = Pod::on_host_network_with("sleeper", args).await;
    let id = p
        .started(container("sleeper", "busybox:latest", "sleep 600"))
        .await;
    let t = Instant::now();
    let e =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), "60".into()],
            timeout: 3,
        })
        .await
        .unwrap_err();
    within_10_percent("ExecSync", t.elapsed(), Duration::from_secs(3));
    assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
    // The command was killed, and the container runs on.
    let out =
        p.c.exec_sync(cri::ExecSyncRequest {
            container_id: id,
            cmd: vec![
                "sh".into(),
                "-c".into(),
                "ps -o args | grep -cx 'sleep 60' || true".into(),
            ],
            timeout: 10,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "0", "{out:?}");
}
