//! Attacks of the runc CVE-2025-31133 / 52565 / 52881 class: a container that shares its /dev (or races mounts)
//! with a sibling swaps what the runtime binds or writes for something of its choosing, between the runtime
//! making it and using it.
//! - masking: /dev/null swapped for a symlink to `/proc/sys/kernel/core_pattern`, so a "mask" would bind that
//!   file, writable, over `/proc/kcore` and friends;
//! - the terminal: `/dev/ptmx` and `/dev/console` swapped for symlinks, so the runtime would hand another file
//!   to the caller as the pty master, or bind one onto /dev/console;
//! - sysctls: a file mounted over `/proc/sys/...`, so the write goes to it instead of the kernel.
//!
//! The swap happens in a createContainer hook: it runs in the container's mount namespace after its mounts are
//! made and before pivot_root, masks and sysctls, the window a racing sibling has; one test races a real
//! sibling container instead. Nothing here writes to /proc/sys: the sysctl case writes a file of the test's
//! own, and the others prove the attack failed by reading the container's mountinfo.
//! crius-runc only (`crius_only_*`): Debian's runc 1.1.5 predates the fixes.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::Duration;

use crius_test_support::{Bundle, Runtime, unique};
use serde_json::{Value, json};

/// A bundle whose /dev is `dev`, a host directory (a volume a sibling could share), whose createContainer hook
/// runs `script` with `/bin/sh` of the host, and whose process runs `args`.
fn bundle_with_dev(dev: &Path, script: &str, args: &[&str]) -> Bundle {
    let mut b = Bundle::new(args);
    let mounts = b.config["mounts"].as_array_mut().unwrap();
    for m in mounts.iter_mut() {
        if m["destination"] == "/dev" {
            *m = json!({"destination": "/dev", "type": "bind", "source": dev, "options": ["rbind", "rw"]});
        }
    }
    b.config["hooks"] = json!({"createContainer": [{"path": "/bin/sh", "args": ["sh", "-c", script]}]});
    b
}

/// `create` through the runtime's CLI, its stdout and stderr to files of the bundle; whether it succeeded.
fn try_create(rt: &Runtime, id: &str, b: &Bundle, extra: &[&str]) -> bool {
    let dir = b.write();
    let out = std::fs::File::create(dir.join("stdout")).unwrap();
    let err = std::fs::File::create(dir.join("stderr")).unwrap();
    let mut args = vec!["create", "--bundle", dir.to_str().unwrap()];
    args.extend_from_slice(extra);
    args.push(id);
    rt.command(&args)
        .stdout(out)
        .stderr(err)
        .status()
        .unwrap()
        .success()
}

/// Waits (up to 10 s) for `path` to be written by the container; its text.
fn wait_file(path: &Path) -> String {
    for _ in 0..200 {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{} was not written", path.display());
}

/// The mountinfo lines (mount root and point) that show `core_pattern` anywhere.
fn core_pattern_mounts(mountinfo: &str) -> Vec<&str> {
    mountinfo.lines().filter(|l| l.contains("core_pattern")).collect()
}

/// The container's /dev/null is swapped for a symlink to core_pattern after the runtime made it: before the
/// fix the masks bound `/proc/sys/kernel/core_pattern` read-write over /proc/kcore, /proc/keys, ... (the
/// attack review saw it on /proc/keys). Now the runtime refuses to mask with anything but the null device.
#[test]
#[ignore]
fn crius_only_a_swapped_dev_null_never_becomes_a_mask() {
    crius_test_support::require_root();
    let rt = Runtime::from_env();
    let dev = tempfile::tempdir().unwrap();
    let swap = format!(
        "/bin/rm -f {d}/null && /bin/ln -s /proc/sys/kernel/core_pattern {d}/null",
        d = dev.path().display()
    );
    let b = bundle_with_dev(
        dev.path(),
        &swap,
        &[
            "sh",
            "-c",
            "cat /proc/self/mountinfo > /dev/out; echo >> /dev/out",
        ],
    );
    let id = unique("mask-swap");
    let created = try_create(&rt, &id, &b, &[]);
    if created {
        rt.ok(&["start", &id]);
        let info = wait_file(&dev.path().join("out"));
        let bad = core_pattern_mounts(&info);
        assert!(bad.is_empty(), "core_pattern mounted in the container: {bad:?}");
    } else {
        let e = b.stderr();
        assert!(
            e.contains("/dev/null"),
            "create failed without naming /dev/null: {e}"
        );
    }
    // crius-runc refuses: the swapped /dev/null is not followed.
    assert!(!created, "the container ran with a swapped /dev/null");
}

/// The attack as the review ran it: container A loops `rm null; ln -s /proc/sys/kernel/core_pattern null` in a
/// volume that container B has as its /dev, while B is created again and again. Every B either starts with no
/// core_pattern mounted anywhere or fails naming /dev/null.
#[test]
#[ignore]
fn crius_only_a_sibling_racing_dev_null_never_gets_core_pattern_mounted() {
    crius_test_support::require_root();
    let rt = Runtime::from_env();
    let shared = tempfile::tempdir().unwrap();
    let mut a = Bundle::new(&[
        "sh",
        "-c",
        "cd /shared; while :; do rm -f null; ln -s /proc/sys/kernel/core_pattern null; done",
    ]);
    a.config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"destination": "/shared", "type": "bind", "source": shared.path(), "options": ["rbind", "rw"]}));
    let a_id = unique("racer");
    rt.create_started(&a_id, &a);
    let (mut started, mut refused) = (0, 0);
    for i in 0..40 {
        let out = shared.path().join(format!("out{i}"));
        let cmd = format!("cat /proc/self/mountinfo > /dev/out{i}; echo >> /dev/out{i}");
        let mut b = bundle_with_dev(shared.path(), ":", &["sh", "-c", &cmd]);
        b.config.as_object_mut().unwrap().remove("hooks");
        let id = unique("victim");
        if try_create(&rt, &id, &b, &[]) {
            rt.ok(&["start", &id]);
            let info = wait_file(&out);
            let bad = core_pattern_mounts(&info);
            assert!(
                bad.is_empty(),
                "run {i}: core_pattern mounted in the container: {bad:?}"
            );
            started += 1;
        } else {
            let e = b.stderr();
            assert!(
                e.contains("/dev/null"),
                "run {i}: create failed without naming /dev/null: {e}"
            );
            refused += 1;
        }
        let _ = rt.run(&["delete", "--force", &id]);
    }
    eprintln!("40 creates against a racing sibling: {started} started clean, {refused} refused");
}

