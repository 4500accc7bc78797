//! Where crius-runc used to part from runc (issue 28, measured with runc's own integration suite): mount
//! sources, the order of device rules and /dev, read-only /dev, the hooks' directory and seccomp, the CLI's
//! signals, exec inputs, exit codes, JSON and help texts.
//! Runs against crius-runc, and against runc with `CRIUS_TEST_RUNTIME=runc` (`crius_only_*` tests excepted).

use crius_test_support::{Bundle, Runtime, unique};
use serde_json::json;

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_non_bind_mounts_source_is_its_name_not_a_bundle_path() {
    let rt = Runtime::from_env();
    let b = Bundle::sh(
        "awk '$2 == \"/proc\" || $2 == \"/tmp\" || $2 == \"/dev/shm\" { print $2, $1 }' /proc/mounts",
    );
    let (code, out, err) = rt.run_bundle(&b, "compat");
    assert_eq!(code, 0, "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(lines, ["/dev/shm shm", "/proc proc", "/tmp tmpfs"], "{out}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn device_rules_apply_after_the_nodes_are_made() {
    let rt = Runtime::from_env();
    // Every device denied but the defaults; /dev/fuse is made all the same, and the rule holds for its use.
    let mut b = Bundle::sh(
        "test -c /dev/fuse && echo made; head -c1 /dev/fuse 2>&1 >/dev/null | grep -q 'not permitted' && echo denied",
    );
    b.config["linux"]["devices"] =
        json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438}]);
    let (code, out, err) = rt.run_bundle(&b, "compat");
    assert_eq!((code, out.as_str()), (0, "made\ndenied\n"), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_device_rules_unknown_access_letters_are_dropped() {
    // runc's update.bats "update devices [minimal transition rules]": access "rwa" (crius-runc refused it).
    let rt = Runtime::from_env();
    let mut b = Bundle::sh("head -c1 /dev/null && echo null; head -c1 /dev/fuse 2>/dev/null || echo denied");
    b.config["linux"]["devices"] =
        json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438}]);
    b.config["linux"]["resources"]["devices"] = json!([{"allow": false, "access": "rwm"},
        {"allow": false, "type": "c", "major": 10, "minor": 229, "access": "rwa"}]);
    let (code, out, err) = rt.run_bundle(&b, "compat");
    assert_eq!((code, out.as_str()), (0, "null\ndenied\n"), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_read_only_dev_still_gets_its_nodes_and_the_mounts_below_it() {
    let rt = Runtime::from_env();
    let mut b = Bundle::sh(
        "test -c /dev/null && grep -q ' /dev/pts devpts' /proc/mounts && echo nodes; \
                    touch /dev/x 2>/dev/null || echo read-only; grep ' /dev tmpfs' /proc/mounts | cut -d' ' -f4 | cut -d, -f1",
    );
    b.config["mounts"][1]["options"]
        .as_array_mut()
        .unwrap()
        .push(json!("ro"));
    let (code, out, err) = rt.run_bundle(&b, "compat");
    assert_eq!((code, out.as_str()), (0, "nodes\nread-only\nro\n"), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_create_container_hook_runs_in_the_rootfs() {
    let rt = Runtime::from_env();
    let mut b = Bundle::sh("true");
    let out = b.path().join("hook-cwd");
    b.config["hooks"] = json!({"createContainer": [{"path": "/bin/sh",
        "args": ["sh", "-c", format!("pwd > {}", out.display())]}]});
    let (code, _, err) = rt.run_bundle(&b, "compat");
    assert_eq!(code, 0, "{err}");
    let rootfs = std::fs::canonicalize(crius_test_support::shared_rootfs()).unwrap();
    assert_eq!(
        std::fs::read_to_string(&out).unwrap().trim(),
        rootfs.to_str().unwrap()
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_start_container_hook_runs_under_the_seccomp_filter() {
    let rt = Runtime::from_env();
    // runc's seccomp.bats: mkdir kills; the hook's mkdir is caught, so the container never runs.
    let mut b = Bundle::sh("echo ran");
    b.config["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_KILL"}]});
    b.config["hooks"] =
        json!({"startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "mkdir /tmp/foo"]}]});
    let (code, out, err) = rt.run_bundle(&b, "compat");
    assert_ne!(code, 0, "{out}{err}");
    assert!(!out.contains("ran"), "{out}");
    assert!(
        err.contains("error running hook #0") && err.contains("bad system call"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn two_seccomp_comparisons_of_one_argument_are_accepted() {
    let rt = Runtime::from_env();
    // libseccomp alone refuses the pair; runc makes each comparison a rule of its own.
    let mut b = Bundle::sh("true");
    b.config["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["getpriority"], "action": "SCMP_ACT_ERRNO",
            "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}, {"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]}]});
    let (code, _, err) = rt.run_bundle(&b, "compat");
    assert_eq!(code, 0, "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn kill_takes_signal_0_running_or_stopped() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("kill0");
    rt.create_started(&id, &b);
    rt.ok(&["kill", &id, "0"]);
    assert_eq!(rt.status(&id), "running");
    rt.ok(&["kill", &id, "KILL"]);
    rt.wait_status(&id, "stopped");
    rt.ok(&["kill", "-a", &id, "0"]);
    rt.ok(&["delete", &id]);
}

/// Runs `script` in bash with `$RT` the runtime command (`--root` set); returns (code, stdout, stderr).
fn bash(rt: &Runtime, script: &str) -> (i32, String, String) {
    let cmd = format!("{} --root {}", rt.bin.display(), rt.root().display());
    let out = std::process::Command::new("bash")
        .args(["-c", script])
        .env("RT", cmd)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn exec_reads_a_process_from_dev_fd_without_user_and_fails_with_255() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("execp");
    rt.create_started(&id, &b);
    // A descriptor of the shell's, as process substitution gives one (/dev/fd/63; the VM has no /dev/fd link,
    // hence /proc/self/fd there), and no `user` in the document (uid 0, as runc reads it).
    let p = r#"{"args": ["/bin/sh", "-c", "id -u; echo from-fd"], "cwd": "/"}"#;
    let script = format!("d=/dev/fd; [ -e $d/0 ] || d=/proc/self/fd; $RT exec -p $d/7 {id} 7<<<'{p}'");
    let (code, out, err) = bash(&rt, &script);
    assert_eq!((code, out.as_str()), (0, "0\nfrom-fd\n"), "{err}");
    // The process's own codes pass through; exec's own failures are 255.
    let code = |args: &[&str]| rt.run(args).status.code();
    assert_eq!(code(&["exec", &id, "false"]), Some(1));
    assert_eq!(code(&["exec", &id, "sh", "-c", "exit 42"]), Some(42));
    assert_eq!(code(&["exec", &id, "no-such-binary"]), Some(255));
    assert_eq!(code(&["exec", "no-such-container", "true"]), Some(255));
    assert_eq!(
        code(&["exec", "--pid-file", "/non-existent/dir/pid", &id, "true"]),
        Some(255)
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn json_output_is_runcs_state_list_ps_and_events() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("json");
    rt.create_started(&id, &b);
    // (runc writes the runtime-spec version it implements; crius-runc the config's, which the state follows.)
    let state = rt.ok(&["state", &id]);
    assert!(state.starts_with("{\n  \"ociVersion\": \""), "{state}");
    assert!(
        state.ends_with('}'),
        "indented, with no newline after it: {state:?}"
    );
    let keys = |v: &str| -> Vec<String> {
        let doc: serde_json::Value = serde_json::from_str(v).unwrap();
        let first = if doc.is_array() { doc[0].clone() } else { doc };
        // serde_json sorts keys, so read their order off the text.
        let mut seen: Vec<(usize, String)> = first
            .as_object()
            .unwrap()
            .keys()
            .map(|k| (v.find(&format!("\"{k}\":")).unwrap(), k.clone()))
            .collect();
        seen.sort();
        seen.into_iter().map(|(_, k)| k).collect()
    };
    let order = [
        "ociVersion",
        "id",
        "pid",
        "status",
        "bundle",
        "rootfs",
        "created",
        "owner",
    ];
    assert_eq!(keys(&state), order);
    let list = rt.ok(&["list", "-f", "json"]);
    assert_eq!(list.lines().count(), 1, "compact: {list}");
    assert_eq!(keys(&list), order);
    let listed: serde_json::Value = serde_json::from_str(&list).unwrap();
    assert_eq!(listed[0]["owner"], "root");
    let ps = rt.ok(&["ps", "-f", "json", &id]);
    let pid = rt.state(&id)["pid"].as_i64().unwrap();
    assert_eq!(ps, format!("[{pid}]\n"));
    let events = rt.ok(&["events", "--stats", &id]);
    assert!(
        events.starts_with(&format!("{{\"type\":\"stats\",\"id\":\"{id}\",\"data\":{{")),
        "{events}"
    );
    assert_eq!(events.lines().count(), 1, "{events}");
    rt.ok(&["delete", "--force", &id]);
    assert_eq!(rt.ok(&["list", "-f", "json"]), "null\n");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn spec_asks_for_a_terminal_and_a_cgroup_namespace_only_on_pure_v2() {
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    rt.ok(&["spec", "--bundle", dir.path().to_str().unwrap()]);
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("config.json")).unwrap()).unwrap();
    assert_eq!(v["process"]["terminal"], true);
    let cgroupns = v["linux"]["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n["type"] == "cgroup");
    assert_eq!(cgroupns, crius_test_support::pure_cgroup_v2());
    let devpts = v["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["type"] == "devpts");
    assert!(
        devpts.unwrap()["options"]
            .as_array()
            .unwrap()
            .contains(&json!("gid=5")),
        "{v}"
    );
    // runc's type, which its tests' helpers look for (`set_cgroup_mount_writable`); mounted as cgroup2.
    let cgroup = v["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["destination"] == "/sys/fs/cgroup");
    assert_eq!(cgroup.unwrap()["type"], "cgroup", "{v}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_users_terminal_and_pipes_are_its_own_and_a_configured_ptmx_is_the_devpts_one() {
    let rt = Runtime::from_env();
    // runc's tty.bats: a process of uid 1000 owns its pty, whose group stays tty's (devpts gid=5).
    let mut b = Bundle::new(&["sleep", "1000"]);
    b.config["mounts"][2]["options"]
        .as_array_mut()
        .unwrap()
        .push(json!("gid=5"));
    let id = unique("ttyown");
    rt.create_started(&id, &b);
    let cmd = format!(
        "{} --root {} exec -t --user 1000:100 {id} sh -c 'stat -c %u:%g $(tty)'",
        rt.bin.display(),
        rt.root().display()
    );
    let out = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("1000:5"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A pipe as stdout is the user's too, so it can reopen /dev/stdout.
    let out = rt.ok(&[
        "exec",
        "--user",
        "1000:100",
        &id,
        "sh",
        "-c",
        "stat -L -c %u /dev/stdout; echo hi > /dev/stdout",
    ]);
    assert_eq!(out, "1000\nhi\n");
    // dev.bats: /dev/ptmx among the devices is still the link to the container's devpts.
    let mut b = Bundle::sh("ls -lLn /dev/ptmx; readlink /dev/ptmx");
    b.config["linux"]["devices"] = json!([{"path": "/dev/ptmx", "type": "c", "major": 5, "minor": 2}]);
    let (code, out, err) = rt.run_bundle(&b, "compat");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with("crw-rw-rw-") && out.ends_with("\npts/ptmx\n"),
        "{out}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn exec_tty_without_a_console_socket_runs_in_the_foreground() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("exectty");
    rt.create_started(&id, &b);
    // script(1) gives the runtime a terminal, as a user's shell would.
    let run = format!(
        "{} --root {} exec -t {id} sh -c 'tty; exit 3'",
        rt.bin.display(),
        rt.root().display()
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
    assert!(
        said.contains("/dev/pts/"),
        "the process ran on a terminal: {said}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn exec_ignore_paused_waits_for_resume_and_cgroup_must_stay_below() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("paused");
    rt.create_started(&id, &b);
    rt.ok(&["pause", &id]);
    let err = rt.fails(&["exec", &id, "true"]);
    assert!(err.contains("cannot exec in a paused container"), "{err}");
    let resume = {
        let (bin, root, id) = (rt.bin.clone(), rt.root().to_path_buf(), id.clone());
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(1));
            std::process::Command::new(bin)
                .arg("--root")
                .arg(root)
                .args(["resume", &id])
                .status()
                .unwrap()
        })
    };
    assert_eq!(rt.ok(&["exec", "--ignore-paused", &id, "echo", "ok"]), "ok\n");
    assert!(resume.join().unwrap().success());
    let err = rt.fails(&["exec", "--cgroup", "..", &id, "true"]);
    assert!(err.contains(".. is not a sub cgroup path"), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_exec_cgroup_runs_the_process_in_a_sub_cgroup() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("subcg");
    rt.create_started(&id, &b);
    let sub = crius_test_support::cgroup2_mount()
        .join(b.cgroups_path().trim_start_matches('/'))
        .join("sub");
    std::fs::create_dir(&sub).unwrap();
    let out = rt.run(&["exec", "--cgroup", "sub", &id, "cat", "/proc/self/cgroup"]);
    let _ = std::fs::remove_dir(&sub);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        said.lines().any(|l| l.starts_with("0::") && l.ends_with("/sub")),
        "{said}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn debug_goes_to_stderr_or_to_the_log_in_its_format() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["echo", "hello"]);
    let dir = b.write().to_str().unwrap().to_string();
    let out = rt.run(&["--debug", "run", "--bundle", &dir, &unique("debug")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && err.contains("level=debug"), "{err}");
    // runc's debug.bats and exec.bats look for its milestones by name.
    for step in [
        "nsexec container setup",
        "child process in init()",
        "init: closing the pipe to signal completion",
    ] {
        assert!(err.contains(step), "{step}: {err}");
    }
    let id = unique("debugexec");
    let sleeper = Bundle::new(&["sleep", "1000"]);
    rt.create_started(&id, &sleeper);
    let out = rt.run(&["--debug", "exec", &id, "true"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("setns_init: about to exec"),
        "{err}"
    );
    for (format, marker) in [("text", "level=debug"), ("json", "\"level\":\"debug\"")] {
        let log = b.path().join(format!("log.{format}"));
        let out = rt.run(&[
            "--log",
            log.to_str().unwrap(),
            "--log-format",
            format,
            "--debug",
            "run",
            "--bundle",
            &dir,
            &unique("debug"),
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !err.contains("level=debug"), "{err}");
        let logged = std::fs::read_to_string(&log).unwrap();
        assert!(logged.contains(marker), "{logged}");
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn help_on_every_command_and_version_lines_as_runcs() {
    let rt = Runtime::from_env();
    let out = rt.ok(&["-h"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "NAME:");
    assert!(lines[1].contains(" - Open Container Initiative runtime"), "{out}");
    for verb in [
        "create",
        "delete",
        "events",
        "exec",
        "kill",
        "list",
        "pause",
        "resume",
        "spec",
        "start",
        "run",
        "state",
        "update",
        "checkpoint",
        "restore",
    ] {
        let out = rt.ok(&[verb, "-h"]);
        let second = out.lines().nth(1).unwrap_or_default().to_string();
        assert!(second.contains(&format!("runc {verb} - ")), "{verb}: {out}");
    }
    let out = rt.run(&["foo", "-h"]);
    assert!(!out.status.success());
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(said.contains("No help topic for 'foo'"), "{said}");
    let v = rt.ok(&["-v"]);
    let lines: Vec<&str> = v.lines().collect();
    assert!(lines[0].contains("runc version "), "{v}");
    assert!(lines[1].starts_with("commit:"), "{v}");
    assert!(lines[2].starts_with("spec: 1."), "{v}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_second_container_in_a_busy_cgroup_is_warned_about() {
    let rt = Runtime::from_env();
    let first = Bundle::new(&["sleep", "1000"]);
    let id1 = unique("busy");
    rt.create_started(&id1, &first);
    let mut second = Bundle::new(&["sleep", "1000"]);
    second.config["linux"]["cgroupsPath"] = first.config["linux"]["cgroupsPath"].clone();
    let id2 = unique("busy");
    rt.create(&id2, &second, &[]);
    assert!(
        second.stderr().contains("container's cgroup is not empty"),
        "{}",
        second.stderr()
    );
    rt.ok(&["delete", "--force", &id2]);
    rt.ok(&["delete", "--force", &id1]);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_a_frozen_cgroup_is_refused() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["true"]);
    let dir = crius_test_support::cgroup2_mount().join(b.cgroups_path().trim_start_matches('/'));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("cgroup.freeze"), "1").unwrap();
    let path = b.write().to_str().unwrap().to_string();
    let err = rt.fails(&["create", "--bundle", &path, &unique("frozen")]);
    let left = dir.is_dir();
    let _ = std::fs::remove_dir(&dir);
    assert!(err.contains("container's cgroup unexpectedly frozen"), "{err}");
    assert!(left, "a cgroup the runtime did not make is left alone");
    assert!(rt.ids().is_empty(), "{:?}", rt.ids());
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_container_without_namespaces_of_its_own_shares_the_runtimes_and_is_chrooted() {
    let rt = Runtime::from_env();
    // runtime-tools' linux_ns_itype: every namespace inherited, the mount namespace too.
    let dir = tempfile::tempdir().unwrap();
    crius_test_support::build_busybox_rootfs(&dir.path().join("rootfs")).unwrap();
    std::fs::create_dir_all(dir.path().join("rootfs/marker-dir")).unwrap();
    let mut b = Bundle::new(&["sleep", "1000"]);
    let linux = b.config["linux"].as_object_mut().unwrap();
    linux.insert("namespaces".into(), json!([]));
    linux.remove("maskedPaths");
    linux.remove("readonlyPaths");
    // Its mounts are made in the shared mount namespace, the host's (as runc makes them): the test undoes them.
    b.config["mounts"] = json!([{"destination": "/proc", "type": "proc", "source": "proc"}]);
    b.config.as_object_mut().unwrap().remove("hostname");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
        }
    }
    // (runc also binds the rootfs onto itself there.)
    let _root = Unmount(dir.path().join("rootfs"));
    let _proc = Unmount(dir.path().join("rootfs/proc"));
    b.config["root"] = json!({"path": dir.path().join("rootfs"), "readonly": false});
    let id = unique("nons");
    rt.create_started(&id, &b);
    let pid = rt.state(&id)["pid"].as_i64().unwrap();
    for ns in ["mnt", "pid", "net", "ipc", "uts", "cgroup"] {
        let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).unwrap();
        let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
        assert_eq!(theirs, ours, "{ns} namespace inherited");
    }
    let root = std::fs::read_link(format!("/proc/{pid}/root")).unwrap();
    assert_eq!(root, std::fs::canonicalize(dir.path().join("rootfs")).unwrap());
    // exec runs in the same root (runc 1.1's exec fails with no namespace to join: "ns paths are empty").
    if rt.is_crius {
        let out = rt.ok(&["exec", &id, "ls", "/"]);
        assert!(out.lines().any(|l| l == "marker-dir"), "{out}");
    }
    rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_cgroup2_in_a_user_namespace_without_a_cgroup_namespace_is_bound() {
    // (runc 1.1 does the same on a pure v2 host; on this hybrid one it mounts cgroup2 alone and fails.)
    let rt = Runtime::from_env();
    let mut b = Bundle::sh(
        "grep -q ' /sys/fs/cgroup ' /proc/mounts && echo mounted; touch /sys/fs/cgroup/x 2>/dev/null || echo ro",
    );
    b.config["linux"]["namespaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "user"}));
    b.config["linux"]["uidMappings"] = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    b.config["linux"]["gidMappings"] = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
    b.config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/sys/fs/cgroup", "type": "cgroup2",
        "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}));
    let (code, out, err) = rt.run_bundle(&b, "compat");
    assert_eq!((code, out.as_str()), (0, "mounted\nro\n"), "{err}");
}

#[path = "runc_compat/checkpoint.rs"]
mod checkpoint;

#[path = "runc_compat/mounts.rs"]
mod mounts;
