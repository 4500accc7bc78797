//! The task lifecycle without root: the OCI runtime is a shell script that plays runc's verbs (a container's
//! init is a `sleep` it leaves behind, re-parented to this test process, which is a subreaper as the shim is),
//! and events go to a channel.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::Duration;

use super::*;

/// The stand-in runtime. An exec whose process names `"quick"` writes `out` and `err` and exits 3, one naming
/// `"big"` writes 17 MB to stdout; any other sleeps. `create` logs each call to `<root>/calls`, fails if `<root>/fail-create` exists and
/// takes 300 ms if `<root>/slow-create` does; `kill` with `<root>/stopped-kill` kills the init and then refuses,
/// as runc does for a container that just stopped; (so a racing Create overlaps it); `pause`/`resume` fail if
/// `<root>/fail-pause`/`fail-resume` exist. Errors go to `--log` as runc's JSON lines.
const FAKE_RUNTIME: &str = r#"#!/bin/sh
while :; do
  case "$1" in
    --root) root=$2; shift 2 ;;
    --log) log=$2; shift 2 ;;
    --log-format) shift 2 ;;
    *) break ;;
  esac
done
verb=$1; shift
echo "$verb $*" >> "$root/calls"
fail() { printf '{"level":"error","msg":"%s"}\n' "$1" >> "$log"; exit 1; }
opt() { o=$1; shift; while [ $# -gt 1 ]; do [ "$1" = "$o" ] && echo "$2"; shift; done; }
pid_file() { opt --pid-file "$@"; }
case $verb in
create)
  eval "id=\${$#}"
  [ -e "$root/fail-create" ] && fail "the fake runtime refuses $id"
  [ -e "$root/slow-create" ] && sleep 0.3
  mkdir "$root/$id" || fail "container $id exists"
  sleep 1000 </dev/null >/dev/null 2>&1 &
  echo $! > "$root/$id/pid"
  echo $! > "$(pid_file "$@")" ;;
start) [ -e "$root/$1/pid" ] || fail "container $1 does not exist" ;;
kill)
  [ "$1" = --all ] && shift
  if [ -e "$root/stopped-kill" ]; then
    # runc's answer when the init died just before: the container is stopped.
    kill -9 "$(cat "$root/$1/pid")"; sleep 0.1; fail "container $1 is stopped: cannot send a signal"
  fi
  kill -"$2" "$(cat "$root/$1/pid")" ;;
exec)
  eval "id=\${$#}"; pf=$(pid_file "$@")
  # Only builtins once the process runs: a command substitution's wait would reap a quick one.
  case "$(cat "$(opt --process "$@")")" in
  *'"quick"'*) sh -c 'echo out; echo err >&2; exit 3' </dev/null & ;;
  *'"big"'*) head -c 17000000 /dev/zero </dev/null & ;;
  *) sleep 1000 </dev/null >/dev/null 2>&1 & ;;
  esac
  echo $! >> "$root/$id/execs"
  echo $! > "$pf" ;;
pause|resume) [ -e "$root/fail-$verb" ] && fail "the fake runtime cannot $verb" ;;
checkpoint)
  eval "id=\${$#}"; img=$(opt --image-path "$@"); work=$(opt --work-path "$@")
  if [ -e "$root/fail-checkpoint" ]; then
    echo "(00.2) Error (criu/sk-unix.c:1): cannot dump $id" > "$work/dump.log"; fail "criu failed: type NOTIFY"
  fi
  echo "$id" > "$img/inventory.img"
  case " $* " in *" --leave-running "*) ;; *) kill -9 "$(cat "$root/$id/pid")" ;; esac ;;
restore)
  eval "id=\${$#}"
  [ -e "$(opt --image-path "$@")/inventory.img" ] || fail "no checkpoint"
  mkdir -p "$root/$id"
  sleep 1000 </dev/null >/dev/null 2>&1 &
  echo $! > "$root/$id/pid"
  echo $! > "$(pid_file "$@")"
  echo restored ;;
