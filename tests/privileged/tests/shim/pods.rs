//! One shim per pod over ttrpc: sharing and leaving, the CRI log format and its reopening, a client killed
//! mid-call, SIGTERM and trap exit codes, exits published late, and the init's exit kept on disk.

use super::*;

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn containers_of_one_pod_share_a_shim_that_leaves_after_their_last_delete() {
    let mut p = Pod::new();
    let (c1, c2) = (p.id("c1"), p.id("c2"));
    let b1 = p.bundle(&TICKER);
    let b2 = p.bundle(&["true"]);
    let a1 = p.start_shim(&c1, &b1);
    let a2 = p.start_shim(&c2, &b2);
    assert_eq!(a1, a2, "containers of one pod share a shim");
    let shims = shim_pids(&p.owner);
    assert_eq!(shims.len(), 1, "{shims:?}");

    let c = client::connect(&a1).unwrap();
    let (log1, uri1) = p.log("c1");
    let pid1 = create(&c, &c1, &b1, &uri1).unwrap();
    assert_eq!(state(&c, &c1).unwrap().status, api::Status::CREATED.into());
    assert_eq!(start(&c, &c1).unwrap(), pid1);
    create(&c, &c2, &b2, "").unwrap();
    start(&c, &c2).unwrap();
    assert_eq!(wait(&c, &c2), 0);
    wait_for_tick(&log1);
    kill(&c, &c1, 15);
    assert_eq!(wait(&c, &c1), 7);

    assert_eq!(delete(&c, &c1).unwrap().exit_status, 7);
    assert_eq!(delete(&c, &c2).unwrap().exit_status, 0);
    // No Shutdown: the shim leaves by itself once its pod's last container is deleted.
    wait_until("the shim to exit after its last container", || !alive(shims[0]));
    assert!(
        !Path::new(a1.trim_start_matches("unix://")).exists(),
        "socket removed"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_log_is_in_kubelets_format_with_partial_records_at_16_kib() {
    let mut p = Pod::new();
    let c2 = p.id("c2");
    let long = "head -c 20000 /dev/zero | tr '\\0' x; printf tail";
    let b2 = p.bundle(&[
        "sh",
        "-c",
        &format!("echo one; echo two >&2; {long}; echo; printf last"),
    ]);
    let c = client::connect(&p.start_shim(&c2, &b2)).unwrap();
    let (log2, uri2) = p.log("c2");
    create(&c, &c2, &b2, &uri2).unwrap();
    start(&c, &c2).unwrap();
    assert_eq!(wait(&c, &c2), 0);

    // The kubelet's log format, exactly: partial records at 16 KiB, a final record for the last line.
    // The last line has no newline: its P record comes at once, the empty F record that ends it when the
    // stream ends, which may be a moment after the exit.
    wait_until("c2's log to end its last line", || {
        let text = std::fs::read_to_string(&log2).unwrap_or_default();
        text.contains("last")
            && text
                .lines()
                .rfind(|l| l.split(' ').nth(1) == Some("stdout"))
                .is_some_and(|l| l.split(' ').nth(2) == Some("F"))
    });
    let text = std::fs::read_to_string(&log2).unwrap();
    let recs: Vec<(String, String, String)> = text
        .lines()
        .map(|l| {
            let p: Vec<&str> = l.splitn(4, ' ').collect();
            assert_eq!(p.len(), 4, "{l:?}");
            let ts = p[0];
            assert!(
                ts.len() >= 20 && ts.ends_with('Z') && &ts[10..11] == "T",
                "RFC3339Nano: {ts}"
            );
            (p[1].to_string(), p[2].to_string(), p[3].to_string())
        })
        .collect();
    // Lines as kubelet joins them: P records up to the F one. A P record comes at 16 KiB, or where a read
    // ended inside a line (so output without a newline reaches the log at once); none is longer.
    let joined = |stream: &str| {
        let mut lines = Vec::new();
        let mut partial = String::new();
        for r in recs.iter().filter(|r| r.0 == stream) {
            assert!(r.2.len() <= 16 * 1024, "a record of {} bytes", r.2.len());
            partial.push_str(&r.2);
            if r.1 == "F" {
                lines.push(std::mem::take(&mut partial));
            } else {
                assert_eq!(r.1, "P", "{text}");
            }
        }
        assert!(partial.is_empty(), "a last line without its F record: {text}");
        lines
    };
    assert_eq!(joined("stderr"), ["two"]);
    assert_eq!(
        joined("stdout"),
        [
            "one".to_string(),
            format!("{}tail", "x".repeat(20000)),
            "last".to_string()
        ],
        "{text}"
    );
    delete(&c, &c2).unwrap();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_reopen_after_kubelets_rename_sends_records_to_a_new_file() {
    let mut p = Pod::new();
    let t = Ticker::start(&mut p);
    // Log rotation as kubelet does it: rename, then ask for a reopen (an Update with the annotation).
    let rotated = p.dir.path().join("logs/c1.log.1");
    std::fs::rename(&t.log, &rotated).unwrap();
    let reopen = api::UpdateTaskRequest {
        id: t.id.clone(),
        annotations: HashMap::from([("io.crius.log.reopen".to_string(), String::new())]),
        ..Default::default()
    };
    t.c.update(client::ctx(10), &reopen).unwrap();
    wait_until("records in the reopened log", || {
        std::fs::read_to_string(&t.log)
            .unwrap_or_default()
            .contains(" stdout F tick")
    });
    let before = std::fs::read_to_string(&rotated).unwrap().len();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        std::fs::read_to_string(&rotated).unwrap().len(),
        before,
        "nothing more goes to the rotated file"
    );
    kill(&t.c, &t.id, 9);
    wait(&t.c, &t.id);
    delete(&t.c, &t.id).unwrap();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_client_killed_mid_call_leaves_the_task_to_the_next_connection() {
    let mut p = Pod::new();
    let t = Ticker::start(&mut p);
    let (c, id, pid) = (t.c, t.id.clone(), t.pid);
    let shims = shim_pids(&p.owner);
    // Pids; then a client process killed with SIGKILL while connected: a new connection finds the same state.
    let pids = c
        .pids(
            client::ctx(10),
            &api::PidsRequest {
                id: id.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(pids.processes.iter().any(|p| p.pid == pid));
    drop(c);
    let mut other = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "pods::client_process_for_the_reconnect_test",
            "--nocapture",
        ])
        .env("CRIUS_TEST_SHIM_ADDR", &t.addr)
        .env("CRIUS_TEST_SHIM_ID", &id)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut out = std::io::BufReader::new(other.stdout.take().unwrap()).lines();
    // The test harness talks first ("running 1 test").
    let line = out
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.starts_with("connected"))
        .unwrap_or_default();
    assert_eq!(
        line.trim(),
        format!("connected {pid}"),
        "the other client saw the task"
    );
    other.kill().unwrap();
    other.wait().unwrap();
    let c = client::connect(&t.addr).unwrap();
    let st = state(&c, &id).unwrap();
    assert_eq!((st.pid, st.status), (pid, api::Status::RUNNING.into()));
    let conn = c
        .connect(
            client::ctx(10),
            &api::ConnectRequest {
                id: id.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((conn.shim_pid as i32, conn.task_pid), (shims[0], pid));
    kill(&c, &id, 9);
    wait(&c, &id);
    delete(&c, &id).unwrap();
}

/// Not a test by itself: the client process that a_client_killed_mid_call_… kills with SIGKILL mid-connection.
#[test]
#[ignore = "a helper process of a_client_killed_mid_call_leaves_the_task_to_the_next_connection"]
fn client_process_for_the_reconnect_test() {
    let (Ok(addr), Ok(id)) = (
        std::env::var("CRIUS_TEST_SHIM_ADDR"),
        std::env::var("CRIUS_TEST_SHIM_ID"),
    ) else {
        return;
    };
    let c = client::connect(&addr).unwrap();
    let pid = state(&c, &id).unwrap().pid;
    println!("connected {pid}");
    // Hold the connection, mid-call, until killed.
    let _ = c.wait(
        client::ctx(600),
        &api::WaitRequest {
            id,
            ..Default::default()
        },
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn sigterm_reaches_the_container_and_its_trap_decides_the_exit_code() {
    let mut p = Pod::new();
    let t = Ticker::start(&mut p);
    // The shim blocks SIGTERM for itself only.
    let status = std::fs::read_to_string(format!("/proc/{}/status", t.pid)).unwrap();
    let blocked = status.lines().find(|l| l.starts_with("SigBlk:")).unwrap();
    let caught = status.lines().find(|l| l.starts_with("SigCgt:")).unwrap();
    assert!(
        blocked.ends_with("0000000000000000"),
        "no signal blocked in the container: {blocked} {caught}"
    );
    kill(&t.c, &t.id, 15);
    assert_eq!(wait(&t.c, &t.id), 7);
    delete(&t.c, &t.id).unwrap();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn an_exit_while_the_events_endpoint_is_gone_is_published_once_it_is_back() {
    let mut p = Pod::new();
    let t = Ticker::start(&mut p);
    let (c1, c) = (t.id.clone(), &t.c);
    let c2 = p.id("c2");
    let b2 = p.bundle(&["true"]);
    assert_eq!(p.start_shim(&c2, &b2), t.addr);
    create(c, &c2, &b2, "").unwrap();
    start(c, &c2).unwrap();
    assert_eq!(wait(c, &c2), 0);
    wait_until("c2's exit event", || p.events.exits().get(&c2) == Some(&0));
    // With the events endpoint gone, an exit is kept and published once it is back.
    drop(p.server.take());
    kill(c, &c1, 15);
    assert_eq!(wait(c, &c1), 7);
    assert!(
        !p.events.exits().contains_key(&c1),
        "published while nobody listened?"
    );
    p.server = Some(EventServer::start(&p.events_sock, &p.events));
    wait_until("the late exit event", || p.events.exits().get(&c1) == Some(&7));
    assert_eq!(p.events.exits().get(&c2), Some(&0));
    let topics = p.events.topics();
    for t in ["/tasks/create", "/tasks/start", "/tasks/exit"] {
        assert_eq!(
            topics.iter().filter(|x| *x == t).count(),
            2,
            "{t} twice: {topics:?}"
        );
    }
    delete(c, &c1).unwrap();
    delete(c, &c2).unwrap();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_inits_exit_is_kept_on_disk_for_a_shim_that_dies() {
    let mut p = Pod::new();
    let id = p.id("c1");
    let b = p.bundle(&["sh", "-c", "exit 7"]);
    let c = client::connect(&p.start_shim(&id, &b)).unwrap();
    let pid = create(&c, &id, &b, "").unwrap();
    start(&c, &id).unwrap();
    assert_eq!(wait(&c, &id), 7);
    // The shim answers Waits before it writes the record, and publishes the exit after.
    wait_until("the exit event", || p.events.exits().get(&id) == Some(&7));
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b.path().join("crius-exit.json")).unwrap()).unwrap();
    assert_eq!(
        (rec["pid"].as_u64(), rec["status"].as_u64()),
        (Some(pid as u64), Some(7))
    );
    delete(&c, &id).unwrap();
}
