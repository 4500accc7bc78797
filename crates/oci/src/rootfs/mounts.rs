//! The config's mounts, made inside the rootfs by fd. Each destination is opened (and made when missing) with
//! [`crius_common::inroot`] from an fd of the rootfs, so a symlink or `..` in it, even one swapped in by
//! another container while the runtime works (CVE-2021-30465), resolves inside the rootfs; the mount goes
//! onto that fd, never onto the path again. Bind mounts are cloned (`open_tree`), given their flags while
//! detached and attached with `move_mount`; other filesystems are mounted onto `/proc/self/fd/N` of the
//! destination. The recursive options (`rro`, ...) go onto the new tree with `AT_RECURSIVE`, so a read-only
//! bind of a directory holding mounts is read-only all the way down. Destinations at or under /proc are
//! refused but a procfs on /proc and lxcfs's files.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crius_common::inroot::{self, ProcPlace};
use nix::errno::Errno;
use nix::mount::MsFlags;
use oci_spec::runtime::Mount;

use super::locked_flags;
use super::mountapi::{self, attach, clone_tree, open_source};
use super::options::{Options, parse_options};
use crate::{Result, err};

/// The rootfs, open: mounts and files are made from this fd.
pub struct Root {
    /// An fd of the rootfs directory (on the rootfs's own bind mount).
    pub fd: OwnedFd,
    /// Its path as the kernel names it, to tell where an fd inside it is.
    pub path: PathBuf,
}

impl Root {
    /// Opens directory `path` as a root.
    pub fn open(path: &Path) -> Result<Root> {
        let fd = open_source(path)?;
        let path = inroot::real_path(&fd).map_err(|e| err!("{}: {e}", path.display()))?;
        Ok(Root { fd, path })
    }

    /// Where `fd` (opened inside the root) is, as a path in the container.
    pub fn place_of(&self, fd: &OwnedFd, what: &str) -> Result<PathBuf> {
        let real = inroot::real_path(fd).map_err(|e| err!("{what}: {e}"))?;
        let rel = real
            .strip_prefix(&self.path)
            .map_err(|_| err!("{what}: resolved to {}, outside the rootfs", real.display()))?;
        Ok(Path::new("/").join(rel))
    }
}

const PROC_SUPER_MAGIC: i64 = 0x9fa0;

fn is_procfs(fd: &OwnedFd) -> bool {
    nix::sys::statfs::fstatfs(fd.as_fd()).is_ok_and(|s| s.filesystem_type().0 == PROC_SUPER_MAGIC)
}

/// Refuses a destination at `place` (a path in the container) for a mount of `fstype` (a bind of `source`).
fn check_proc(dest: &Path, place: &Path, fstype: &str, source: Option<&OwnedFd>) -> Result<()> {
    let named = if dest == place {
        String::new()
    } else {
        format!(" (it resolves to {})", place.display())
    };
    match inroot::proc_place(place) {
        ProcPlace::Outside | ProcPlace::Allowed => Ok(()),
        ProcPlace::Proc if fstype == "proc" || source.is_some_and(is_procfs) => Ok(()),
        ProcPlace::Proc => Err(err!(
            "mount {}{named}: only a procfs may be mounted on /proc (this is {fstype})",
            dest.display()
        )),
        ProcPlace::Inside => Err(err!(
            "mount {}{named}: destination is inside /proc, where only {} may be mounted over",
            dest.display(),
            inroot::PROC_FILES.join(", ")
        )),
    }
}

/// A bind mount's tree from its source `src`, detached and with its flags (the recursive options last: they
/// win over the top mount's own). In a user namespace (`userns`) the flags the source has locked are kept.
pub(super) fn bind_tree(src: &OwnedFd, o: &Options, userns: bool, what: &str) -> Result<OwnedFd> {
    let tree = clone_tree(src, o.flags.contains(MsFlags::MS_REC), &what)?;
    let extra = o.flags & !(MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_REMOUNT);
    if !extra.is_empty() {
        let keep = if userns {
            mountapi::attrs(locked_flags(src))
        } else {
            0
        };
        mountapi::set_flags(&tree, mountapi::attrs(extra), keep, false, &what)?;
    }
    set_recursive(&tree, o, &what)?;
    Ok(tree)
}