delete)
  [ "$1" = --force ] && shift
  [ -e "$root/$1/pid" ] && kill -9 "$(cat "$root/$1/pid")" 2>/dev/null
  rm -rf "${root:?}/$1" ;;
*) fail "unknown verb $verb" ;;
esac
exit 0
"#;

/// The fake runtime, written once per test process under the build directory (never rewritten while a test
/// may exec it: a write fd that a concurrent fork inherited would make the exec fail with ETXTBSY).
fn fake_runtime() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let dir = exe.parent().and_then(Path::parent).unwrap().join("test-fixtures");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("crius-shim-fake-runtime");
        if std::fs::read_to_string(&path).ok().as_deref() != Some(FAKE_RUNTIME) {
            let tmp = dir.join(format!("crius-shim-fake-runtime.{}", std::process::id()));
            std::fs::write(&tmp, FAKE_RUNTIME).unwrap();
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::fs::rename(&tmp, &path).unwrap();
        }
        path
    })
}

/// One reaper for the test process, as a shim has one: two would steal each other's children.
fn reaper() -> Reaper {
    static REAPER: OnceLock<Reaper> = OnceLock::new();
    REAPER.get_or_init(|| Reaper::start().unwrap()).clone()
}

/// A shim's tasks on a loop of their own, the runtime state and bundles in temporary directories; dropped,
/// it kills what its containers left running.
pub(super) struct Fixture {
    pub(super) tasks: Tasks,
    events: Receiver<Event>,
    pub(super) root: tempfile::TempDir,
    bundles: tempfile::TempDir,
    reactor: Arc<Reactor>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Fixture {
    pub(super) fn new() -> Fixture {
        let runtime = fake_runtime();
        let reactor = Reactor::new().unwrap();
        let (tx, events) = channel();
        let tasks = Tasks::new("test", reaper(), Arc::new(tx), reactor.clone());
        let r = reactor.clone();
        let thread = Some(std::thread::spawn(move || r.run()));
        let root = tempfile::tempdir().unwrap();
        assert!(runtime.exists());
        Fixture {
            tasks,
            events,
            root,
            bundles: tempfile::tempdir().unwrap(),
            reactor,
            thread,
        }
    }

    pub(super) fn request(&self, id: &str) -> CreateTask {
        let bundle = self.bundles.path().join(id);
        std::fs::create_dir_all(&bundle).unwrap();
        CreateTask {
            id: id.into(),
            bundle,
            rootfs: Vec::new(),
            stdio: StdioPaths::default(),
            terminal: false,
            checkpoint: None,
            runtime: Ok(RuntimeChoice {
                binary: Some(fake_runtime().to_path_buf()),
                root: Some(self.root.path().to_path_buf()),
                systemd_cgroup: false,
            }),
        }
    }

    pub(super) fn create(&self, id: &str) -> Result<u32> {
        self.tasks.create(self.request(id))
    }

    /// Marks the fake runtime (`fail-create`, `slow-create`, …).
    pub(super) fn mark(&self, name: &str, on: bool) {
        let f = self.root.path().join(name);
        if on {
            std::fs::write(f, "").unwrap();
        } else {
            std::fs::remove_file(f).unwrap();
        }
    }

    /// How often the runtime ran `verb`.
    pub(super) fn calls(&self, verb: &str) -> usize {
        std::fs::read_to_string(self.root.path().join("calls"))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.split(' ').next() == Some(verb))
            .count()
    }

    pub(super) fn state(&self, id: &str, exec_id: &str) -> State {
        self.tasks.state(id, exec_id).unwrap().state
    }

    pub(super) fn event(&self) -> Event {
        self.events
            .recv_timeout(Duration::from_secs(10))
            .expect("an event")
    }

    pub(super) fn no_event(&self) {
        if let Ok(e) = self.events.recv_timeout(Duration::from_millis(50)) {
            panic!("unexpected event {e:?}");
        }
    }

