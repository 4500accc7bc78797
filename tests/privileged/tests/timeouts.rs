//! criusd keeps the times it is given, against real shims and containers: StopContainer of a process that
//! ignores SIGTERM takes its grace period (then SIGKILL), and ExecSync of a command that outlives its timeout
//! answers DeadlineExceeded after that timeout — within 10%, not twice it (a deadline is an answer, not a
//! broken connection to retry on), on the shim's direct exec path and through `crius-runc exec`. And a stop right
//! after a start is not lost: a container's PID 1 that has not installed its SIGTERM handler yet (the kernel
//! drops the signal) gets it again once it has. ExecSyncs waiting for their commands hold no thread of criusd
//! (its thread count, from /proc, does not grow with their number).

use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::cri::{Pod, container, cremove, cstatus, cstop};
use crius_test_support::{image, require_root, testprog_binary};
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

/// criusd's threads, from /proc.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn exec_syncs_waiting_for_their_commands_hold_no_criusd_thread() {
    require_root();
    let mut p = Pod::on_host_network("waiters").await;
    let id = p
        .started(container("waiters", "busybox:latest", "sleep 600"))
        .await;
    let exec = |c: &mut crius_privileged_tests::cri::Client, cmd: &str| {
        let req = cri::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sh".into(), "-c".into(), cmd.into()],
            timeout: 20,
        };
        let mut c = c.clone();
        async move { c.exec_sync(req).await.map(|r| r.into_inner()) }
    };
    // The shim's connection is made, and criusd has served an ExecSync.
    exec(&mut p.c, "true").await.unwrap();
    let pid = p.d.pid();
    let mut counts = Vec::new();
    for n in [4usize, 40] {
        let before = threads(pid);
        let calls: Vec<_> = (0..n)
            .map(|i| tokio::spawn(exec(&mut p.c, &format!("sleep 3; echo {i}"))))
            .collect();
        // Every call is waiting for its command now.
        tokio::time::sleep(Duration::from_millis(2000)).await;
        let during = threads(pid);
        for (i, call) in calls.into_iter().enumerate() {
            let out = call.await.unwrap().unwrap();
            assert_eq!(
                (out.exit_code, String::from_utf8_lossy(&out.stdout).trim()),
                (0, i.to_string().as_str())
            );
        }
        println!("{n} ExecSyncs waiting: criusd has {during} threads, {before} before");
        counts.push((n, before, during));
    }
    for (n, before, during) in counts {
        assert!(
            during <= before + 3,
            "{n} waiting ExecSyncs took criusd from {before} to {during} threads"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_stop_right_after_the_start_is_not_lost_before_the_handler_is_installed() {
    require_root();
    let mut p = Pod::on_host_network("early-stop").await;
    let layout = image::test_images_layout(&testprog_binary());
    p.d.cli_ok(&["images", "import", &layout.display().to_string()]);
    // PID 1 of its own PID namespace, with its SIGTERM handler only 200 ms after it starts.
    let mut config = container("early", "crius-testprog:latest", "");
    config.command = vec!["/crius-testprog".into(), "--trap-after".into(), "200".into()];
    let grace = 30;
    let mut took = Vec::new();
    for round in 0..50u64 {
        config.metadata.as_mut().unwrap().attempt = round as u32;
        config.log_path = format!("early/{round}.log");
        let id = p.create(config.clone()).await.unwrap();
        p.c.start_container(cri::StartContainerRequest {
            container_id: id.clone(),
        })
        .await
        .unwrap();
        // 0–10 ms after the start.
        tokio::time::sleep(Duration::from_millis(round % 11)).await;
        let t = Instant::now();
        cstop(&mut p.c, &id, grace).await;
        took.push(t.elapsed());
        let st = cstatus(&mut p.c, &id).await.unwrap();
        assert_eq!(
            (st.state, st.exit_code),
            (cri::ContainerState::ContainerExited as i32, 0),
            "round {round}: stopped by its SIGTERM handler, not killed at the end of the grace period"
        );
        cremove(&mut p.c, &id).await;
    }
    took.sort();
    let ms = |d: Duration| d.as_millis();
    println!(
        "50 stops 0-10 ms after the start, handler at 200 ms: min {} ms, median {} ms, max {} ms",
        ms(took[0]),
        ms(took[took.len() / 2]),
        ms(took[took.len() - 1])
    );
    assert!(
        took[took.len() - 1] < Duration::from_secs(2),
        "a stop took {:?} (grace {grace} s): {took:?}",
        took[took.len() - 1]
    );
}
