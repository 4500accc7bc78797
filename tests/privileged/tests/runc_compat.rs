//! Where crius-runc used to part from runc (issue 28, measured with runc's own integration suite): mount
//! sources, the order of device rules and /dev, read-only /dev, the hooks' directory and seccomp, the CLI's
//! signals, exec inputs, exit codes, JSON and help texts.
//! Runs against crius-runc, and against runc with `CRIUS_TEST_RUNTIME=runc` (`crius_only_*` tests excepted).

use crius_test_support::{Bundle, Runtime, unique};
use serde_json::json;

/// Runs `b` to its end; returns (exit code, stdout, stderr).
fn run(rt: &Runtime, b: &Bundle) -> (i32, String, String) {
    let dir = b.write().to_str().unwrap().to_string();
    let out = rt.run(&["run", "--bundle", &dir, &unique("compat")]);
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    (
        out.status.code().unwrap_or(-1),
        text(&out.stdout),
        text(&out.stderr),
    )
}

fn sh(script: &str) -> Bundle {
    Bundle::new(&["sh", "-c", script])
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_non_bind_mounts_source_is_its_name_not_a_bundle_path() {
    let rt = Runtime::from_env();
    let b = sh("awk '$2 == \"/proc\" || $2 == \"/tmp\" || $2 == \"/dev/shm\" { print $2, $1 }' /proc/mounts");
    let (code, out, err) = run(&rt, &b);
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
    let mut b = sh(
        "test -c /dev/fuse && echo made; head -c1 /dev/fuse 2>&1 >/dev/null | grep -q 'not permitted' && echo denied",
    );
    b.config["linux"]["devices"] =
        json!([{"path": "/dev/fuse", "type": "c", "major": 10, "minor": 229, "fileMode": 438}]);
    let (code, out, err) = run(&rt, &b);
    assert_eq!((code, out.as_str()), (0, "made\ndenied\n"), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_read_only_dev_still_gets_its_nodes_and_the_mounts_below_it() {
    let rt = Runtime::from_env();
    let mut b = sh(
        "test -c /dev/null && grep -q ' /dev/pts devpts' /proc/mounts && echo nodes; \
                    touch /dev/x 2>/dev/null || echo read-only; grep ' /dev tmpfs' /proc/mounts | cut -d' ' -f4 | cut -d, -f1",
    );
    b.config["mounts"][1]["options"]
        .as_array_mut()
        .unwrap()
        .push(json!("ro"));
    let (code, out, err) = run(&rt, &b);
    assert_eq!((code, out.as_str()), (0, "nodes\nread-only\nro\n"), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_create_container_hook_runs_in_the_rootfs() {
    let rt = Runtime::from_env();
    let mut b = sh("true");
    let out = b.path().join("hook-cwd");
    b.config["hooks"] = json!({"createContainer": [{"path": "/bin/sh",
        "args": ["sh", "-c", format!("pwd > {}", out.display())]}]});
    let (code, _, err) = run(&rt, &b);
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
    let mut b = sh("echo ran");
    b.config["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_KILL"}]});
    b.config["hooks"] =
        json!({"startContainer": [{"path": "/bin/sh", "args": ["sh", "-c", "mkdir /tmp/foo"]}]});
    let (code, out, err) = run(&rt, &b);
    assert_ne!(code, 0, "{out}{err}");
    assert!(!out.contains("ran"), "{out}");
    assert!(
        err.contains("error running") && err.contains("bad system call"),
        "{err}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn two_seccomp_comparisons_of_one_argument_are_accepted() {
    let rt = Runtime::from_env();
    // libseccomp alone refuses the pair; runc makes each comparison a rule of its own.
    let mut b = sh("true");
    b.config["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW",
        "syscalls": [{"names": ["getpriority"], "action": "SCMP_ACT_ERRNO",
            "args": [{"index": 0, "value": 1, "op": "SCMP_CMP_EQ"}, {"index": 0, "value": 2, "op": "SCMP_CMP_EQ"}]}]});
    let (code, _, err) = run(&rt, &b);
    assert_eq!(code, 0, "{err}");
}
