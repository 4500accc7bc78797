//! Container lifecycle through the runtime's CLI: states, exit codes, output, run --detach, exec, pause.
//! Runs against crius-runc, and against runc with `CRIUS_TEST_RUNTIME=runc` (hack/test.sh does both).

use crius_test_support::{Bundle, Runtime, unique};

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn create_start_kill_delete_walks_the_states() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("life");
    rt.create(&id, &b, &[]);
    let st = rt.state(&id);
    assert_eq!(st["status"], "created");
    assert!(st["pid"].as_i64().unwrap() > 0);
    assert_eq!(st["id"], id.as_str());
    rt.ok(&["start", &id]);
    assert_eq!(rt.status(&id), "running");
    rt.ok(&["kill", &id, "KILL"]);
    rt.wait_status(&id, "stopped");
    rt.ok(&["delete", &id]);
    assert!(
        !rt.run(&["state", &id]).status.success(),
        "state of a deleted container must fail"
    );
    assert!(rt.ids().is_empty(), "state left behind: {:?}", rt.ids());
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn run_returns_the_exit_code_and_passes_stdout() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sh", "-c", "echo out; echo err >&2; exit 7"]);
    let dir = b.write().to_str().unwrap().to_string();
    let id = unique("run");
    let out = rt.run(&["run", "--bundle", &dir, &id]);
    assert_eq!(
        out.status.code(),
        Some(7),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err"));
    assert!(
        rt.ids().is_empty(),
        "run must delete the container: {:?}",
        rt.ids()
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn run_reports_death_by_signal_as_128_plus_signal() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let dir = b.write().to_str().unwrap().to_string();
    let id = unique("sig");
    let mut run = rt
        .command(&["run", "--bundle", &dir, &id])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !rt.run(&["state", &id]).status.success() || rt.status(&id) != "running" {
        assert!(std::time::Instant::now() < deadline, "container never ran");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    rt.ok(&["kill", &id, "KILL"]);
    assert_eq!(run.wait().unwrap().code(), Some(137));
    assert!(rt.ids().is_empty());
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn run_detach_leaves_it_running() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let dir = b.write().to_str().unwrap().to_string();
    let id = unique("detach");
    let out = rt
        .command(&["run", "--detach", "--bundle", &dir, &id])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(b.path().join("stderr")).unwrap())
        .status()
        .unwrap();
    // Not output(): the container inherits the pipes and would keep them open.
    assert!(out.success(), "{}", b.stderr());
    assert_eq!(rt.status(&id), "running");
    rt.ok(&["delete", "--force", &id]);
    assert!(rt.ids().is_empty());
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn exec_runs_in_the_containers_namespaces() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("exec");
    rt.create_started(&id, &b);
    let out = rt.run(&[
        "exec",
        &id,
        "sh",
        "-c",
        "hostname; tr '\\0' ' ' < /proc/1/cmdline; echo; exit 5",
    ]);
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "crius-test\nsleep 1000 \n");

    let process = b.path().join("process.json");
    let p = serde_json::json!({"cwd": "/tmp", "args": ["sh", "-c", "pwd; echo $X; id -u"], "env": ["PATH=/bin", "X=42"],
        "user": {"uid": 65534, "gid": 65534}});
    std::fs::write(&process, p.to_string()).unwrap();
    let out = rt.ok(&["exec", "--process", process.to_str().unwrap(), &id]);
    assert_eq!(out, "/tmp\n42\n65534\n");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn pid_file_ps_list_pause_resume_and_stats() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("misc");
    let pid_file = b.path().join("pid");
    rt.create(&id, &b, &["--pid-file", pid_file.to_str().unwrap()]);
    let pid: i64 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(rt.state(&id)["pid"].as_i64(), Some(pid));
    rt.ok(&["start", &id]);

    let pids: Vec<i64> = serde_json::from_str(&rt.ok(&["ps", "--format", "json", &id])).unwrap();
    assert_eq!(pids, vec![pid]);
    let list = rt.ok(&["list", "--quiet"]);
    assert!(list.lines().any(|l| l == id), "{list}");

    rt.ok(&["pause", &id]);
    assert_eq!(rt.status(&id), "paused");
    rt.fails(&["pause", &id]);
    rt.ok(&["resume", &id]);
    assert_eq!(rt.status(&id), "running");

    let ev: serde_json::Value =
        serde_json::from_str(rt.ok(&["events", "--stats", &id]).lines().next().unwrap()).unwrap();
    assert_eq!(ev["type"], "stats");
    assert_eq!(ev["id"], id.as_str());
    rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn terminal_through_the_console_socket() {
    use std::io::Read;
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&["sh", "-c", "[ -t 0 ] && [ -t 1 ] && tty && echo done"]);
    b.config["process"]["terminal"] = serde_json::json!(true);
    let console = crius_test_support::ConsoleSocket::new();
    let id = unique("tty");
    let sock = console.path();
    let receiver = std::thread::spawn(move || console.receive());
    rt.create(&id, &b, &["--console-socket", sock.to_str().unwrap()]);
    let mut master = receiver.join().unwrap();
    rt.ok(&["start", &id]);
    let mut out = Vec::new();
    // Reading the master ends with EIO once the container's side is closed.
    let _ = master.read_to_end(&mut out);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("/dev/pts/0") && text.contains("done"), "{text:?}");
    rt.wait_status(&id, "stopped");
    rt.ok(&["delete", &id]);
}

