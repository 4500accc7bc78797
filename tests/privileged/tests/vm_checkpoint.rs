//! `checkpoint` and `restore` with CRIU, inside the VM (this host's kernel is too new for CRIU 3.17): a counter
//! goes on from where it was, `--leave-running` leaves the original running while a copy is restored under
//! another root ("another node"), a container CRIU cannot dump fails with CRIU's words and keeps running, and a
//! restored container is a container like any other (state, exec, kill, delete; nothing left behind). A
//! container with a terminal comes back on a new pty sent to the new console socket: its counter goes on there
//! and what is typed there reaches it; the container's CRIU configuration file (`org.criu.config`) applies; a
//! bind nested in a bind comes back when its mount point was removed after the dump.
//! hack/test.sh runs it with crius-runc and with runc (`CRIUS_TEST_RUNTIME=runc`), so the two are compared.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Stdio};
use std::time::{Duration, Instant};

use crius_test_support::{Bundle, Runtime, cgroup2_mount, require_pure_cgroup_v2, unique};

/// A counter that writes each value to /tmp/cnt and to stdout, five times a second.
fn counter() -> Bundle {
    Bundle::sh("i=0; while true; do i=$((i+1)); echo $i > /tmp/cnt; echo $i; sleep 0.2; done")
}

/// Spawns `create`/`restore` (`args`) with a pipe for stderr, `stdin` and `stdout`.
fn create_piped(rt: &Runtime, id: &str, b: &Bundle, args: &[&str], (stdin, stdout): (Stdio, Stdio)) -> Child {
    let dir = b.write().to_str().unwrap().to_string();
    let mut all = vec![args[0], "--bundle", &dir];
    all.extend_from_slice(&args[1..]);
    all.push(id);
    let mut cmd = rt.command(&all);
    cmd.stdin(stdin).stdout(stdout).stderr(Stdio::piped());
    cmd.spawn().expect("spawning the runtime")
}

/// The write end of the container's stdin and the read end of its stderr, held by the test as a shim holds them.
type Held = (Option<std::process::ChildStdin>, std::process::ChildStderr);

/// Runs `create`/`restore` with pipes for stdio and asserts success; returns the container's stdout reader (and
/// the other pipes, which must stay open). Only the status is waited for: the container holds the pipes (its
/// stderr too) for as long as it lives.
/// With `null_stdin`, stdin is the host's /dev/null (a file outside the container, as a shim gives when there is
/// no stdin), else a pipe.
fn piped(
    rt: &Runtime,
    id: &str,
    b: &Bundle,
    args: &[&str],
    null_stdin: bool,
) -> (BufReader<ChildStdout>, Held) {
    let stdin = if null_stdin { Stdio::null() } else { Stdio::piped() };
    let mut child = create_piped(rt, id, b, args, (stdin, Stdio::piped()));
    let stdout = child.stdout.take().unwrap();
    let stdin = child.stdin.take();
    let mut stderr = child.stderr.take().unwrap();
    let status = child.wait().unwrap();
    if !status.success() {
        // Failed: no container holds the pipe, which ends.
        let mut said = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut said);
        panic!("{args:?} {id} failed ({status}): {said}");
    }
    (BufReader::new(stdout), (stdin, stderr))
}

/// The counter's value, read from its /tmp through /proc.
fn count(rt: &Runtime, id: &str) -> u64 {
    let pid = rt.state(id)["pid"].as_i64().unwrap();
    let text = std::fs::read_to_string(format!("/proc/{pid}/root/tmp/cnt")).unwrap_or_default();
    text.trim().parse().unwrap_or(0)
}

/// Waits until the counter of `id` reaches at least `n`.
fn count_reaches(rt: &Runtime, id: &str, n: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let c = count(rt, id);
        if c >= n {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "{id}: the counter stays at {c} (< {n})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn images() -> (tempfile::TempDir, String, String) {
    let t = tempfile::tempdir().unwrap();
    let img = t.path().join("img").to_str().unwrap().to_string();
    let work = t.path().join("work").to_str().unwrap().to_string();
    (t, img, work)
}

fn cgroup_dir(b: &Bundle) -> PathBuf {
    cgroup2_mount().join(b.cgroups_path().trim_start_matches('/'))
}

/// Nothing of `id` is left: no state, no cgroup, no CRIU root still mounted.
fn nothing_left(rt: &Runtime, id: &str, b: &Bundle) {
    assert!(!rt.ids().contains(&id.to_string()), "{id} is still listed");
    assert!(!cgroup_dir(b).exists(), "{} is left", cgroup_dir(b).display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let root = rt.root().to_str().unwrap();
    assert!(!mounts.contains(root), "a mount under {root} is left: {mounts}");
}

fn with_cgroupns(mut b: Bundle) -> Bundle {
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"type": "cgroup"}));
    b
}

