//! Waiting without threads, stdin through FIFOs, a runtime named in the options, bad input and terminals.

use super::*;

fn threads_of(pid: i32) -> usize {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:").and_then(|n| n.trim().parse().ok()))
        .unwrap_or(0)
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn pending_waits_hold_no_thread_and_end_with_their_process_or_its_delete() {
    let mut p = Pod::without_events();
    let ids: Vec<String> = (1..6).map(|i| p.id(&format!("w{i}"))).collect();
    // A bundle each: a bundle's config names the container's cgroup.
    let sleepers: Vec<Bundle> = (0..5).map(|_| p.bundle(&["sleep", "1000"])).collect();
    let addr = p.start_shim(&ids[0], &sleepers[0]);
    let shim_pid = shim_pids(&p.owner)[0];
    let c = client::connect(&addr).unwrap();
    // ids[0..4] run; ids[4] is created and never started.
    for (id, b) in ids.iter().zip(&sleepers) {
        create(&c, id, b, "").unwrap();
    }
    for id in &ids[..4] {
        start(&c, id).unwrap();
    }
    // An exec of ids[0] that is added and never started.
    let exec = api::ExecProcessRequest {
        id: ids[0].clone(),
        exec_id: "never".into(),
        ..Default::default()
    };
    c.exec(client::ctx(10), &exec).unwrap();
    // A Wait for each, all pending at once on one connection.
    let waits: Vec<_> = ids
        .iter()
        .map(|id| (id.clone(), String::new()))
        .chain([(ids[0].clone(), "never".to_string())])
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
    // Six Waits pending, five containers: the shim is down to its one loop thread once its workers idle out.
    wait_until("the shim to idle on one thread", || threads_of(shim_pid) == 1);
    assert_eq!(state(&c, &ids[0]).unwrap().status, api::Status::RUNNING.into());

    // Deleting the never-started container kills what the runtime made of it; deleting the never-started exec
    // answers its Wait with NOT_FOUND.
    delete(&c, &ids[4]).unwrap();
    let del = api::DeleteRequest {
        id: ids[0].clone(),
        exec_id: "never".into(),
        ..Default::default()
    };
    c.delete(client::ctx(10), &del).unwrap();
    for id in &ids[..4] {
        kill(&c, id, 9);
    }
    let results: Vec<_> = waits.into_iter().map(|t| t.join().unwrap()).collect();
    for r in &results[..5] {
        assert_eq!(r.as_ref().unwrap().exit_status, 137);
    }
    let (code_, msg) = code(results.into_iter().nth(5).expect("six waits"));
    assert_eq!(code_, Code::NOT_FOUND, "{msg}");
    assert!(msg.contains("deleted"), "{msg}");

    for id in &ids[..4] {
        delete(&c, id).unwrap();
    }
    wait_until("the shim to exit after its last container", || !alive(shim_pid));
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn stdin_flows_through_fifos_and_close_io_ends_it() {
    let mut p = Pod::without_events();
    let id = p.id("w0");
    let cat = p.bundle(&["cat"]);
    let c = client::connect(&p.start_shim(&id, &cat)).unwrap();
    // cat between two FIFOs.
    let (fin, fout) = (p.dir.path().join("in"), p.dir.path().join("out"));
    for f in [&fin, &fout] {
        nix::unistd::mkfifo(f, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }
    let req = api::CreateTaskRequest {
        id: id.clone(),
        bundle: cat.path().display().to_string(),
        stdin: fin.display().to_string(),
        stdout: fout.display().to_string(),
        ..Default::default()
    };
    c.create(client::ctx(20), &req).unwrap();
    // The output's read end is opened here, before Start: opened by the reader thread, on a loaded machine it
    // could come after cat exited and the shim let go of the FIFO, and then wait for a writer forever. Opened
    // without blocking, then made blocking again, so the read ends when the shim closes its end.
    let out = {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fout)
            .unwrap();
        let flags =
            nix::fcntl::OFlag::from_bits_truncate(nix::fcntl::fcntl(&f, nix::fcntl::F_GETFL).unwrap());
        nix::fcntl::fcntl(&f, nix::fcntl::F_SETFL(flags - nix::fcntl::OFlag::O_NONBLOCK)).unwrap();
        f
    };
    start(&c, &id).unwrap();
    let reader = std::thread::spawn(move || std::io::read_to_string(out).unwrap());
    {
        use std::io::Write;
        let mut w = std::fs::OpenOptions::new().write(true).open(&fin).unwrap();
        w.write_all(b"ping\n").unwrap();
    }
    // CloseIO: cat sees EOF on stdin and exits 0; its output, already through, ends with it.
    c.close_io(
        client::ctx(10),
        &api::CloseIORequest {
            id: id.clone(),
            stdin: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(wait(&c, &id), 0, "cat after CloseIO");
    assert_eq!(reader.join().unwrap(), "ping\n");
    delete(&c, &id).unwrap();
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
