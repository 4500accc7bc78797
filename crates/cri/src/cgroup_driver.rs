//! The node's cgroup driver, as kubelet must be told it (RuntimeConfig) and as every container's cgroup is
//! named: `cgroupfs` (directories below the cgroup2 mount: `<cgroup_parent>/<id>`) or `systemd` (transient
//! scopes that systemd owns: `<parent slice>:crius:<id>`, run with the OCI runtime's `--systemd-cgroup`).
//!
//! criusd sets it once at start from its config ([`set`]); everything else reads it ([`get`]).

use std::sync::OnceLock;

use crius_api::cri;

/// A cgroup driver.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Driver {
    /// cgroupfs paths, written by the runtime.
    #[default]
    Cgroupfs,
    /// systemd scopes and slices.
    Systemd,
}

/// The prefix of a container's scope (`crius-<id>.scope`), as containerd's is `cri-containerd`.
pub const SCOPE_PREFIX: &str = "crius";

static DRIVER: OnceLock<Driver> = OnceLock::new();

/// Sets the node's driver; only the first call counts (false if it was set already to another).
pub fn set(d: Driver) -> bool {
    *DRIVER.get_or_init(|| d) == d
}

/// The node's driver (cgroupfs until [`set`]).
pub fn get() -> Driver {
    DRIVER.get().copied().unwrap_or_default()
}

impl Driver {
    /// The CRI's name of it, for RuntimeConfig.
    pub fn cri(self) -> cri::CgroupDriver {
        match self {
            Driver::Cgroupfs => cri::CgroupDriver::Cgroupfs,
            Driver::Systemd => cri::CgroupDriver::Systemd,
        }
    }

    /// The OCI `linux.cgroupsPath` of container `id` in a pod whose `cgroup_parent` is `parent` (empty:
    /// crius's default, `/crius` or `system.slice`).
    pub fn cgroups_path(self, parent: &str, id: &str) -> String {
        match self {
            Driver::Cgroupfs => {
                let parent = parent.trim_end_matches('/');
                let parent = if parent.is_empty() { "/crius" } else { parent };
                format!("{parent}/{id}")
            }
            Driver::Systemd => {
                let slice = if parent.is_empty() { "system.slice" } else { parent };
                format!("{slice}:{SCOPE_PREFIX}:{id}")
            }
        }
    }

    /// The pod cgroup's directory below the cgroup2 mount for a sandbox's `cgroup_parent` (a path, or a slice
    /// name under systemd); None when it names none or a name systemd would refuse.
    pub fn pod_dir(self, parent: &str) -> Option<std::path::PathBuf> {
        match self {
            Driver::Cgroupfs => {
                let p = parent.trim_matches('/');
                (!p.is_empty()).then(|| p.into())
            }
            Driver::Systemd => crius_oci::cgroup::systemd::expand_slice(parent)
                .ok()
                .filter(|p| !p.as_os_str().is_empty()),
        }
    }
}

impl std::str::FromStr for Driver {
    type Err = String;

    fn from_str(s: &str) -> Result<Driver, String> {
        match s {
            "cgroupfs" => Ok(Driver::Cgroupfs),
            "systemd" => Ok(Driver::Systemd),
            _ => Err(format!("cgroup driver {s:?}: it is \"cgroupfs\" or \"systemd\"")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_of_each_driver() {
        assert_eq!(
            Driver::Cgroupfs.cgroups_path("/kubepods/pod1/", "c"),
            "/kubepods/pod1/c"
        );
        assert_eq!(Driver::Cgroupfs.cgroups_path("", "c"), "/crius/c");
        assert_eq!(
            Driver::Systemd.cgroups_path("kubepods-besteffort-pod1.slice", "c"),
            "kubepods-besteffort-pod1.slice:crius:c"
        );
        assert_eq!(Driver::Systemd.cgroups_path("", "c"), "system.slice:crius:c");
        assert_eq!(
            Driver::Systemd.pod_dir("kubepods-pod1.slice").unwrap(),
            std::path::PathBuf::from("kubepods.slice/kubepods-pod1.slice")
        );
        assert_eq!(Driver::Systemd.pod_dir("/kubepods/x"), None);
        assert_eq!(
            Driver::Cgroupfs.pod_dir("/kubepods/x/").unwrap(),
            std::path::PathBuf::from("kubepods/x")
        );
        assert!("systemd".parse::<Driver>().is_ok() && "other".parse::<Driver>().is_err());
    }
}
