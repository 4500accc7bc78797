//! Test helpers shared by crius's suites: a busybox root filesystem, OCI bundles with a known config, and a
//! driver for the runtime under test — crius-runc by default, or any runc-compatible binary named by
//! `CRIUS_TEST_RUNTIME` (`runc`, `crun`, a path), so the same tests check crius and check themselves.

pub mod cni;
pub mod containerd;
pub mod cosign;
pub mod daemon;
pub mod image;
pub mod proxy;
pub mod registry;
pub mod shims;
pub mod token;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

/// Sends SIGTERM to `child` and waits up to `within` for it to exit; its status, or None if it is still running
/// (the caller decides between SIGKILL and a failure).
pub fn terminate(
    child: &mut std::process::Child,
    within: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Fails the test loudly unless it runs as root: privileged tests never pass without running.
pub fn require_root() {
    assert_eq!(
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() },
        0,
        "this test needs root; run it through hack/test.sh"
    );
}

/// Where the static busybox comes from (Debian's busybox-static), overridable with `CRIUS_BUSYBOX`.
pub fn busybox_path() -> PathBuf {
    std::env::var_os("CRIUS_BUSYBOX")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/bin/busybox".into())
}

/// Builds a busybox root filesystem in `dir`: `/bin/busybox`, every applet as a hard link, and the usual
/// mount points. Fails loudly if busybox is missing or not static.
pub fn build_busybox_rootfs(dir: &Path) -> std::io::Result<()> {
    let src = busybox_path();
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin)?;
    std::fs::copy(&src, bin.join("busybox")).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("copying {} (install busybox-static): {e}", src.display()),
        )
    })?;
    // Ask the source binary, never the fresh copy: another test thread's fork may still hold the copy's write fd,
    // and exec'ing it would then fail with ETXTBSY.
    let list = Command::new(&src).arg("--list").output()?;
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        if applet != "busybox" && !applet.is_empty() {
            let _ = std::fs::hard_link(bin.join("busybox"), bin.join(applet));
        }
    }
    for d in ["proc", "sys", "dev", "etc", "tmp", "root", "var", "run"] {
        std::fs::create_dir_all(dir.join(d))?;
    }
    std::fs::write(
        dir.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n",
    )?;
    std::fs::write(dir.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;
    Ok(())
}

/// Where fixtures built once per build directory live: `target/<profile>/test-fixtures`.
fn fixtures_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .join("test-fixtures")
}

/// Builds directory `dest` with `build` in a temp dir beside it and renames it into place, so whoever finds
/// `dest` finds it complete.
fn build_into(dest: &Path, build: impl FnOnce(&Path) -> std::io::Result<()>) -> std::io::Result<()> {
    let parent = dest.parent().expect("a fixture in test-fixtures");
    std::fs::create_dir_all(parent)?;
    let tmp = tempfile::Builder::new().prefix(".build-").tempdir_in(parent)?;
    build(tmp.path())?;
    // Another test process may have won the race; either copy is complete.
    let tmp = tmp.keep();
    if std::fs::rename(&tmp, dest).is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    Ok(())
}

/// The busybox rootfs shared read-only by all bundles: built once per build directory
/// (`target/<profile>/test-fixtures/busybox-rootfs`), so no test leaves a copy behind.
pub fn shared_rootfs() -> &'static Path {
    static ROOTFS: OnceLock<PathBuf> = OnceLock::new();
    ROOTFS.get_or_init(|| {
        let dest = fixtures_dir().join("busybox-rootfs");
        if !dest.join("bin/sh").exists() {
            build_into(&dest, build_busybox_rootfs).expect("building the busybox rootfs");
        }
        dest
    })
}

