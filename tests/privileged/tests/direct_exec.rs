//! Execs through the shim on both of its paths, compared (issue 30): the direct one (crius-runc's sealed copy
//! joins the container itself, `crius_shim::direct`) and `crius-runc exec` (the shim started with
//! `direct_exec` off). Each case runs the same exec in a container of each shim and checks the results are
//! the same and right: user, groups, capabilities, `Seccomp: 2`, no_new_privs, cwd, env, umask, exit codes, a
//! missing program, a terminal, a cwd through a descriptor (CVE-2024-21626), a user namespace, a shared PID
//! namespace, and a container whose init has exited (FailedPrecondition, nothing left behind).

use std::path::Path;
use std::time::{Duration, Instant};

use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::ttrpc::Code;
use crius_privileged_tests::shim::{Cleanup, code, create, delete, kill, shim, start, wait};
use crius_shim::client;
use crius_test_support::{Bundle, require_root, unique};
use serde_json::{Value, json};

/// A container of its own shim, on one exec path.
struct Ctr {
    c: client::TaskClient,
    id: String,
    b: Bundle,
    dir: tempfile::TempDir,
    _cleanup: Cleanup,
}

/// What an exec gave: its exit status, stdout and stderr; or the refusal of its start.
type Ran = Result<(u32, String, String), (Code, String)>;

impl Ctr {
    /// Starts a shim (`direct`: its direct exec on) and in it a container of bundle `b`.
    fn new(direct: bool, b: Bundle) -> Ctr {
        let dir = tempfile::tempdir().unwrap();
        let owner = dir.path().join("owner.sock").display().to_string();
        let id = unique(if direct { "direct" } else { "runc-exec" });
        let cleanup = Cleanup {
            namespace: "test",
            ids: vec![id.clone()],
            needle: owner.clone(),
        };
        b.write();
        let extras = client::Extras {
            sealed: None,
            direct_exec: direct,
        };
        let addr = client::start_shim_with(&shim(), "test", &owner, "", &id, b.path(), extras).unwrap();
        let c = client::connect(&addr).unwrap();
        create(&c, &id, &b, "").unwrap();
        start(&c, &id).unwrap();
        Ctr {
            c,
            id,
            b,
            dir,
            _cleanup: cleanup,
        }
    }

