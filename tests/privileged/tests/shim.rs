//! containerd-shim-crius-v2: under a real containerd 1.6 (ctr run/exec/kill/delete, the shim gone after the last
//! delete), and driven directly over ttrpc by crius-shim's client: one shim per pod, exits and events (also
//! when the events endpoint comes back late), the CRI log format, reconnecting, and bad input.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use containerd_shim_protos as protos;
use crius_shim::client;
use crius_test_support::containerd::{Containerd, mounts_under};
use crius_test_support::daemon::built_binary;
use crius_test_support::shims::{self, shim_pids};
use crius_test_support::{Bundle, image, require_root, unique};
use protos::api;
use protos::protobuf::Message;
use protos::ttrpc::{self, Code};

fn shim() -> PathBuf {
    built_binary("containerd-shim-crius-v2")
}

/// Whatever a failing test leaves: containers deleted through the runtime, then the shims that held them.
struct Cleanup {
    namespace: &'static str,
    ids: Vec<String>,
    needle: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        shims::delete_containers(self.namespace, &self.ids);
        shims::kill_shims(&self.needle);
    }
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn alive(pid: i32) -> bool {
    // A zombie still has /proc/<pid>; check its state.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

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

/// An events service, as containerd and criusd serve it, recording what shims publish.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<Published>>>);

/// A published event: its topic and its encoded message.
type Published = (String, Vec<u8>);

impl protos::Events for Events {
    fn forward(&self, _: &ttrpc::TtrpcContext, req: api::ForwardRequest) -> ttrpc::Result<api::Empty> {
        let env = req.envelope.unwrap_or_default();
        let value = env.event.as_ref().map(|a| a.value.clone()).unwrap_or_default();
        self.0.lock().unwrap().push((env.topic.clone(), value));
        Ok(api::Empty::new())
    }
}

struct EventServer {
    server: Option<ttrpc::Server>,
}

impl EventServer {
    fn start(path: &Path, events: &Events) -> EventServer {
        let _ = std::fs::remove_file(path);
        let l = std::os::unix::net::UnixListener::bind(path).unwrap();
        use std::os::fd::IntoRawFd;
        let svc: Arc<dyn protos::Events + Send + Sync> = Arc::new(events.clone());
        let mut server = ttrpc::Server::new()
            .add_listener(l.into_raw_fd())
            .unwrap()
            .register_service(protos::create_events(svc));
        server.start().unwrap();
        EventServer { server: Some(server) }
    }
}

impl Drop for EventServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

fn exits(events: &Events) -> HashMap<String, u32> {
    events
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(t, _)| t == "/tasks/exit")
        .map(|(_, v)| {
            let e = protos::events::task::TaskExit::parse_from_bytes(v).unwrap();
            (e.container_id, e.exit_status)
        })
        .collect()
}

fn pod_bundle(args: &[&str], pod: &str) -> Bundle {
    let mut b = Bundle::new(args);
    b.config["annotations"] = serde_json::json!({"io.kubernetes.cri.sandbox-id": pod});
    b.write();
    b
}

fn create(c: &client::TaskClient, id: &str, b: &Bundle, stdout: &str) -> ttrpc::Result<u32> {
    let req = api::CreateTaskRequest {
        id: id.into(),
        bundle: b.path().display().to_string(),
        stdout: stdout.into(),
        ..Default::default()
    };
    c.create(client::ctx(20), &req).map(|r| r.pid)
}

fn start(c: &client::TaskClient, id: &str) -> ttrpc::Result<u32> {
    let req = api::StartRequest {
        id: id.into(),
        ..Default::default()
    };
    c.start(client::ctx(20), &req).map(|r| r.pid)
}

fn state(c: &client::TaskClient, id: &str) -> ttrpc::Result<api::StateResponse> {
    let req = api::StateRequest {
        id: id.into(),
        ..Default::default()
    };
    c.state(client::ctx(10), &req)
}

