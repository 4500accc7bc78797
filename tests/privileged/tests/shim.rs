//! containerd-shim-crius-v2: under a real containerd 1.6 (ctr run/exec/kill/delete, the shim gone after the last
//! delete), and driven directly over ttrpc by crius-shim's client: one shim per pod, exits and events (also
//! when the events endpoint comes back late), the CRI log format, reconnecting, and bad input. What needs cgroup
//! v2 (OOM kills, live updates) is in vm_shim.rs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use containerd_shim_protos as protos;
use crius_privileged_tests::shim::{
    Cleanup, EventServer, Events, alive, code, create, delete, kill, pod_bundle, shim, start, state, wait,
    wait_until,
};
use crius_shim::client;
use crius_test_support::containerd::{Containerd, mounts_under};
use crius_test_support::shims::shim_pids;
use crius_test_support::{Bundle, image, require_root, unique};
use protos::api;
use protos::protobuf::Message;
use protos::ttrpc::Code;

#[test]
#[ignore = "needs root and containerd: run through hack/test.sh"]
fn under_containerd_run_exec_kill_delete() {
    require_root();
    let ctrd = Containerd::start();
    let _cleanup = Cleanup {
        namespace: "default",
        ids: vec!["c1".into(), "once".into()],
        needle: format!("-address {}", ctrd.socket().display()),
    };
    let dir = tempfile::tempdir().unwrap();
    image::busybox(&dir.path().join("layout"), "docker.io/library/busybox:latest").unwrap();
    image::write_archive(&dir.path().join("layout"), &dir.path().join("bb.tar")).unwrap();
    ctrd.ctr_ok(&["images", "import", dir.path().join("bb.tar").to_str().unwrap()]);
    let shim = shim();
    let rt = shim.to_str().unwrap();
    let img = "docker.io/library/busybox:latest";
    // On this hybrid host only the cgroup v2 tree without controllers exists: no cpu shares.
    let run = ["run", "--cpu-shares", "0", "--runtime", rt];

    // A task that exits: its code comes back, and its shim goes.
    let mut args = run.to_vec();
    args.extend(["--rm", img, "once", "sh", "-c", "exit 3"]);
    let out = ctrd.ctr(&args);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let mut args = run.to_vec();
    args.extend(["-d", img, "c1", "sleep", "1000"]);
    ctrd.ctr_ok(&args);
    assert_eq!(ctrd.task_status("c1").as_deref(), Some("RUNNING"));
    let needle = format!("-address {}", ctrd.socket().display());
    let shims = shim_pids(&needle);
    assert_eq!(shims.len(), 1, "one shim: {shims:?}");
    let out = ctrd.ctr_ok(&[
        "task",
        "exec",
        "--exec-id",
        "e1",
        "c1",
        "sh",
        "-c",
        "echo from exec; tr '\\0' ' ' < /proc/1/cmdline",
    ]);
    assert_eq!(out, "from exec\nsleep 1000 ");
    let ps = ctrd.ctr_ok(&["task", "ps", "c1"]);
    assert_eq!(ps.lines().count(), 2, "{ps}");
    ctrd.ctr_ok(&["task", "pause", "c1"]);
    assert_eq!(ctrd.task_status("c1").as_deref(), Some("PAUSED"));
    ctrd.ctr_ok(&["task", "resume", "c1"]);
    assert!(ctrd.ctr_ok(&["task", "metrics", "c1"]).contains("cpu.usage_usec"));
    ctrd.ctr_ok(&["task", "kill", "-s", "KILL", "c1"]);
    wait_until("c1 stopped", || {
        ctrd.task_status("c1").as_deref() == Some("STOPPED")
    });
    ctrd.ctr_ok(&["task", "delete", "c1"]);
    ctrd.ctr_ok(&["container", "delete", "c1"]);
    wait_until("the shim to exit", || !alive(shims[0]));
    assert!(shim_pids(&needle).is_empty());
    let left: Vec<String> = mounts_under(ctrd.dir())
        .into_iter()
        .filter(|m| m.contains("/rootfs"))
        .collect();
    assert!(left.is_empty(), "rootfs mounts left: {left:?}");
}

