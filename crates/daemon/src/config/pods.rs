//! The `[pods]` table: the pod service (crius apply/get/delete...): where pods' logs go, what the node
//! offers them, and the restart back-off of its engine.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The `[pods]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PodsSection {
    /// Where pods' log directories go (kubelet's /var/log/pods).
    pub log_root: PathBuf,
    /// milli-CPUs the node offers pods; 0: the machine's less 100m.
    pub allocatable_milli_cpu: u64,
    /// Bytes of memory the node offers pods; 0: the machine's less a tenth (at most 512 MiB).
    pub allocatable_memory: u64,
    /// The first restart back-off of a container, ms; it doubles up to 5 minutes (kubelet: 10 s).
    pub restart_backoff_ms: u64,
    /// Which images to pull: `policy` (each container's imagePullPolicy, as kubelet), `always`, `missing`
    /// (only images not there: for nodes whose images were imported offline) or `never`.
    pub pull: String,
    /// The cgroup under which each pod gets its own (`<root>/burstable/pod<uid>`...), as kubelet's
    /// `--cgroup-root`; empty: no pod cgroups.
    pub cgroup_root: String,
}

impl Default for PodsSection {
    fn default() -> PodsSection {
        PodsSection {
            log_root: "/var/log/pods".into(),
            allocatable_milli_cpu: 0,
            allocatable_memory: 0,
            restart_backoff_ms: 10_000,
            pull: "policy".into(),
            cgroup_root: "/kubepods".into(),
        }
    }
}

impl PodsSection {
    /// The pull policy `pull` names.
    pub fn pull_policy(&self) -> Result<crius_pod::PullPolicy, String> {
        Ok(match self.pull.as_str() {
            "policy" => crius_pod::PullPolicy::Manifest,
            "always" => crius_pod::PullPolicy::Always,
            "missing" => crius_pod::PullPolicy::Missing,
            "never" => crius_pod::PullPolicy::Never,
            other => {
                return Err(format!(
                    "[pods] pull = {other:?}: policy, always, missing or never"
                ));
            }
        })
    }

    /// The pod cgroups' root, if pods get cgroups, in the form of the cgroup driver `driver`: under systemd
    /// a slice (the default `/kubepods` becomes `kubepods.slice`), under cgroupfs a path.
    pub fn cgroup_root(&self, driver: crius_cri::cgroup_driver::Driver) -> Result<Option<String>, String> {
        use crius_cri::cgroup_driver::Driver;
        let root = self.cgroup_root.as_str();
        let slice = root.ends_with(".slice");
        Ok(match (driver, root) {
            (_, "") => None,
            (Driver::Systemd, "/kubepods") => Some("kubepods.slice".into()),
            (Driver::Systemd, r) if slice && Driver::Systemd.pod_dir(r).is_some() => Some(r.into()),
            (Driver::Cgroupfs, r) if !slice => Some(r.into()),
            (Driver::Systemd, r) => {
                return Err(format!(
                    "[pods] cgroup_root = {r:?}: the systemd cgroup driver wants a slice name (kubepods.slice)"
                ));
            }
            (Driver::Cgroupfs, r) => {
                return Err(format!(
                    "[pods] cgroup_root = {r:?}: a slice name wants cgroup_driver = \"systemd\"; the cgroupfs driver \
                     takes a path (/kubepods)"
                ));
            }
        })
    }

    /// The node's allocatable resources.
    pub fn allocatable(&self) -> crius_pod::node::Allocatable {
        let machine = crius_pod::node::Allocatable::of_machine();
        crius_pod::node::Allocatable {
            milli_cpu: if self.allocatable_milli_cpu > 0 {
                self.allocatable_milli_cpu
            } else {
                machine.milli_cpu
            },
            memory: if self.allocatable_memory > 0 {
                self.allocatable_memory
            } else {
                machine.memory
            },
        }
    }

    /// The table as `--print-config` shows it.
    pub fn render(&self, value: impl Fn(&dyn erased::Value) -> String) -> String {
        let d = PodsSection::default();
        let mut out = String::from("[pods]\n");
        let mut key = |doc: &str, name: &str, v: String, default: String| {
            out += &format!("# {doc}\n# default: {default}\n{name} = {v}\n\n");
        };
        key(
            "Where pods' log directories go (kubelet's /var/log/pods).",
            "log_root",
            value(&self.log_root),
            value(&d.log_root),
        );
        key(
            "milli-CPUs the node offers pods (resize admission); 0: the machine's less 100m.",
            "allocatable_milli_cpu",
            value(&self.allocatable_milli_cpu),
            value(&d.allocatable_milli_cpu),
        );
        key(
            "Bytes of memory the node offers pods; 0: the machine's less a tenth, at most 512 MiB.",
            "allocatable_memory",
            value(&self.allocatable_memory),
            value(&d.allocatable_memory),
        );
        key(
            "Which images to pull: policy (each container's imagePullPolicy, as kubelet), always, missing (only \
             those not there: images imported offline) or never.",
            "pull",
            value(&self.pull),
            value(&d.pull),
        );
        key(
            "First restart back-off of a container, ms; doubles up to 5 minutes (kubelet: 10 s).",
            "restart_backoff_ms",
            value(&self.restart_backoff_ms),
            value(&d.restart_backoff_ms),
        );
        key(
            "The cgroup under which each pod gets its own (<root>/burstable/pod<uid>, <root>/pod<uid> when \
             Guaranteed), as kubelet's --cgroup-root; \"\": no pod cgroups.",
            "cgroup_root",
            value(&self.cgroup_root),
            value(&d.cgroup_root),
        );
        out
    }
}

/// A value `render` can print.
pub mod erased {
    /// Something serializable, behind a reference.
    pub trait Value {
        /// It as TOML.
        fn toml(&self) -> String;
    }

    impl<T: serde::Serialize> Value for T {
        fn toml(&self) -> String {
            toml::Value::try_from(self)
                .map(|v| v.to_string())
                .unwrap_or_else(|e| format!("\"<{e}>\""))
        }
    }
}
