//! The kernel's fd-based mount calls, as the rootfs uses them: `open_tree` clones a tree into a detached
//! mount, `mount_setattr` sets its flags and propagation before or after it is attached, `move_mount` puts it
//! it onto a destination fd. Nothing here takes a path that is resolved again: sources and destinations are
//! fds opened beforehand.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::mount::MsFlags;

use crate::{Result, err};

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x40;
const AT_EMPTY_PATH: libc::c_uint = libc::AT_EMPTY_PATH as libc::c_uint;
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// `mount_setattr` flags.
pub const ATTR_RDONLY: u64 = 0x1;
/// No set-uid.
pub const ATTR_NOSUID: u64 = 0x2;
/// No devices.
pub const ATTR_NODEV: u64 = 0x4;
/// No exec.
pub const ATTR_NOEXEC: u64 = 0x8;
const ATTR_ATIME: u64 = 0x70;
const ATTR_NOATIME: u64 = 0x10;
const ATTR_STRICTATIME: u64 = 0x20;
const ATTR_NODIRATIME: u64 = 0x80;
const ATTR_IDMAP: u64 = 0x0010_0000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// A detached copy of the mount tree at `src` (the whole tree below it when `recursive`).
pub fn clone_tree(src: &impl AsRawFd, recursive: bool, what: &dyn std::fmt::Display) -> Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_EMPTY_PATH;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: open_tree with a valid fd, an empty C string and flags; it returns a new fd or -1.
    let fd = unsafe { libc::syscall(libc::SYS_open_tree, src.as_raw_fd(), c"".as_ptr(), flags) };
    Errno::result(fd).map_err(|e| err!("cloning the mount tree of {what}: {e}"))?;
    // SAFETY: a new fd this process owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attaches detached tree `tree` onto the file or directory `dest` is open on.
pub fn attach(tree: &OwnedFd, dest: &impl AsRawFd, what: &dyn std::fmt::Display) -> Result<()> {
    // SAFETY: move_mount with two valid fds, empty paths and the flags naming them.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            dest.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    Errno::result(r).map_err(|e| err!("attaching {what}: {e}"))?;
    Ok(())
}

/// The `mount_setattr` flags of mount(2) flags (the four basic ones and the atime ones).
pub fn attrs(flags: MsFlags) -> u64 {
    let mut a = 0;
    for (ms, at) in [
        (MsFlags::MS_RDONLY, ATTR_RDONLY),
        (MsFlags::MS_NOSUID, ATTR_NOSUID),
        (MsFlags::MS_NODEV, ATTR_NODEV),
        (MsFlags::MS_NOEXEC, ATTR_NOEXEC),
        (MsFlags::MS_NOATIME, ATTR_NOATIME),
        (MsFlags::MS_STRICTATIME, ATTR_STRICTATIME),
        (MsFlags::MS_NODIRATIME, ATTR_NODIRATIME),
    ] {
        if flags.contains(ms) {
            a |= at;
        }
    }
    a
}

fn setattr(fd: &impl AsRawFd, recursive: bool, attr: &MountAttr) -> std::result::Result<(), Errno> {
    let mut flags = AT_EMPTY_PATH;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: mount_setattr with a valid fd, an empty path and a mount_attr of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            attr as *const MountAttr,
            size_of::<MountAttr>(),
        )
    };
    Errno::result(r).map(drop)
}

/// Sets the basic flags `set` on the mount `fd` is the root of (the whole tree below it when `recursive`) and
/// clears the others but those in `keep` (all of them for a mount that only gains flags; a user namespace may
/// not clear the flags it inherited locked); an atime mode in `set` replaces the mount's.
pub fn set_flags(
    fd: &impl AsRawFd,
    set: u64,
    keep: u64,
    recursive: bool,
    what: &dyn std::fmt::Display,
) -> Result<()> {
    let basic = ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC | ATTR_NODIRATIME;
    let mut clr = basic & !set & !keep;
    if set & ATTR_ATIME != 0 {
        clr |= ATTR_ATIME;
    }
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clr,
        propagation: 0,
        userns_fd: 0,
    };
    setattr(fd, recursive, &attr).map_err(|e| err!("setting the flags of {what}: {e}"))
}

/// Sets the flags `set` and clears `clear` (`mount_setattr` flags) on the mount `fd` is the root of and on
/// every mount below it (`AT_RECURSIVE`): the recursive options, `rro` and its kin. Nothing else changes.
pub fn set_recursive(fd: &impl AsRawFd, set: u64, clear: u64, what: &dyn std::fmt::Display) -> Result<()> {
    let attr = MountAttr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: 0,
    };
    setattr(fd, true, &attr).map_err(|e| err!("setting the recursive flags of {what}: {e}"))
}

/// Idmaps the detached mount `fd` is the root of (and every mount below it when `recursive`) through user
/// namespace `userns`: its ids on disk are shown as that namespace maps them.
pub fn set_idmap(
    fd: &impl AsRawFd,
    userns: &OwnedFd,
    recursive: bool,
    what: &dyn std::fmt::Display,
) -> Result<()> {
    let attr = MountAttr {
        attr_set: ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    setattr(fd, recursive, &attr).map_err(|e| err!("idmapping {what} (MOUNT_ATTR_IDMAP): {e}"))
}

/// All the flags a mount may have, for `keep` in [`set_flags`].
pub const ALL: u64 = u64::MAX;

/// Sets propagation `prop` (`MS_SHARED`, `MS_SLAVE`, `MS_PRIVATE` or `MS_UNBINDABLE`, with `MS_REC` for the
/// whole tree) on the mount `fd` is the root of.
pub fn set_propagation(fd: &impl AsRawFd, prop: MsFlags, what: &dyn std::fmt::Display) -> Result<()> {
    let attr = MountAttr {
        attr_set: 0,
        attr_clr: 0,
        propagation: (prop & !MsFlags::MS_REC).bits(),
        userns_fd: 0,
    };
    setattr(fd, prop.contains(MsFlags::MS_REC), &attr)
        .map_err(|e| err!("setting propagation {prop:?} on {what}: {e}"))
}

/// Opens host path `p` (`O_PATH`), for a mount source: the host's paths are the host's to name.
pub fn open_source(p: &Path) -> Result<OwnedFd> {
    nix::fcntl::open(
        p,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| err!("mount source {}: {e}", p.display()))
}
