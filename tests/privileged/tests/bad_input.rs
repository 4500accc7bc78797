//! Bad input: each case is a clear error and leaves nothing behind (no state, no process, no cgroup).

use crius_test_support::{Bundle, Runtime, cgroup2_mount, unique};
use serde_json::json;

fn assert_clean(rt: &Runtime, b: &Bundle) {
    assert!(rt.ids().is_empty(), "state left behind: {:?}", rt.ids());
    let cg = cgroup2_mount().join(b.cgroups_path().trim_start_matches('/'));
    assert!(!cg.exists(), "cgroup {} left behind", cg.display());
}

fn create_fails(rt: &Runtime, b: &Bundle, id: &str) -> String {
    let dir = b.write().to_str().unwrap().to_string();
    rt.fails(&["create", "--bundle", &dir, id])
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn malformed_config_names_the_field() {
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&["true"]);
    b.config["process"]["user"]["uid"] = json!("root");
    let err = create_fails(&rt, &b, &unique("bad"));
    assert!(err.contains("uid"), "error must name the field: {err}");
    assert_clean(&rt, &b);
    std::fs::write(b.path().join("config.json"), "{ not json").unwrap();
    let out = rt.run(&["create", "--bundle", b.path().to_str().unwrap(), &unique("bad")]);
    assert!(!out.status.success());
    assert_clean(&rt, &b);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn missing_rootfs() {
    let rt = Runtime::from_env();
    let mut b = Bundle::new(&["true"]);
    b.config["root"]["path"] = json!("/nonexistent/rootfs");
    let err = create_fails(&rt, &b, &unique("noroot"));
    assert!(!err.is_empty());
    assert_clean(&rt, &b);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn ids_that_would_escape_the_root() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["true"]);
    for id in ["a/b", "..", "../escape", "."] {
        let err = create_fails(&rt, &b, id);
        assert!(!err.is_empty(), "{id}");
        assert_clean(&rt, &b);
    }
    assert!(!rt.root().parent().unwrap().join("escape").exists());
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn duplicate_id_start_twice_and_delete_running() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("dup");
    rt.create(&id, &b, &[]);
    let pid = rt.state(&id)["pid"].clone();
    let other = Bundle::new(&["true"]);
    let err = create_fails(&rt, &other, &id);
    assert!(err.contains("exist"), "{err}");
    assert_eq!(rt.state(&id)["pid"], pid, "the first container must be untouched");

    rt.ok(&["start", &id]);
    rt.fails(&["start", &id]);
    assert_eq!(rt.status(&id), "running");

    rt.fails(&["delete", &id]);
    assert_eq!(
        rt.status(&id),
        "running",
        "delete without --force must not touch a running container"
    );
    rt.ok(&["delete", "--force", &id]);
    assert_clean(&rt, &b);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn unknown_container_and_exec_in_stopped() {
    let rt = Runtime::from_env();
    for verb in ["state", "start", "kill", "delete", "pause"] {
        rt.fails(&[verb, "no-such-container"]);
    }
    let b = Bundle::new(&["true"]);
    let id = unique("stopped");
    rt.create_started(&id, &b);
    rt.wait_status(&id, "stopped");
    rt.fails(&["exec", &id, "true"]);
    rt.ok(&["delete", &id]);
    assert_clean(&rt, &b);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_errors_name_the_container_and_the_state() {
    let rt = Runtime::from_env();
    let err = rt.fails(&["state", "no-such-container"]);
    assert!(err.contains("\"no-such-container\" does not exist"), "{err}");
    let b = Bundle::new(&["sleep", "1000"]);
    let id = unique("named");
    rt.create_started(&id, &b);
    let err = rt.fails(&["delete", &id]);
    assert!(
        err.contains(&id) && err.contains("running") && err.contains("--force"),
        "{err}"
    );
    let err = rt.fails(&["create", "--bundle", b.path().to_str().unwrap(), "a/b"]);
    assert!(err.contains("invalid container id \"a/b\""), "{err}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_limit_without_its_controller_fails_naming_it() {
    let rt = Runtime::from_env();
    assert!(
        !crius_test_support::pure_cgroup_v2(),
        "this test belongs to the hybrid host (no memory controller in the cgroup2 tree); the VM group covers v2"
    );
    let mut b = Bundle::new(&["true"]);
    b.config["linux"]["resources"]["memory"] = json!({"limit": 67108864});
    let err = create_fails(&rt, &b, &unique("noctl"));
    assert!(
        err.contains("\"memory\" is not available") && err.contains("memory.max=67108864"),
        "{err}"
    );
    assert_clean(&rt, &b);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn errors_reach_the_json_log() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["true"]);
    let log = b.path().join("runtime.log");
    let log_arg = log.to_str().unwrap().to_string();
    rt.fails(&[
        "--log",
        &log_arg,
        "--log-format",
        "json",
        "state",
        "no-such-container",
    ]);
    let text = std::fs::read_to_string(&log).unwrap();
    let last: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["level"], "error");
    let msg = last["msg"].as_str().unwrap();
    assert!(msg.contains("does not exist"), "{text}");
    // crius also names the container (runc 1.1 does not).
    assert!(!rt.is_crius || msg.contains("no-such-container"), "{text}");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_rlimit_above_the_hard_limit_names_it() {
    let rt = Runtime::from_env();
    let mut hard = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit with a valid pointer.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut hard) };
    let mut b = Bundle::new(&["true"]);
    let above = hard.rlim_max + 1;
    b.config["process"]["rlimits"] = json!([{"type": "RLIMIT_NOFILE", "hard": above, "soft": above}]);
    let err = create_fails(&rt, &b, &unique("rlimit"));
    assert!(
        err.contains("RLIMIT_NOFILE") && err.contains(&hard.rlim_max.to_string()),
        "{err}"
    );
    assert_clean(&rt, &b);
}
