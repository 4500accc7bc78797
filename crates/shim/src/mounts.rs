//! Mounting the rootfs containerd passes with Create (`rootfs: [Mount]`, e.g. an overlay from its snapshotter)
//! at `<bundle>/rootfs`, and unmounting it again.

use std::path::Path;

use nix::mount::{MntFlags, MsFlags, mount, umount2};

/// A mount as containerd passes it with Create (and reports it in the create event).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mount {
    /// The filesystem type (`overlay`, `bind`, …).
    pub kind: String,
    /// What is mounted.
    pub source: String,
    /// Where, below the target (empty: the target itself).
    pub target: String,
    /// Mount options: flags (`ro`, `nosuid`, …) and filesystem data (`lowerdir=…`).
    pub options: Vec<String>,
}

fn flag(opt: &str) -> Option<(bool, MsFlags)> {
    Some(match opt {
        "ro" => (true, MsFlags::MS_RDONLY),
        "rw" => (false, MsFlags::MS_RDONLY),
        "bind" => (true, MsFlags::MS_BIND),
        "rbind" => (true, MsFlags::MS_BIND | MsFlags::MS_REC),
        "nosuid" => (true, MsFlags::MS_NOSUID),
        "suid" => (false, MsFlags::MS_NOSUID),
        "nodev" => (true, MsFlags::MS_NODEV),
        "dev" => (false, MsFlags::MS_NODEV),
        "noexec" => (true, MsFlags::MS_NOEXEC),
        "exec" => (false, MsFlags::MS_NOEXEC),
        "relatime" => (true, MsFlags::MS_RELATIME),
        "noatime" => (true, MsFlags::MS_NOATIME),
        _ => return None,
    })
}

/// Mounts each of `mounts` on `target`, in order.
pub(crate) fn mount_all(mounts: &[Mount], target: &Path) -> crate::error::Result<()> {
    for m in mounts {
        let mut flags = MsFlags::empty();
        let mut data = Vec::new();
        for o in &m.options {
            match flag(o) {
                Some((true, f)) => flags |= f,
                Some((false, f)) => flags &= !f,
                None => data.push(o.as_str()),
            }
        }
        let data = data.join(",");
        let fstype = (!m.kind.is_empty() && m.kind != "bind").then_some(m.kind.as_str());
        mount(
            Some(m.source.as_str()),
            target,
            fstype,
            flags,
            (!data.is_empty()).then_some(data.as_str()),
        )
        .map_err(crate::error::Error::sys(format!(
            "mounting {} ({}) on {}",
            m.source,
            m.kind,
            target.display()
        )))?;
    }
    Ok(())
}

/// Unmounts whatever is mounted on `target` (all layers); nothing mounted is fine.
pub(crate) fn unmount_all(target: &Path) {
    while umount2(target, MntFlags::MNT_DETACH).is_ok() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn a_failed_mount_is_a_sys_error_naming_source_type_and_target() {
        let dir = tempfile::tempdir().unwrap();
        // A target that does not exist: refused (ENOENT as root, EPERM otherwise) before anything is mounted.
        let target = dir.path().join("missing");
        let m = Mount {
            kind: "tmpfs".into(),
            source: "none".into(),
            options: vec!["ro".into(), "size=4k".into()],
            ..Default::default()
        };
        let e = mount_all(&[m], &target).unwrap_err();
        assert!(matches!(e, Error::Sys { .. }), "{e:?}");
        let prefix = format!("mounting none (tmpfs) on {}: E", target.display());
        assert!(e.to_string().starts_with(&prefix), "{e}");
    }
}
