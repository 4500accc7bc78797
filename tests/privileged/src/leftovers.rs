//! What a criusd's pods leave on the node once they are all removed, for the suites that churn pods (chaos,
//! load): it must be nothing.

use std::path::Path;
use std::time::{Duration, Instant};

use crius_test_support::cni::Network;
use crius_test_support::daemon::Daemon;

use crate::cri::{entries, records};

/// The cgroup hierarchies mounted: their mount points.
fn hierarchies() -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(" - cgroup2 ") || l.contains(" - cgroup "))
        .filter_map(|l| l.split(' ').nth(4).map(str::to_string))
        .collect()
}

/// A cgroup parent of a test's own (`/<unique>`), removed from every hierarchy when dropped, however the
/// test ends.
pub struct CgroupParent(pub String);

impl CgroupParent {
    /// A new one named after `prefix`.
    pub fn new(prefix: &str) -> CgroupParent {
        CgroupParent(format!("/{}", crius_test_support::unique(prefix)))
    }

    /// The cgroups below it, in every hierarchy.
    pub fn children(&self) -> Vec<String> {
        hierarchies()
            .into_iter()
            .map(|m| Path::new(&m).join(self.0.trim_start_matches('/')))
            .flat_map(|d| {
                entries(&d)
                    .into_iter()
                    .map(|e| d.join(e))
                    .filter(|p| p.is_dir())
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

impl Drop for CgroupParent {
    fn drop(&mut self) {
        for m in hierarchies() {
            let _ = std::fs::remove_dir(Path::new(&m).join(self.0.trim_start_matches('/')));
        }
    }
}

/// What `d`'s pods (on `net`, in cgroup parent `parent`) left: mounts, namespace pins, bundles, records,
/// intents, snapshots, cgroups, veths on the bridge, IP allocations and shims. Empty when all is clean.
pub fn now(d: &Daemon, net: &Network, parent: &CgroupParent) -> Vec<String> {
    let mut left: Vec<String> = crius_test_support::containerd::mounts_under(d.dir())
        .into_iter()
        .map(|m| format!("mount {m}"))
        .collect();
    let (state, root) = (d.state(), d.root());
    for dir in [
        state.join("ns"),
        state.join("containers"),
        state.join("sandboxes"),
        state.join("intents"),
        root.join("intents"),
        root.join("images/snapshots"),
    ] {
        left.extend(
            entries(&dir)
                .into_iter()
                .map(|e| format!("{}/{e}", dir.display())),
        );
    }
    for dir in [root.join("containers"), root.join("sandboxes")] {
        left.extend(
            records(&dir)
                .into_iter()
                .map(|e| format!("{}: {e}", dir.display())),
        );
    }
    left.extend(parent.children().into_iter().map(|g| format!("cgroup {g}")));
    let veths = std::process::Command::new("ip")
        .args(["-o", "link", "show", "master", &net.bridge])
        .output()
        .expect("running ip");
    left.extend(
        String::from_utf8_lossy(&veths.stdout)
            .lines()
            .map(|l| format!("veth {l}")),
    );
    left.extend(
        entries(&net.ipam_dir())
            .into_iter()
            .filter(|e| e != "lock" && !e.starts_with("last_reserved_ip"))
            .map(|e| format!("IP allocation {e}")),
    );
    left.extend(
        crius_test_support::shims::shim_pids(&d.socket().display().to_string())
            .into_iter()
            .map(|p| format!("shim {p}")),
    );
    left
}

/// Waits (30 s at most: idle shims take a moment to exit) until nothing is left; what is left then.
pub async fn settled(d: &Daemon, net: &Network, parent: &CgroupParent) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = now(d, net, parent);
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