/// A directory that `build` fills once per build directory and that tests then only read:
/// `target/<profile>/test-fixtures/<name>-<digest of inputs>`. `inputs` are everything its content depends on, so
/// a change to any of them builds a new one. Safe against test processes building it at the same time.
pub fn fixture(name: &str, inputs: &[&[u8]], build: impl FnOnce(&Path) -> std::io::Result<()>) -> PathBuf {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    for i in inputs {
        h.update((i.len() as u64).to_le_bytes());
        h.update(i);
    }
    let key = format!("{:x}", h.finalize());
    let dest = fixtures_dir().join(format!("{name}-{}", &key[..16]));
    if !dest.exists() {
        build_into(&dest, build).unwrap_or_else(|e| panic!("building the {name} fixture: {e}"));
    }
    dest
}

/// A unique name for containers and cgroups of this test process.
pub fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A loopback TCP port that nothing holds now, for a server a test starts on the host's network. It is taken
/// below the kernel's ephemeral range (32768 and up by default), so an outgoing connection elsewhere on the
/// machine cannot take it between this check and the server's bind; tests running at once get different ports.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id() * 97;
    for _ in 0..2000 {
        let port = 12000 + (start + NEXT.fetch_add(1, Ordering::Relaxed)) % 20000;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    panic!("no free port between 12000 and 32000 on 127.0.0.1")
}

/// A bundle directory with a config.json that tests adjust before writing.
pub struct Bundle {
    dir: tempfile::TempDir,
    /// The config that [`Bundle::write`] saves.
    pub config: Value,
}

/// The capabilities runc's default spec grants.
pub const DEFAULT_CAPS: &[&str] = &["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];

impl Bundle {
    /// [`Bundle::new`] of `sh -c script`.
    pub fn sh(script: &str) -> Bundle {
        Bundle::new(&["sh", "-c", script])
    }

    /// A bundle that runs `args` in new pid, net, ipc, uts, mount namespaces over the shared busybox rootfs
    /// (read-only; /tmp is a tmpfs), with runc's default mounts, masked and read-only paths, in cgroup
    /// `/<cgroup>` (unique per bundle).
    pub fn new(args: &[&str]) -> Bundle {
        let dir = tempfile::Builder::new()
            .prefix("crius-bundle-")
            .tempdir()
            .expect("tempdir");
        let config = json!({
            "ociVersion": "1.0.2",
            "process": {
                "terminal": false,
                "user": {"uid": 0, "gid": 0},
                "args": args,
                "env": ["PATH=/bin", "HOME=/root"],
                "cwd": "/",
                "capabilities": {"bounding": DEFAULT_CAPS, "effective": DEFAULT_CAPS, "permitted": DEFAULT_CAPS},
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
                "noNewPrivileges": true
            },
            "root": {"path": shared_rootfs(), "readonly": true},
            "hostname": "crius-test",
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
                {"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
                {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
                {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
                {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]}
            ],
            "linux": {
                "resources": {"devices": [{"allow": false, "access": "rwm"}]},
                "cgroupsPath": format!("/{}", unique("crius-test")),
                "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
                "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                    "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
                "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
            }
        });
        Bundle { dir, config }
    }

    /// The bundle directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The container's cgroup path as configured (relative to the cgroup mount).
    pub fn cgroups_path(&self) -> String {
        self.config["linux"]["cgroupsPath"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// What the container wrote to stdout (after [`Runtime::create`]).
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stdout")).unwrap_or_default()
    }

    /// What the container (and the runtime) wrote to stderr (after [`Runtime::create`]).
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr")).unwrap_or_default()
    }

    /// Sets the process arguments.
    pub fn args(&mut self, args: &[&str]) -> &mut Self {
        self.config["process"]["args"] = json!(args);
        self
    }

    /// Saves config.json and returns the bundle path.
    pub fn write(&self) -> &Path {
        let text = serde_json::to_vec_pretty(&self.config).expect("config JSON");
        std::fs::write(self.dir.path().join("config.json"), text).expect("writing config.json");
        self.dir.path()
    }
}

/// The runtime under test, with its own state root; deletes its containers when dropped.
pub struct Runtime {
    /// The runtime binary.
    pub bin: PathBuf,
    /// True when it is crius-runc.
    pub is_crius: bool,
    root: tempfile::TempDir,
}

/// The crius-runc binary built next to the test binary (`target/<profile>/crius-runc`), or `CRIUS_RUNC`.
pub fn crius_runc() -> PathBuf {
    if let Some(p) = std::env::var_os("CRIUS_RUNC") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let bin = profile_dir.join("crius-runc");
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build -p crius-runc)",
        bin.display()
    );
    bin
}