/// A console socket in a temp dir, its connection accepted in a thread that tells what the runtime sent: None
/// (nothing, or no fd), or whether the fd is a pty master, and what it is.
struct Peer {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    thread: std::thread::JoinHandle<Option<(bool, String, std::os::fd::OwnedFd)>>,
}

fn console_peer() -> Peer {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::{FromRawFd, OwnedFd};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("console.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    let thread = std::thread::spawn(move || {
        let (conn, _) = listener.accept().ok()?;
        conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = [0u8; 4096];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let msg = recvmsg::<()>(conn.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()).ok()?;
        for c in msg.cmsgs().ok()? {
            if let ControlMessageOwned::ScmRights(fds) = c {
                // SAFETY: just received; owned by nobody else.
                let fd = unsafe { OwnedFd::from_raw_fd(fds[0]) };
                let link = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
                    .map(|p| p.display().to_string())
                    .unwrap_or_default();
                let mut n: libc::c_uint = 0;
                // SAFETY: TIOCGPTN into a c_uint; fails on anything but a pty master.
                let master = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGPTN, &mut n) } == 0;
                // Kept open, as a shim keeps the master: a closed one hangs the container's terminal up.
                return Some((master, link, fd));
            }
        }
        None
    });
    Peer {
        _dir: dir,
        path,
        thread,
    }
}

/// /dev/ptmx swapped for a symlink to core_pattern: before the fix the runtime opened it by path and sent the
/// caller (the shim, on the host) a descriptor of `/proc/sys/kernel/core_pattern` as the pty master, writable.
/// Now only a pty master of a devpts is ever sent: the swap fails create, naming /dev/ptmx.
#[test]
#[ignore]
fn crius_only_a_swapped_ptmx_never_reaches_the_console_socket() {
    crius_test_support::require_root();
    let rt = Runtime::from_env();
    let dev = tempfile::tempdir().unwrap();
    let swap = format!(
        "/bin/rm -f {d}/ptmx && /bin/ln -s /proc/sys/kernel/core_pattern {d}/ptmx",
        d = dev.path().display()
    );
    let mut b = bundle_with_dev(dev.path(), &swap, &["sh", "-c", "sleep 1"]);
    b.config["process"]["terminal"] = Value::Bool(true);
    let peer = console_peer();
    let id = unique("ptmx-swap");
    let created = try_create(&rt, &id, &b, &["--console-socket", peer.path.to_str().unwrap()]);
    let sent = peer.thread.join().unwrap().map(|(m, l, _)| (m, l));
    if let Some((master, link)) = &sent {
        assert!(
            *master,
            "the console socket got a descriptor that is no pty master: {link}"
        );
    }
    assert!(
        !created,
        "the container ran with a swapped /dev/ptmx (sent: {sent:?})"
    );
    let e = b.stderr();
    assert!(
        e.contains("/dev/ptmx"),
        "create failed without naming /dev/ptmx: {e}"
    );
}

