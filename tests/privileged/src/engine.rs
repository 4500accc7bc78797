//! The pod engine (`crius run`) for the engine suites (engine, vm_engine): criusd on a CNI network of the
//! test's own with the seed stand-in images, `crius run` to its end or in the background, and its JSON report.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crius_test_support::cni::Network;
use crius_test_support::daemon::{Daemon, built_binary};
use crius_test_support::image;
use crius_test_support::require_root;
use crius_test_support::shims::shim_pids;
use serde_json::Value;

/// A manifest of `tests/privileged/manifests`.
pub fn manifest(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("manifests").join(name)
}

/// criusd on the test's network, with the seed stand-in images imported.
pub struct Setup {
    /// The daemon.
    pub d: Daemon,
    net: Network,
    /// The test's directory (pods, logs, manifests it writes).
    pub dir: tempfile::TempDir,
}

impl Setup {
    /// Starts criusd on a network of its own and imports the seed images.
    pub fn start() -> Setup {
        require_root();
        let net = Network::new();
        let args = net.daemon_args();
        let d = Daemon::start(&args.iter().map(String::as_str).collect::<Vec<_>>());
        let dir = tempfile::tempdir().unwrap();
        d.cli_ok(&["images", "import", &image::seed_layout().display().to_string()]);
        Setup { d, net, dir }
    }

    /// The test's network.
    pub fn net(&self) -> &Network {
        &self.net
    }

    /// Restarts criusd (SIGTERM; it must be gone within 10 s, open event streams or not).
    pub fn restart_daemon(&mut self) {
        let args = self.net.daemon_args();
        self.d
            .restart(&args.iter().map(String::as_str).collect::<Vec<_>>());
    }

    /// `crius run` arguments that keep the pods' files in the test's directory.
    pub fn run_args(&self, files: &[&Path], extra: &[&str]) -> Vec<String> {
        let mut a: Vec<String> = vec!["run".into()];
        a.extend(files.iter().map(|f| f.display().to_string()));
        for (k, v) in [("--pods-dir", "pods"), ("--log-root", "logs")] {
            a.push(k.into());
            a.push(self.dir.path().join(v).display().to_string());
        }
        a.extend(["--pull", "missing", "-o", "json"].map(String::from));
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    }

    /// `crius` with `args`, against this daemon.
    pub fn command(&self, args: &[String]) -> Command {
        let mut c = Command::new(built_binary("crius"));
        c.env("CRIUS_ADDRESS", self.d.socket()).args(args);
        c
    }

    /// Runs `crius run` to its end: (exit code, stdout, stderr).
    pub fn run(&self, files: &[&Path], extra: &[&str]) -> (i32, String, String) {
        let out = self.command(&self.run_args(files, extra)).output().unwrap();
        let (o, e) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        (out.status.code().unwrap_or(-1), o, e)
    }

    /// No pod, container, shim, volume or mount is left.
    pub fn assert_nothing_left(&self) {
        for sub in ["sandboxes", "containers"] {
            let left = crate::cri::records(&self.d.root().join(sub));
            assert!(left.is_empty(), "{sub} left: {left:?}");
        }
        let pods: Vec<_> = std::fs::read_dir(self.dir.path().join("pods"))
            .map(|d| d.flatten().collect())
            .unwrap_or_default();
        assert!(pods.is_empty(), "pod directories left");
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let here = self.dir.path().display().to_string();
        assert!(!mounts.contains(&here), "mounts left under {here}");
        let deadline = Instant::now() + Duration::from_secs(10);
        let owner = self.d.socket().display().to_string();
        while !shim_pids(&owner).is_empty() {
            assert!(Instant::now() < deadline, "shims left: {:?}", shim_pids(&owner));
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The JSON report after the log lines on stdout.
pub fn report(stdout: &str) -> Value {
    let at = stdout
        .find("\n[")
        .map(|i| i + 1)
        .unwrap_or_else(|| stdout.find('[').expect("a JSON report"));
    let all: Value = serde_json::from_str(&stdout[at..]).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    all[0].clone()
}

/// Container `name` of report `r`.
pub fn container<'a>(r: &'a Value, name: &str) -> &'a Value {
    r["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("{name} in {r}"))
}

/// A `crius run` in the background, its stderr read line by line.
pub struct Running {
    child: Option<std::process::Child>,
    lines: std::sync::mpsc::Receiver<String>,
    reader: Option<std::thread::JoinHandle<String>>,
}

impl Running {
    /// Spawns `crius run` with `args` and waits for `line` on its stderr.
    pub fn spawn(s: &Setup, args: &[String], line: &str) -> Running {
        let mut child = s
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut all = String::new();
            for l in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(l.clone());
                all.push_str(&l);
                all.push('\n');
            }
            all
        });
        let mut r = Running {
            child: Some(child),
            lines,
            reader: Some(reader),
        };
        r.wait_for(line);
        r
    }

    /// Waits (up to 2 minutes: the VM is slow) for a stderr line containing `needle`; returns it.
    pub fn wait_for(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut seen = Vec::new();
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(l) if l.contains(needle) => return l,
                Ok(l) => seen.push(l),
                Err(e) => {
                    let status = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                    panic!(
                        "no {needle:?} from crius run ({e}; its exit status: {status:?}); it said:\n{}",
                        seen.join("\n")
                    )
                }
            }
        }
    }

    /// Stops it with SIGTERM: (exit code, stdout, stderr).
    pub fn stop(mut self) -> (i32, String, String) {
        let child = self.child.take().expect("running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = self.reader.take().map(|r| r.join().unwrap()).unwrap_or_default();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            err,
        )
    }
}

impl Drop for Running {
    /// A test that failed midway still stops its `crius run`, which removes its pod.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = crius_test_support::terminate(&mut child, Duration::from_secs(30));
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
