//! containerd-shim-crius-v2: under a real containerd 1.6 (ctr run/exec/kill/delete, the shim gone after the last
//! delete), and driven directly over ttrpc by crius-shim's client: one shim per pod, exits and events (also
//! when the events endpoint comes back late), the CRI log format, reconnecting, and bad input. What needs cgroup
//! v2 (OOM kills, live updates) is in vm_shim.rs.

mod io;
mod pods;

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