    /// Wait: the process's exit.
    pub(super) fn wait(&self, id: &str, exec_id: &str) -> Result<Exit> {
        let (tx, rx) = channel();
        self.tasks.wait_then(id, exec_id, move |r| {
            let _ = tx.send(r);
        });
        rx.recv_timeout(Duration::from_secs(10)).expect("Wait answered")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for entry in std::fs::read_dir(self.root.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            for file in ["pid", "execs"] {
                let pids = std::fs::read_to_string(entry.path().join(file)).unwrap_or_default();
                for pid in pids.lines().filter_map(|p| p.trim().parse::<i32>().ok()) {
                    let _ =
                        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
                }
            }
        }
        self.reactor.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The transition a refusal names.
fn refused<T: std::fmt::Debug>(r: Result<T>) -> (State, State) {
    match r {
        Err(Error::FailedPrecondition { from, to, .. }) => (from, to),
        other => panic!("expected FailedPrecondition, got {other:?}"),
    }
}

#[test]
fn a_container_is_created_started_killed_waited_for_and_deleted() {
    let f = Fixture::new();
    let pid = f.create("c1").unwrap();
    assert!(pid > 0);
    assert_eq!(f.state("c1", ""), State::Created);
    let bundle = f.bundles.path().join("c1").display().to_string();
    assert!(
        matches!(f.event(), Event::Create { container_id, bundle: b, pid: p, .. }
        if container_id == "c1" && b == bundle && p == pid)
    );

    assert_eq!(f.tasks.start("c1", "").unwrap(), pid);
    assert_eq!(f.state("c1", ""), State::Running);
    assert_eq!(
        f.event(),
        Event::Start {
            container_id: "c1".into(),
            pid
        }
    );

    // A Wait before the exit is answered by it.
    let (tx, rx) = channel();
    f.tasks.wait_then("c1", "", move |r| {
        let _ = tx.send(r.map(|e| e.status));
    });
    assert!(
        rx.recv_timeout(Duration::from_millis(50)).is_err(),
        "answered before the exit"
    );
    f.tasks.kill("c1", "", 9, false).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)).unwrap().unwrap(), 137);
    assert!(
        matches!(f.event(), Event::Exit { container_id, exec_id, pid: p, exit_status: 137, exited_at_ns }
        if container_id == "c1" && exec_id.is_empty() && p == pid && exited_at_ns > 0)
    );
    let st = f.tasks.state("c1", "").unwrap();
    assert_eq!((st.state, st.exit.map(|e| e.status)), (State::Exited, Some(137)));
    // After the exit, a Wait is answered at once; a signal finds nothing to kill; a start is refused.
    assert_eq!(f.wait("c1", "").unwrap().status, 137);
    assert!(matches!(
        f.tasks.kill("c1", "", 9, false),
        Err(Error::Finished(_))
    ));
    assert_eq!(refused(f.tasks.start("c1", "")), (State::Exited, State::Starting));
    // The shim's own record for its delete action.
    let rec = std::fs::read_to_string(f.bundles.path().join("c1").join(EXIT_FILE)).unwrap();
    assert!(rec.contains("\"status\":137"), "{rec}");

    let d = f.tasks.delete("c1", "").unwrap();
    assert_eq!((d.pid, d.exit.map(|e| e.status)), (pid, Some(137)));
    assert!(
        matches!(f.event(), Event::Delete { container_id, pid: p, exit_status: 137, exited_at_ns: Some(_) }
        if container_id == "c1" && p == pid)
    );
    assert!(matches!(f.tasks.state("c1", ""), Err(Error::NotFound(_))));
    assert!(matches!(f.wait("c1", ""), Err(Error::NotFound(_))));
    assert_eq!(
        (f.calls("create"), f.calls("start"), f.calls("delete")),
        (1, 1, 1)
    );
    f.no_event();
}