/// Whether mount `m` (of filesystem `fstype`) is mounted writable first and made read-only only by
/// [`remount_read_only`] once the rootfs is complete, as runc does: a tmpfs may get files made or chmod-ed in it
/// and /dev gets its nodes and the mounts below it (`/dev/pts`, `/dev/shm`).
pub fn read_only_later(m: &Mount, fstype: &str) -> bool {
    fstype == "tmpfs" || inroot::clean(m.destination()) == Path::new("dev")
}

/// A proc or sysfs whose mount point exists but is no directory (a symlink included) is refused before anything
/// is mounted, in runc's words: a mount through a symlink swapped in for /proc was an attack (CVE-2019-19921).
/// A missing mount point is made later as usual.
fn ordinary_dir(root: &Root, dest: &Path, fstype: &str) -> Result<()> {
    if !matches!(fstype, "proc" | "sysfs") {
        return Ok(());
    }
    let (Some(parent), Some(name)) = (dest.parent(), dest.file_name()) else {
        return Ok(());
    };
    let Ok(dir) = inroot::open(root.fd.as_fd(), parent) else {
        return Ok(());
    };
    match nix::sys::stat::fstatat(dir.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => Err(err!(
            "mount {}: filesystem {fstype:?} must be mounted on ordinary directory",
            dest.display()
        )),
        _ => Ok(()),
    }
}