fn kill_and_delete(rt: &Runtime, id: &str) {
    rt.ok(&["kill", id, "KILL"]);
    rt.wait_status(id, "stopped");
    rt.ok(&["delete", id]);
}

#[test]
#[ignore = "needs CRIU and a kernel it supports: run through hack/test.sh (in the VM)"]
fn a_restored_counter_goes_on_from_where_it_was_and_is_a_container_like_any_other() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let b = counter();
    let id = unique("ck");
    let (_out, _in) = piped(&rt, &id, &b, &["create"], false);
    rt.ok(&["start", &id]);
    count_reaches(&rt, &id, 5);
    let (_t, img, work) = images();
    rt.ok(&["checkpoint", "--image-path", &img, "--work-path", &work, &id]);
    // Without --leave-running the container is gone.
    nothing_left(&rt, &id, &b);
    assert!(Path::new(&img).join("descriptors.json").exists());
    let at_dump: u64 = {
        // The last value the container wrote before the dump is on the old pipe.
        let lines: Vec<String> = _out.lines().map_while(Result::ok).collect();
        lines
            .last()
            .and_then(|l| l.parse().ok())
            .expect("the counter's output")
    };
    let id2 = unique("rs");
    let (mut out, _in2) = piped(
        &rt,
        &id2,
        &b,
        &["restore", "-d", "--image-path", &img, "--work-path", &work],
        false,
    );
    assert_eq!(rt.status(&id2), "running");
    // From where it was, not from 1. (It has counted on for a few seconds by now: under the VM's emulated CPU,
    // CRIU's last steps and `state` take that long.)
    let restored = count(&rt, &id2);
    assert!(restored >= at_dump, "restored at {restored}, dumped at {at_dump}");
    // crius-runc: the restored counter writes its next values to restore's new stdout. (runc 1.1.5 does not
    // reattach it here: that pipe reads as ended.)
    if rt.is_crius {
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let next: u64 = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{line:?} on the new stdout"));
        // (The dump may have come between its two writes of a value: then the first is that value again.)
        assert!(
            next == at_dump + 1 || next == at_dump,
            "restored at {next}, dumped at {at_dump}"
        );
    }
    count_reaches(&rt, &id2, at_dump + 3);
    // Its cgroup is the new spec's.
    let pid = rt.state(&id2)["pid"].as_i64().unwrap();
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert_eq!(cg.trim(), format!("0::{}", b.cgroups_path()));
    let said = rt.ok(&["exec", &id2, "cat", "/tmp/cnt"]);
    assert!(said.trim().parse::<u64>().unwrap() > at_dump, "{said}");
    kill_and_delete(&rt, &id2);
    nothing_left(&rt, &id2, &b);
}

#[test]
#[ignore = "needs CRIU and a kernel it supports: run through hack/test.sh (in the VM)"]
fn leave_running_keeps_the_original_and_a_copy_restores_on_another_node() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    // With a cgroup namespace, as `spec` on a pure v2 host and CRI containers have.
    let b = with_cgroupns(counter());
    let id = unique("ck");
    // Its stdin is the host's /dev/null, which is not in the container's mounts: CRIU takes it as external.
    let (_out, _in) = piped(&rt, &id, &b, &["create"], true);
    rt.ok(&["start", &id]);
    // The dump is of a value at least this one (it counts on meanwhile).
    let before = count_reaches(&rt, &id, 3);
    let (_t, img, work) = images();
    rt.ok(&[
        "checkpoint",
        "--leave-running",
        "--image-path",
        &img,
        "--work-path",
        &work,
        &id,
    ]);
    assert_eq!(rt.status(&id), "running");
    let after = count(&rt, &id);
    count_reaches(&rt, &id, after + 2);
    assert_eq!(
        std::fs::read_to_string(cgroup_dir(&b).join("cgroup.freeze"))
            .unwrap()
            .trim(),
        "0"
    );
    // Another node: another state root, the same id, a bundle of its own (its own cgroup).
    let node2 = Runtime::from_env();
    let mut b2 = with_cgroupns(counter());
    b2.config["process"] = b.config["process"].clone();
    let (_out2, _in2) = piped(
        &node2,
        &id,
        &b2,
        &["restore", "-d", "--image-path", &img, "--work-path", &work],
        true,
    );
    assert_eq!(node2.status(&id), "running");
    let restored = count(&node2, &id);
    assert!(
        restored >= before,
        "restored at {restored}, the original was at {before} before the dump"
    );
    count_reaches(&node2, &id, restored + 2);
    assert_ne!(rt.state(&id)["pid"], node2.state(&id)["pid"]);
    kill_and_delete(&node2, &id);
    nothing_left(&node2, &id, &b2);
    kill_and_delete(&rt, &id);
    nothing_left(&rt, &id, &b);
}

