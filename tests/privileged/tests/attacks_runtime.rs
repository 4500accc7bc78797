//! Attacks on the runtime itself, attempted for real: a container overwriting the runtime binary through
//! `/proc/<pid>/exe` (CVE-2019-5736), and descriptors leaked into the container or used as its working directory
//! to reach the host (CVE-2024-21626).
//!
//! The CVE-2019-5736 cases run a COPY of the runtime binary from a temp dir, so a defence that fails damages
//! only the copy; each asserts the copy is byte-identical afterwards (sha256) and the attacker's write failed.
//! The attack image is built here: the busybox rootfs, the static `crius-testprog` as `/attacker` (its
//! `--steal-exe` and `--overwrite-fd` modes), the runtime's own shared libraries and loader (so the runtime
//! binary can run inside the container), and `/attack.so`, a library compiled here with `cc` whose
//! constructor opens `/proc/self/exe` and hands the descriptor to `/attacker` — code of the image running in
//! a process that is still the runtime.
//! Runs against crius-runc, and against runc with `CRIUS_TEST_RUNTIME=runc` (`crius_only_*` tests excepted).

use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crius_test_support::{Bundle, Runtime, shared_rootfs, testprog_binary, unique};
use serde_json::json;

/// The privileged-container attacker's capabilities: every one this test (and so the runtime) holds.
fn our_caps() -> Vec<String> {
    let mut all: Vec<String> = caps::read(None, caps::CapSet::Bounding)
        .unwrap()
        .iter()
        .map(|c| c.to_string())
        .collect();
    all.sort();
    all
}

/// The constructor of `/attack.so`: runs before the runtime's main, in the runtime's process.
const ATTACK_SO: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void attack(void) {
    int fd = open("/proc/self/exe", O_RDONLY);
    char num[16];
    snprintf(num, sizeof num, "%d", fd);
    execl("/attacker", "/attacker", "--overwrite-fd", num, (char *)0);
    _exit(99);
}
"#;

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().expect("sha256sum");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The runtime under test, running from a copy in a temp dir; its sha256. Cleanup runs the original, which
/// still works if the attack broke the copy.
struct Copied {
    rt: Runtime,
    orig: PathBuf,
    _dir: tempfile::TempDir,
    sha: String,
}

impl Drop for Copied {
    fn drop(&mut self) {
        self.rt.bin = self.orig.clone();
    }
}

impl Copied {
    fn new() -> Copied {
        let mut rt = Runtime::from_env();
        let dir = tempfile::Builder::new()
            .prefix("crius-runtime-copy-")
            .tempdir()
            .unwrap();
        let copy = dir.path().join(rt.bin.file_name().unwrap());
        std::fs::copy(&rt.bin, &copy).unwrap();
        let orig = std::mem::replace(&mut rt.bin, copy);
        let sha = sha256(&rt.bin);
        assert_eq!(sha.len(), 64, "sha256 of {}", rt.bin.display());
        Copied {
            rt,
            orig,
            _dir: dir,
            sha,
        }
    }

    /// The copy is still what was copied.
    fn assert_intact(&self, out: &str) {
        assert_eq!(
            sha256(&self.rt.bin),
            self.sha,
            "the container overwrote the runtime binary {}; attacker said:\n{out}",
            self.rt.bin.display()
        );
    }
}