#[test]
fn refused_transitions_name_the_state_found_and_the_state_asked_for() {
    let f = Fixture::new();
    f.create("c1").unwrap();
    assert_eq!(refused(f.tasks.pause("c1")), (State::Created, State::Paused));
    assert_eq!(refused(f.tasks.resume("c1")), (State::Created, State::Running));
    let exec = f
        .tasks
        .exec("c1", "e1", StdioPaths::default(), false, b"{}".to_vec());
    assert!(matches!(
        exec,
        Err(Error::NotRunning {
            state: State::Created,
            op: "exec",
            ..
        })
    ));

    f.tasks.start("c1", "").unwrap();
    assert_eq!(
        refused(f.tasks.start("c1", "")),
        (State::Running, State::Starting)
    );
    assert_eq!(
        refused(f.tasks.delete("c1", "")),
        (State::Running, State::Deleting)
    );
    assert_eq!(refused(f.tasks.resume("c1")), (State::Running, State::Running));

    f.tasks.pause("c1").unwrap();
    assert_eq!(f.state("c1", ""), State::Paused);
    assert_eq!(refused(f.tasks.pause("c1")), (State::Paused, State::Paused));
    assert_eq!(
        refused(f.tasks.delete("c1", "")),
        (State::Paused, State::Deleting)
    );
    f.tasks.resume("c1").unwrap();
    assert_eq!(f.state("c1", ""), State::Running);

    // The runtime's refusal moves the state back, with the runtime's own message.
    f.mark("fail-pause", true);
    match f.tasks.pause("c1") {
        Err(Error::Runtime(msg)) => assert!(msg.contains("the fake runtime cannot pause"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(f.state("c1", ""), State::Running);
    assert_eq!(f.calls("pause"), 2);

    let events: Vec<Event> =
        std::iter::from_fn(|| f.events.recv_timeout(Duration::from_millis(200)).ok()).collect();
    let paused = Event::Paused {
        container_id: "c1".into(),
    };
    let resumed = Event::Resumed {
        container_id: "c1".into(),
    };
    assert_eq!(events.iter().filter(|e| **e == paused).count(), 1, "{events:?}");
    assert_eq!(events.iter().filter(|e| **e == resumed).count(), 1, "{events:?}");
    f.tasks.kill("c1", "", 9, true).unwrap();
    f.wait("c1", "").unwrap();
    f.tasks.delete("c1", "").unwrap();
}

#[test]
fn two_creates_of_one_id_make_one_container_and_the_other_gets_already_exists() {
    let f = Fixture::new();
    f.mark("slow-create", true);
    let both = Barrier::new(2);
    let (tasks, both) = (&f.tasks, &both);
    let results: Vec<Result<u32>> = std::thread::scope(|s| {
        let racers: Vec<_> = [f.request("c1"), f.request("c1")]
            .into_iter()
            .map(|req| {
                s.spawn(move || {
                    both.wait();
                    tasks.create(req)
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let made: Vec<&u32> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(made.len(), 1, "{results:?}");
    assert!(
        results
            .iter()
            .any(|r| matches!(r, Err(Error::AlreadyExists(w)) if w == "container \"c1\"")),
        "{results:?}"
    );
    assert_eq!(f.calls("create"), 1, "the loser never ran the runtime");
    assert!(matches!(f.create("c1"), Err(Error::AlreadyExists(_))));

    // While a create runs, its id is taken and the shim is not idle.
    std::thread::scope(|s| {
        let req = f.request("c2");
        let slow = s.spawn(move || tasks.create(req));
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while f.calls("create") < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "the second create never ran"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(matches!(f.create("c2"), Err(Error::AlreadyExists(_))));
        assert!(!f.tasks.finish_if_empty());
        slow.join().unwrap().unwrap();
    });
    for id in ["c1", "c2"] {
        f.tasks.kill(id, "", 9, false).unwrap();
        f.wait(id, "").unwrap();
        f.tasks.delete(id, "").unwrap();
    }
}

#[test]
fn a_failed_create_frees_its_id_and_carries_the_runtimes_message() {
    let f = Fixture::new();
    f.mark("fail-create", true);
    match f.create("c1") {
        Err(Error::Runtime(msg)) => assert!(msg.contains("the fake runtime refuses c1"), "{msg}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(f.tasks.state("c1", ""), Err(Error::NotFound(_))));
    f.mark("fail-create", false);
    f.create("c1").unwrap();
    // An empty id and undecodable runtime options are refused as bad input.
    assert!(matches!(f.create(""), Err(Error::InvalidArgument(_))));
    let mut bad = f.request("c2");
    bad.runtime = Err(Error::InvalidArgument("runtime options: truncated".into()));
    assert!(
        matches!(f.tasks.create(bad), Err(Error::InvalidArgument(m)) if m == "runtime options: truncated")
    );
    assert!(matches!(f.tasks.state("c2", ""), Err(Error::NotFound(_))));
    // A created container that is deleted is killed by its runtime: its exit is recorded.
    let d = f.tasks.delete("c1", "").unwrap();
    assert!(d.pid > 0);
    assert!(matches!(f.tasks.state("c1", ""), Err(Error::NotFound(_))));
}

#[test]
fn an_exec_is_defined_started_killed_and_deleted_once_it_exited() {
    let f = Fixture::new();
    f.create("c1").unwrap();
    f.tasks.start("c1", "").unwrap();
    let _ = (f.event(), f.event());
    f.tasks
        .exec("c1", "e1", StdioPaths::default(), false, b"{}".to_vec())
        .unwrap();
    assert!(matches!(
        f.tasks.exec("c1", "e1", StdioPaths::default(), false, Vec::new()),
        Err(Error::AlreadyExists(w)) if w == "exec \"e1\""
    ));
    assert!(matches!(
        f.tasks.exec("c1", "", StdioPaths::default(), false, Vec::new()),
        Err(Error::InvalidArgument(_))
    ));
    assert_eq!(
        f.event(),
        Event::ExecAdded {
            container_id: "c1".into(),
            exec_id: "e1".into()
        }
    );
    assert_eq!(f.state("c1", "e1"), State::Created);
    let pid = f.tasks.start("c1", "e1").unwrap();
    assert!(pid > 0);
    assert_eq!(f.state("c1", "e1"), State::Running);
    assert_eq!(
        f.event(),
        Event::ExecStarted {
            container_id: "c1".into(),
            exec_id: "e1".into(),
            pid
        }
    );
    assert_eq!(
        refused(f.tasks.start("c1", "e1")),
        (State::Running, State::Starting)
    );
    assert_eq!(
        refused(f.tasks.delete("c1", "e1")),
        (State::Running, State::Deleting)
    );
    assert!(matches!(f.tasks.state("c1", "nope"), Err(Error::NotFound(_))));

    f.tasks.kill("c1", "e1", 15, false).unwrap();
    assert_eq!(f.wait("c1", "e1").unwrap().status, 143);
    assert!(
        matches!(f.event(), Event::Exit { exec_id, pid: p, exit_status: 143, .. } if exec_id == "e1" && p == pid)
    );
    assert_eq!(f.state("c1", ""), State::Running, "the container runs on");
    let d = f.tasks.delete("c1", "e1").unwrap();
    assert_eq!((d.pid, d.exit.map(|e| e.status)), (pid, Some(143)));
    assert!(matches!(f.tasks.state("c1", "e1"), Err(Error::NotFound(_))));
    assert_eq!(f.calls("exec"), 1);

    f.tasks.kill("c1", "", 9, false).unwrap();
    f.wait("c1", "").unwrap();
    f.tasks.delete("c1", "").unwrap();
}

#[test]
fn a_kill_the_runtime_refuses_because_the_init_just_died_is_finished_not_a_failure() {
    let f = Fixture::new();
    f.create("c1").unwrap();
    f.tasks.start("c1", "").unwrap();
    f.mark("stopped-kill", true);
    // The runtime saw the container stopped before the reaper told the task: a stop found what it wanted.
    assert!(matches!(
        f.tasks.kill("c1", "", 15, false),
        Err(Error::Finished(_))
    ));
    assert_eq!(f.wait("c1", "").unwrap().status, 137);
}