#[test]
#[ignore = "needs CRIU and a kernel it supports: run through hack/test.sh (in the VM)"]
fn a_socket_to_the_host_fails_the_checkpoint_with_criu_s_words_and_the_container_runs_on() {
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let b = counter();
    let id = unique("ck");
    // Its stdout is a unix socket whose peer is the test's: CRIU refuses a socket to outside the container.
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut child = create_piped(
        &rt,
        &id,
        &b,
        &["create"],
        (Stdio::piped(), Stdio::from(std::os::fd::OwnedFd::from(theirs))),
    );
    let _held = (child.stdin.take(), child.stderr.take());
    assert!(child.wait().unwrap().success(), "create {id} failed");
    rt.ok(&["start", &id]);
    count_reaches(&rt, &id, 2);
    let (_t, img, work) = images();
    let said = rt.fails(&["checkpoint", "--image-path", &img, "--work-path", &work, &id]);
    let log = std::fs::read_to_string(Path::new(&work).join("dump.log")).unwrap_or_default();
    assert!(log.contains("unix"), "dump.log: {log}");
    if rt.is_crius {
        assert!(said.contains("criu dump of container"), "{said}");
        assert!(said.contains("dump.log") && said.contains("Error ("), "{said}");
        assert!(said.contains("unix"), "{said}");
    }
    assert_eq!(rt.status(&id), "running");
    assert_eq!(
        std::fs::read_to_string(cgroup_dir(&b).join("cgroup.freeze"))
            .unwrap()
            .trim(),
        "0"
    );
    let now = count(&rt, &id);
    count_reaches(&rt, &id, now + 2);
    drop(ours);
    kill_and_delete(&rt, &id);
    nothing_left(&rt, &id, &b);
}

/// What a pty master has said so far, read by a thread of its own (until EIO: the container's side is gone).
struct Screen(std::sync::Arc<std::sync::Mutex<String>>);

