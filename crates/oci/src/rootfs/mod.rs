//! The container's root filesystem: propagation, the config's mounts, /dev, pivot_root, masked and read-only
//! paths. Runs inside the container's new mount namespace, before and after `pivot_root`.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use oci_spec::runtime::{LinuxDevice, LinuxDeviceType, Mount, Spec};

use crate::{Result, err};

/// Resolves `path` inside `root` as if `root` were `/`: `..` and symlinks (absolute or relative) never leave it.
pub fn secure_join(root: &Path, path: &Path) -> Result<PathBuf> {
    let mut pending: Vec<PathBuf> = path
        .components()
        .rev()
        .map(|c| PathBuf::from(c.as_os_str()))
        .collect();
    let mut resolved = PathBuf::new();
    let mut links = 0;
    while let Some(part) = pending.pop() {
        match part.components().next() {
            None | Some(Component::RootDir | Component::CurDir) => continue,
            Some(Component::ParentDir) => {
                resolved.pop();
                continue;
            }
            _ => {}
        }
        let candidate = root.join(&resolved).join(&part);
        match std::fs::symlink_metadata(&candidate) {
            Ok(m) if m.file_type().is_symlink() => {
                links += 1;
                if links > 255 {
                    return Err(err!(
                        "too many symlinks resolving {} in {}",
                        path.display(),
                        root.display()
                    ));
                }
                let target =
                    std::fs::read_link(&candidate).map_err(|e| err!("{}: {e}", candidate.display()))?;
                if target.is_absolute() {
                    resolved = PathBuf::new();
                }
                pending.extend(target.components().rev().map(|c| PathBuf::from(c.as_os_str())));
            }
            _ => resolved.push(part),
        }
    }
    Ok(root.join(resolved))
}

/// Mount flags and data of an options list.
#[derive(Debug, PartialEq, Eq)]
pub struct Options {
    /// Flags for the mount call.
    pub flags: MsFlags,
    /// Propagation flags, applied by a second call.
    pub propagation: MsFlags,
    /// Filesystem-specific options, comma-separated.
    pub data: String,
    /// A bind mount (`bind` or `rbind`).
    pub bind: bool,
}

/// Parses mount options as mount(8) names them.
pub fn parse_options(opts: &[String]) -> Options {
    let mut o = Options {
        flags: MsFlags::empty(),
        propagation: MsFlags::empty(),
        data: String::new(),
        bind: false,
    };
    let mut data = Vec::new();
    for opt in opts {
        let (set, clear) = match opt.as_str() {
            "ro" => (MsFlags::MS_RDONLY, MsFlags::empty()),
            "rw" => (MsFlags::empty(), MsFlags::MS_RDONLY),
            "nosuid" => (MsFlags::MS_NOSUID, MsFlags::empty()),
            "suid" => (MsFlags::empty(), MsFlags::MS_NOSUID),
            "nodev" => (MsFlags::MS_NODEV, MsFlags::empty()),
            "dev" => (MsFlags::empty(), MsFlags::MS_NODEV),
            "noexec" => (MsFlags::MS_NOEXEC, MsFlags::empty()),
            "exec" => (MsFlags::empty(), MsFlags::MS_NOEXEC),
            "sync" => (MsFlags::MS_SYNCHRONOUS, MsFlags::empty()),
            "async" => (MsFlags::empty(), MsFlags::MS_SYNCHRONOUS),
            "dirsync" => (MsFlags::MS_DIRSYNC, MsFlags::empty()),
            "remount" => (MsFlags::MS_REMOUNT, MsFlags::empty()),
            "mand" => (MsFlags::MS_MANDLOCK, MsFlags::empty()),
            "nomand" => (MsFlags::empty(), MsFlags::MS_MANDLOCK),
            "atime" => (MsFlags::empty(), MsFlags::MS_NOATIME),
            "noatime" => (MsFlags::MS_NOATIME, MsFlags::empty()),
            "diratime" => (MsFlags::empty(), MsFlags::MS_NODIRATIME),
            "nodiratime" => (MsFlags::MS_NODIRATIME, MsFlags::empty()),
            "relatime" => (MsFlags::MS_RELATIME, MsFlags::empty()),
            "norelatime" => (MsFlags::empty(), MsFlags::MS_RELATIME),
            "strictatime" => (MsFlags::MS_STRICTATIME, MsFlags::empty()),
            "nostrictatime" => (MsFlags::empty(), MsFlags::MS_STRICTATIME),
            "bind" => {
                o.bind = true;
                (MsFlags::MS_BIND, MsFlags::empty())
            }
            "rbind" => {
                o.bind = true;
                (MsFlags::MS_BIND | MsFlags::MS_REC, MsFlags::empty())
            }
            "private" | "rprivate" | "shared" | "rshared" | "slave" | "rslave" | "unbindable"
            | "runbindable" => {
                o.propagation |= propagation(opt).unwrap_or(MsFlags::empty());
                continue;
            }
            "tmpcopyup" | "defaults" => continue,
            other => {
                data.push(other.to_string());
                continue;
            }
        };
        o.flags = (o.flags | set) & !clear;
    }
    o.data = data.join(",");
    o
}

