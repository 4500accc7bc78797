//! The container's root filesystem: propagation, the config's mounts, /dev, pivot_root, masked and read-only
//! paths. Runs inside the container's new mount namespace, before and after `pivot_root`. Every path inside
//! the rootfs is resolved by fd, inside it ([`crius_common::inroot`]): see [`mounts`] (and the private `dev`
//! and `paths` modules).

mod dev;
pub mod idmap_overlay;
mod mountapi;
pub mod mounts;
pub mod options;
mod paths;
pub mod sources;

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use oci_spec::runtime::Spec;

pub use dev::bind_console;
pub use options::{Options, parse_options, propagation, recursive_names};
pub use sources::Sources;

use crate::{Result, err};

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

/// The flags of the mount `fd` is on that cannot be cleared in a user namespace.
fn locked_flags(fd: &impl AsFd) -> MsFlags {
    let Ok(st) = nix::sys::statvfs::fstatvfs(fd) else {
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

/// pivot_root refuses a new root that is shared or whose parent mount is (EINVAL), as they are once
/// rootfsPropagation is `rshared`. The mount holding the rootfs (the rootfs itself when it is a mount point,
/// as an overlay snapshot is) is made private in the container's mount namespace, as runc does, before the
/// rootfs is bound onto itself (a bind of a private mount is private). Mounts made below it afterwards keep
/// their own propagation, so a Bidirectional mount still reaches the host. `fd` is the rootfs, open: the
/// rootfs as its own mount point is changed through it (no path is searched again).
fn rootfs_mount_private(rootfs: &Path, fd: &OwnedFd) -> Result<()> {
    let rootfs = crius_common::inroot::real_path(fd).unwrap_or_else(|_| rootfs.to_path_buf());
    let mounts = crius_common::mountinfo::mounts().map_err(|e| err!("reading the mount table: {e}"))?;
    match crius_common::mountinfo::holding(&mounts, &rootfs) {
        Some(m) if m.shared && m.mount_point == rootfs => {
            mountapi::set_propagation(fd, MsFlags::MS_PRIVATE, &"the rootfs's mount")
        }
        Some(m) if m.shared => mnt(None, &m.mount_point, None, MsFlags::MS_PRIVATE, None),
        _ => Ok(()),
    }
}

/// Whether the container has a mount namespace of its own (new or joined). Without one it shares the
/// runtime's: nothing is changed on the mount tree but the config's mounts, and init chroots ([`pivot`]).
pub fn own_mount_namespace(spec: &Spec) -> bool {
    spec.linux()
        .as_ref()
        .and_then(|l| l.namespaces().as_ref())
        .is_some_and(|ns| {
            ns.iter()
                .any(|n| n.typ() == oci_spec::runtime::LinuxNamespaceType::Mount)
        })
}

/// Before pivot_root: propagation, the rootfs as a mount point, the config's mounts and /dev. `sources` holds
/// what the runtime opened before a user namespace (else each is opened here by path). Returns the rootfs's
/// own mount, for [`pivot`]. Without a mount namespace of its own ([`own_mount_namespace`]) the host's
/// propagation is left alone and the rootfs is used where it is.
pub fn prepare(
    spec: &Spec,
    rootfs: &Path,
    bundle: &Path,
    userns: bool,
    sources: Sources,
) -> Result<mounts::Root> {
    if !own_mount_namespace(spec) {
        let root = mounts::Root::open(rootfs)?;
        return prepare_mounts(spec, root, bundle, userns, sources);
    }
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
    let src = if sources.root_is_cwd {
        mountapi::open_source(Path::new("."))?
    } else {
        mountapi::open_source(rootfs)?
    };
    // After a recursive slave, private or unbindable (rslave is the default) no mount is shared: the mount
    // table need not be read (printing it is most of a create's kernel time on a node with many pods).
    let none_shared = prop.contains(MsFlags::MS_REC)
        && prop.intersects(MsFlags::MS_SLAVE | MsFlags::MS_PRIVATE | MsFlags::MS_UNBINDABLE);
    if !none_shared {
        rootfs_mount_private(rootfs, &src)?;
    }
    // The rootfs bound onto itself; the new mount's fd is where the mounts and pivot_root go.
    let what = format!("the rootfs {}", rootfs.display());
    let tree = mountapi::clone_tree(&src, true, &what)?;
    mountapi::attach(&tree, &src, &what)?;
    let path = crius_common::inroot::real_path(&tree).map_err(|e| err!("{what}: {e}"))?;
    let root = mounts::Root { fd: tree, path };
    prepare_mounts(spec, root, bundle, userns, sources)
}

/// The config's mounts and /dev, inside `root`.
fn prepare_mounts(
    spec: &Spec,
    root: mounts::Root,
    bundle: &Path,
    userns: bool,
    mut sources: Sources,
) -> Result<mounts::Root> {
    let mut dev_mounted = false;
    for (i, m) in spec.mounts().iter().flatten().enumerate() {
        mounts::mount_one(&root, bundle, m, userns, sources.take(i))?;
        if m.destination() == Path::new("/dev") {
            dev_mounted = true;
        }
    }
    let host_dev =
        spec.mounts().iter().flatten().any(|m| {
            m.destination() == Path::new("/dev") && m.source().as_deref() == Some(Path::new("/dev"))
        });
    let has_dev = || crius_common::inroot::open(root.fd.as_fd(), Path::new("/dev")).is_ok();
    if !host_dev && (dev_mounted || has_dev()) {
        dev::setup(&root, spec, userns)?;
    }
    Ok(root)
}

/// Makes `root` (the rootfs's own mount, from [`prepare`]) the root: pivot_root with the old root stacked on
/// top, then detached; without a mount namespace of its own (the host's would lose its root), chroot.
pub fn pivot(root: &mounts::Root, own_mountns: bool) -> Result<()> {
    if !own_mountns {
        nix::unistd::fchdir(&root.fd).map_err(|e| err!("chdir to rootfs {}: {e}", root.path.display()))?;
        nix::unistd::chroot(".").map_err(|e| err!("chroot {}: {e}", root.path.display()))?;
        return nix::unistd::chdir("/").map_err(|e| err!("chdir /: {e}"));
    }
    use nix::fcntl::{OFlag, open};
    use nix::sys::stat::Mode;
    let old = open(
        "/",
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err!("opening /: {e}"))?;
    nix::unistd::fchdir(&root.fd).map_err(|e| err!("chdir to rootfs {}: {e}", root.path.display()))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| err!("pivot_root {}: {e}", root.path.display()))?;
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
    if !sysctls.is_empty() {
        // Through procfs only: a file mounted over /proc/sys/... cannot take the write (CVE-2025-52881).
        let proc = crate::procfs::Proc::open().map_err(|e| err!("linux.sysctl: {e}"))?;
        for (k, v) in sysctls {
            if k.split(['.', '/']).any(|s| s.is_empty() || s == "..") {
                return Err(err!("linux.sysctl: {k:?} is not a sysctl name"));
            }
            let rel = format!("sys/{}", k.replace('.', "/"));
            proc.write(&rel, v.as_bytes())
                .map_err(|e| err!("linux.sysctl {k}={v}: writing /proc/{rel}: {e}"))?;
        }
    }
    if !own_mount_namespace(spec) {
        // The rest changes mounts, which are the host's here (config::check refuses what would need it).
        return Ok(());
    }
    let root = mounts::Root::open(Path::new("/"))?;
    mounts::remount_read_only(&root, spec.mounts().as_deref().unwrap_or_default())?;
    let masked = linux.and_then(|l| l.masked_paths().as_ref());
    let readonly = linux.and_then(|l| l.readonly_paths().as_ref());
    // Read-only paths first, as runc >= 1.2.8 does: a mask's bind can then land in no writable place under
    // them (CVE-2025-31133), and /proc/sys is read-only before anything else is mounted in /proc.
    paths::read_only(&root, readonly.into_iter().flatten())?;
    paths::mask(&root, masked.into_iter().flatten())?;
    if spec.root().as_ref().and_then(|r| r.readonly()) == Some(true) {
        let locked = if userns {
            locked_flags(&root.fd)
        } else {
            MsFlags::empty()
        };
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | locked;
        mnt(None, Path::new("/"), None, flags, None).map_err(|e| err!("making the rootfs read-only: {e}"))?;
    }
    Ok(())
}