/// A bundle directory with a busybox `rootfs` of its own (runc takes no symlink there), for a config.json
/// made by another tool.
fn bundle_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    crius_test_support::build_busybox_rootfs(&dir.path().join("rootfs")).unwrap();
    dir
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_bundle_made_by_runc_spec_runs_unedited_with_a_terminal_in_the_foreground() {
    let rt = Runtime::from_env();
    let dir = bundle_dir();
    // runc 1.1's own default spec: `sh` on a terminal, and ambient capabilities that are not inheritable.
    let spec = std::process::Command::new("runc")
        .args(["spec", "--bundle"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(spec.status.success(), "{}", String::from_utf8_lossy(&spec.stderr));
    let id = unique("spec");
    // script(1) gives the runtime a terminal for its stdio, as a user's shell would; the commands come on it.
    let run = format!(
        "printf 'echo ran-$((6 * 7)); exit 3\\n' | {} --root {} run --bundle {} {id}",
        rt.bin.display(),
        rt.root().display(),
        dir.path().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &run, "/dev/null"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("ran-42"), "the shell ran on the terminal: {said}");
    if rt.is_crius {
        // Where runc only warns, so does crius-runc (on the terminal, before the container runs).
        assert!(
            said.contains("CAP_KILL") && said.contains("not raised"),
            "the ambient capabilities it cannot raise are named: {said}"
        );
    }
    assert!(
        rt.run(&["state", &id]).status.code() != Some(0),
        "deleted after the run"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_bundle_made_by_containerds_default_spec_runs_with_only_its_command_set() {
    let rt = Runtime::from_env();
    let dir = bundle_dir();
    let spec = std::process::Command::new("ctr")
        .args(["oci", "spec"])
        .output()
        .unwrap();
    assert!(spec.status.success(), "{}", String::from_utf8_lossy(&spec.stderr));
    let mut config: serde_json::Value = serde_json::from_slice(&spec.stdout).unwrap();
    // containerd sets the command (and the env, with PATH) from the image; nothing else changes.
    config["process"]["args"] = serde_json::json!(["/bin/sh", "-c", "echo from-ctr-spec; exit 4"]);
    std::fs::write(dir.path().join("config.json"), config.to_string()).unwrap();
    let id = unique("ctrspec");
    let out = rt.run(&["run", "--bundle", dir.path().to_str().unwrap(), &id]);
    assert_eq!(
        (out.status.code(), String::from_utf8_lossy(&out.stdout).trim()),
        (Some(4), "from-ctr-spec"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_a_container_without_limits_gets_every_controller_its_parent_offers() {
    // On this hybrid host the cgroup2 tree offers what v1 does not hold (hugetlb here); the VM's cgroup_v2 suite
    // checks memory, pids, cpu and io. runc in hybrid mode leaves the v2 tree's controllers alone.
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("ctl");
    rt.create(&id, &b, &[]);
    let dir = crius_test_support::cgroup2_mount().join(b.cgroups_path().trim_start_matches('/'));
    let list = |d: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_to_string(d.join("cgroup.controllers"))
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    assert_eq!(list(&dir), list(dir.parent().unwrap()), "{}", dir.display());
    rt.ok(&["delete", "--force", &id]);
    assert!(!dir.exists(), "cgroup left behind");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn start_of_a_program_that_exits_at_once_succeeds() {
    // Released, run and gone between start's read of the exec FIFO and its look at the process: the start
    // still happened (the byte is in the FIFO). 100 on 4 threads, for the load that widens the window.
    let rt = Runtime::from_env();
    std::thread::scope(|s| {
        for t in 0..4 {
            let rt = &rt;
            s.spawn(move || {
                for i in 0..25 {
                    // A bundle (and so a cgroup) each.
                    let b = Bundle::new(&["true"]);
                    let id = unique(&format!("quick{t}-{i}"));
                    rt.create(&id, &b, &[]);
                    rt.ok(&["start", &id]);
                    rt.wait_status(&id, "stopped");
                    rt.ok(&["delete", &id]);
                }
            });
        }
    });
}