/// Propagation flags of a propagation name (`rslave`, `private`, ...).
pub fn propagation(name: &str) -> Option<MsFlags> {
    let rec = if name.starts_with('r') {
        MsFlags::MS_REC
    } else {
        MsFlags::empty()
    };
    let kind = match name.trim_start_matches('r') {
        "private" => MsFlags::MS_PRIVATE,
        "shared" => MsFlags::MS_SHARED,
        "slave" => MsFlags::MS_SLAVE,
        "unbindable" => MsFlags::MS_UNBINDABLE,
        _ => return None,
    };
    Some(kind | rec)
}

fn mnt(
    src: Option<&Path>,
    dst: &Path,
    fstype: Option<&str>,
    flags: MsFlags,
    data: Option<&str>,
) -> Result<()> {
    mount(src, dst, fstype, flags, data).map_err(|e| {
        err!(
            "mount {} on {} (type {}, flags {flags:?}): {e}",
            src.map(|s| s.display().to_string()).unwrap_or_default(),
            dst.display(),
            fstype.unwrap_or("none")
        )
    })
}

/// The flags of the mount at `p` that cannot be cleared in a user namespace.
fn locked_flags(p: &Path) -> MsFlags {
    let Ok(st) = nix::sys::statvfs::statvfs(p) else {
        return MsFlags::empty();
    };
    use nix::sys::statvfs::FsFlags;
    let f = st.flags();
    let mut m = MsFlags::empty();
    for (fs, ms) in [
        (FsFlags::ST_NOSUID, MsFlags::MS_NOSUID),
        (FsFlags::ST_NODEV, MsFlags::MS_NODEV),
        (FsFlags::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (FsFlags::ST_RDONLY, MsFlags::MS_RDONLY),
    ] {
        if f.contains(fs) {
            m |= ms;
        }
    }
    m
}

fn mount_one(rootfs: &Path, bundle: &Path, m: &Mount, userns: bool) -> Result<()> {
    let dest = secure_join(rootfs, m.destination())?;
    let o = parse_options(m.options().as_deref().unwrap_or_default());
    let mut fstype = m.typ().clone().unwrap_or_else(|| "none".into());
    if fstype == "cgroup" {
        fstype = "cgroup2".into();
    }
    let source = m.source().as_ref().map(|s| {
        if s.is_absolute() {
            s.clone()
        } else {
            bundle.join(s)
        }
    });
    if o.bind || fstype == "bind" {
        let src = source.ok_or_else(|| err!("bind mount on {} has no source", m.destination().display()))?;
        let meta = std::fs::metadata(&src).map_err(|e| err!("bind mount source {}: {e}", src.display()))?;
        make_target(&dest, meta.is_dir())?;
        let rec = o.flags & MsFlags::MS_REC;
        mnt(Some(&src), &dest, None, MsFlags::MS_BIND | rec, None)?;
        let extra = o.flags & !(MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_REMOUNT);
        if !extra.is_empty() {
            let locked = if userns {
                locked_flags(&dest)
            } else {
                MsFlags::empty()
            };
            mnt(
                None,
                &dest,
                None,
                MsFlags::MS_BIND | MsFlags::MS_REMOUNT | extra | locked | rec,
                None,
            )?;
        }
    } else {
        make_target(&dest, true)?;
        let data = (!o.data.is_empty()).then_some(o.data.as_str());
        let src = source.unwrap_or_else(|| PathBuf::from(&fstype));
        let res = mnt(Some(&src), &dest, Some(&fstype), o.flags, data);
        match res {
            // Without its own network namespace a user namespace may not mount sysfs: bind the host's.
            Err(_) if fstype == "sysfs" && userns => mnt(
                Some(Path::new("/sys")),
                &dest,
                None,
                MsFlags::MS_BIND | MsFlags::MS_REC,
                None,
            )?,
            r => r?,
        }
    }
    if !o.propagation.is_empty() {
        mnt(None, &dest, None, o.propagation, None)?;
    }
    Ok(())
}

fn make_target(dest: &Path, dir: bool) -> Result<()> {
    if dir {
        std::fs::create_dir_all(dest).map_err(|e| err!("creating mount point {}: {e}", dest.display()))
    } else {
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent).map_err(|e| err!("creating {}: {e}", parent.display()))?;
        }
        if !dest.exists() {
            std::fs::File::create(dest).map_err(|e| err!("creating mount point {}: {e}", dest.display()))?;
        }
        Ok(())
    }
}