impl Runtime {
    /// The runtime named by `CRIUS_TEST_RUNTIME` (`runc`, `crun`, a path), else crius-runc.
    pub fn from_env() -> Runtime {
        require_root();
        let (bin, is_crius) = match std::env::var("CRIUS_TEST_RUNTIME").ok().filter(|s| !s.is_empty()) {
            None => (crius_runc(), true),
            Some(name) if name == "crius-runc" => (crius_runc(), true),
            Some(name) => (which(&name), false),
        };
        let root = tempfile::Builder::new()
            .prefix("crius-state-")
            .tempdir_in(state_parent())
            .expect("state dir");
        Runtime { bin, is_crius, root }
    }

    /// The state root.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// A command for the runtime with `--root` set.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.arg("--root").arg(self.root.path()).args(args);
        c.stdin(Stdio::null());
        c
    }

    /// Runs the runtime and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .output()
            .unwrap_or_else(|e| panic!("running {}: {e}", self.bin.display()))
    }

    /// `run` of bundle `b` (written first) as a new container named `prefix-<unique>`, to its end:
    /// (exit code, stdout, stderr).
    pub fn run_bundle(&self, b: &Bundle, prefix: &str) -> (i32, String, String) {
        let dir = b.write().to_str().unwrap().to_string();
        let out = self.run(&["run", "--bundle", &dir, &unique(prefix)]);
        let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
        (
            out.status.code().unwrap_or(-1),
            text(&out.stdout),
            text(&out.stderr),
        )
    }

    /// Runs the runtime, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{} {args:?} failed ({}): {}{}",
            self.bin.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs the runtime, asserts failure, returns stderr (and the log, which runc uses for errors).
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            !out.status.success(),
            "{args:?} should fail but succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// `create` with the container's stdout and stderr going to files in the bundle (see [`Bundle::stdout`]):
    /// a pipe would keep `output()` waiting for as long as the container lives.
    pub fn create(&self, id: &str, bundle: &Bundle, extra: &[&str]) {
        let dir = bundle.write();
        let out = std::fs::File::create(dir.join("stdout")).expect("stdout file");
        let err = std::fs::File::create(dir.join("stderr")).expect("stderr file");
        let mut args = vec!["create", "--bundle", dir.to_str().expect("utf-8 path")];
        args.extend_from_slice(extra);
        args.push(id);
        let status = self
            .command(&args)
            .stdout(out)
            .stderr(err)
            .status()
            .expect("running create");
        assert!(
            status.success(),
            "create {id} failed ({status}): {}",
            bundle.stderr()
        );
    }

    /// `create` then `start`.
    pub fn create_started(&self, id: &str, bundle: &Bundle) {
        self.create(id, bundle, &[]);
        self.ok(&["start", id]);
    }

    /// The OCI state of `id`.
    pub fn state(&self, id: &str) -> Value {
        serde_json::from_str(&self.ok(&["state", id])).expect("state JSON")
    }

    /// The status field of `id`'s state.
    pub fn status(&self, id: &str) -> String {
        self.state(id)["status"].as_str().unwrap_or_default().to_string()
    }

    /// Waits up to 10 s for `id` to reach `status`.
    pub fn wait_status(&self, id: &str, status: &str) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.status(id) != status {
            assert!(std::time::Instant::now() < deadline, "{id} never became {status}");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    /// Ids of the containers under this root.
    pub fn ids(&self) -> Vec<String> {
        match std::fs::read_dir(self.root.path()) {
            Ok(d) => d
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for id in self.ids() {
            let _ = self.run(&["delete", "--force", &id]);
        }
    }
}

/// Where state roots go: a tmpfs (`/run`) so that runtimes behave as in production.
fn state_parent() -> PathBuf {
    let p = PathBuf::from("/run/crius-tests");
    std::fs::create_dir_all(&p).expect("creating /run/crius-tests");
    p
}

/// Finds `name` in PATH, failing loudly if it is not installed.
pub fn which(name: &str) -> PathBuf {
    if name.contains('/') {
        return name.into();
    }
    let path = std::env::var("PATH").unwrap_or_default();
    path.split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{name} is not installed (hack/install-deps.sh installs it)"))
}

/// The static test program (`crius-testprog`), built by hack/test.sh with
/// `cargo rustc -p crius-testprog --release -- -C target-feature=+crt-static`, or `CRIUS_TESTPROG`.
pub fn testprog_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("CRIUS_TESTPROG") {
        return p.into();
    }
    let exe = std::env::current_exe().expect("current_exe");
    let target = exe.ancestors().nth(3).expect("target/<profile>/deps/<test>");
    let bin = target.join("release/crius-testprog");
    assert!(
        bin.exists(),
        "{} is missing: build it with `cargo rustc -p crius-testprog --release -- -C target-feature=+crt-static` \
         (hack/test.sh does)",
        bin.display()
    );
    bin
}

