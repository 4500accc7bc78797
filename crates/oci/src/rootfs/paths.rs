//! Masked and read-only paths, after pivot_root: each is opened inside the new root by fd (no magic link
//! followed), then masked (an empty read-only tmpfs on a directory, /dev/null on a file) or bound onto itself
//! read-only, through that fd. Missing paths are skipped, as runc does.
//!
//! The /dev/null bound over masked files is the container's own, and a container sharing its /dev with a
//! sibling may swap it for a symlink to anything (`/proc/sys/kernel/core_pattern`) at any time (runc
//! CVE-2025-31133). So it is opened once, with no symlink followed on its path, checked by fstat to be the
//! character device 1:3, and that very descriptor is the source of every mask: nothing the container can swap
//! is looked up again.

use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use crius_common::inroot;
use nix::mount::MsFlags;

use super::mnt;
use super::mountapi::{self, attach, clone_tree};
use super::mounts::Root;
use crate::{Result, err};

/// `p` in the root, or None if it does not exist.
fn open(root: &Root, p: &str, what: &str) -> Result<Option<OwnedFd>> {
    match inroot::open(root.fd.as_fd(), Path::new(p)) {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err!("{what} {p}: {e}")),
    }
}

/// Masks `paths` in the root.
pub fn mask<'a>(root: &Root, paths: impl Iterator<Item = &'a String>) -> Result<()> {
    let mut null: Option<OwnedFd> = None;
    for p in paths {
        let Some(fd) = open(root, p, "masking")? else {
            continue;
        };
        let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| err!("masking {p}: {e}"))?;
        if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
            let on = inroot::fd_path(&fd);
            mnt(
                Some(Path::new("tmpfs")),
                &on,
                Some("tmpfs"),
                MsFlags::MS_RDONLY,
                None,
            )
            .map_err(|e| err!("masking {p}: {e}"))?;
        } else {
            if null.is_none() {
                null = Some(null_device(root).map_err(|e| err!("masking {p}: {e}"))?);
            }
            // The node may have been unlinked since it was opened (a sibling sharing /dev): the bind then
            // fails, naming it.
            let what = format!("masking {p} with the container's /dev/null");
            attach(
                &clone_tree(null.as_ref().expect("set"), false, &what)?,
                &fd,
                &what,
            )?;
        }
    }
    Ok(())
}

/// The container's /dev/null (O_PATH), opened with no symlink followed on its path and checked to be the
/// null device: a char device 1:3.
fn null_device(root: &Root) -> Result<OwnedFd> {
    let fd = inroot::open_no_symlinks(root.fd.as_fd(), Path::new("/dev/null"), nix::fcntl::OFlag::O_PATH)
        .map_err(|e| err!("opening /dev/null with no symlink on its path: {e}"))?;
    let st = nix::sys::stat::fstat(fd.as_fd()).map_err(|e| err!("/dev/null: {e}"))?;
    let (major, minor) = (libc::major(st.st_rdev), libc::minor(st.st_rdev));
    if st.st_mode & libc::S_IFMT != libc::S_IFCHR || (major, minor) != (1, 3) {
        return Err(err!(
            "/dev/null is not the null device (char 1:3; mode {:o}, device {major}:{minor}): refused as a mask",
            st.st_mode
        ));
    }
    Ok(fd)
}

/// Makes `paths` in the root read-only (and nosuid, nodev, noexec), with what is mounted below them.
pub fn read_only<'a>(root: &Root, paths: impl Iterator<Item = &'a String>) -> Result<()> {
    use mountapi::{ALL, ATTR_NODEV, ATTR_NOEXEC, ATTR_NOSUID, ATTR_RDONLY};
    for p in paths {
        let Some(fd) = open(root, p, "making read-only")? else {
            continue;
        };
        let what = format!("read-only path {p}");
        let tree = clone_tree(&fd, true, &what)?;
        let set = ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC;
        mountapi::set_flags(&tree, set, ALL, true, &what)?;
        attach(&tree, &fd, &what)?;
    }
    Ok(())
}
