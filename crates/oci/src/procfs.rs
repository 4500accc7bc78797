//! Writes to files under the container's `/proc` that a racing mount cannot redirect (the runc
//! CVE-2025-52881 class): sysctls under `/proc/sys` and AppArmor's `attr/` files.
//!
//! A write by path goes wherever the path leads at that instant: a file bind-mounted over `/proc/sys/...` or
//! over `/proc/self/attr/...` by a sibling with a shared mount, or a symlink, takes the write elsewhere (a
//! `core_pattern` instead of a namespaced sysctl, a file instead of the AppArmor request, so the process runs
//! unconfined). Here `/proc` is opened once and checked to be the root of a procfs (its `f_type` and inode 1),
//! then each file is opened beneath it with `openat2(RESOLVE_BENEATH | RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS)`: the walk may cross no mount and follow no link, so the file opened is the one the
//! path names in that procfs, and it is checked to be on procfs again before the write. `/proc/thread-self`
//! is read as a link (never followed) to name this thread's directory.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

/// procfs's `f_type` (`PROC_SUPER_MAGIC`).
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
/// The inode of a procfs's root directory (`PROC_ROOT_INO`).
const PROC_ROOT_INO: u64 = 1;

/// The root of the procfs mounted at `/proc` in this mount namespace, checked.
pub struct Proc {
    root: OwnedFd,
}

fn on_procfs(fd: &impl AsFd) -> io::Result<bool> {
    let st = nix::sys::statfs::fstatfs(fd).map_err(io::Error::from)?;
    Ok(st.filesystem_type().0 as i64 == PROC_SUPER_MAGIC)
}

impl Proc {
    /// Opens `/proc` (no symlink followed) and checks that it is the root of a procfs.
    pub fn open() -> io::Result<Proc> {
        Self::open_at(Path::new("/proc"))
    }

    fn open_at(path: &Path) -> io::Result<Proc> {
        let root = nix::fcntl::open(
            path,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            io::Error::new(
                io::Error::from(e).kind(),
                format!("opening {}: {e}", path.display()),
            )
        })?;
        let ino = nix::sys::stat::fstat(root.as_fd())
            .map_err(io::Error::from)?
            .st_ino;
        if !on_procfs(&root)? || ino != PROC_ROOT_INO {
            return Err(io::Error::other(format!(
                "{} is not the root of a procfs (something is mounted over it)",
                path.display()
            )));
        }
        Ok(Proc { root })
    }

    /// Opens `rel` (relative to `/proc`, e.g. `sys/net/ipv4/ip_forward`) for writing: no mount crossed, no
    /// link followed, and the file on procfs.
    fn open_write(&self, rel: &str) -> io::Result<OwnedFd> {
        let how = OpenHow::new()
            .flags(OFlag::O_WRONLY | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
            .resolve(
                ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_XDEV
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_MAGICLINKS,
            );
        let fd = loop {
            match nix::fcntl::openat2(self.root.as_fd(), rel, how) {
                Err(Errno::EAGAIN) => continue,
                Err(Errno::EXDEV) => {
                    return Err(io::Error::other(format!(
                        "/proc/{rel}: the path crosses a mount or leaves /proc (refused: writes go to procfs only)"
                    )));
                }
                Err(Errno::ELOOP) => {
                    return Err(io::Error::other(format!(
                        "/proc/{rel}: a symlink lies on its path (refused: writes go to procfs only)"
                    )));
                }
                Err(e) => {
                    return Err(io::Error::new(
                        io::Error::from(e).kind(),
                        format!("/proc/{rel}: {e}"),
                    ));
                }
                Ok(fd) => break fd,
            }
        };
        if !on_procfs(&fd)? {
            return Err(io::Error::other(format!("/proc/{rel}: not on procfs (refused)")));
        }
        Ok(fd)
    }

    /// Writes `data` in one write(2) to `rel` under `/proc`: the kernel reads a sysctl or an AppArmor request
    /// from a single write. Returns the bytes written.
    pub fn write(&self, rel: &str, data: &[u8]) -> io::Result<usize> {
        let fd = self.open_write(rel)?;
        loop {
            // SAFETY: a write of a live buffer to a descriptor we own.
            let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }

    /// This thread's directory relative to `/proc` (`PID/task/TID`), as this procfs numbers it: the text of
    /// its `thread-self` link, read without following it.
    pub fn thread_self(&self) -> io::Result<String> {
        let link = nix::fcntl::readlinkat(self.root.as_fd(), "thread-self")
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("/proc/thread-self: {e}")))?;
        let text = link
            .into_string()
            .map_err(|_| io::Error::other("/proc/thread-self: not UTF-8"))?;
        let ok = text.split('/').collect::<Vec<_>>();
        match ok.as_slice() {
            [p, "task", t] if p.parse::<u32>().is_ok() && t.parse::<u32>().is_ok() => Ok(text),
            _ => Err(io::Error::other(format!(
                "/proc/thread-self: unexpected link {text:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_is_a_procfs_root_and_other_dirs_are_not() {
        Proc::open().unwrap();
        let e = Proc::open_at(Path::new("/proc/sys")).err().unwrap().to_string();
        assert!(e.contains("not the root of a procfs"), "{e}");
        let e = Proc::open_at(Path::new("/tmp")).err().unwrap().to_string();
        assert!(e.contains("not the root of a procfs"), "{e}");
    }

    #[test]
    fn thread_self_names_this_thread() {
        let p = Proc::open().unwrap();
        let t = p.thread_self().unwrap();
        // SAFETY: gettid has no arguments.
        let tid = unsafe { libc::gettid() };
        assert_eq!(t, format!("{}/task/{tid}", std::process::id()));
    }

    #[test]
    fn links_and_escapes_are_refused() {
        let p = Proc::open().unwrap();
        // `self` is a link: refused even though it leads into procfs.
        let e = p.open_write("self/attr/current").unwrap_err().to_string();
        assert!(e.contains("symlink"), "{e}");
        let e = p.open_write("../etc/passwd").unwrap_err().to_string();
        assert!(e.contains("/proc/../etc/passwd"), "{e}");
        // A file of procfs that this process may write to, through its thread's directory.
        let me = p.thread_self().unwrap();
        p.open_write(&format!("{me}/comm")).unwrap();
    }
}
