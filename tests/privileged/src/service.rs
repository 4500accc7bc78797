//! What the pod-service suites (`pod_service` on the host, `vm_pod_service` in the VM) share: criusd with
//! the pod service's files in the test's directory, and the CLI's JSON read back.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::engine::Setup;

/// criusd with the pod service's logs in the test's directory, restart back-offs short, images imported,
/// and `extra` lines added to its `[pods]` table.
pub fn setup(extra: &str) -> Setup {
    let mut s = Setup::start();
    let logs = s.dir.path().join("logs");
    std::fs::write(
        s.d.config_path(),
        format!("[pods]\nlog_root = {logs:?}\nrestart_backoff_ms = 200\npull = \"missing\"\n{extra}"),
    )
    .unwrap();
    s.restart_daemon();
    s
}

/// The CLI's answer to `args` (which must include `-o json`), parsed.
pub fn json(s: &Setup, args: &[&str]) -> Value {
    serde_json::from_str(&s.d.cli_ok(args)).unwrap()
}

/// Waits for `f`, checking every 200 ms; fails naming `what` after `timeout`.
pub fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The container id of container `name` in `pod`'s status list `list` (`containerStatuses`...), or "".
pub fn cid(pod: &Value, list: &str, name: &str) -> String {
    pod["status"][list]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c["containerID"].as_str())
        .unwrap_or("")
        .to_string()
}

/// Writes `text` to file `name` in the test's directory; its path.
pub fn write(s: &Setup, name: &str, text: &str) -> String {
    let p = s.dir.path().join(name);
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}