/// /dev/console planted as a symlink to core_pattern: the terminal's bind must land on a fresh /dev/console and
/// nowhere else. The container starts, its /dev/console is the pty (a devpts mount), and core_pattern is
/// mounted nowhere.
#[test]
#[ignore]
fn crius_only_dev_console_is_the_pty_whatever_was_planted_there() {
    crius_test_support::require_root();
    let rt = Runtime::from_env();
    let dev = tempfile::tempdir().unwrap();
    let plant = format!(
        "/bin/rm -f {d}/console && /bin/ln -s /proc/sys/kernel/core_pattern {d}/console",
        d = dev.path().display()
    );
    let mut b = bundle_with_dev(
        dev.path(),
        &plant,
        &[
            "sh",
            "-c",
            "cat /proc/self/mountinfo > /dev/out; echo >> /dev/out; sleep 2",
        ],
    );
    b.config["process"]["terminal"] = Value::Bool(true);
    let peer = console_peer();
    let id = unique("console-plant");
    assert!(
        try_create(&rt, &id, &b, &["--console-socket", peer.path.to_str().unwrap()]),
        "create: {}",
        b.stderr()
    );
    let (master, link, _pty) = peer
        .thread
        .join()
        .unwrap()
        .expect("a pty master on the console socket");
    assert!(master, "the console socket got {link}, no pty master");
    rt.ok(&["start", &id]);
    let info = wait_file(&dev.path().join("out"));
    assert!(
        core_pattern_mounts(&info).is_empty(),
        "core_pattern mounted: {info}"
    );
    let console: Vec<&str> = info
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some("/dev/console"))
        .collect();
    assert_eq!(console.len(), 1, "one mount on /dev/console: {info}");
    assert!(
        console[0].contains(" - devpts "),
        "/dev/console is no devpts file: {}",
        console[0]
    );
    let meta = std::fs::symlink_metadata(dev.path().join("console")).unwrap();
    assert!(
        meta.file_type().is_file(),
        "/dev/console is a regular mount point, not the planted symlink"
    );
}

/// A file mounted over the sysctl's place in /proc/sys (as a racing mount would put one there): before the fix
/// the runtime wrote the sysctl's value into that file (here a file of the test's own; in the attack, any file
/// the sibling binds there). Now the write refuses to cross a mount and create fails naming the sysctl; the
/// file is untouched.
#[test]
#[ignore]
fn crius_only_a_sysctl_write_is_never_redirected_by_a_mount() {
    crius_test_support::require_root();
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    let decoy = dir.path().join("decoy");
    std::fs::write(&decoy, "untouched\n").unwrap();
    let mut b = Bundle::new(&["true"]);
    let rootfs = b.config["root"]["path"].as_str().unwrap().to_string();
    let target = format!("{rootfs}/proc/sys/net/ipv4/ip_unprivileged_port_start");
    b.config["hooks"] =
        json!({"createContainer": [{"path": "/bin/mount", "args": ["mount", "--bind", decoy, target]}]});
    b.config["linux"]["sysctl"] = json!({"net.ipv4.ip_unprivileged_port_start": "1000"});
    let id = unique("sysctl-redirect");
    let created = try_create(&rt, &id, &b, &[]);
    assert_eq!(
        std::fs::read_to_string(&decoy).unwrap(),
        "untouched\n",
        "the sysctl went to the decoy"
    );
    assert!(
        !created,
        "the container ran though its sysctl could not be written to procfs"
    );
    let e = b.stderr();
    assert!(
        e.contains("net.ipv4.ip_unprivileged_port_start") && e.contains("crosses a mount"),
        "create failed without naming the sysctl and the mount: {e}"
    );
}

/// A plain sysctl still works through procfs (the defence does not break the feature).
#[test]
#[ignore]
fn namespaced_sysctls_are_still_written() {
    crius_test_support::require_root();
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    let mut b = Bundle::new(&["true"]);
    b.config["mounts"].as_array_mut().unwrap().push(
        json!({"destination": "/out", "type": "bind", "source": dir.path(), "options": ["rbind", "rw"]}),
    );
    b.config["root"]["readonly"] = Value::Bool(true);
    b.args(&[
        "sh",
        "-c",
        "cat /proc/sys/net/ipv4/ip_unprivileged_port_start > /out/v",
    ]);
    b.config["linux"]["sysctl"] = json!({"net.ipv4.ip_unprivileged_port_start": "1000"});
    let id = unique("sysctl-ok");
    rt.create_started(&id, &b);
    assert_eq!(wait_file(&dir.path().join("v")).trim(), "1000");
}
