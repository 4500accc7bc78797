//! Seccomp user notification (`SCMP_ACT_NOTIFY`): the runtime hands the filter's listener to the seccomp agent
//! at `listenerPath`, for the container's init and for an exec'd process, and the agent answers the calls.
//! Runs against crius-runc, and against runc with `CRIUS_TEST_RUNTIME=runc`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex};

use crius_test_support::{Bundle, Runtime, unique};
use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
use serde_json::{Value, json};

/// `struct seccomp_notif`: a notified call.
#[repr(C)]
#[derive(Default)]
struct Notif {
    id: u64,
    pid: u32,
    flags: u32,
    nr: i32,
    arch: u32,
    ip: u64,
    args: [u64; 6],
}

/// `struct seccomp_notif_resp`: the agent's answer.
#[repr(C)]
struct Resp {
    id: u64,
    val: i64,
    error: i32,
    flags: u32,
}

/// `_IOWR('!', 0, struct seccomp_notif)` and `_IOWR('!', 1, struct seccomp_notif_resp)`.
const NOTIF_RECV: libc::c_ulong = 0xc050_2100;
const NOTIF_SEND: libc::c_ulong = 0xc018_2101;
const FLAG_CONTINUE: u32 = 1;

/// A seccomp agent: records each message it is sent, fails every `mkdir`/`mkdirat` with ENOMEDIUM and lets
/// every other notified call go on.
struct Agent {
    messages: Arc<Mutex<Vec<Value>>>,
}

impl Agent {
    fn start(path: &Path) -> Agent {
        let listener = UnixListener::bind(path).unwrap();
        let messages = Arc::new(Mutex::new(Vec::new()));
        let seen = messages.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (doc, fd) = receive(&conn);
                seen.lock().unwrap().push(doc);
                std::thread::spawn(move || answer(fd));
            }
        });
        Agent { messages }
    }
}

fn receive(conn: &UnixStream) -> (Value, OwnedFd) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .unwrap();
    let mut fd = None;
    for c in msg.cmsgs().unwrap() {
        if let ControlMessageOwned::ScmRights(fds) = c {
            // SAFETY: received just now; ours alone.
            fd = Some(unsafe { OwnedFd::from_raw_fd(fds[0]) });
        }
    }
    let n = msg.bytes;
    (
        serde_json::from_slice(&buf[..n]).unwrap(),
        fd.expect("a listener descriptor"),
    )
}

fn answer(fd: OwnedFd) {
    loop {
        let mut pfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: poll on one valid pollfd.
        if unsafe { libc::poll(&mut pfd, 1, 10_000) } <= 0 || pfd.revents & libc::POLLIN == 0 {
            return;
        }
        let mut n = Notif::default();
        // SAFETY: the ioctl fills the zeroed struct of the size its number encodes.
        if unsafe { libc::ioctl(fd.as_raw_fd(), NOTIF_RECV, &mut n) } != 0 {
            continue;
        }
        let refuse = n.nr == libc::SYS_mkdir as i32 || n.nr == libc::SYS_mkdirat as i32;
        let resp = Resp {
            id: n.id,
            val: 0,
            error: if refuse { -libc::ENOMEDIUM } else { 0 },
            flags: if refuse { 0 } else { FLAG_CONTINUE },
        };
        // SAFETY: as above, with the answer struct.
        unsafe { libc::ioctl(fd.as_raw_fd(), NOTIF_SEND, &resp) };
    }
}

fn notify_bundle(args: &[&str], sock: &Path, nnp: bool) -> Bundle {
    let mut b = Bundle::new(args);
    b.config["process"]["noNewPrivileges"] = json!(nnp);
    b.config["linux"]["seccomp"] = json!({"defaultAction": "SCMP_ACT_ALLOW", "listenerPath": sock,
        "listenerMetadata": "bar", "syscalls": [{"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_NOTIFY"}]});
    b
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_agent_answers_the_containers_calls_with_and_without_no_new_privs() {
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let agent = Agent::start(&sock);
    for nnp in [true, false] {
        let b = notify_bundle(&["sh", "-c", "mkdir /tmp/foo"], &sock, nnp);
        let path = b.write().to_str().unwrap().to_string();
        let id = unique("notify");
        let out = rt.run(&["run", "--bundle", &path, &id]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(0), "nnp {nnp}");
        assert!(
            err.contains("No medium found"),
            "nnp {nnp}: the agent's answer: {err}"
        );
        let doc = agent.messages.lock().unwrap().last().cloned().unwrap();
        assert_eq!(doc["fds"], json!(["seccompFd"]), "{doc}");
        assert_eq!(doc["metadata"], "bar", "{doc}");
        assert_eq!(doc["state"]["id"], id.as_str(), "{doc}");
        assert_eq!(doc["pid"], doc["state"]["pid"], "the init's own filter: {doc}");
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn an_exec_process_gets_its_own_listener_to_the_agent() {
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let agent = Agent::start(&sock);
    let b = notify_bundle(&["sleep", "1000"], &sock, true);
    let id = unique("notifyexec");
    rt.create_started(&id, &b);
    let out = rt.run(&["exec", &id, "sh", "-c", "mkdir /tmp/bar"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("No medium found"), "{err}");
    let messages = agent.messages.lock().unwrap().clone();
    assert_eq!(messages.len(), 2, "init's and the exec'd process's: {messages:?}");
    let init = rt.state(&id)["pid"].clone();
    assert_eq!(messages[1]["state"]["pid"], init);
    assert_ne!(messages[1]["pid"], init, "the exec'd process's own pid");
    rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn without_an_agent_or_with_notify_on_write_create_fails_naming_why() {
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    let b = notify_bundle(&["true"], &dir.path().join("nobody.sock"), false);
    let path = b.write().to_str().unwrap().to_string();
    let out = rt.run(&["run", "--bundle", &path, &unique("noagent")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("failed to connect with seccomp agent"),
        "{err}"
    );
    let mut b = notify_bundle(&["true"], &dir.path().join("nobody.sock"), false);
    b.config["linux"]["seccomp"]["syscalls"][0]["names"] = json!(["write"]);
    let path = b.write().to_str().unwrap().to_string();
    let out = rt.run(&["run", "--bundle", &path, &unique("notifywrite")]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("SCMP_ACT_NOTIFY cannot be used for the write syscall"),
        "{err}"
    );
    assert!(rt.ids().is_empty(), "{:?}", rt.ids());
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn notifying_the_calls_the_runtime_itself_makes_last_does_not_hang() {
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let _agent = Agent::start(&sock);
    for nnp in [true, false] {
        let mut b = notify_bundle(&["true"], &sock, nnp);
        b.config["linux"]["seccomp"]["syscalls"][0]["names"] =
            json!(["execve", "openat", "open", "read", "close"]);
        let path = b.write().to_str().unwrap().to_string();
        let out = rt.run(&["run", "--bundle", &path, &unique("notifyall")]);
        assert!(
            out.status.success(),
            "nnp {nnp}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