fn wait(c: &client::TaskClient, id: &str) -> u32 {
    let req = api::WaitRequest {
        id: id.into(),
        ..Default::default()
    };
    c.wait(client::ctx(30), &req).unwrap().exit_status
}

fn delete(c: &client::TaskClient, id: &str) -> ttrpc::Result<api::DeleteResponse> {
    let req = api::DeleteRequest {
        id: id.into(),
        ..Default::default()
    };
    c.delete(client::ctx(20), &req)
}

fn code(r: ttrpc::Result<impl std::fmt::Debug>) -> (Code, String) {
    match r {
        Err(ttrpc::Error::RpcStatus(s)) => (s.code(), s.message().to_string()),
        other => panic!("expected an error status, got {other:?}"),
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn one_shim_per_pod_exits_events_cri_logs_and_reconnect() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let events_sock = dir.path().join("events.sock");
    let events = Events::default();
    let server = EventServer::start(&events_sock, &events);
    let pod = unique("pod");
    let (c1, c2) = (unique("c1"), unique("c2"));
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![c1.clone(), c2.clone()],
        needle: owner.clone(),
    };
    // SIGTERM reaches the container (the shim blocks it for itself only) and its trap decides the exit code.
    let b1 = pod_bundle(
        &[
            "sh",
            "-c",
            "trap 'exit 7' TERM; while :; do echo tick; sleep 0.1; done",
        ],
        &pod,
    );
    let long = "head -c 20000 /dev/zero | tr '\\0' x; printf tail";
    let b2 = pod_bundle(
        &[
            "sh",
            "-c",
            &format!("echo one; echo two >&2; {long}; echo; printf last"),
        ],
        &pod,
    );
    let ev = events_sock.display().to_string();
    let a1 = client::start_shim(&shim(), "test", &owner, &ev, &c1, b1.path()).unwrap();
    let a2 = client::start_shim(&shim(), "test", &owner, &ev, &c2, b2.path()).unwrap();
    assert_eq!(a1, a2, "containers of one pod share a shim");
    let shims = shim_pids(&owner);
    assert_eq!(shims.len(), 1, "{shims:?}");

    let c = client::connect(&a1).unwrap();
    let log1 = dir.path().join("logs/c1.log");
    let log2 = dir.path().join("logs/c2.log");
    let pid1 = create(&c, &c1, &b1, &format!("crius-log://{}", log1.display())).unwrap();
    assert_eq!(state(&c, &c1).unwrap().status, api::Status::CREATED.into());
    assert_eq!(start(&c, &c1).unwrap(), pid1);
    create(&c, &c2, &b2, &format!("crius-log://{}", log2.display())).unwrap();
    start(&c, &c2).unwrap();
    assert_eq!(wait(&c, &c2), 0);

    // The kubelet's log format, exactly: partial records at 16 KiB, a final record for the last line.
    wait_until("c2's log", || {
        std::fs::read_to_string(&log2)
            .unwrap_or_default()
            .contains("last")
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
    let stdout: Vec<_> = recs.iter().filter(|r| r.0 == "stdout").collect();
    let stderr: Vec<_> = recs.iter().filter(|r| r.0 == "stderr").collect();
    assert_eq!(stderr.len(), 1);
    assert_eq!((stderr[0].1.as_str(), stderr[0].2.as_str()), ("F", "two"));
    assert_eq!((stdout[0].1.as_str(), stdout[0].2.as_str()), ("F", "one"));
    assert_eq!((stdout[1].1.as_str(), stdout[1].2.len()), ("P", 16 * 1024));
    assert_eq!(stdout[2].1, "F");
    assert_eq!(stdout[2].2, format!("{}tail", "x".repeat(20000 - 16 * 1024)));
    assert_eq!((stdout[3].1.as_str(), stdout[3].2.as_str()), ("F", "last"));
    assert_eq!(stdout.len(), 4, "{text}");

    // Log rotation as kubelet does it: rename, then ask for a reopen (an Update with the annotation).
    wait_until("c1's log", || {
        std::fs::read_to_string(&log1)
            .unwrap_or_default()
            .contains(" stdout F tick")
    });
    let rotated = dir.path().join("logs/c1.log.1");
    std::fs::rename(&log1, &rotated).unwrap();
    let reopen = api::UpdateTaskRequest {
        id: c1.clone(),
        annotations: HashMap::from([("io.crius.log.reopen".to_string(), String::new())]),
        ..Default::default()
    };
    c.update(client::ctx(10), &reopen).unwrap();
    wait_until("records in the reopened log", || {
        std::fs::read_to_string(&log1)
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

    // Pids; then a client process killed with SIGKILL while connected: a new connection finds the same state.
    let pids = c
        .pids(
            client::ctx(10),
            &api::PidsRequest {
                id: c1.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    assert!(pids.processes.iter().any(|p| p.pid == pid1));
    drop(c);
    let mut other = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "client_process_for_the_reconnect_test",
            "--nocapture",
        ])
        .env("CRIUS_TEST_SHIM_ADDR", &a1)
        .env("CRIUS_TEST_SHIM_ID", &c1)
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
        format!("connected {pid1}"),
        "the other client saw the task"
    );
    other.kill().unwrap();
    other.wait().unwrap();
    let c = client::connect(&a1).unwrap();
    let st = state(&c, &c1).unwrap();
    assert_eq!((st.pid, st.status), (pid1, api::Status::RUNNING.into()));
    let conn = c
        .connect(
            client::ctx(10),
            &api::ConnectRequest {
                id: c1.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!((conn.shim_pid as i32, conn.task_pid), (shims[0], pid1));

    let status = std::fs::read_to_string(format!("/proc/{pid1}/status")).unwrap();
    let blocked = status.lines().find(|l| l.starts_with("SigBlk:")).unwrap();
    let caught = status.lines().find(|l| l.starts_with("SigCgt:")).unwrap();
    assert!(
        blocked.ends_with("0000000000000000"),
        "no signal blocked in the container: {blocked} {caught}"
    );
    // With the events endpoint gone, an exit is kept and published once it is back.
    drop(server);
    let kill = api::KillRequest {
        id: c1.clone(),
        signal: 15,
        ..Default::default()
    };
    c.kill(client::ctx(10), &kill).unwrap();
    assert_eq!(wait(&c, &c1), 7);
    assert!(
        !exits(&events).contains_key(&c1),
        "published while nobody listened?"
    );
    let _server = EventServer::start(&events_sock, &events);
    wait_until("the late exit event", || exits(&events).get(&c1) == Some(&7));
    assert_eq!(exits(&events).get(&c2), Some(&0));
    let topics: Vec<String> = events.0.lock().unwrap().iter().map(|e| e.0.clone()).collect();
    for t in ["/tasks/create", "/tasks/start", "/tasks/exit"] {
        assert_eq!(
            topics.iter().filter(|x| *x == t).count(),
            2,
            "{t} twice: {topics:?}"
        );
    }
    // The init's exit is on disk too, for a shim that dies.
    let rec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(b1.path().join("crius-exit.json")).unwrap()).unwrap();
    assert_eq!(
        (rec["pid"].as_u64(), rec["status"].as_u64()),
        (Some(pid1 as u64), Some(7))
    );

    assert_eq!(delete(&c, &c1).unwrap().exit_status, 7);
    assert_eq!(delete(&c, &c2).unwrap().exit_status, 0);
    // No Shutdown: the shim leaves by itself once its pod's last container is deleted.
    wait_until("the shim to exit after its last container", || !alive(shims[0]));
    assert!(
        !Path::new(a1.trim_start_matches("unix://")).exists(),
        "socket removed"
    );
}

/// Not a test by itself: the client process that one_shim_per_pod_… kills with SIGKILL mid-connection.
#[test]
#[ignore = "a helper process of one_shim_per_pod_exits_events_cri_logs_and_reconnect"]
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

fn require_v2() {
    assert!(
        crius_test_support::pure_cgroup_v2(),
        "needs a pure cgroup v2 host: hack/test.sh runs the vm_* tests inside hack/vm"
    );
}

/// The cgroup v2 directory of process `pid`.
fn cgroup_of(pid: u32) -> PathBuf {
    let rel = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let rel = rel
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap()
        .to_string();
    crius_test_support::cgroup2_mount().join(rel.trim_start_matches('/'))
}

fn read_cg(pid: u32, file: &str) -> String {
    std::fs::read_to_string(cgroup_of(pid).join(file))
        .unwrap()
        .trim()
        .to_string()
}

fn update_memory(
    c: &client::TaskClient,
    id: &str,
    resources: serde_json::Value,
) -> ttrpc::Result<api::Empty> {
    let req = api::UpdateTaskRequest {
        id: id.into(),
        resources: Some(protos::protobuf::well_known_types::any::Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources".into(),
            value: resources.to_string().into_bytes(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    c.update(client::ctx(20), &req)
}

const MIB: u64 = 1024 * 1024;

#[test]
#[ignore = "needs cgroup v2: hack/test.sh runs it in the VM"]
fn vm_oom_kills_are_reported_and_updates_are_live() {
    require_v2();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let events_sock = dir.path().join("events.sock");
    let events = Events::default();
    let _server = EventServer::start(&events_sock, &events);
    let pod = unique("pod");
    let (hog, idle) = (unique("hog"), unique("idle"));
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![hog.clone(), idle.clone()],
        needle: owner.clone(),
    };
    let limit = json_limit(32 * MIB);
    let mut b1 = pod_bundle(
        &[
            "sh",
            "-c",
            "x=$(head -c 200000000 /dev/zero | tr '\\0' x); echo ${#x}",
        ],
        &pod,
    );
    b1.config["linux"]["resources"] = limit.clone();
    b1.write();
    let mut b2 = pod_bundle(&["sleep", "1000"], &pod);
    b2.config["linux"]["resources"] = limit;
    b2.write();
    let ev = events_sock.display().to_string();
    let addr = client::start_shim(&shim(), "test", &owner, &ev, &hog, b1.path()).unwrap();
    let c = client::connect(&addr).unwrap();

    // Over its limit: killed by the kernel, 137, and a /tasks/oom event for it.
    create(&c, &hog, &b1, "").unwrap();
    start(&c, &hog).unwrap();
    assert_eq!(wait(&c, &hog), 137);
    wait_until("the OOM event", || {
        events.0.lock().unwrap().iter().any(|(t, v)| {
            t == "/tasks/oom"
                && protos::events::task::TaskOOM::parse_from_bytes(v)
                    .unwrap()
                    .container_id
                    == hog
        })
    });

    // A live update of a running task: new limits, same pid.
    let addr2 = client::start_shim(&shim(), "test", &owner, &ev, &idle, b2.path()).unwrap();
    assert_eq!(addr2, addr);
    let pid = create(&c, &idle, &b2, "").unwrap();
    start(&c, &idle).unwrap();
    assert_eq!(read_cg(pid, "memory.max"), (32 * MIB).to_string());
    update_memory(
        &c,
        &idle,
        serde_json::json!({"memory": {"limit": 128 * MIB, "swap": 128 * MIB},
        "cpu": {"quota": 50000, "period": 100000}}),
    )
    .unwrap();
    assert_eq!(read_cg(pid, "memory.max"), (128 * MIB).to_string());
    assert_eq!(read_cg(pid, "cpu.max"), "50000 100000");
    let st = state(&c, &idle).unwrap();
    assert_eq!((st.pid, st.status), (pid, api::Status::RUNNING.into()));
    // Stats: cgroup v2 metrics with this container's memory and pids.
    let stats = c
        .stats(
            client::ctx(10),
            &api::StatsRequest {
                id: idle.clone(),
                ..Default::default()
            },
        )
        .unwrap();
    let m = protos::cgroups_v2::metrics::Metrics::parse_from_bytes(&stats.stats.value).unwrap();
    assert_eq!(m.memory.usage_limit, 128 * MIB);
    assert_eq!(m.pids.current, 1);
    assert!(m.memory.usage > 0 && m.cpu.usage_usec > 0, "{m:?}");

    c.kill(
        client::ctx(10),
        &api::KillRequest {
            id: idle.clone(),
            signal: 9,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(wait(&c, &idle), 137);
    delete(&c, &hog).unwrap();
    delete(&c, &idle).unwrap();
    let _ = c.shutdown(client::ctx(10), &api::ShutdownRequest::default());
}

fn json_limit(bytes: u64) -> serde_json::Value {
    serde_json::json!({"memory": {"limit": bytes, "swap": bytes}})
}

#[test]
#[ignore = "needs cgroup v2 and containerd: hack/test.sh runs it in the VM"]
fn vm_under_containerd_a_live_update_keeps_the_pid() {
    require_v2();
    let ctrd = Containerd::start();
    let _cleanup = Cleanup {
        namespace: "default",
        ids: vec!["live".into()],
        needle: format!("-address {}", ctrd.socket().display()),
    };
    let dir = tempfile::tempdir().unwrap();
    image::busybox(&dir.path().join("layout"), "docker.io/library/busybox:latest").unwrap();
    image::write_archive(&dir.path().join("layout"), &dir.path().join("bb.tar")).unwrap();
    ctrd.ctr_ok(&["images", "import", dir.path().join("bb.tar").to_str().unwrap()]);
    let shim = shim();
    let limit = (64 * MIB).to_string();
    ctrd.ctr_ok(&[
        "run",
        "-d",
        "--runtime",
        shim.to_str().unwrap(),
        "--memory-limit",
        &limit,
        "docker.io/library/busybox:latest",
        "live",
        "sleep",
        "1000",
    ]);
    let pid: u32 = ctrd
        .ctr_ok(&["task", "ls"])
        .lines()
        .find(|l| l.starts_with("live "))
        .and_then(|l| l.split_whitespace().nth(1).map(|p| p.parse().unwrap()))
        .unwrap();
    assert_eq!(read_cg(pid, "memory.max"), limit);
    // ctr 1.6 has no `task update`: send containerd's UpdateTaskRequest to the shim containerd started.
    let bundle = ctrd
        .dir()
        .join("state/io.containerd.runtime.v2.task/default/live");
    let addr = std::fs::read_to_string(bundle.join("address")).unwrap();
    let c = client::connect(&addr).unwrap();
    update_memory(
        &c,
        "live",
        serde_json::json!({"memory": {"limit": 96 * MIB}, "pids": {"limit": 50}}),
    )
    .unwrap();
    assert_eq!(read_cg(pid, "memory.max"), (96 * MIB).to_string());
    assert_eq!(read_cg(pid, "pids.max"), "50");
    let row = ctrd.ctr_ok(&["task", "ls"]);
    assert!(
        row.contains(&format!("live    {pid}")) && row.contains("RUNNING"),
        "same pid, running: {row}"
    );
    ctrd.ctr_ok(&["task", "kill", "-s", "KILL", "live"]);
    wait_until("live stopped", || {
        ctrd.task_status("live").as_deref() == Some("STOPPED")
    });
    ctrd.ctr_ok(&["task", "delete", "live"]);
    ctrd.ctr_ok(&["container", "delete", "live"]);
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

fn threads_of(pid: i32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").and_then(|n| n.trim().parse().ok()))
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn waits_hold_no_thread_and_stdin_flows_through_fifos() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let pod = unique("pod");
    let ids: Vec<String> = (0..6).map(|i| unique(&format!("w{i}"))).collect();
    let _cleanup = Cleanup {
        namespace: "test",
        ids: ids.clone(),
        needle: owner.clone(),
    };
    let cat = pod_bundle(&["cat"], &pod);
    // A bundle each: a bundle's config names the container's cgroup.
    let sleepers: Vec<Bundle> = (1..6).map(|_| pod_bundle(&["sleep", "1000"], &pod)).collect();
    let addr = client::start_shim(&shim(), "test", &owner, "", &ids[0], cat.path()).unwrap();
    let shim_pid = shim_pids(&owner)[0];
    let c = client::connect(&addr).unwrap();

    // ids[0]: cat between two FIFOs.
    let (fin, fout) = (dir.path().join("in"), dir.path().join("out"));
    for f in [&fin, &fout] {
        nix::unistd::mkfifo(f, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }
    let req = api::CreateTaskRequest {
        id: ids[0].clone(),
        bundle: cat.path().display().to_string(),
        stdin: fin.display().to_string(),
        stdout: fout.display().to_string(),
        ..Default::default()
    };
    c.create(client::ctx(20), &req).unwrap();
    start(&c, &ids[0]).unwrap();
    let reader = {
        let fout = fout.clone();
        std::thread::spawn(move || std::fs::read_to_string(fout).unwrap())
    };
    {
        use std::io::Write;
        let mut w = std::fs::OpenOptions::new().write(true).open(&fin).unwrap();
        w.write_all(b"ping\n").unwrap();
    }
    // ids[1..5] run; ids[5] is created and never started.
    for (id, b) in ids[1..].iter().zip(&sleepers) {
        create(&c, id, b, "").unwrap();
    }
    for id in &ids[1..5] {
        start(&c, id).unwrap();
    }
    // An exec of ids[1] that is added and never started.
    let exec = api::ExecProcessRequest {
        id: ids[1].clone(),
        exec_id: "never".into(),
        ..Default::default()
    };
    c.exec(client::ctx(10), &exec).unwrap();
    // A Wait for each, all pending at once on one connection.
    let waits: Vec<_> = ids
        .iter()
        .map(|id| (id.clone(), String::new()))
        .chain([(ids[1].clone(), "never".to_string())])
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
    // Seven Waits pending, six containers: the shim is down to its one loop thread once its workers idle out.
    wait_until("the shim to idle on one thread", || threads_of(shim_pid) == 1);
    assert_eq!(state(&c, &ids[1]).unwrap().status, api::Status::RUNNING.into());

    // Deleting the never-started container kills what the runtime made of it; deleting the never-started exec
    // answers its Wait with NOT_FOUND.
    delete(&c, &ids[5]).unwrap();
    let del = api::DeleteRequest {
        id: ids[1].clone(),
        exec_id: "never".into(),
        ..Default::default()
    };
    c.delete(client::ctx(10), &del).unwrap();
    // CloseIO: cat sees EOF on stdin and exits 0; its output, already through, ends with it.
    c.close_io(
        client::ctx(10),
        &api::CloseIORequest {
            id: ids[0].clone(),
            stdin: true,
            ..Default::default()
        },
    )
    .unwrap();
    for id in &ids[1..5] {
        let kill = api::KillRequest {
            id: id.clone(),
            signal: 9,
            ..Default::default()
        };
        c.kill(client::ctx(10), &kill).unwrap();
    }
    let results: Vec<_> = waits.into_iter().map(|t| t.join().unwrap()).collect();
    assert_eq!(results[0].as_ref().unwrap().exit_status, 0, "cat after CloseIO");
    for r in &results[1..6] {
        assert_eq!(r.as_ref().unwrap().exit_status, 137);
    }
    let (code_, msg) = code(results[6].clone());
    assert_eq!(code_, Code::NOT_FOUND, "{msg}");
    assert!(msg.contains("deleted"), "{msg}");
    assert_eq!(reader.join().unwrap(), "ping\n");

    for id in &ids[..5] {
        delete(&c, id).unwrap();
    }
    wait_until("the shim to exit after its last container", || !alive(shim_pid));
}
