//! ExecSync against the fake shim: one call of the shim, its timeout, its refusals, and an older shim.

use std::time::{Duration, Instant};

use tonic::Code;

use super::{World, exec_sync};
use crate::error::answer as code;

#[test]
fn exec_sync_runs_the_command_and_keeps_its_timeout() {
    let w = World::new();
    let id = w.create("web").unwrap();
    w.containers.start(&id).unwrap();
    *w.shim.exec_exit.lock().unwrap() = Some(3);
    let out = exec_sync(&w.containers, &id, &["cat".into(), "/etc/os-release".into()], 5).unwrap();
    assert_eq!(out.exit_code, 3);
    // A command that outlives its timeout: killed, DeadlineExceeded, after the timeout and long before the
    // command's own end (how close to the timeout is a figure for hack/bench-exec.sh, not for a loaded CI).
    *w.shim.exec_exit.lock().unwrap() = None;
    let t = Instant::now();
    let e = exec_sync(&w.containers, &id, &["sleep".into(), "60".into()], 1).unwrap_err();
    let took = t.elapsed();
    let (c, msg) = code(e);
    assert_eq!(c, Code::DeadlineExceeded, "{msg}");
    assert!(msg.contains("sleep") && msg.contains("killed"), "{msg}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(20),
        "ExecSync with a 1 s timeout took {took:?}"
    );
    // One call of the shim for each ExecSync; the timeout is the shim's to keep.
    let calls = w.shim.calls();
    let execs: Vec<&str> = calls
        .iter()
        .filter(|c| c.contains("/exec-"))
        .map(|s| s.split('/').next().unwrap())
        .collect();
    let one = format!("exec-sync {id}");
    assert_eq!(execs, [one.as_str(), one.as_str()]);
    // The exec ran the container's process with these arguments, without a terminal.
    let p = w.shim.processes.lock().unwrap()[0].clone();
    assert_eq!(p.args().clone().unwrap(), ["cat", "/etc/os-release"]);
    assert_eq!(p.terminal(), Some(false));
    assert_eq!(p.cwd(), &std::path::PathBuf::from("/"));
}

#[test]
fn exec_sync_through_a_shim_older_than_its_call_fails_clearly() {
    let w = World::new();
    let id = w.create("web").unwrap();
    w.containers.start(&id).unwrap();
    *w.shim.old_shim.lock().unwrap() = true;
    let (c, msg) = code(exec_sync(&w.containers, &id, &["true".into()], 1).unwrap_err());
    assert_eq!(c, Code::Unimplemented, "{msg}");
    assert!(
        msg.contains("older than criusd") && msg.contains("recreate the pod"),
        "{msg}"
    );
}

#[test]
fn exec_sync_refuses_what_it_cannot_run() {
    let w = World::new();
    let id = w.create("web").unwrap();
    let (c, msg) = code(exec_sync(&w.containers, &id, &["true".into()], 1).unwrap_err());
    assert_eq!(c, Code::FailedPrecondition, "not started yet: {msg}");
    w.containers.start(&id).unwrap();
    let (c, msg) = code(exec_sync(&w.containers, &id, &[], 1).unwrap_err());
    assert_eq!(
        (c, msg.as_str()),
        (Code::InvalidArgument, "ExecSync: cmd is empty")
    );
    let (c, _) = code(exec_sync(&w.containers, "nope", &["true".into()], 1).unwrap_err());
    assert_eq!(c, Code::NotFound);
}

#[test]
fn exec_sync_of_a_command_that_cannot_run_answers_with_a_shells_exit_code() {
    let w = World::new();
    let id = w.create("web").unwrap();
    w.containers.start(&id).unwrap();
    for (msg, code) in [
        (r#"exec: "nope": executable file not found in $PATH"#, 127),
        (r#"exec: "/etc/passwd": not executable (permission denied)"#, 126),
    ] {
        // As the shim words a runtime failure: its command line, the exit status, the runtime's message.
        let shim = format!("crius-runc exec --process p.json x: exit status 1: {msg}");
        *w.shim.exec_refusal.lock().unwrap() = Some(shim);
        let r = exec_sync(&w.containers, &id, &["nope".into()], 1).unwrap();
        assert_eq!(r.exit_code, code);
        assert_eq!(String::from_utf8_lossy(&r.stderr), format!("{msg}\n"));
    }
    // Any other refusal is the call's error.
    *w.shim.exec_refusal.lock().unwrap() = Some("setting uid 5: operation not permitted".into());
    let (c, msg) = code(exec_sync(&w.containers, &id, &["x".into()], 1).unwrap_err());
    assert_eq!(c, Code::Internal, "{msg}");
    assert!(msg.contains("operation not permitted"), "{msg}");
    assert_eq!(
        std::fs::read_dir(w.dir.path().join("bundles").join(&id))
            .unwrap()
            .filter(|e| e
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with("exec-"))
            .count(),
        0,
        "no exec directory left"
    );
}
