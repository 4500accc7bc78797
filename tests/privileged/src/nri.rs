//! The NRI suites' helpers (nri on the host, vm_nri in the VM): criusd's NRI arguments, and the test plugin
//! (tests/nri-plugin) pre-launched from the plugin dir or connecting to the socket.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crius_test_support::daemon::built_binary;

/// A loop that ends on SIGTERM.
pub const LOOP: &str = "trap 'exit 0' TERM; echo ready; while :; do sleep 0.1; done";

/// criusd's arguments: NRI on, its socket and plugin dirs under `dir`, a 1 s request timeout.
pub fn nri_args(dir: &Path) -> Vec<String> {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    std::fs::create_dir_all(dir.join("conf.d")).unwrap();
    [
        "--nri",
        "--nri-socket-path",
        &dir.join("nri.sock").display().to_string(),
        "--nri-plugin-path",
        &plugins.display().to_string(),
        "--nri-plugin-config-path",
        &dir.join("conf.d").display().to_string(),
        "--nri-plugin-request-timeout",
        "1s",
    ]
    .map(String::from)
    .to_vec()
}

/// Puts the test plugin in `dir`'s plugin dir as `IDX-NAME` (a script that runs it with `args`).
pub fn pre_launch(dir: &Path, idx_name: &str, args: &[&str]) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    let path = dir.join("plugins").join(idx_name);
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let script = format!(
        "#!/bin/sh\nexec '{}' {}\n",
        built_binary("crius-nri-test-plugin").display(),
        quoted.join(" ")
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The test plugin, connecting to `dir`'s socket as `IDX-NAME`, logging to `log`, doing `behave`; returns
/// once it is synchronized.
pub fn connect(dir: &Path, idx: &str, name: &str, behave: &str, log: &Path) -> Plugin {
    let child = Command::new(built_binary("crius-nri-test-plugin"))
        .args(["--socket", &dir.join("nri.sock").display().to_string()])
        .args(["--idx", idx, "--name", name, "--behave", behave])
        .arg("--log")
        .arg(log)
        .spawn()
        .unwrap();
    let p = Plugin {
        child,
        log: log.to_path_buf(),
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    // Synchronized: the host lists the plugin before any later event passes (it holds events back until then).
    while !p.lines().iter().any(|l| l.starts_with("Synchronize ")) {
        assert!(
            Instant::now() < deadline,
            "{name} did not register: {:?}",
            p.lines()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    p
}

/// A plugin process the test started; killed when dropped.
pub struct Plugin {
    /// The process.
    pub child: Child,
    log: PathBuf,
}

impl Plugin {
    /// What it logged so far, line by line.
    pub fn lines(&self) -> Vec<String> {
        log_lines(&self.log)
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The lines of the log at `path` (none if it is not there yet).
pub fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}