/// The device nodes every container gets: (name, major, minor).
const DEFAULT_DEVICES: &[(&str, u64, u64)] = &[
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

fn make_device(
    rootfs: &Path,
    path: &Path,
    kind: LinuxDeviceType,
    major: u64,
    minor: u64,
    d: Option<&LinuxDevice>,
    userns: bool,
) -> Result<()> {
    let dest = secure_join(rootfs, path)?;
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| err!("creating {}: {e}", parent.display()))?;
    }
    let _ = std::fs::remove_file(&dest);
    if userns {
        // mknod is not allowed in a user namespace: bind the host's node.
        std::fs::File::create(&dest).map_err(|e| err!("creating {}: {e}", dest.display()))?;
        return mnt(Some(path), &dest, None, MsFlags::MS_BIND, None);
    }
    let sflag = match kind {
        LinuxDeviceType::B => nix::sys::stat::SFlag::S_IFBLK,
        LinuxDeviceType::P => nix::sys::stat::SFlag::S_IFIFO,
        _ => nix::sys::stat::SFlag::S_IFCHR,
    };
    let mode = d.and_then(|d| d.file_mode()).unwrap_or(0o666);
    let perm = nix::sys::stat::Mode::from_bits_truncate(mode);
    nix::sys::stat::mknod(&dest, sflag, perm, nix::sys::stat::makedev(major, minor))
        .map_err(|e| err!("mknod {}: {e}", dest.display()))?;
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| err!("chmod {}: {e}", dest.display()))?;
    let uid = d.and_then(|d| d.uid());
    let gid = d.and_then(|d| d.gid());
    if uid.is_some() || gid.is_some() {
        std::os::unix::fs::chown(&dest, uid, gid).map_err(|e| err!("chown {}: {e}", dest.display()))?;
    }
    Ok(())
}

