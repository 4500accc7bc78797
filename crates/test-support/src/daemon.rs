//! A criusd started for one test: the binary built next to the test (`target/<profile>/criusd`), its root,
//! state and socket in a temp dir, its log in a file. The `crius` CLI next to it talks to it. Stopped with
//! SIGTERM when dropped (killed if it does not stop).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running criusd.
pub struct Daemon {
    child: Option<Child>,
    dir: tempfile::TempDir,
}

/// A binary built next to the test binary (`target/<profile>/<name>`).
pub fn built_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>")
        .join(name);
    assert!(
        bin.exists(),
        "{} is missing: build it first (cargo build --workspace --bins)",
        bin.display()
    );
    bin
}

impl Daemon {
    /// Starts criusd with `args` added to `--root/--state/--listen` in a fresh temp dir; waits for its socket.
    pub fn start(args: &[&str]) -> Daemon {
        crate::require_root();
        let dir = tempfile::Builder::new()
            .prefix("criusd-test-")
            .tempdir()
            .expect("tempdir");
        let mut d = Daemon { child: None, dir };
        d.spawn(args);
        d
    }

    fn spawn(&mut self, args: &[&str]) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("criusd log");
        let child = Command::new(built_binary("criusd"))
            .arg("--root")
            .arg(self.root())
            .arg("--state")
            .arg(self.state())
            .arg("--listen")
            .arg(self.socket())
            .arg("--config")
            .arg(self.config_path())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting criusd");
        self.child = Some(child);
        // Generous: in a VM on a loaded host, criusd's start-up probes (idmapped mounts, the runtimes' features)
        // take tens of seconds.
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::os::unix::net::UnixStream::connect(self.socket()).is_err() {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("criusd exited with {status}: {}", self.log());
            }
            assert!(Instant::now() < deadline, "criusd did not listen: {}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The temp dir everything lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `--root`.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    /// `--state`.
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// `--listen`.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("crius.sock")
    }

    /// `--config`: `<dir>/config.toml`, written empty unless the test wrote one before starting.
    pub fn config_path(&self) -> PathBuf {
        let p = self.dir.path().join("config.toml");
        if !p.exists() {
            std::fs::write(&p, "").expect("config file");
        }
        p
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("criusd.log")
    }

    /// What criusd logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Its pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Runs the `crius` CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> Output {
        self.cli_with_stdin(args, Stdio::null())
    }

    /// Runs the CLI against this daemon with `stdin` as its standard input (a file, for `images import -`).
    pub fn cli_with_stdin(&self, args: &[&str], stdin: impl Into<Stdio>) -> Output {
        Command::new(built_binary("crius"))
            .env("CRIUS_ADDRESS", self.socket())
            .args(args)
            .stdin(stdin)
            .output()
            .expect("running crius")
    }

    /// Runs the CLI, asserts success, returns stdout.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "crius {args:?}: {}\ncriusd log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends SIGTERM and waits (10 s at most, then SIGKILL); returns the exit status.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        if let Some(status) = crate::terminate(&mut child, Duration::from_secs(10)) {
            return Some(status);
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("criusd did not stop within 10 s of SIGTERM: {}", self.log());
    }

    /// SIGKILLs it (a crash: nothing of its own shutdown runs) and reaps it.
    pub fn crash(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again after [`Daemon::crash`], on the same directories with `args`.
    pub fn start_again(&mut self, args: &[&str]) {
        assert!(self.child.is_none(), "criusd still runs");
        self.spawn(args);
    }

    /// Starts it again on the same directories with `args`.
    pub fn restart(&mut self, args: &[&str]) {
        self.stop();
        self.spawn(args);
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            crate::terminate(&mut c, Duration::from_secs(10));
            let _ = c.kill();
            let _ = c.wait();
        }
        // Containers a failed test left (they outlive criusd by design): deleted by the runtime, then the
        // pod shims that held them are killed and their sockets removed.
        if let Ok(dir) = std::fs::read_dir(self.state().join("containers")) {
            crate::shims::delete_containers("k8s.io", dir.flatten().map(|e| e.file_name()));
        }
        crate::shims::kill_shims(&self.socket().display().to_string());
        // What a failed test left mounted (namespace pins, rootfs): unmounted, so its namespaces and the temp
        // dir go too.
        for m in crate::containerd::mounts_under(self.dir.path()) {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
    }
}