/// The cgroup2 mount point (pure v2: /sys/fs/cgroup; hybrid: /sys/fs/cgroup/unified).
pub fn cgroup2_mount() -> PathBuf {
    crius_common::mountinfo::cgroup2().expect("no cgroup2 mount")
}

/// True on a pure cgroup v2 host (the VM), where limits can be tested.
pub fn pure_cgroup_v2() -> bool {
    cgroup2_mount() == Path::new("/sys/fs/cgroup")
}

/// Fails the test loudly unless it runs as root on a pure cgroup v2 host: the vm_* suites never pass without
/// running.
pub fn require_pure_cgroup_v2() {
    require_root();
    assert!(
        pure_cgroup_v2(),
        "needs a pure cgroup v2 host: hack/test.sh runs this suite inside hack/vm"
    );
}

/// A console socket as a shim provides one: the runtime connects and sends the pty master with SCM_RIGHTS.
pub struct ConsoleSocket {
    dir: tempfile::TempDir,
    listener: std::os::unix::net::UnixListener,
}

impl ConsoleSocket {
    /// Listens on a fresh socket path.
    pub fn new() -> ConsoleSocket {
        let dir = tempfile::Builder::new()
            .prefix("crius-console-")
            .tempdir()
            .expect("tempdir");
        let listener = std::os::unix::net::UnixListener::bind(dir.path().join("console.sock")).expect("bind");
        ConsoleSocket { dir, listener }
    }

    /// The socket path to pass as `--console-socket`.
    pub fn path(&self) -> PathBuf {
        self.dir.path().join("console.sock")
    }

    /// Accepts the runtime's connection and returns the pty master it sends.
    pub fn receive(&self) -> std::fs::File {
        use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
        use std::os::fd::{AsRawFd, FromRawFd};
        let (conn, _) = self.listener.accept().expect("accept");
        let mut buf = [0u8; 4096];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let msg =
            recvmsg::<()>(conn.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::empty()).expect("recvmsg");
        for c in msg.cmsgs().expect("cmsgs") {
            if let ControlMessageOwned::ScmRights(fds) = c {
                // SAFETY: the fd was just received and is owned by nobody else.
                return unsafe { std::fs::File::from_raw_fd(fds[0]) };
            }
        }
        panic!("no fd received on the console socket");
    }
}

impl Default for ConsoleSocket {
    fn default() -> Self {
        Self::new()
    }
}