/// The attack image: a private copy of the busybox rootfs with the attacker, the runtime's libraries, the
/// constructor library, a symlink `/entry` to `/proc/self/exe` and a `#!/proc/self/exe` script.
fn attack_rootfs(runtime: &Path) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("crius-attack-rootfs-")
        .tempdir()
        .unwrap();
    let root = dir.path();
    let st = Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", shared_rootfs().display()))
        .arg(root)
        .status()
        .unwrap();
    assert!(st.success(), "copying the busybox rootfs");
    std::fs::copy(testprog_binary(), root.join("attacker")).unwrap();
    // The runtime's loader and libraries, so that exec'ing the runtime inside the container works.
    let ldd = Command::new("ldd").arg(runtime).output().unwrap();
    for line in String::from_utf8_lossy(&ldd.stdout).lines() {
        let lib = line
            .split_whitespace()
            .find(|w| w.starts_with('/'))
            .map(PathBuf::from);
        if let Some(lib) = lib {
            let dest = root.join(lib.strip_prefix("/").unwrap());
            std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
            std::fs::copy(&lib, &dest).unwrap_or_else(|e| panic!("copying {}: {e}", lib.display()));
        }
    }
    let src = root.join("attack.c");
    std::fs::write(&src, ATTACK_SO).unwrap();
    let cc = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(root.join("attack.so"))
        .arg(&src)
        .output()
        .expect("running cc (the attack library is compiled by the test)");
    assert!(cc.status.success(), "cc: {}", String::from_utf8_lossy(&cc.stderr));
    std::fs::write(root.join("attack.sh"), "#!/proc/self/exe\n").unwrap();
    std::os::unix::fs::symlink("/proc/self/exe", root.join("entry")).unwrap();
    let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(root.join("attack.sh"), mode).unwrap();
    dir
}

fn attack_bundle(rootfs: &Path, args: &[&str], caps: &[impl AsRef<str>]) -> Bundle {
    let mut b = Bundle::new(args);
    b.config["root"]["path"] = json!(rootfs);
    b.config["process"]["env"] = json!(["PATH=/bin", "LD_PRELOAD=/attack.so"]);
    for set in ["bounding", "effective", "permitted"] {
        b.config["process"]["capabilities"][set] =
            json!(caps.iter().map(AsRef::as_ref).collect::<Vec<&str>>());
    }
    b
}

