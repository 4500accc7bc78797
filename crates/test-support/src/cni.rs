//! A test's own pod network: a CNI config for Debian's bridge and host-local plugins, on a bridge and /24 no
//! other test uses; the bridge is deleted when the value is dropped, however the test ends.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The network.
pub struct Network {
    /// The bridge's name (`crius<n>`).
    pub bridge: String,
    /// The subnet's first three octets with a dot: `10.213.<n>.`.
    pub subnet_prefix: String,
    /// The CNI config directory to give criusd.
    pub conf_dir: PathBuf,
    dir: tempfile::TempDir,
}

impl Network {
    /// A fresh network: each one of a process, and of processes running at once, gets its own bridge and subnet.
    pub fn new() -> Network {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dir = tempfile::tempdir().expect("tempdir");
        let n = (std::process::id() * 7 + NEXT.fetch_add(1, Ordering::Relaxed) * 31) % 200 + 20;
        let bridge = format!("crius{n}");
        let subnet_prefix = format!("10.213.{n}.");
        let conf_dir = dir.path().join("net.d");
        std::fs::create_dir(&conf_dir).expect("net.d");
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "crius-test",
            "plugins": [{
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": format!("{subnet_prefix}0/24")}]],
                    "dataDir": dir.path().join("ipam"),
                },
            }],
        });
        std::fs::write(conf_dir.join("10-test.conflist"), conf.to_string()).expect("conflist");
        Network {
            bridge,
            subnet_prefix,
            conf_dir,
            dir,
        }
    }

    /// criusd's flags for this network (plugins from Debian's package).
    pub fn daemon_args(&self) -> Vec<String> {
        vec![
            "--cni-conf-dir".to_string(),
            self.conf_dir.display().to_string(),
            "--cni-plugin-dir".to_string(),
            "/usr/lib/cni".to_string(),
        ]
    }

    /// host-local's allocation records (a file per IP).
    pub fn ipam_dir(&self) -> PathBuf {
        self.dir.path().join("ipam/crius-test")
    }
}

impl Default for Network {
    fn default() -> Network {
        Network::new()
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.bridge]).output();
    }
}