/// A pod's shim as criusd starts it: a temp dir holding the owner socket path (unique per test, so it names the
/// test's shims) and the events socket, served by a recording events server unless the test wants none. The
/// containers it names are deleted, and its shims killed, when it is dropped.
struct Pod {
    cleanup: Cleanup,
    server: Option<EventServer>,
    events: Events,
    events_sock: PathBuf,
    /// What the shims are told to publish to ("" for nowhere).
    events_addr: String,
    owner: String,
    pod: String,
    dir: tempfile::TempDir,
}

impl Pod {
    fn new() -> Pod {
        let mut p = Pod::without_events();
        p.server = Some(EventServer::start(&p.events_sock, &p.events));
        p.events_addr = p.events_sock.display().to_string();
        p
    }

    fn without_events() -> Pod {
        require_root();
        let dir = tempfile::tempdir().unwrap();
        let owner = dir.path().join("owner.sock").display().to_string();
        Pod {
            cleanup: Cleanup {
                namespace: "test",
                ids: Vec::new(),
                needle: owner.clone(),
            },
            server: None,
            events: Events::default(),
            events_sock: dir.path().join("events.sock"),
            events_addr: String::new(),
            owner,
            pod: unique("pod"),
            dir,
        }
    }

    /// A unique container id, deleted at the end.
    fn id(&mut self, prefix: &str) -> String {
        let id = unique(prefix);
        self.cleanup.ids.push(id.clone());
        id
    }

    /// A bundle of `args` in this pod.
    fn bundle(&self, args: &[&str]) -> Bundle {
        pod_bundle(args, &self.pod)
    }

    /// Starts (or joins) the pod's shim for container `id`: its address.
    fn start_shim(&self, id: &str, b: &Bundle) -> String {
        client::start_shim(&shim(), "test", &self.owner, &self.events_addr, id, b.path()).unwrap()
    }

    /// Where container `name` logs, and the stdout URI that says so.
    fn log(&self, name: &str) -> (PathBuf, String) {
        let path = self.dir.path().join(format!("logs/{name}.log"));
        let uri = format!("crius-log://{}", path.display());
        (path, uri)
    }
}

/// A container that traps SIGTERM to exit 7, then ticks on stdout: once a tick is logged, the trap is set.
const TICKER: [&str; 3] = [
    "sh",
    "-c",
    "trap 'exit 7' TERM; while :; do echo tick; sleep 0.1; done",
];

/// Waits until `log` has a record of a tick.
fn wait_for_tick(log: &Path) {
    wait_until("a tick in the log", || {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains(" stdout F tick")
    });
}

/// A ticker (see [`TICKER`]) that runs in a pod's shim and has logged a tick.
struct Ticker {
    c: client::TaskClient,
    addr: String,
    id: String,
    pid: u32,
    log: PathBuf,
    /// The task's bundle, removed with the value.
    _bundle: Bundle,
}

impl Ticker {
    fn start(p: &mut Pod) -> Ticker {
        let id = p.id("c1");
        let bundle = p.bundle(&TICKER);
        let addr = p.start_shim(&id, &bundle);
        let c = client::connect(&addr).unwrap();
        let (log, uri) = p.log("c1");
        let pid = create(&c, &id, &bundle, &uri).unwrap();
        start(&c, &id).unwrap();
        wait_for_tick(&log);
        Ticker {
            c,
            addr,
            id,
            pid,
            log,
            _bundle: bundle,
        }
    }
}

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
            "client_process_for_the_reconnect_test",
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

