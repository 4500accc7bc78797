//! /dev in the rootfs: the default and configured device nodes and the usual symlinks, all made by fd inside
//! the rootfs (a node's parent directory is opened in the root, the node made and chmod-ed through it), so a
//! symlink in the image or raced in never places a node or a link on the host.

use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crius_common::inroot;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{Mode, SFlag};
use oci_spec::runtime::{LinuxDevice, LinuxDeviceType, Spec};

use super::mountapi::{attach, clone_tree, open_source};
use super::mounts::Root;
use crate::{Result, err};

/// The device nodes every container gets: (name, major, minor).
const DEFAULT_DEVICES: &[(&str, u64, u64)] = &[
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

/// The symlinks of /dev: (name, target).
const LINKS: &[(&str, &str)] = &[
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
    ("ptmx", "pts/ptmx"),
];

/// The parent directory of `path` in the root (made if missing) and the name in it.
fn parent_and_name(root: &Root, path: &Path) -> Result<(OwnedFd, std::ffi::OsString)> {
    let p = inroot::clean(path);
    let name = p
        .file_name()
        .ok_or_else(|| err!("device {}: not a file path", path.display()))?
        .to_os_string();
    let parent = inroot::mkdir_all(root.fd.as_fd(), p.parent().unwrap_or(Path::new("")), 0o755)
        .map_err(|e| err!("device {}: its directory: {e}", path.display()))?;
    Ok((parent, name))
}

struct Node<'a> {
    path: &'a Path,
    kind: LinuxDeviceType,
    major: u64,
    minor: u64,
    config: Option<&'a LinuxDevice>,
}

fn make_device(root: &Root, n: &Node<'_>, userns: bool) -> Result<()> {
    let what = format!("device {}", n.path.display());
    let (parent, name) = parent_and_name(root, n.path)?;
    let _ = nix::unistd::unlinkat(
        parent.as_fd(),
        name.as_os_str(),
        nix::unistd::UnlinkatFlags::NoRemoveDir,
    );
    if userns {
        // mknod is not allowed in a user namespace: bind the host's node.
        let file = openat(
            parent.as_fd(),
            name.as_os_str(),
            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        )
        .map_err(|e| err!("{what}: creating its mount point: {e}"))?;
        let tree = clone_tree(&open_source(n.path)?, false, &what)?;
        return attach(&tree, &file, &what);
    }
    let sflag = match n.kind {
        LinuxDeviceType::B => SFlag::S_IFBLK,
        LinuxDeviceType::P => SFlag::S_IFIFO,
        _ => SFlag::S_IFCHR,
    };
    let mode = n.config.and_then(|d| d.file_mode()).unwrap_or(0o666);
    nix::sys::stat::mknodat(
        parent.as_fd(),
        name.as_os_str(),
        sflag,
        Mode::from_bits_truncate(mode),
        nix::sys::stat::makedev(n.major, n.minor),
    )
    .map_err(|e| err!("{what}: mknod: {e}"))?;
    let node = openat(
        parent.as_fd(),
        name.as_os_str(),
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err!("{what}: {e}"))?;
    // chmod and chown through the fd's magic link: the node just made, whatever its name now leads to.
    let at = inroot::fd_path(&node);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(mode & 0o7777))
        .map_err(|e| err!("{what}: chmod: {e}"))?;
    let uid = n.config.and_then(|d| d.uid());
    let gid = n.config.and_then(|d| d.gid());
    if uid.is_some() || gid.is_some() {
        std::os::unix::fs::chown(&at, uid, gid).map_err(|e| err!("{what}: chown: {e}"))?;
    }
    Ok(())
}

/// The device nodes and symlinks of /dev in `root`.
pub fn setup(root: &Root, spec: &Spec, userns: bool) -> Result<()> {
    for &(name, major, minor) in DEFAULT_DEVICES {
        let path = Path::new("/dev").join(name);
        let n = Node {
            path: &path,
            kind: LinuxDeviceType::C,
            major,
            minor,
            config: None,
        };
        make_device(root, &n, userns)?;
    }
    let devices = spec
        .linux()
        .as_ref()
        .and_then(|l| l.devices().clone())
        .unwrap_or_default();
    for d in &devices {
        // /dev/ptmx is always the link to the container's devpts (below), as runc makes it: a configured node
        // there would be the host's pty multiplexer, which the terminal setup refuses.
        if inroot::clean(d.path()) == Path::new("dev/ptmx") {
            continue;
        }
        let n = Node {
            path: d.path(),
            kind: d.typ(),
            major: d.major() as u64,
            minor: d.minor() as u64,
            config: Some(d),
        };
        make_device(root, &n, userns)?;
    }
    let dev = inroot::mkdir_all(root.fd.as_fd(), Path::new("/dev"), 0o755).map_err(|e| err!("/dev: {e}"))?;
    let exists = |name: &str| {
        nix::sys::stat::fstatat(dev.as_fd(), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok()
    };
    for (name, target) in LINKS {
        if !exists(name) {
            nix::unistd::symlinkat(*target, dev.as_fd(), *name)
                .map_err(|e| err!("symlink /dev/{name}: {e}"))?;
        }
    }
    if Path::new("/proc/kcore").exists() && !exists("core") {
        let _ = nix::unistd::symlinkat("/proc/kcore", dev.as_fd(), "core");
    }
    Ok(())
}

/// Binds the pty slave `slave` onto `/dev/console` in `root` (the container's root, after pivot_root): an
/// empty regular file made afresh in its /dev with no symlink followed (whatever was there is removed first),
/// so the bind lands on that file and nowhere else. Nothing when the root has no /dev.
pub fn bind_console(root: &OwnedFd, slave: &OwnedFd) -> Result<()> {
    let dev = match inroot::open_no_symlinks(
        root.as_fd(),
        Path::new("/dev"),
        OFlag::O_PATH | OFlag::O_DIRECTORY,
    ) {
        Ok(d) => d,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(err!(
                "/dev/console: opening /dev with no symlink on its path: {e}"
            ));
        }
    };
    match nix::unistd::unlinkat(dev.as_fd(), "console", nix::unistd::UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
        Err(e) => return Err(err!("/dev/console: removing what was there: {e}")),
    }
    let file = openat(
        dev.as_fd(),
        "console",
        OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| err!("/dev/console: creating its mount point: {e}"))?;
    let what = "the terminal on /dev/console";
    attach(&clone_tree(slave, false, &what)?, &file, &what)
}
