//! A volumeMount's subPath: resolved inside its volume by fd and bound under `<uid>/subpaths/<container>/<i>`,
//! which is what the container mounts.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crius_common::inroot;
use nix::mount::{MntFlags, MsFlags};

use super::Volumes;
use crate::Error;

impl Volumes {
    /// Resolves `sub` inside volume `volume` by fd (made as a directory if missing) and binds what it leads
    /// to onto `pin`, which the container then mounts: a subPath that is, or is swapped for, a symlink
    /// leading out of the volume resolves inside it, and the runtime never resolves the subPath's string
    /// again (the CVE-2017-1002101 class).
    pub(super) fn pin_sub_path(
        &self,
        volume: &Path,
        sub: &Path,
        pin: &Path,
        at: &str,
    ) -> Result<PathBuf, Error> {
        let fd =
            resolve_sub_path(volume, sub).map_err(Error::io(format!("{at}: subPath {}", sub.display())))?;
        let dir = nix::sys::stat::fstat(fd.as_fd())
            .map(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR)
            .map_err(|e| Error::io(format!("{at}: subPath {}", sub.display()))(e.into()))?;
        // An earlier attempt's pin: the new one is resolved afresh.
        let _ = nix::mount::umount2(pin, MntFlags::MNT_DETACH);
        let parent = pin.parent().unwrap_or(pin);
        std::fs::create_dir_all(parent).map_err(Error::io(format!("{at}: creating {}", parent.display())))?;
        let _ = std::fs::remove_dir(pin);
        let _ = std::fs::remove_file(pin);
        let made = if dir {
            std::fs::create_dir(pin)
        } else {
            std::fs::write(pin, b"")
        };
        made.map_err(Error::io(format!("{at}: creating {}", pin.display())))?;
        nix::mount::mount(
            Some(&inroot::fd_path(&fd)),
            pin,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| Error::Io {
            context: format!("{at}: binding subPath {} onto {}", sub.display(), pin.display()),
            source: e.into(),
        })?;
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pin.to_path_buf());
        Ok(pin.to_path_buf())
    }
}

/// Opens `sub` inside `volume` as if the volume were `/` (making it a directory if it is missing), by fd.
pub(super) fn resolve_sub_path(volume: &Path, sub: &Path) -> std::io::Result<OwnedFd> {
    let root = nix::fcntl::open(
        volume,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    match inroot::open(root.as_fd(), sub) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => inroot::mkdir_all(root.as_fd(), sub, 0o777),
        r => r,
    }
}