    /// Runs `process` (the container's own process with these fields replaced) as exec `exec_id`.
    fn exec(&self, exec_id: &str, fields: Value) -> Ran {
        let mut p = self.b.config["process"].clone();
        for (k, v) in fields.as_object().unwrap() {
            p[k] = v.clone();
        }
        let terminal = p["terminal"].as_bool().unwrap_or(false);
        let (out, err) = (
            self.dir.path().join(format!("{exec_id}.out")),
            self.dir.path().join(format!("{exec_id}.err")),
        );
        for f in [&out, &err] {
            std::fs::write(f, "").unwrap();
        }
        let req = api::ExecProcessRequest {
            id: self.id.clone(),
            exec_id: exec_id.into(),
            terminal,
            stdout: out.display().to_string(),
            stderr: if terminal {
                String::new()
            } else {
                err.display().to_string()
            },
            spec: Some(Any {
                type_url: "types.containerd.io/opencontainers/runtime-spec/1/Process".into(),
                value: p.to_string().into_bytes(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        };
        if let Err(e) = self.c.exec(client::ctx(10), &req) {
            return Err(code(Err::<(), _>(e)));
        }
        let started = self.c.start(
            client::ctx(20),
            &api::StartRequest {
                id: self.id.clone(),
                exec_id: exec_id.into(),
                ..Default::default()
            },
        );
        if let Err(e) = started {
            let refused = code(Err::<(), _>(e));
            let _ = self.delete_exec(exec_id);
            return Err(refused);
        }
        let status = self
            .c
            .wait(
                client::ctx(30),
                &api::WaitRequest {
                    id: self.id.clone(),
                    exec_id: exec_id.into(),
                    ..Default::default()
                },
            )
            .unwrap()
            .exit_status;
        self.delete_exec(exec_id).unwrap();
        // Each container has its own cgroup: named alike, so that the two paths' outputs compare.
        let cg = self.b.cgroups_path();
        let out = settled(&out).replace(&cg, "<the container's cgroup>");
        Ok((status, out, settled(&err)))
    }

    fn delete_exec(&self, exec_id: &str) -> client::Result<api::DeleteResponse> {
        self.c.delete(
            client::ctx(20),
            &api::DeleteRequest {
                id: self.id.clone(),
                exec_id: exec_id.into(),
                ..Default::default()
            },
        )
    }

    /// Stops the container and its shim.
    fn end(self) {
        kill(&self.c, &self.id, 9);
        wait(&self.c, &self.id);
        delete(&self.c, &self.id).unwrap();
        let _ = self.c.shutdown(client::ctx(10), &api::ShutdownRequest::default());
    }
}

/// A file's text once it stops growing (the shim copies output after the process ended).
fn settled(path: &Path) -> String {
    let mut last = None;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        std::thread::sleep(Duration::from_millis(30));
        let now = std::fs::read_to_string(path).unwrap_or_default();
        if last.as_ref() == Some(&now) || Instant::now() > deadline {
            return now;
        }
        last = Some(now);
    }
}

/// A container of `b()` on each path: (direct, `crius-runc exec`).
fn both(b: impl Fn() -> Bundle) -> (Ctr, Ctr) {
    (Ctr::new(true, b()), Ctr::new(false, b()))
}

/// Runs the same exec on both paths; asserts the results are the same and returns it. A refusal is the same
/// when its code is: its message is then both messages joined by ` || ` (`crius-runc exec`'s says more).
fn same(pair: &(Ctr, Ctr), exec_id: &str, fields: Value) -> Ran {
    let direct = pair.0.exec(exec_id, fields.clone());
    let runc = pair.1.exec(exec_id, fields);
    match (direct, runc) {
        (Err((c1, m1)), Err((c2, m2))) => {
            assert_eq!(c1, c2, "exec {exec_id}: direct: {m1}; crius-runc exec: {m2}");
            Err((c1, format!("{m1} || {m2}")))
        }
        (d, r) => {
            assert_eq!(
                d, r,
                "exec {exec_id}: the direct path (left) and crius-runc exec (right) differ"
            );
            d
        }
    }
}

/// Whether both halves of a refusal that [`same`] joined contain `want`.
fn both_say(msg: &str, want: &str) -> bool {
    msg.split(" || ").all(|m| m.contains(want))
}

fn sleeper() -> Bundle {
    let mut b = Bundle::new(&["sleep", "1000"]);
    // A seccomp filter (default allow, one rule) so that both paths must load it.
    b.config["linux"]["seccomp"] = json!({
        "defaultAction": "SCMP_ACT_ALLOW",
        "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_AARCH64"],
        "syscalls": [{"names": ["syslog"], "action": "SCMP_ACT_ERRNO"}]
    });
    b
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_process_is_the_same_on_both_paths() {
    require_root();
    let pair = both(sleeper);
    let script = "id; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|Seccomp|NoNewPrivs):' /proc/self/status; pwd; \
                  echo \"FOO=$FOO\"; umask; grep '^0::' /proc/self/cgroup; ls /proc/self/fd";
    let (status, out, err) = same(
        &pair,
        "whoami",
        json!({
            "args": ["sh", "-c", script],
            "user": {"uid": 1000, "gid": 1000, "additionalGids": [10, 20], "umask": 23},
            "cwd": "/tmp",
            "env": ["PATH=/bin", "FOO=bar"],
        }),
    )
    .unwrap();
    assert_eq!(status, 0, "{err}");
    assert!(out.starts_with("uid=1000 gid=1000 groups=10,20"), "{out}");
    for want in [
        "Seccomp:\t2",
        "NoNewPrivs:\t1",
        "CapEff:\t0000000000000000",
        "/tmp\n",
        "FOO=bar",
        "0027",
    ] {
        assert!(out.contains(want), "{want:?} missing:\n{out}");
    }
    // Only stdio (and the descriptor ls opens) in the process.
    assert!(out.trim_end().ends_with("0\n1\n2\n3"), "{out}");
    // Exit codes, and a program that is not there.
    assert_eq!(
        same(&pair, "seven", json!({"args": ["sh", "-c", "exit 7"]}))
            .unwrap()
            .0,
        7
    );
    let (c, msg) = same(&pair, "nope", json!({"args": ["no-such-program"]})).unwrap_err();
    assert!(both_say(&msg, "not found"), "{c:?} {msg}");
    // Which path ran: only `crius-runc exec`'s refusal names the command the shim ran.
    let (direct, runc) = msg.split_once(" || ").unwrap();
    assert!(!direct.contains(" exec --process "), "{direct}");
    assert!(runc.contains(" exec --process "), "{runc}");
    // A terminal.
    let (status, out, _) = same(&pair, "tty", json!({"args": ["tty"], "terminal": true})).unwrap();
    assert_eq!(status, 0);
    assert!(out.starts_with("/dev/pts/"), "{out}");
    pair.0.end();
    pair.1.end();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_cwd_through_a_descriptor_is_refused_on_both_paths() {
    require_root();
    let pair = both(sleeper);
    for fd in 3..12 {
        let cwd = format!("/proc/self/fd/{fd}");
        let r = same(
            &pair,
            &format!("fd{fd}"),
            json!({"args": ["sh", "-c", "pwd; ls"], "cwd": cwd}),
        );
        let (_, msg) = r.unwrap_err();
        assert!(both_say(&msg, "process.cwd"), "{cwd}: {msg}");
    }
    pair.0.end();
    pair.1.end();
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_user_namespace_and_a_shared_pid_namespace_are_joined() {
    require_root();
    let pair = both(|| {
        let mut b = sleeper();
        b.config["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"type": "user"}));
        b.config["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
        b.config["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
        b
    });
    let (status, out, err) = same(
        &pair,
        "userns",
        json!({"args": ["sh", "-c", "cat /proc/self/uid_map; id -u"]}),
    )
    .unwrap();
    assert_eq!(status, 0, "{err}");
    assert_eq!(
        out.split_whitespace().collect::<Vec<_>>(),
        ["0", "100000", "65536", "0"]
    );
    // A second container in each shim, in the first one's PID namespace: an exec in it sees the first's init.
    let second = |first: &Ctr, direct: bool| {
        let init = crius_privileged_tests::shim::state(&first.c, &first.id)
            .unwrap()
            .pid;
        let mut b = Bundle::new(&["sleep", "1000"]);
        for ns in b.config["linux"]["namespaces"].as_array_mut().unwrap() {
            if ns["type"] == "pid" {
                ns["path"] = json!(format!("/proc/{init}/ns/pid"));
            }
        }
        Ctr::new(direct, b)
    };
    let shared = (second(&pair.0, true), second(&pair.1, false));
    let (status, out, err) = same(
        &shared,
        "ps",
        json!({"args": ["sh", "-c", "cat /proc/1/cmdline | tr '\\0' ' '"]}),
    )
    .unwrap();
    assert_eq!((status, out.as_str()), (0, "sleep 1000 "), "{err}");
    for b in [shared.0, shared.1, pair.0, pair.1] {
        b.end();
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn an_exec_into_a_container_whose_init_exited_fails_and_leaves_nothing() {
    require_root();
    for direct in [true, false] {
        let b = Ctr::new(direct, sleeper());
        kill(&b.c, &b.id, 9);
        wait(&b.c, &b.id);
        let (c, msg) = b.exec("late", json!({"args": ["true"]})).unwrap_err();
        assert_eq!(c, Code::FAILED_PRECONDITION, "direct {direct}: {msg}");
        let left: Vec<String> = std::fs::read_dir(b.b.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".exec-") || n.starts_with(".runtime-"))
            .collect();
        assert!(left.is_empty(), "direct {direct}: left in the bundle: {left:?}");
        delete(&b.c, &b.id).unwrap();
        let _ = b.c.shutdown(client::ctx(10), &api::ShutdownRequest::default());
    }
}

/// The pids of the processes whose parent is `ppid`, with their command lines.
fn children(ppid: u32) -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // pid (comm) state ppid ...: the fields after the last ')'.
            let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
            rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) == Some(ppid)
        })
        .map(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            (pid, String::from_utf8_lossy(&cmd).replace('\0', " "))
        })
        .collect()
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn direct_execs_are_forks_of_one_sealed_exec_server_that_ends_with_the_shim() {
    require_root();
    let ctr = Ctr::new(true, sleeper());
    let shim_pid = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd);
            cmd.contains("containerd-shim-crius-v2") && cmd.contains(&ctr._cleanup.needle)
        })
        .expect("the shim");
    let server = || -> Vec<u32> {
        children(shim_pid)
            .into_iter()
            .filter(|(_, cmd)| cmd.contains("__crius-direct-exec-server"))
            .map(|(pid, _)| pid)
            .collect()
    };
    assert!(server().is_empty(), "a server before the first exec");
    let (status, out, _) = ctr.exec("one", json!({"args": ["echo", "one"]})).unwrap();
    assert_eq!((status, out.as_str()), (0, "one\n"));
    let first = server();
    assert_eq!(first.len(), 1, "{:?}", children(shim_pid));
    // It runs from a sealed copy of the runtime, never from a host file (CVE-2019-5736).
    let exe = std::fs::read_link(format!("/proc/{}/exe", first[0])).unwrap();
    assert!(exe.to_string_lossy().starts_with("/memfd:"), "{exe:?}");
    // Single-threaded, so that its forks may do anything.
    let status = std::fs::read_to_string(format!("/proc/{}/status", first[0])).unwrap();
    assert!(status.lines().any(|l| l.starts_with("Threads:\t1")), "{status}");
    // Only its socket and stdio open.
    let fds: Vec<_> = std::fs::read_dir(format!("/proc/{}/fd", first[0]))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(fds.len(), 4, "{fds:?}");
    for i in 0..5 {
        let (status, out, _) = ctr
            .exec(&format!("again{i}"), json!({"args": ["sh", "-c", "exit 3"]}))
            .unwrap();
        assert_eq!((status, out.as_str()), (3, ""));
    }
    // The same server served them all, and its workers were reaped (within its 50 ms look-ups).
    assert_eq!(server(), first);
    crius_privileged_tests::shim::wait_until("the server's workers to be reaped", || {
        children(first[0]).is_empty()
    });
    ctr.end();
    crius_privileged_tests::shim::wait_until("the exec server to end with its shim", || {
        !Path::new(&format!("/proc/{}", first[0])).exists()
            || std::fs::read_to_string(format!("/proc/{}/stat", first[0])).is_ok_and(|s| {
                s.rsplit_once(')')
                    .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
            })
    });
}