fn setup_dev(rootfs: &Path, spec: &Spec, userns: bool) -> Result<()> {
    for &(name, major, minor) in DEFAULT_DEVICES {
        let p = PathBuf::from("/dev").join(name);
        make_device(rootfs, &p, LinuxDeviceType::C, major, minor, None, userns)?;
    }
    let devices = spec
        .linux()
        .as_ref()
        .and_then(|l| l.devices().clone())
        .unwrap_or_default();
    for d in &devices {
        make_device(
            rootfs,
            d.path(),
            d.typ(),
            d.major() as u64,
            d.minor() as u64,
            Some(d),
            userns,
        )?;
    }
    let dev = secure_join(rootfs, Path::new("/dev"))?;
    let links: &[(&str, &str)] = &[
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ];
    for (name, target) in links {
        let p = dev.join(name);
        if std::fs::symlink_metadata(&p).is_err() {
            symlink(target, &p).map_err(|e| err!("symlink {}: {e}", p.display()))?;
        }
    }
    if Path::new("/proc/kcore").exists() && std::fs::symlink_metadata(dev.join("core")).is_err() {
        let _ = symlink("/proc/kcore", dev.join("core"));
    }
    Ok(())
}

/// pivot_root refuses a new root that is shared or whose parent mount is (EINVAL), as they are once
/// rootfsPropagation is `rshared`. The mount holding the rootfs (the rootfs itself when it is a mount point,
/// as an overlay snapshot is) is made private in the container's mount namespace, as runc does, before the
/// rootfs is bound onto itself (a bind of a private mount is private). Mounts made below it afterwards keep
/// their own propagation, so a Bidirectional mount still reaches the host.
fn rootfs_mount_private(rootfs: &Path) -> Result<()> {
    let rootfs = std::fs::canonicalize(rootfs).unwrap_or_else(|_| rootfs.to_path_buf());
    let mounts = crius_common::mountinfo::mounts().map_err(|e| err!("reading the mount table: {e}"))?;
    match crius_common::mountinfo::holding(&mounts, &rootfs) {
        Some(m) if m.shared => mnt(None, &m.mount_point, None, MsFlags::MS_PRIVATE, None),
        _ => Ok(()),
    }
}

/// Before pivot_root: propagation, the rootfs as a mount point, the config's mounts and /dev.
pub fn prepare(spec: &Spec, rootfs: &Path, bundle: &Path, userns: bool) -> Result<()> {
    let linux = spec.linux().as_ref();
    let prop = linux
        .and_then(|l| l.rootfs_propagation().as_deref())
        .filter(|p| !p.is_empty())
        .map(|p| {
            propagation(p).ok_or_else(|| err!("linux.rootfsPropagation {p:?} is not a propagation mode"))
        })
        .transpose()?
        .unwrap_or(MsFlags::MS_SLAVE | MsFlags::MS_REC);
    mnt(None, Path::new("/"), None, prop, None)?;
    rootfs_mount_private(rootfs)?;
    mnt(
        Some(rootfs),
        rootfs,
        None,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None,
    )?;
    let mut dev_mounted = false;
    for m in spec.mounts().iter().flatten() {
        mount_one(rootfs, bundle, m, userns)?;
        if m.destination() == Path::new("/dev") {
            dev_mounted = true;
        }
    }
    let host_dev =
        spec.mounts().iter().flatten().any(|m| {
            m.destination() == Path::new("/dev") && m.source().as_deref() == Some(Path::new("/dev"))
        });
    if !host_dev && (dev_mounted || rootfs.join("dev").is_dir()) {
        setup_dev(rootfs, spec, userns)?;
    }
    Ok(())
}

/// Makes `rootfs` the root: pivot_root with the old root stacked on top, then detached.
pub fn pivot(rootfs: &Path) -> Result<()> {
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::Mode;
    let old = open(
        "/",
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err!("opening /: {e}"))?;
    let new = open(
        rootfs,
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err!("opening {}: {e}", rootfs.display()))?;
    nix::unistd::fchdir(&new).map_err(|e| err!("chdir to rootfs: {e}"))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| err!("pivot_root {}: {e}", rootfs.display()))?;
    nix::unistd::fchdir(&old).map_err(|e| err!("chdir to old root: {e}"))?;
    mnt(
        None,
        Path::new("."),
        None,
        MsFlags::MS_SLAVE | MsFlags::MS_REC,
        None,
    )?;
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| err!("detaching the old root: {e}"))?;
    nix::unistd::chdir("/").map_err(|e| err!("chdir /: {e}"))?;
    Ok(())
}

