//! The node's cgroup driver, as kubelet must be told it (RuntimeConfig) and as every container's cgroup is
//! named: `cgroupfs` (directories below the cgroup2 mount: `<cgroup_parent>/<id>`) or `systemd` (transient
//! scopes that systemd owns: `<parent slice>:crius:<id>`, run with the OCI runtime's `--systemd-cgroup`).
//!
//! criusd reads it from its config and passes it in its setup (`node::Setup`): to the pods (which check a
//! `cgroup_parent` in its form and write the pod cgroup it names), the containers (the spec's
//! `cgroupsPath`, through `convert::Host`), the shims (the runtime's `--systemd-cgroup`) and RuntimeConfig.
//! Nothing reads it from a process global, so one process can serve, or test, both drivers.

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

    /// Checks a pod's `cgroup_parent` is in the form this driver names cgroups: any path under cgroupfs, a
    /// slice name under systemd (kubelet sends `kubepods-burstable-pod<uid>.slice` then); InvalidArgument
    /// for call `call` if not.
    pub fn check_parent(self, call: &'static str, parent: &str) -> crate::error::Result<()> {
        if self != Driver::Systemd || parent.is_empty() {
            return Ok(());
        }
        crius_oci::cgroup::systemd::expand_slice(parent)
            .map(drop)
            .map_err(|_| {
                crate::error::Error::invalid(
                    call,
                    "linux.cgroup_parent",
                    format!(
                        "{parent:?}: under the systemd cgroup driver it is a slice name (NAME.slice), as \
                     kubelet's cgroupDriver: systemd sends it; is kubelet's cgroupDriver cgroupfs?"
                    ),
                )
            })
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

/// The cgroup every pod's `cgroup_parent` must lie within (`[runtime] cgroup_parent_root`): a path under
/// cgroupfs (`/kubepods`), a slice under systemd (`kubepods.slice`); `/` or empty, any. Without it a client could
/// name any cgroup of the node (`/system.slice`) as a pod's parent, and UpdatePodSandboxResources would then
/// write that cgroup's limits.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ParentRoot(String);

/// Why a cgroup parent, or the root parents must lie within, is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParentError {
    /// A cgroupfs path that climbs.
    #[error("a path with . or .. in it")]
    DotDot,
    /// Not a systemd slice name.
    #[error("not a slice name (NAME.slice)")]
    NotSlice,
    /// A pod's parent outside the root.
    #[error(
        "{parent:?} is not within {root:?}, the node's cgroup_parent_root ([runtime] in criusd's config)"
    )]
    Outside {
        /// The pod's parent.
        parent: String,
        /// The root.
        root: String,
    },
    /// The root itself is not in the driver's form.
    #[error("cgroup_parent_root {root:?}: {why}")]
    Root {
        /// The root as configured.
        root: String,
        /// Why.
        why: Box<ParentError>,
    },
}

impl ParentRoot {
    /// The root `root` in `driver`'s form; an error naming it when it is not one.
    pub fn new(driver: Driver, root: &str) -> Result<ParentRoot, ParentError> {
        let r = ParentRoot(root.to_string());
        if !r.is_any() {
            r.parts(driver, root).map_err(|e| ParentError::Root {
                root: root.to_string(),
                why: Box::new(e),
            })?;
        }
        Ok(r)
    }

    /// Whether it allows every parent.
    pub fn is_any(&self) -> bool {
        self.0.trim_matches('/').is_empty()
    }

    /// The cgroup's components below the cgroup2 mount, as `driver` reads `name`.
    fn parts(&self, driver: Driver, name: &str) -> Result<Vec<String>, ParentError> {
        match driver {
            Driver::Cgroupfs => {
                let parts: Vec<String> = name
                    .split('/')
                    .filter(|p| !p.is_empty())
                    .map(String::from)
                    .collect();
                if parts.iter().any(|p| p == "." || p == "..") {
                    return Err(ParentError::DotDot);
                }
                Ok(parts)
            }
            Driver::Systemd => crius_oci::cgroup::systemd::expand_slice(name)
                .map(|p| p.iter().map(|c| c.to_string_lossy().into_owned()).collect())
                .map_err(|_| ParentError::NotSlice),
        }
    }

    /// Checks a pod's `parent` against the root: empty (crius's own default) or within it.
    pub fn check(&self, driver: Driver, parent: &str) -> Result<(), ParentError> {
        if parent.is_empty() {
            return Ok(());
        }
        let p = self.parts(driver, parent)?;
        if self.is_any() {
            return Ok(());
        }
        let root = self.parts(driver, &self.0)?;
        if !p.starts_with(&root) {
            return Err(ParentError::Outside {
                parent: parent.to_string(),
                root: self.0.clone(),
            });
        }
        Ok(())
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

    /// Found by convert/proptests.rs: these reached config.json and failed only in the runtime.
    #[test]
    fn a_cgroup_parent_must_be_a_slice_under_the_systemd_driver() {
        for ok in ["kubepods-besteffort-pod1.slice", ""] {
            Driver::Systemd.check_parent("RunPodSandbox", ok).unwrap();
        }
        Driver::Cgroupfs
            .check_parent("RunPodSandbox", "/kubepods/besteffort/pod1")
            .unwrap();
        let e = Driver::Systemd
            .check_parent("RunPodSandbox", "/kubepods/besteffort/pod1")
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.to_string().contains("linux.cgroup_parent") && e.to_string().contains("slice name"),
            "{e}"
        );
    }

    #[test]
    fn a_parent_must_lie_within_the_root() {
        let fs = Driver::Cgroupfs;
        let any = ParentRoot::new(fs, "/").unwrap();
        any.check(fs, "/system.slice").unwrap();
        assert!(any.check(fs, "/kubepods/../x").is_err());
        let kube = ParentRoot::new(fs, "/kubepods").unwrap();
        for ok in [
            "",
            "/kubepods",
            "/kubepods/",
            "/kubepods/burstable/pod1",
            "kubepods/besteffort",
        ] {
            kube.check(fs, ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "/",
            "/system.slice",
            "/kubepods2",
            "/kubepodsx/pod",
            "/kubepods/../system.slice",
            "/kube",
        ] {
            let e = kube.check(fs, bad).unwrap_err();
            assert!(
                matches!(e, ParentError::Outside { .. } | ParentError::DotDot),
                "{bad}: {e}"
            );
        }
        let sd = Driver::Systemd;
        let kube = ParentRoot::new(sd, "kubepods.slice").unwrap();
        kube.check(sd, "kubepods-burstable-pod1.slice").unwrap();
        kube.check(sd, "kubepods.slice").unwrap();
        for bad in ["system.slice", "kubepods2-x.slice", "-.slice"] {
            assert!(kube.check(sd, bad).is_err(), "{bad}");
        }
        assert!(ParentRoot::new(sd, "/kubepods").is_err());
        assert!(ParentRoot::new(fs, "/a/../b").is_err());
        ParentRoot::new(sd, "")
            .unwrap()
            .check(sd, "system.slice")
            .unwrap();
    }
}