/// Makes mount `m` inside `root`. A bind mount's relative source is relative to `bundle`; `made` is the bind
/// tree the runtime made for it before the user namespace ([`super::sources`]), else it is made here.
pub fn mount_one(root: &Root, bundle: &Path, m: &Mount, userns: bool, made: Option<OwnedFd>) -> Result<()> {
    let dest = Path::new("/").join(inroot::clean(m.destination()));
    let what = format!("mount {}", m.destination().display());
    let mut o = parse_options(m.options().as_deref().unwrap_or_default());
    let mut fstype = m.typ().clone().unwrap_or_else(|| "none".into());
    if fstype == "cgroup" {
        fstype = "cgroup2".into();
    }
    if read_only_later(m, &fstype) {
        o.flags.remove(MsFlags::MS_RDONLY);
    }
    let premade = made.is_some();
    let bind = o.bind || fstype == "bind" || premade;
    // Only a bind mount's source is a path, relative to the bundle; another filesystem's is a name the
    // kernel shows in the mount table (`proc`, `tmpfs`, `shm`), passed as it is.
    let source = m.source().as_ref().map(|s| {
        if s.is_absolute() || !bind {
            s.clone()
        } else {
            bundle.join(s)
        }
    });
    let src_fd = match made {
        Some(tree) => Some(tree),
        None if bind => {
            let src = source
                .as_ref()
                .ok_or_else(|| err!("{what}: a bind mount needs a source"))?;
            Some(open_source(src).map_err(|e| err!("{what}: {e}"))?)
        }
        None => None,
    };
    check_proc(&dest, &dest, &fstype, src_fd.as_ref())?;
    let is_dir = match &src_fd {
        Some(fd) => nix::sys::stat::fstat(fd.as_fd())
            .map(|s| s.st_mode & libc::S_IFMT == libc::S_IFDIR)
            .map_err(|e| err!("{what}: source: {e}"))?,
        None => true,
    };
    ordinary_dir(root, &dest, &fstype)?;
    let target = inroot::create(root.fd.as_fd(), &dest, is_dir)
        .map_err(|e| err!("{what}: making the mount point in the rootfs: {e}"))?;
    check_proc(&dest, &root.place_of(&target, &what)?, &fstype, src_fd.as_ref())?;
    if let Some(src) = src_fd {
        let tree = if premade {
            src
        } else {
            bind_tree(&src, &o, userns, &what)?
        };
        attach(&tree, &target, &what)?;
        if !o.propagation.is_empty() {
            mountapi::set_propagation(&tree, o.propagation, &what)?;
        }
        return Ok(());
    }
    let on = inroot::fd_path(&target);
    let data = (!o.data.is_empty()).then_some(o.data.as_str());
    let src = source.unwrap_or_else(|| PathBuf::from(&fstype));
    match nix::mount::mount(Some(&src), &on, Some(fstype.as_str()), o.flags, data) {
        Ok(()) => {}
        // Without its own network namespace a user namespace may not mount sysfs: bind the host's.
        Err(_) if fstype == "sysfs" && userns => {
            let tree = clone_tree(&open_source(Path::new("/sys"))?, true, &what)?;
            attach(&tree, &target, &what)?;
        }
        // Nor cgroup2 without its own cgroup namespace (EPERM; EBUSY on some kernels): as runc does, bind the
        // host's cgroup2 mount with the mount's flags (those the host's mount has locked kept).
        Err(Errno::EPERM | Errno::EBUSY) if fstype == "cgroup2" && userns => {
            let host = crate::cgroup::mount_point()?;
            let src = open_source(&host)?;
            let tree = clone_tree(&src, false, &what)?;
            let extra = o.flags & !(MsFlags::MS_BIND | MsFlags::MS_REC | MsFlags::MS_REMOUNT);
            let keep = mountapi::attrs(locked_flags(&src));
            mountapi::set_flags(&tree, mountapi::attrs(extra), keep, false, &what)?;
            attach(&tree, &target, &what)?;
        }
        Err(e) => {
            return Err(err!(
                "{what}: mount {} on {} (type {fstype}, flags {:?}): {e}",
                src.display(),
                on.display(),
                o.flags
            ));
        }
    }
    if !o.propagation.is_empty() || !o.rec_set.is_empty() || !o.rec_clear.is_empty() {
        // The new mount is on top of the fd's: open it again, inside the root, and make sure it is another.
        let top = inroot::open(root.fd.as_fd(), &dest).map_err(|e| err!("{what}: reopening: {e}"))?;
        let before = inroot::mount_id(&target).map_err(|e| err!("{what}: {e}"))?;
        if inroot::mount_id(&top).map_err(|e| err!("{what}: {e}"))? == before {
            return Err(err!("{what}: the destination changed while it was mounted"));
        }
        set_recursive(&top, &o, &what)?;
        if !o.propagation.is_empty() {
            mountapi::set_propagation(&top, o.propagation, &what)?;
        }
    }
    Ok(())
}

/// The recursive options of `o` (`rro`, ...), on the mount `fd` is the root of and every submount.
fn set_recursive(fd: &OwnedFd, o: &Options, what: &dyn std::fmt::Display) -> Result<()> {
    if o.rec_set.is_empty() && o.rec_clear.is_empty() {
        return Ok(());
    }
    mountapi::set_recursive(fd, mountapi::attrs(o.rec_set), mountapi::attrs(o.rec_clear), what)
}

/// Makes the mounts of `spec` that [`read_only_later`] left writable read-only (after pivot_root: `root` is the
/// container's root). Each is opened inside the root; the flag goes onto the mount on top of it.
pub fn remount_read_only(root: &Root, mounts: &[Mount]) -> Result<()> {
    for m in mounts {
        let o = parse_options(m.options().as_deref().unwrap_or_default());
        let fstype = m.typ().clone().unwrap_or_default();
        if !o.flags.contains(MsFlags::MS_RDONLY) || !read_only_later(m, &fstype) {
            continue;
        }
        let what = format!("mount {}", m.destination().display());
        let fd =
            inroot::open(root.fd.as_fd(), m.destination()).map_err(|e| err!("{what}: reopening: {e}"))?;
        mountapi::set_flags(&fd, mountapi::ATTR_RDONLY, mountapi::ALL, false, &what)?;
    }
    Ok(())
}