/// Waits up to `secs` for the container's stdout to contain `want`; returns it.
fn wait_output(b: &Bundle, want: &str, secs: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let out = b.stdout();
        if out.contains(want) || Instant::now() > deadline {
            return out;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The attacker got hold of the runtime's executable and its write failed.
fn assert_attack_failed(out: &str) {
    eprintln!("attacker's report:\n{out}");
    assert!(
        out.contains("holding "),
        "the attack never got hold of the runtime's executable:\n{out}"
    );
    assert!(out.contains("write: "), "the attack did not finish:\n{out}");
    assert!(
        !out.contains("write: ok"),
        "the attacker's write through the runtime's executable succeeded:\n{out}"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn an_entrypoint_that_execs_the_runtime_cannot_overwrite_it() {
    let c = Copied::new();
    let rootfs = attack_rootfs(&c.rt.bin);
    // `/proc/self/exe` as the entrypoint, a symlink to it, and a script whose interpreter it is: each runs the
    // runtime's binary inside the container, where /attack.so's constructor takes over.
    for entry in ["/proc/self/exe", "/entry", "/attack.sh"] {
        let b = attack_bundle(rootfs.path(), &[entry], crius_test_support::DEFAULT_CAPS);
        let id = unique("cve5736-entry");
        c.rt.create(&id, &b, &[]);
        c.rt.ok(&["start", &id]);
        // The attacker waits until no process runs the binary any more (ETXTBSY), then writes.
        let out = wait_output(&b, "write: ", 40);
        assert_attack_failed(&out);
        c.assert_intact(&out);
        c.rt.wait_status(&id, "stopped");
        c.rt.ok(&["delete", &id]);
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_runtime_joining_with_exec_cannot_be_overwritten_through_its_proc_exe() {
    let c = Copied::new();
    let rootfs = attack_rootfs(&c.rt.bin);
    // Privileged (CAP_SYS_PTRACE): being non-dumpable alone would not keep this attacker out.
    let b = attack_bundle(rootfs.path(), &["/attacker", "--steal-exe"], &our_caps());
    let id = unique("cve5736-exec");
    c.rt.create_started(&id, &b);
    assert!(
        wait_output(&b, "watching", 10).contains("watching"),
        "{}",
        b.stderr()
    );
    // Each exec runs the runtime inside the container for a moment before its execve; the attacker races it.
    for _ in 0..100 {
        let _ = c.rt.run(&["exec", &id, "/attacker", "--exit-after", "1"]);
        if b.stdout().contains("caught") {
            break;
        }
    }
    let out = wait_output(&b, "write: ", 40);
    assert!(
        out.contains("caught"),
        "the attacker never caught an exec'ing runtime:\n{out}"
    );
    assert_attack_failed(&out);
    c.assert_intact(&out);
    c.rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_container_sharing_the_pid_namespace_cannot_overwrite_the_runtime_through_a_new_init() {
    let c = Copied::new();
    let rootfs = attack_rootfs(&c.rt.bin);
    let a = attack_bundle(rootfs.path(), &["/attacker", "--steal-exe"], &our_caps());
    let a_id = unique("cve5736-pod");
    c.rt.create_started(&a_id, &a);
    assert!(
        wait_output(&a, "watching", 10).contains("watching"),
        "{}",
        a.stderr()
    );
    let pid = c.rt.state(&a_id)["pid"].as_i64().unwrap();
    // A second container of the pod, created into the attacker's pid namespace: its init is the runtime until
    // `start`, and stays so while it waits.
    let mut b = Bundle::new(&["true"]);
    for ns in b.config["linux"]["namespaces"].as_array_mut().unwrap() {
        if ns["type"] == "pid" {
            ns["path"] = json!(format!("/proc/{pid}/ns/pid"));
        }
    }
    let b_id = unique("cve5736-next");
    c.rt.create(&b_id, &b, &[]);
    let caught = wait_output(&a, "holding", 20);
    let _ = c.rt.run(&["delete", "--force", &b_id]);
    let out = wait_output(&a, "write: ", 40);
    assert!(
        caught.contains("caught"),
        "the attacker never caught the new init:\n{out}"
    );
    assert_attack_failed(&out);
    c.assert_intact(&out);
    c.rt.ok(&["delete", "--force", &a_id]);
}

/// Lets `cmd` inherit, without close-on-exec, `path` opened as descriptor `fd` (a leak from its caller).
fn leak(cmd: &mut Command, fd: i32, path: &Path) -> std::fs::File {
    let f = std::fs::File::open(path).unwrap();
    let raw = f.as_raw_fd();
    // SAFETY: dup2 and fcntl only, both async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if raw != fd && libc::dup2(raw, fd) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            libc::fcntl(fd, libc::F_SETFD, 0);
            Ok(())
        });
    }
    f
}

/// The descriptor numbers `ls -l /proc/self/fd` listed, without the one ls read the directory through: the
/// only one without a link target (ls closed it before it read the links), and the highest.
fn listed_fds(out: &str) -> Vec<i32> {
    let mut fds: Vec<(i32, bool)> = out
        .lines()
        .filter_map(|l| {
            let (entry, link) = l.split_once(" -> ").map_or((l, false), |(e, _)| (e, true));
            let n = entry.split_whitespace().nth(8)?.parse().ok()?;
            Some((n, link))
        })
        .collect();
    fds.sort();
    let own: Vec<i32> = fds.iter().filter(|(_, link)| !link).map(|(n, _)| *n).collect();
    assert_eq!(
        own.len(),
        1,
        "exactly one descriptor (ls's own) has no target:\n{out}"
    );
    let rest: Vec<i32> = fds.iter().filter(|(_, link)| *link).map(|(n, _)| *n).collect();
    assert!(
        rest.iter().all(|n| *n < own[0]),
        "descriptors above ls's own {} reached the process:\n{out}",
        own[0]
    );
    rest
}

fn leaky(rt: &Runtime, args: &[&str]) -> std::process::Output {
    let mut cmd = rt.command(args);
    let _a = leak(&mut cmd, 7, Path::new("/"));
    let _b = leak(&mut cmd, 9, Path::new("/etc/hostname"));
    cmd.output().unwrap()
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn only_stdio_reaches_a_container_process_or_an_exec() {
    let rt = Runtime::from_env();
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    // run, with a host directory (7) and a host file (9) leaked into the runtime.
    let b = Bundle::new(&["ls", "-l", "/proc/self/fd"]);
    let dir = b.write().to_str().unwrap().to_string();
    let out = leaky(&rt, &["run", "--bundle", &dir, &unique("fds-run")]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(listed_fds(&text(&out.stdout)), [0, 1, 2], "{}", text(&out.stdout));

    // create + start, each leaking.
    let id = unique("fds-create");
    let stdout = std::fs::File::create(b.path().join("stdout")).unwrap();
    let mut cmd = rt.command(&["create", "--bundle", &dir, &id]);
    let _a = leak(&mut cmd, 7, Path::new("/"));
    let st = cmd.stdout(stdout).status().unwrap();
    assert!(st.success());
    let st = leaky(&rt, &["start", &id]);
    assert!(st.status.success(), "{}", text(&st.stderr));
    rt.wait_status(&id, "stopped");
    assert_eq!(listed_fds(&b.stdout()), [0, 1, 2], "{}", b.stdout());
    rt.ok(&["delete", &id]);

    // exec into a running container.
    let s = Bundle::new(&["sleep", "1000"]);
    let id = unique("fds-exec");
    rt.create_started(&id, &s);
    let out = leaky(&rt, &["exec", &id, "ls", "-l", "/proc/self/fd"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(listed_fds(&text(&out.stdout)), [0, 1, 2], "{}", text(&out.stdout));
    rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn preserve_fds_passes_exactly_those() {
    let rt = Runtime::from_env();
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    let b = Bundle::new(&["ls", "-l", "/proc/self/fd"]);
    let dir = b.write().to_str().unwrap().to_string();
    let mut cmd = rt.command(&[
        "run",
        "--preserve-fds",
        "1",
        "--bundle",
        &dir,
        &unique("fds-keep"),
    ]);
    let _keep = leak(&mut cmd, 3, Path::new("/etc/hostname"));
    let _drop = leak(&mut cmd, 4, Path::new("/"));
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        listed_fds(&text(&out.stdout)),
        [0, 1, 2, 3],
        "{}",
        text(&out.stdout)
    );
}

/// The runtime refuses `cwd` when host directory descriptors are leaked (7) or deliberately preserved (3).
fn assert_cwd_refused(rt: &Runtime, out: &std::process::Output, cwd: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "cwd {cwd} through a host directory descriptor was accepted: {}{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    if rt.is_crius {
        assert!(
            err.contains("process.cwd"),
            "the error must name process.cwd: {err}"
        );
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_cwd_through_a_leaked_descriptor_fails_create_and_exec() {
    let rt = Runtime::from_env();
    let host = tempfile::tempdir().unwrap();
    let s = Bundle::new(&["sleep", "1000"]);
    let running = unique("cwd-target");
    rt.create_started(&running, &s);
    for n in [3, 4, 5, 7, 8, 9, 10] {
        let cwd = format!("/proc/self/fd/{n}");
        let mut b = Bundle::new(&["sh", "-c", "pwd; ls"]);
        b.config["process"]["cwd"] = json!(cwd);
        let dir = b.write().to_str().unwrap().to_string();
        let mut cmd = rt.command(&["run", "--bundle", &dir, &unique("cwd-run")]);
        let _f = leak(&mut cmd, n, host.path());
        assert_cwd_refused(&rt, &cmd.output().unwrap(), &cwd);

        let mut cmd = rt.command(&["exec", "--cwd", &cwd, &running, "sh", "-c", "pwd; ls"]);
        let _f = leak(&mut cmd, n, host.path());
        assert_cwd_refused(&rt, &cmd.output().unwrap(), &cwd);
    }
    // Preserved on purpose, the descriptor is open in the container: the check after chdir must refuse it.
    let mut b = Bundle::new(&["sh", "-c", "pwd; ls"]);
    b.config["process"]["cwd"] = json!("/proc/self/fd/3");
    let dir = b.write().to_str().unwrap().to_string();
    let mut cmd = rt.command(&[
        "run",
        "--preserve-fds",
        "1",
        "--bundle",
        &dir,
        &unique("cwd-keep"),
    ]);
    let _f = leak(&mut cmd, 3, host.path());
    assert_cwd_refused(&rt, &cmd.output().unwrap(), "/proc/self/fd/3 (preserved)");
    let mut cmd = rt.command(&[
        "exec",
        "--preserve-fds",
        "1",
        "--cwd",
        "/proc/self/fd/3",
        &running,
        "pwd",
    ]);
    let _f = leak(&mut cmd, 3, host.path());
    assert_cwd_refused(&rt, &cmd.output().unwrap(), "/proc/self/fd/3 (preserved, exec)");
    rt.ok(&["delete", "--force", &running]);
    assert_eq!(
        std::fs::read_dir(host.path()).unwrap().count(),
        0,
        "the container wrote into the host dir"
    );
}

/// The close-on-exec state of every descriptor above stderr of process `pid` (from /proc/<pid>/fdinfo).
fn inheritable_fds(pid: i32) -> Vec<String> {
    let mut bad = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .unwrap()
        .flatten()
    {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.parse::<i32>().is_ok_and(|n| n <= 2) {
            continue;
        }
        let Ok(info) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or(0);
        if flags & libc::O_CLOEXEC as u32 == 0 {
            let target = std::fs::read_link(format!("/proc/{pid}/fd/{name}")).unwrap_or_default();
            bad.push(format!("{name} -> {}", target.display()));
        }
    }
    bad
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_the_shims_pty_masters_and_sockets_are_close_on_exec() {
    use crius_privileged_tests::shim::{Cleanup, delete, shim, start};
    use crius_shim::client;
    use std::os::unix::fs::OpenOptionsExt;
    crius_test_support::require_root();
    let dir = tempfile::tempdir().unwrap();
    let owner = dir.path().join("owner.sock").display().to_string();
    let id = unique("shim-fds");
    let _cleanup = Cleanup {
        namespace: "test",
        ids: vec![id.clone()],
        needle: owner.clone(),
    };
    // A task with a terminal: the shim holds its pty master, as well as its sockets and pipes.
    let mut b = Bundle::new(&["sleep", "1000"]);
    b.config["process"]["terminal"] = json!(true);
    b.write();
    let fifo = dir.path().join("stdout");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let _reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    let addr = client::start_shim(&shim(), "test", &owner, "", &id, b.path()).unwrap();
    let c = client::connect(&addr).unwrap();
    let req = containerd_shim_protos::api::CreateTaskRequest {
        id: id.clone(),
        bundle: b.path().display().to_string(),
        terminal: true,
        stdout: fifo.display().to_string(),
        ..Default::default()
    };
    c.create(client::ctx(20), &req).unwrap();
    start(&c, &id).unwrap();
    let shims = crius_test_support::shims::shim_pids(&owner);
    assert_eq!(shims.len(), 1, "one shim: {shims:?}");
    // The shim finishes setting the task up after Start returns: look until its descriptors settle.
    let deadline = Instant::now() + Duration::from_secs(5);
    let bad = loop {
        let bad = inheritable_fds(shims[0]);
        if bad.is_empty() || Instant::now() > deadline {
            break bad;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        bad.is_empty(),
        "the shim's descriptors a runtime it runs would inherit: {bad:?}"
    );
    c.kill(
        client::ctx(10),
        &containerd_shim_protos::api::KillRequest {
            id: id.clone(),
            signal: 9,
            ..Default::default()
        },
    )
    .unwrap();
    let _ = c.wait(
        client::ctx(20),
        &containerd_shim_protos::api::WaitRequest {
            id: id.clone(),
            ..Default::default()
        },
    );
    delete(&c, &id).unwrap();
    let _ = c.shutdown(
        client::ctx(10),
        &containerd_shim_protos::api::ShutdownRequest::default(),
    );
}

#[path = "attacks_runtime/modes.rs"]
mod modes;

#[path = "attacks_runtime/direct.rs"]
mod direct;