/// After pivot_root: sysctls, masked paths, read-only paths, read-only root.
pub fn finalize(spec: &Spec, userns: bool) -> Result<()> {
    let linux = spec.linux().as_ref();
    // Sysctls first: /proc/sys is usually among the read-only paths.
    let mut sysctls: Vec<_> = linux
        .and_then(|l| l.sysctl().as_ref())
        .into_iter()
        .flatten()
        .collect();
    sysctls.sort();
    for (k, v) in sysctls {
        if k.split(['.', '/']).any(|s| s.is_empty() || s == "..") {
            return Err(err!("linux.sysctl: {k:?} is not a sysctl name"));
        }
        let p = PathBuf::from("/proc/sys").join(k.replace('.', "/"));
        std::fs::write(&p, v).map_err(|e| err!("linux.sysctl {k}={v}: writing {}: {e}", p.display()))?;
    }
    for p in linux
        .and_then(|l| l.masked_paths().as_ref())
        .into_iter()
        .flatten()
    {
        let path = Path::new(p);
        let r = match std::fs::metadata(path) {
            Err(_) => continue,
            Ok(m) if m.is_dir() => mnt(
                Some(Path::new("tmpfs")),
                path,
                Some("tmpfs"),
                MsFlags::MS_RDONLY,
                None,
            ),
            Ok(_) => mnt(Some(Path::new("/dev/null")), path, None, MsFlags::MS_BIND, None),
        };
        r.map_err(|e| err!("masking {p}: {e}"))?;
    }
    for p in linux
        .and_then(|l| l.readonly_paths().as_ref())
        .into_iter()
        .flatten()
    {
        let path = Path::new(p);
        if !path.exists() {
            continue;
        }
        mnt(Some(path), path, None, MsFlags::MS_BIND | MsFlags::MS_REC, None)?;
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | MsFlags::MS_REC;
        let locked = locked_flags(path) | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        mnt(None, path, None, flags | locked, None).map_err(|e| err!("making {p} read-only: {e}"))?;
    }
    if spec.root().as_ref().and_then(|r| r.readonly()) == Some(true) {
        let locked = if userns {
            locked_flags(Path::new("/"))
        } else {
            MsFlags::empty()
        };
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked;
        mnt(None, Path::new("/"), None, flags, None).map_err(|e| err!("making the rootfs read-only: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secure_join_stays_inside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        symlink("/etc", root.join("a/abs")).unwrap();
        symlink("../../../../..", root.join("a/up")).unwrap();
        symlink("loop2", root.join("loop1")).unwrap();
        symlink("loop1", root.join("loop2")).unwrap();
        assert_eq!(secure_join(root, Path::new("/a/b")).unwrap(), root.join("a/b"));
        assert_eq!(secure_join(root, Path::new("/../../x")).unwrap(), root.join("x"));
        assert_eq!(
            secure_join(root, Path::new("/a/abs/passwd")).unwrap(),
            root.join("etc/passwd")
        );
        assert_eq!(
            secure_join(root, Path::new("/a/up/etc")).unwrap(),
            root.join("etc")
        );
        assert!(secure_join(root, Path::new("/loop1/x")).is_err());
    }

    #[test]
    fn options() {
        let o =
            parse_options(&["nosuid", "noexec", "mode=755", "size=65536k", "rslave", "ro"].map(String::from));
        assert_eq!(
            o.flags,
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY
        );
        assert_eq!(o.propagation, MsFlags::MS_SLAVE | MsFlags::MS_REC);
        assert_eq!(o.data, "mode=755,size=65536k");
        let o = parse_options(&["rbind", "ro", "rw"].map(String::from));
        assert!(o.bind && o.flags == MsFlags::MS_BIND | MsFlags::MS_REC);
    }
}