impl Screen {
    fn read(master: &std::fs::File) -> Screen {
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let (mut m, t) = (master.try_clone().unwrap(), text.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut m, &mut buf) {
                t.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Screen(text)
    }

    fn text(&self) -> String {
        self.0.lock().unwrap().clone()
    }

    /// The counter's values (`n=N` lines) shown so far.
    fn counts(&self) -> Vec<u64> {
        self.text()
            .lines()
            .filter_map(|l| l.trim().strip_prefix("n=")?.parse().ok())
            .collect()
    }

    /// Waits until the text holds `what`.
    fn shows(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.text().contains(what) {
            assert!(
                Instant::now() < deadline,
                "{what:?} never came: {:?}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
#[ignore = "needs CRIU and a kernel it supports: run through hack/test.sh (in the VM)"]
fn a_container_with_a_terminal_is_restored_with_a_new_pty_sent_to_the_new_console_socket() {
    use std::io::Write;
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    // A counter in the background prints on the terminal; the foreground reads lines typed on it, through
    // /dev/tty (held open, as an interactive shell holds it).
    let mut b = Bundle::sh(
        "(i=0; while true; do i=$((i+1)); echo $i > /tmp/cnt; echo n=$i; sleep 0.2; done) & \
         exec 3</dev/tty; while read l <&3; do echo got:$l; done",
    );
    b.config["process"]["terminal"] = serde_json::json!(true);
    // The container's own CRIU configuration file (runc's annotation): its log file wins over the runtime's.
    let conf = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(conf.path(), "log-file=by-config.log\n").unwrap();
    b.config["annotations"] = serde_json::json!({"org.criu.config": conf.path().to_str().unwrap()});
    let id = unique("ckt");
    let console = crius_test_support::ConsoleSocket::new();
    let sock = console.path();
    let receiver = std::thread::spawn(move || console.receive());
    rt.create(&id, &b, &["--console-socket", sock.to_str().unwrap()]);
    let mut master = receiver.join().unwrap();
    let screen = Screen::read(&master);
    rt.ok(&["start", &id]);
    count_reaches(&rt, &id, 3);
    master.write_all(b"before\n").unwrap();
    screen.shows("got:before");
    let (_t, img, work) = images();
    rt.ok(&["checkpoint", "--image-path", &img, "--work-path", &work, &id]);
    nothing_left(&rt, &id, &b);
    let work_dir = Path::new(&work);
    assert!(work_dir.join("by-config.log").exists() && !work_dir.join("dump.log").exists());
    // The old master reads to its end (EIO) once the dumped container is gone.
    std::thread::sleep(Duration::from_millis(300));
    let at_dump = *screen.counts().last().expect("the counter on the old terminal");
    drop(master);

    let id2 = unique("rst");
    let console2 = crius_test_support::ConsoleSocket::new();
    let sock2 = console2.path();
    let receiver2 = std::thread::spawn(move || console2.receive());
    let dir = b.write().to_str().unwrap().to_string();
    rt.ok(&[
        "restore",
        "-d",
        "--console-socket",
        sock2.to_str().unwrap(),
        "--image-path",
        &img,
        "--work-path",
        &work,
        "--bundle",
        &dir,
        &id2,
    ]);
    let mut master2 = receiver2.join().unwrap();
    assert!(!work_dir.join("restore.log").exists());
    let screen2 = Screen::read(&master2);
    assert_eq!(rt.status(&id2), "running");
    // The counter goes on from where it was, on the new terminal.
    screen2.shows(&format!("n={}", at_dump + 2));
    let first = screen2.counts()[0];
    assert!(
        first == at_dump + 1 || first == at_dump,
        "the new terminal starts at {first}, the dump was at {at_dump}"
    );
    // What is typed on the new master reaches the restored process.
    master2.write_all(b"after\n").unwrap();
    screen2.shows("got:after");
    kill_and_delete(&rt, &id2);
    nothing_left(&rt, &id2, &b);
}

#[test]
#[ignore = "needs CRIU and a kernel it supports: run through hack/test.sh (in the VM)"]
fn a_bind_nested_in_a_bind_is_restored_when_its_mount_point_is_gone() {
    // runc's checkpoint.bats "nested bind mounts": the mount point of /test/for/nested lies in /test's source;
    // it is removed after the dump, and restore makes it again before CRIU mounts there.
    require_pure_cgroup_v2();
    let rt = Runtime::from_env();
    let mut b = counter();
    let (outer, inner) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    std::fs::write(inner.path().join("mark"), "inner").unwrap();
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    for (src, dest) in [(outer.path(), "/test"), (inner.path(), "/test/for/nested")] {
        mounts.push(serde_json::json!({"type": "bind", "source": src, "destination": dest, "options": ["rw", "bind"]}));
    }
    let id = unique("ckn");
    let (_out, _in) = piped(&rt, &id, &b, &["create"], false);
    rt.ok(&["start", &id]);
    count_reaches(&rt, &id, 3);
    let (_t, img, work) = images();
    rt.ok(&["checkpoint", "--image-path", &img, "--work-path", &work, &id]);
    nothing_left(&rt, &id, &b);
    std::fs::remove_dir_all(outer.path().join("for")).unwrap();
    let id2 = unique("rsn");
    let (_out2, _in2) = piped(
        &rt,
        &id2,
        &b,
        &["restore", "-d", "--image-path", &img, "--work-path", &work],
        false,
    );
    assert_eq!(rt.status(&id2), "running");
    let said = rt.ok(&["exec", &id2, "cat", "/test/for/nested/mark"]);
    assert_eq!(said.trim(), "inner");
    kill_and_delete(&rt, &id2);
    nothing_left(&rt, &id2, &b);
}
