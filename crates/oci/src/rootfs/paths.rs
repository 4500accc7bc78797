//! Masked and read-only paths, after pivot_root: each is opened inside the new root by fd (no magic link
//! followed), then masked (an empty read-only tmpfs on a directory, /dev/null on a file) or bound onto itself
//! read-only, through that fd. Missing paths are skipped, as runc does.

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
            let null =
                open(root, "/dev/null", "masking")?.ok_or_else(|| err!("masking {p}: no /dev/null"))?;
            let what = format!("masking {p}");
            attach(&clone_tree(&null, false, &what)?, &fd, &what)?;
        }
    }
    Ok(())
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
