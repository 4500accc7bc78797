//! The CVE-2019-5736 and CVE-2024-21626 attacks against the shim's direct exec (issue 30), where no
//! `crius-runc exec` command runs: the shim starts crius-runc's hidden direct-exec action, which enters the
//! container itself. crius-runc only (`crius_only_*`).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use containerd_shim_protos::api;
use containerd_shim_protos::protobuf::Message;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use crius_privileged_tests::shim::{Cleanup, delete, shim, start, wait};
use crius_shim::client;

use super::*;

/// crius-runc's hidden action (`crius_oci::direct::ARG`).
const DIRECT: &str = "__crius-direct-exec";

/// Exec `exec_id` of `args` (the container's own process otherwise) through the shim, to its end.
fn shim_exec(c: &client::TaskClient, id: &str, b: &Bundle, exec_id: &str, args: &[&str]) {
    let mut p = b.config["process"].clone();
    p["args"] = json!(args);
    let req = api::ExecProcessRequest {
        id: id.into(),
        exec_id: exec_id.into(),
        spec: Some(Any {
            type_url: "types.containerd.io/opencontainers/runtime-spec/1/Process".into(),
            value: p.to_string().into_bytes(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    c.exec(client::ctx(10), &req).unwrap();
    let (id, exec_id) = (id.to_string(), exec_id.to_string());
    let started = c.start(
        client::ctx(20),
        &api::StartRequest {
            id: id.clone(),
            exec_id: exec_id.clone(),
            ..Default::default()
        },
    );
    if started.is_ok() {
        let _ = c.wait(
            client::ctx(30),
            &api::WaitRequest {
                id: id.clone(),
                exec_id: exec_id.clone(),
                ..Default::default()
            },
        );
    }
    let _ = c.delete(
        client::ctx(20),
        &api::DeleteRequest {
            id,
            exec_id,
            ..Default::default()
        },
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_a_direct_exec_cannot_be_overwritten_through_its_proc_exe() {
    let c = Copied::new();
    let rootfs = attack_rootfs(&c.rt.bin);
    let b = attack_bundle(rootfs.path(), &["/attacker", "--steal-exe"], &our_caps());
    b.write();
    let stdout = b.path().join("stdout");
    std::fs::write(&stdout, "").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let id = unique("cve5736-direct");
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![id.clone()],
        needle: owner.clone(),
    };
    let tc =
        client::connect(&client::start_shim(&shim(), "test", &owner, "", &id, b.path()).unwrap()).unwrap();
    // The copy (named crius-runc, so the shim's execs of it go the direct way) runs the container.
    let options = containerd_shim_protos::shim::oci::Options {
        binary_name: c.rt.bin.display().to_string(),
        ..Default::default()
    };
    let req = api::CreateTaskRequest {
        id: id.clone(),
        bundle: b.path().display().to_string(),
        stdout: stdout.display().to_string(),
        options: Some(Any {
            type_url: "containerd.runc.v1.Options".into(),
            value: options.write_to_bytes().unwrap(),
            ..Default::default()
        })
        .into(),
        ..Default::default()
    };
    tc.create(client::ctx(20), &req).unwrap();
    start(&tc, &id).unwrap();
    assert!(
        wait_output(&b, "watching", 10).contains("watching"),
        "{}",
        b.stdout()
    );
    // Each exec's entering process is in the container for a moment before its execve; the attacker races it.
    for n in 0..100 {
        shim_exec(
            &tc,
            &id,
            &b,
            &format!("e{n}"),
            &["/attacker", "--exit-after", "1"],
        );
        if b.stdout().contains("caught") {
            break;
        }
    }
    let out = wait_output(&b, "write: ", 40);
    assert!(
        out.contains("caught"),
        "the attacker never caught a direct exec:\n{out}"
    );
    assert_attack_failed(&out);
    c.assert_intact(&out);
    // The attacker ends after its attempt; a kill finds it gone or ends it.
    let _ = tc.kill(
        client::ctx(10),
        &api::KillRequest {
            id: id.clone(),
            signal: 9,
            ..Default::default()
        },
    );
    wait(&tc, &id);
    delete(&tc, &id).unwrap();
    let _ = tc.shutdown(client::ctx(10), &api::ShutdownRequest::default());
}

/// A running container (`sleep 1000`) named after `name`, and a host directory for the attacks to leak: the
/// directory, the bundle (kept while the container runs) and the container's id.
fn running_with_host_dir(rt: &Runtime, name: &str) -> (tempfile::TempDir, Bundle, String) {
    let host = tempfile::tempdir().unwrap();
    let s = Bundle::new(&["sleep", "1000"]);
    let running = unique(name);
    rt.create_started(&running, &s);
    (host, s, running)
}

/// `cmd`'s child gets `fd` as its descriptor 3 (where the direct-exec action and server take their socket).
fn socket_at_3(cmd: &mut Command, fd: i32) {
    // SAFETY: dup2 only, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(fd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Asks over `conn` for an exec in `running` whose cwd is `cwd` (writing into it); the answer.
fn ask_exec_in(conn: &mut UnixStream, rt: &Runtime, running: &str, cwd: &str) -> String {
    let req = json!({
        "root": rt.root(),
        "id": running,
        "process": {"args": ["sh", "-c", "pwd; ls; touch x"], "cwd": cwd, "user": {"uid": 0, "gid": 0},
                    "env": ["PATH=/bin"]},
    });
    conn.write_all(req.to_string().as_bytes()).unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    answer
}

/// Removes `running`; the host directory must be as empty as it was.
fn end_with_host_dir_untouched(rt: &Runtime, running: &str, host: &Path) {
    rt.ok(&["delete", "--force", running]);
    assert_eq!(
        std::fs::read_dir(host).unwrap().count(),
        0,
        "the exec wrote into the host dir"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_the_direct_exec_action_lets_no_leaked_descriptor_in() {
    let rt = Runtime::from_env();
    if !rt.is_crius {
        return;
    }
    let (host, _bundle, running) = running_with_host_dir(&rt, "cwd-direct");
    // The request's socket is descriptor 3; a host directory leaked at any other number must not serve as the
    // cwd, nor reach the process.
    for n in [4, 5, 7, 8, 9, 10] {
        let cwd = format!("/proc/self/fd/{n}");
        let (mut mine, theirs) = UnixStream::pair().unwrap();
        let mut cmd = Command::new(&rt.bin);
        cmd.arg(DIRECT).stdin(std::process::Stdio::null());
        socket_at_3(&mut cmd, theirs.as_raw_fd());
        let _f = leak(&mut cmd, n, host.path());
        let child = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        drop(theirs);
        let answer = ask_exec_in(&mut mine, &rt, &running, &cwd);
        let out = child.wait_with_output().unwrap();
        assert!(
            answer.starts_with("error ") && answer.contains("process.cwd"),
            "cwd {cwd} through a leaked host directory: {answer:?} {}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    end_with_host_dir_untouched(&rt, &running, host.path());
}

/// crius-runc's exec server (`crius_oci::direct::SERVER_ARG`), which the shim starts once.
const SERVER: &str = "__crius-direct-exec-server";

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_the_exec_server_lets_no_leaked_descriptor_in() {
    use std::os::fd::AsRawFd;
    let rt = Runtime::from_env();
    if !rt.is_crius {
        return;
    }
    let (host, _bundle, running) = running_with_host_dir(&rt, "cwd-server");
    // One server, started with host directories leaked at several numbers (its socket is 3).
    let (ctl, theirs) = nix::sys::socket::socketpair(
        nix::sys::socket::AddressFamily::Unix,
        nix::sys::socket::SockType::SeqPacket,
        None,
        nix::sys::socket::SockFlag::SOCK_CLOEXEC,
    )
    .unwrap();
    let mut cmd = Command::new(&rt.bin);
    cmd.arg(SERVER).stdin(std::process::Stdio::null());
    socket_at_3(&mut cmd, theirs.as_raw_fd());
    let leaked = [4, 5, 7, 9, 10];
    let _files: Vec<_> = leaked.iter().map(|&n| leak(&mut cmd, n, host.path())).collect();
    let mut server = cmd.spawn().unwrap();
    drop((cmd, theirs));
    for n in leaked {
        let cwd = format!("/proc/self/fd/{n}");
        let (mut mine, worker) = UnixStream::pair().unwrap();
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null").unwrap();
        let fds = [
            worker.as_raw_fd(),
            null.as_raw_fd(),
            null.as_raw_fd(),
            null.as_raw_fd(),
        ];
        nix::sys::socket::sendmsg::<()>(
            ctl.as_raw_fd(),
            &[std::io::IoSlice::new(b"exec")],
            &[nix::sys::socket::ControlMessage::ScmRights(&fds)],
            nix::sys::socket::MsgFlags::empty(),
            None,
        )
        .unwrap();
        drop(worker);
        let answer = ask_exec_in(&mut mine, &rt, &running, &cwd);
        assert!(
            answer.starts_with("error ") && answer.contains("process.cwd"),
            "cwd {cwd} through a host directory leaked into the server: {answer:?}"
        );
    }
    // Its peer gone, the server ends.
    drop(ctl);
    assert!(server.wait().unwrap().success());
    end_with_host_dir_untouched(&rt, &running, host.path());
}