fn threads_of(pid: i32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").and_then(|n| n.trim().parse().ok()))
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn pending_waits_hold_no_thread_and_end_with_their_process_or_its_delete() {
    let mut p = Pod::without_events();
    let ids: Vec<String> = (1..6).map(|i| p.id(&format!("w{i}"))).collect();
    // A bundle each: a bundle's config names the container's cgroup.
    let sleepers: Vec<Bundle> = (0..5).map(|_| p.bundle(&["sleep", "1000"])).collect();
    let addr = p.start_shim(&ids[0], &sleepers[0]);
    let shim_pid = shim_pids(&p.owner)[0];
    let c = client::connect(&addr).unwrap();
    // ids[0..4] run; ids[4] is created and never started.
    for (id, b) in ids.iter().zip(&sleepers) {
        create(&c, id, b, "").unwrap();
    }
    for id in &ids[..4] {
        start(&c, id).unwrap();
    }
    // An exec of ids[0] that is added and never started.
    let exec = api::ExecProcessRequest {
        id: ids[0].clone(),
        exec_id: "never".into(),
        ..Default::default()
    };
    c.exec(client::ctx(10), &exec).unwrap();
    // A Wait for each, all pending at once on one connection.
    let waits: Vec<_> = ids
        .iter()
        .map(|id| (id.clone(), String::new()))
        .chain([(ids[0].clone(), "never".to_string())])
        .map(|(id, exec_id)| {
            let c = c.clone();
            std::thread::spawn(move || {
                let req = api::WaitRequest {
                    id,
                    exec_id,
                    ..Default::default()
                };
                c.wait(client::ctx(60), &req)
            })
        })
        .collect();
    // Six Waits pending, five containers: the shim is down to its one loop thread once its workers idle out.
    wait_until("the shim to idle on one thread", || threads_of(shim_pid) == 1);
    assert_eq!(state(&c, &ids[0]).unwrap().status, api::Status::RUNNING.into());

    // Deleting the never-started container kills what the runtime made of it; deleting the never-started exec
    // answers its Wait with NOT_FOUND.
    delete(&c, &ids[4]).unwrap();
    let del = api::DeleteRequest {
        id: ids[0].clone(),
        exec_id: "never".into(),
        ..Default::default()
    };
    c.delete(client::ctx(10), &del).unwrap();
    for id in &ids[..4] {
        kill(&c, id, 9);
    }
    let results: Vec<_> = waits.into_iter().map(|t| t.join().unwrap()).collect();
    for r in &results[..5] {
        assert_eq!(r.as_ref().unwrap().exit_status, 137);
    }
    let (code_, msg) = code(results.into_iter().nth(5).expect("six waits"));
    assert_eq!(code_, Code::NOT_FOUND, "{msg}");
    assert!(msg.contains("deleted"), "{msg}");

    for id in &ids[..4] {
        delete(&c, id).unwrap();
    }
    wait_until("the shim to exit after its last container", || !alive(shim_pid));
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn stdin_flows_through_fifos_and_close_io_ends_it() {
    let mut p = Pod::without_events();
    let id = p.id("w0");
    let cat = p.bundle(&["cat"]);
    let c = client::connect(&p.start_shim(&id, &cat)).unwrap();
    // cat between two FIFOs.
    let (fin, fout) = (p.dir.path().join("in"), p.dir.path().join("out"));
    for f in [&fin, &fout] {
        nix::unistd::mkfifo(f, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }
    let req = api::CreateTaskRequest {
        id: id.clone(),
        bundle: cat.path().display().to_string(),
        stdin: fin.display().to_string(),
        stdout: fout.display().to_string(),
        ..Default::default()
    };
    c.create(client::ctx(20), &req).unwrap();
    // The output's read end is opened here, before Start: opened by the reader thread, on a loaded machine it
    // could come after cat exited and the shim let go of the FIFO, and then wait for a writer forever. Opened
    // without blocking, then made blocking again, so the read ends when the shim closes its end.
    let out = {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fout)
            .unwrap();
        let flags =
            nix::fcntl::OFlag::from_bits_truncate(nix::fcntl::fcntl(&f, nix::fcntl::F_GETFL).unwrap());
        nix::fcntl::fcntl(&f, nix::fcntl::F_SETFL(flags - nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
        f
    };
    start(&c, &id).unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(out).unwrap());
    {
        use std::io::Write;
        let mut w = std::fs::OpenOptions::new().write(true).open(&fin).unwrap();
        w.write_all(b"ping\n").unwrap();
    }
    // CloseIO: cat sees EOF on stdin and exits 0; its output, already through, ends with it.
    c.close_io(
        client::ctx(10),
        &api::CloseIORequest {
            id: id.clone(),
            stdin: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(wait(&c, &id), 0, "cat after CloseIO");
    assert_eq!(reader.join().unwrap(), "ping\n");
    delete(&c, &id).unwrap();
}

#[test]
#[ignore = "needs root and runc: run through hack/test.sh"]
fn a_runtime_named_in_the_options_runs_the_container() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let id = unique("runc");
    let runc_root = dir.path().join("runc-root");
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![id.clone()],
        needle: owner.clone(),
    };
    let b = pod_bundle(&["sleep", "1000"], &unique("pod"));
    let addr = client::start_shim(&shim(), "test", &owner, "", &id, b.path()).unwrap();
    let c = client::connect(&addr).unwrap();
    let opts = protos::shim::oci::Options {
        binary_name: crius_test_support::which("runc").display().to_string(),
        root: runc_root.display().to_string(),
        ..Default::default()
    };
    let req = api::CreateTaskRequest {
        id: id.clone(),
        bundle: b.path().display().to_string(),
        options: Some(protos::protobuf::well_known_types::any::Any {
            type_url: "containerd.runc.v1.Options".into(),
            value: opts.write_to_bytes().unwrap(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    let pid = c.create(client::ctx(20), &req).unwrap().pid;
    start(&c, &id).unwrap();
    // runc knows it, under the root the options named.
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(&runc_root)
        .args(["state", &id])
        .output()
        .unwrap();
    let st: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (st["pid"].as_u64(), st["status"].as_str()),
        (Some(pid as u64), Some("running"))
    );
    c.kill(
        client::ctx(10),
        &api::KillRequest {
            id: id.clone(),
            signal: 9,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(wait(&c, &id), 137);
    delete(&c, &id).unwrap();
    assert!(!runc_root.join(&id).exists(), "runc's state removed");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn bad_input_gets_clear_errors_and_leaks_nothing() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let b = pod_bundle(&["sleep", "1000"], &unique("pod"));
    let c1 = unique("c1");
    let bad_id = unique("bad");
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![c1.clone(), bad_id.clone()],
        needle: owner.clone(),
    };
    let addr = client::start_shim(&shim(), "test", &owner, "", &c1, b.path()).unwrap();
    let c = client::connect(&addr).unwrap();

    let (code_, msg) = code(state(&c, "nope"));
    assert_eq!(code_, Code::NOT_FOUND);
    assert!(msg.contains("\"nope\""), "{msg}");
    assert_eq!(code(start(&c, &c1)).0, Code::NOT_FOUND, "start before create");
    assert_eq!(code(delete(&c, "nope")).0, Code::NOT_FOUND);

    create(&c, &c1, &b, "").unwrap();
    assert_eq!(code(create(&c, &c1, &b, "")).0, Code::ALREADY_EXISTS);
    start(&c, &c1).unwrap();
    let (code_, msg) = code(start(&c, &c1));
    assert_eq!(code_, Code::FAILED_PRECONDITION, "double start: {msg}");
    assert!(msg.contains("running"), "{msg}");
    let (code_, msg) = code(delete(&c, &c1));
    assert_eq!(
        code_,
        Code::FAILED_PRECONDITION,
        "delete of a running task: {msg}"
    );
    let exec = api::ExecProcessRequest {
        id: c1.clone(),
        exec_id: "x".into(),
        ..Default::default()
    };
    c.exec(client::ctx(10), &exec).unwrap();
    assert_eq!(code(c.exec(client::ctx(10), &exec)).0, Code::ALREADY_EXISTS);

    // The runtime refuses a config: its own message comes back, and nothing is left.
    let mut bad = Bundle::new(&["true"]);
    bad.config["process"]["user"]["uid"] = serde_json::json!("root");
    bad.write();
    let (code_, msg) = code(create(&c, &bad_id, &bad, ""));
    assert_eq!(code_, Code::INTERNAL);
    assert!(msg.contains("process.user.uid"), "the runtime's error: {msg}");
    assert_eq!(code(state(&c, &bad_id)).0, Code::NOT_FOUND);
    let runtime_state = Path::new("/run/crius/shim/crius-runc/test").join(&bad_id);
    assert!(!runtime_state.exists(), "runtime state left behind");

    // A shim whose only container fails to be created does not stay: it exits by itself.
    let owner2 = dir.path().join("owner2.sock").display().to_string();
    let lone = pod_bundle(&["true"], &unique("pod"));
    let mut lone_bad = lone;
    lone_bad.config["process"]["user"]["uid"] = serde_json::json!("root");
    lone_bad.write();
    let lone_id = unique("lone");
    let addr2 = client::start_shim(&shim(), "test", &owner2, "", &lone_id, lone_bad.path()).unwrap();
    let c2 = client::connect(&addr2).unwrap();
    assert_eq!(code(create(&c2, &lone_id, &lone_bad, "")).0, Code::INTERNAL);
    let lone_shims = shim_pids(&owner2);
    assert_eq!(lone_shims.len(), 1);
    wait_until("the shim of a failed create to exit", || !alive(lone_shims[0]));

    c.kill(
        client::ctx(10),
        &api::KillRequest {
            id: c1.clone(),
            signal: 9,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(wait(&c, &c1), 137);
    let (code_, msg) = code(c.kill(
        client::ctx(10),
        &api::KillRequest {
            id: c1.clone(),
            signal: 9,
            ..Default::default()
        },
    ));
    assert_eq!(code_, Code::NOT_FOUND, "kill of a finished process: {msg}");
    delete(&c, &c1).unwrap();
    let shims = shim_pids(&owner);
    let _ = c.shutdown(client::ctx(10), &api::ShutdownRequest::default());
    for p in shims {
        wait_until("the shim to exit", || !alive(p));
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_terminal_is_sized_and_carries_output() {
    require_root();
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let id = unique("tty");
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![id.clone()],
        needle: owner.clone(),
    };
    let mut b = Bundle::new(&["sh", "-c", "stty size; tty"]);
    b.config["process"]["terminal"] = serde_json::json!(true);
    b.write();
    let fifo = dir.path().join("stdout");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let addr = client::start_shim(&shim(), "test", &owner, "", &id, b.path()).unwrap();
    let c = client::connect(&addr).unwrap();
    let req = api::CreateTaskRequest {
        id: id.clone(),
        bundle: b.path().display().to_string(),
        terminal: true,
        stdout: fifo.display().to_string(),
        ..Default::default()
    };
    c.create(client::ctx(20), &req).unwrap();
    let resize = api::ResizePtyRequest {
        id: id.clone(),
        width: 100,
        height: 40,
        ..Default::default()
    };
    c.resize_pty(client::ctx(10), &resize).unwrap();
    start(&c, &id).unwrap();
    assert_eq!(wait(&c, &id), 0);
    let mut out = Vec::new();
    wait_until("the terminal's output", || {
        let mut buf = [0u8; 4096];
        if let Ok(n) = reader.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&out).contains("/dev/pts/")
    });
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("40 100\r\n"),
        "stty size through the pty: {text:?}"
    );
    assert!(text.contains("/dev/pts/0"), "{text:?}");
    assert!(state(&c, &id).unwrap().terminal);
    delete(&c, &id).unwrap();
    assert_eq!(code(c.resize_pty(client::ctx(10), &resize)).0, Code::NOT_FOUND);
    let _ = c.shutdown(client::ctx(10), &api::ShutdownRequest::default());
}
