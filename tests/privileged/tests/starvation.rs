//! No request starves criusd: with 50 ExecSync `sleep 30` calls in flight (timeout 0, an hour, and
//! i64::MAX, the largest a request can carry), a StopContainer with a grace period of i64::MAX seconds on a
//! container that ignores SIGTERM, and 20 streaming exec sessions (`kubectl exec`) of `sleep 30` open,
//! Version, ListContainers and ContainerStatus each answer within 100 ms, every time. The slow calls hold no
//! place in criusd's blocking pool (they wait on threads of their own). Then the containers are stopped,
//! every slow call returns, and no `sleep` is left.
//!
//! Figures (each call's times, the time the 50 execs took to start) are printed.

use std::io::Write;
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_privileged_tests::cri::{Client, Pod, container, cstatus, cstop};
use crius_stream::client;
use crius_test_support::require_root;

const SLOW: usize = 50;
/// Streaming exec sessions open besides: more than criusd's blocking pool (16) holds.
const SESSIONS: usize = 20;
const LIMIT: Duration = Duration::from_millis(100);

fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "starvation: {line}");
}

/// The pids whose cgroup names container `id` and whose command line is `argv`.
fn processes(id: &str, argv: &[&str]) -> Vec<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| [a.as_bytes(), b"\0"].concat()).collect();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c == want)
                && std::fs::read_to_string(format!("/proc/{pid}/cgroup")).is_ok_and(|c| c.contains(id))
        })
        .collect()
}

/// Times one of each quick call, `rounds` times: (call, times).
async fn quick_calls(c: &mut Client, id: &str, rounds: usize) -> Vec<(&'static str, Vec<Duration>)> {
    let mut out: Vec<(&'static str, Vec<Duration>)> = vec![
        ("Version", vec![]),
        ("ListContainers", vec![]),
        ("ContainerStatus", vec![]),
    ];
    for _ in 0..rounds {
        let t = Instant::now();
        c.version(cri::VersionRequest::default()).await.unwrap();
        out[0].1.push(t.elapsed());
        let t = Instant::now();
        c.list_containers(cri::ListContainersRequest::default())
            .await
            .unwrap();
        out[1].1.push(t.elapsed());
        let t = Instant::now();
        cstatus(c, id).await.unwrap();
        out[2].1.push(t.elapsed());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    out
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn fifty_slow_calls_leave_criusd_answering() {
    require_root();
    let mut p = Pod::on_host_network("starve").await;
    let sleeper = p
        .started(container("sleeper", "busybox:latest", "sleep 600"))
        .await;
    let script = "trap '' TERM; echo trapped; while :; do sleep 1; done";
    let stubborn = p.started(container("stubborn", "busybox:latest", script)).await;
    p.wait_for_log("stubborn", "trapped").await;
    // Warm up: connections made, code paged in.
    quick_calls(&mut p.c, &sleeper, 3).await;

    let timeouts = [0, 3600, i64::MAX];
    let started = Instant::now();
    let execs: Vec<_> = (0..SLOW)
        .map(|i| {
            let mut c = p.c.clone();
            let req = cri::ExecSyncRequest {
                container_id: sleeper.clone(),
                cmd: vec!["sleep".into(), "30".into()],
                timeout: timeouts[i % timeouts.len()],
            };
            tokio::spawn(async move { c.exec_sync(req).await })
        })
        .collect();
    let stop = {
        let mut c = p.c.clone();
        let req = cri::StopContainerRequest {
            container_id: stubborn.clone(),
            timeout: i64::MAX,
        };
        tokio::spawn(async move { c.stop_container(req).await })
    };
    // And streaming exec sessions (`kubectl exec`), open as long as their process runs.
    let mut sessions = Vec::new();
    for _ in 0..SESSIONS {
        let url =
            p.c.exec(cri::ExecRequest {
                container_id: sleeper.clone(),
                cmd: vec!["sleep".into(), "30".into()],
                stdout: true,
                stderr: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .url;
        sessions.push(tokio::spawn(async move {
            let (out, _kept) = tokio::io::duplex(1 << 16);
            let (err, _kept_too) = tokio::io::duplex(1 << 16);
            let stdio = client::Stdio {
                stdin: None,
                stdout: Some(Box::pin(out)),
                stderr: Some(Box::pin(err)),
                resize: None,
            };
            client::remote_command(&url, client::Transport::Spdy, stdio).await
        }));
    }
    // Every exec running: all slow calls are in flight.
    let deadline = Instant::now() + Duration::from_secs(27);
    loop {
        let n = processes(&sleeper, &["sleep", "30"]).len();
        if n >= SLOW + SESSIONS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "only {n} of {} execs started in 27 s",
            SLOW + SESSIONS
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    say(&format!(
        "{SLOW} ExecSync and {SESSIONS} streaming execs running after {:?}",
        started.elapsed()
    ));
    assert!(!stop.is_finished(), "StopContainer is still in its grace period");

    let figures = quick_calls(&mut p.c, &sleeper, 5).await;
    for (call, times) in &figures {
        say(&format!("{call}: {times:?}"));
    }
    let in_flight = SLOW - execs.iter().filter(|e| e.is_finished()).count();
    say(&format!(
        "{in_flight} execs still in flight after the measurements"
    ));
    assert_eq!(
        in_flight, SLOW,
        "the measurements were made with every exec in flight"
    );
    let open = SESSIONS - sessions.iter().filter(|s| s.is_finished()).count();
    assert_eq!(open, SESSIONS, "and every session open");

    // Clean up: the sleeper's init goes (its PID namespace with it); a second Stop kills the stubborn one.
    cstop(&mut p.c, &sleeper, 0).await;
    cstop(&mut p.c, &stubborn, 0).await;
    let all_back = tokio::time::timeout(Duration::from_secs(60), async {
        let mut outcomes = std::collections::BTreeMap::<String, usize>::new();
        for e in execs {
            // Killed with their container: an answer (exit 137) or an error, but an end, and never a refusal
            // of the timeout.
            let what = match e.await.unwrap() {
                Ok(r) => format!("exit {}", r.into_inner().exit_code),
                Err(s) => format!("{:?}", s.code()),
            };
            *outcomes.entry(what).or_default() += 1;
        }
        for s in sessions {
            let ended = s.await.unwrap();
            *outcomes
                .entry(format!(
                    "session {:?}",
                    ended.map(drop).map_err(|e| e.to_string())
                ))
                .or_default() += 1;
        }
        (outcomes, stop.await.unwrap())
    })
    .await;
    let (outcomes, stopped) = all_back.expect("every slow call returned once its container stopped");
    say(&format!("the execs ended: {outcomes:?}"));
    assert!(
        !outcomes.contains_key("InvalidArgument") && !outcomes.contains_key("Internal"),
        "{outcomes:?}"
    );
    assert!(
        stopped.is_ok(),
        "the long StopContainer ended with the kill: {stopped:?}"
    );
    assert_eq!(
        processes(&sleeper, &["sleep", "30"]),
        Vec::<u32>::new(),
        "no sleep left"
    );
    assert_eq!(
        processes(&stubborn, &["sleep", "1"]),
        Vec::<u32>::new(),
        "no sleep left"
    );

    for (call, times) in figures {
        let worst = times.iter().max().copied().unwrap_or_default();
        assert!(
            worst < LIMIT,
            "{call} took {worst:?} with {SLOW} slow calls in flight: {times:?}"
        );
    }
}
