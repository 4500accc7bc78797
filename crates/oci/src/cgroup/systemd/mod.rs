//! The systemd cgroup driver: a container's cgroup is a transient scope that systemd makes and owns
//! (`--systemd-cgroup`, kubelet's `cgroupDriver: systemd`).
//!
//! `linux.cgroupsPath` is `slice:prefix:name`, as runc reads it: the scope `prefix-name.scope` in `slice`
//! (`system.slice` when empty). A slice name stands for its whole path, each dash one level down:
//! `kubepods-besteffort-pod1.slice` is `/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice`,
//! and systemd makes the slices that do not exist yet.
//!
//! The scope is started over D-Bus ([`dbus`], systemd's private socket, else the system bus) with
//! `Delegate=yes`, the accounting switches and, for every limit, the property that keeps it ([`props`]), so that
//! a `systemctl daemon-reload`, which has systemd write each unit's properties again, leaves the limits as they
//! are. The cgroup files are written directly too, as runc does, for what systemd has no property for.

pub mod dbus;
pub mod hold;
pub mod props;

use std::path::PathBuf;

use crate::{Result, err};

/// The default slice of a container without one, as runc's.
const DEFAULT_SLICE: &str = "system.slice";
/// The default prefix of a container's scope when its cgroupsPath names none.
const DEFAULT_PREFIX: &str = "crius";

/// A container's systemd unit and where its cgroup is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    /// The slice it is in, e.g. `kubepods-besteffort-pod1.slice`.
    pub slice: String,
    /// The unit, e.g. `crius-abc.scope`.
    pub unit: String,
}

impl Scope {
    /// The scope of `cgroups_path` (`slice:prefix:name`; None or empty: `system.slice:crius:<id>`). Any other
    /// form is refused, naming the form wanted.
    pub fn parse(cgroups_path: Option<&str>, id: &str) -> Result<Scope> {
        let path = cgroups_path.unwrap_or_default();
        if path.is_empty() {
            return Ok(Scope {
                slice: DEFAULT_SLICE.into(),
                unit: format!("{DEFAULT_PREFIX}-{id}.scope"),
            });
        }
        let parts: Vec<&str> = path.split(':').collect();
        let [slice, prefix, name] = parts[..] else {
            return Err(err!(
                "cgroupsPath {path:?}: the systemd cgroup driver wants the form slice:prefix:name"
            ));
        };
        let slice = if slice.is_empty() { DEFAULT_SLICE } else { slice };
        if !slice.ends_with(".slice") || slice.contains('/') {
            return Err(err!(
                "cgroupsPath {path:?}: {slice:?} is not a slice unit name (NAME.slice)"
            ));
        }
        if name.is_empty() || name.contains('/') {
            return Err(err!(
                "cgroupsPath {path:?}: the name part must be a non-empty unit name"
            ));
        }
        if name.ends_with(".slice") {
            return Err(err!(
                "cgroupsPath {path:?}: a slice as the container's own unit is not supported; give a scope name"
            ));
        }
        let unit = match (prefix, name.ends_with(".scope")) {
            (_, true) => name.to_string(),
            ("", false) => format!("{name}.scope"),
            (p, false) => format!("{p}-{name}.scope"),
        };
        Ok(Scope {
            slice: slice.into(),
            unit,
        })
    }

    /// The scope's cgroup directory, relative to the cgroup2 mount.
    pub fn relative_dir(&self) -> Result<PathBuf> {
        Ok(expand_slice(&self.slice)?.join(&self.unit))
    }
}

/// The cgroup path of slice `slice` below the cgroup2 mount, as systemd lays it out: `-.slice` is the root,
/// `a-b.slice` is `a.slice/a-b.slice`. A name systemd would refuse (an empty part, a slash) is refused.
pub fn expand_slice(slice: &str) -> Result<PathBuf> {
    let bad = || err!("{slice:?} is not a valid slice name");
    let stem = slice.strip_suffix(".slice").ok_or_else(bad)?;
    if stem == "-" {
        return Ok(PathBuf::new());
    }
    if stem.is_empty()
        || stem.contains('/')
        || stem.starts_with('-')
        || stem.ends_with('-')
        || stem.contains("--")
    {
        return Err(bad());
    }
    let mut path = PathBuf::new();
    let mut prefix = String::new();
    for part in stem.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        path.push(format!("{prefix}.slice"));
    }
    Ok(path)
}

/// Whether `cgroups_path` is in systemd's form (`slice:prefix:name`) rather than a cgroupfs path.
pub fn is_systemd_form(cgroups_path: &str) -> bool {
    !cgroups_path.starts_with('/') && cgroups_path.contains(':')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slices_expand_one_level_per_dash() {
        assert_eq!(expand_slice("-.slice").unwrap(), PathBuf::new());
        assert_eq!(
            expand_slice("system.slice").unwrap(),
            PathBuf::from("system.slice")
        );
        assert_eq!(
            expand_slice("kubepods-besteffort-pod1_2.slice").unwrap(),
            PathBuf::from("kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1_2.slice")
        );
        for bad in [
            "kubepods",
            "-a.slice",
            "a-.slice",
            "a--b.slice",
            "a/b.slice",
            ".slice",
        ] {
            assert!(expand_slice(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cgroups_paths_name_the_scope_as_runc_does() {
        let s = Scope::parse(Some("kubepods-burstable-pod9.slice:crius:abc"), "abc").unwrap();
        assert_eq!(s.unit, "crius-abc.scope");
        assert_eq!(s.slice, "kubepods-burstable-pod9.slice");
        assert_eq!(
            s.relative_dir().unwrap(),
            PathBuf::from(
                "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod9.slice/crius-abc.scope"
            )
        );
        assert_eq!(
            Scope::parse(Some(":cri-containerd:x"), "x").unwrap().slice,
            "system.slice"
        );
        assert_eq!(Scope::parse(Some("a.slice::x"), "x").unwrap().unit, "x.scope");
        assert_eq!(
            Scope::parse(Some("a.slice:p:x.scope"), "x").unwrap().unit,
            "x.scope"
        );
        let d = Scope::parse(None, "id1").unwrap();
        assert_eq!(
            (d.slice.as_str(), d.unit.as_str()),
            ("system.slice", "crius-id1.scope")
        );
    }

    #[test]
    fn other_forms_are_refused_naming_the_form() {
        for bad in [
            "/kubepods/pod1",
            "a.slice:x",
            "a:b:c:d",
            "notaslice:p:x",
            "a.slice:p:",
            "a.slice:p:b.slice",
        ] {
            let e = Scope::parse(Some(bad), "x").unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
        assert!(is_systemd_form("a.slice:p:x") && !is_systemd_form("/a/b") && !is_systemd_form("a/b"));
    }
}
