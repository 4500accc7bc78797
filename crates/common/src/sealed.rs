//! Sealed in-memory copies of an executable, the defence against CVE-2019-5736: a memfd holding the file's
//! bytes with the seals `F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE`, which nobody can write,
//! shrink or grow, and whose seals nobody can lift. A process executed from one has it as `/proc/<pid>/exe`,
//! so a container that reaches that link holds the copy, never the host's file.
//!
//! crius-runc re-executes itself from such a copy when it is not already running from one. To spare that copy
//! (about 3 ms a call), criusd makes one of the runtime at start-up and hands it to the shims it starts: the
//! descriptor is named in [`ENV`] with the [`Stamp`] of the file it was copied from, and a shim executes the
//! runtime through it for as long as the file on disk still has that stamp (an upgraded binary is run from
//! its path again).
//!
//! Failures are [`Error`]s: a system call that failed (with its errno as the source), or a file that changed
//! or ended while it was copied.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The seals a copy carries.
pub const SEALS: libc::c_int =
    libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;

/// The environment variable that hands a sealed copy of the runtime to a shim: `FD STAMP PATH`.
pub const ENV: &str = "CRIUS_SEALED_RUNTIME";

/// `MFD_EXEC` (Linux 6.3): executable even where `vm.memfd_noexec` makes memfds non-executable by default.
const MFD_EXEC: libc::c_uint = 0x10;

/// Why a sealed copy could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed: reading the file, making, filling or sealing the memfd.
    #[error("{context}: {source}")]
    Io {
        /// What was being done (the file's path, or the step).
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
    /// The file ended before its size said (it shrank while it was copied).
    #[error("copying the file to seal: it ended {left} bytes early")]
    Truncated {
        /// The bytes still missing.
        left: u64,
    },
    /// The file was replaced or changed while it was copied: the copy may be of neither version.
    #[error("{} changed while it was copied", path.display())]
    Changed {
        /// The file.
        path: PathBuf,
    },
}

fn os_err(what: &str) -> Error {
    Error::Io {
        context: what.to_string(),
        source: std::io::Error::last_os_error(),
    }
}

/// Whether `fd` is a memfd carrying every seal of [`SEALS`].
pub fn is_sealed(fd: BorrowedFd<'_>) -> bool {
    // SAFETY: fcntl on a live descriptor; F_GET_SEALS fails with EINVAL on files that are not memfds.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & SEALS == SEALS
}

/// A sealed copy of `file` (read from its current offset to its end), named `name` (close-on-exec).
pub fn copy_of(file: &std::fs::File, name: &CStr) -> Result<OwnedFd, Error> {
    let size = file
        .metadata()
        .map_err(|source| Error::Io {
            context: "stat of the file to seal".into(),
            source,
        })?
        .len();
    let create = |flags: libc::c_uint| {
        // SAFETY: a NUL-terminated name and flags; the result is checked.
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING | flags) }
    };
    let mut raw = create(MFD_EXEC);
    if raw < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
        // A kernel before 6.3, which knows no MFD_EXEC (and whose memfds are executable).
        raw = create(0);
    }
    if raw < 0 {
        return Err(os_err(
            "memfd_create (EACCES here means vm.memfd_noexec is 2: no executable memfds)",
        ));
    }
    // SAFETY: memfd_create just returned this descriptor and nothing else owns it.
    let memfd = unsafe { OwnedFd::from_raw_fd(raw) };
    let mut left = size;
    while left > 0 {
        // SAFETY: two valid descriptors; sendfile reads from the file's current offset.
        let n = unsafe {
            libc::sendfile(
                memfd.as_raw_fd(),
                file.as_raw_fd(),
                std::ptr::null_mut(),
                left as usize,
            )
        };
        match n {
            n if n > 0 => left -= n as u64,
            0 => return Err(Error::Truncated { left }),
            _ if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return Err(os_err("copying the file into the memfd")),
        }
    }
    // SAFETY: fcntl on the memfd we own.
    seal_retrying(|| unsafe { libc::fcntl(memfd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) })?;
    Ok(memfd)
}

/// How many times [`copy_of`] tries to seal a copy the kernel finds busy.
const SEAL_TRIES: u32 = 8;

/// Runs `seal` (an `F_ADD_SEALS`) until it succeeds, again after an `EBUSY`. `F_SEAL_WRITE` answers EBUSY
/// while any page of the memfd holds an extra reference (the kernel waits about 150 ms for them first):
/// references the copy itself leaves in per-CPU page batches, or that compaction or migration take for a
/// moment on a loaded machine. Nothing else holds this memfd, so the pins pass; after [`SEAL_TRIES`] the
/// EBUSY is returned.
fn seal_retrying(mut seal: impl FnMut() -> libc::c_int) -> Result<(), Error> {
    for attempt in 1..=SEAL_TRIES {
        if seal() == 0 {
            return Ok(());
        }
        let busy = std::io::Error::last_os_error().raw_os_error() == Some(libc::EBUSY);
        if !busy || attempt == SEAL_TRIES {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10 * u64::from(attempt)));
    }
    Err(os_err("sealing the memfd"))
}

/// What identifies a file's content without reading it: device, inode, size and modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

impl Stamp {
    /// The stamp of the file at `path` (followed if a symlink).
    pub fn of(path: &Path) -> std::io::Result<Stamp> {
        let m = std::fs::metadata(path)?;
        Ok(Stamp {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        })
    }

    fn text(&self) -> String {
        format!("{}-{}-{}-{}", self.dev, self.ino, self.size, self.mtime_ns)
    }

    fn parse(s: &str) -> Option<Stamp> {
        let mut f = s.split('-');
        let stamp = Stamp {
            dev: f.next()?.parse().ok()?,
            ino: f.next()?.parse().ok()?,
            size: f.next()?.parse().ok()?,
            mtime_ns: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(stamp)
    }
}

/// A sealed copy of the runtime at `path`, as [`ENV`] names it to a shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handed {
    /// The descriptor, in the process that reads [`ENV`].
    pub fd: RawFd,
    /// The stamp of the file it was copied from.
    pub stamp: Stamp,
    /// The file it was copied from.
    pub path: PathBuf,
}

impl Handed {
    /// The value of [`ENV`] for it.
    pub fn to_env(&self) -> String {
        format!("{} {} {}", self.fd, self.stamp.text(), self.path.display())
    }

    /// Reads [`ENV`]'s value `v`; None unless it is well formed.
    pub fn from_env(v: &str) -> Option<Handed> {
        let mut f = v.splitn(3, ' ');
        let fd = f.next()?.parse().ok().filter(|fd| *fd > 2)?;
        let stamp = Stamp::parse(f.next()?)?;
        let path = PathBuf::from(f.next()?);
        path.is_absolute().then_some(Handed { fd, stamp, path })
    }

    /// This process's [`ENV`], if it names an open sealed copy.
    pub fn inherited() -> Option<Handed> {
        let h = Handed::from_env(&std::env::var(ENV).ok()?)?;
        // SAFETY: only borrowed for the check; fcntl on a closed number fails and the check says no.
        let fd = unsafe { BorrowedFd::borrow_raw(h.fd) };
        is_sealed(fd).then_some(h)
    }

    /// Whether the file it was copied from still has the same stamp (not replaced since).
    pub fn current(&self) -> bool {
        Stamp::of(&self.path).is_ok_and(|s| s == self.stamp)
    }
}

/// A sealed copy of the executable at `path`, with what names it to a shim (whose copy of the descriptor has
/// the same number: it is inherited).
pub fn seal_runtime(path: &Path) -> Result<(OwnedFd, Handed), Error> {
    seal(path, c"crius-runtime")
}

/// A sealed copy of the executable at `path` named `name` (`/memfd:<name>` in `/proc/<pid>/exe`), with its
/// [`Handed`] description (whose [`Handed::current`] tells when the file on disk changed).
pub fn seal(path: &Path, name: &CStr) -> Result<(OwnedFd, Handed), Error> {
    let io = |source: std::io::Error| Error::Io {
        context: path.display().to_string(),
        source,
    };
    let stamp = Stamp::of(path).map_err(io)?;
    let file = std::fs::File::open(path).map_err(io)?;
    let fd = copy_of(&file, name)?;
    if Stamp::of(path).ok() != Some(stamp) {
        return Err(Error::Changed {
            path: path.to_path_buf(),
        });
    }
    let handed = Handed {
        fd: fd.as_raw_fd(),
        stamp,
        path: path.to_path_buf(),
    };
    Ok((fd, handed))
}

/// Clears close-on-exec on `fd`: for a child's `pre_exec`, so that the child (alone) inherits it.
///
/// # Safety
/// Async-signal-safe (one fcntl); `fd` must be open in the calling process.
pub unsafe fn inherit_in_child(fd: RawFd) -> std::io::Result<()> {
    // SAFETY: fcntl with integer arguments, as the caller promises fd is open.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// `seal` failing with `errno` for its first `fails` calls, then succeeding; counts its calls.
    fn failing(errno: libc::c_int, fails: u32, calls: &std::cell::Cell<u32>) -> impl FnMut() -> libc::c_int {
        move || {
            calls.set(calls.get() + 1);
            if calls.get() <= fails {
                // SAFETY: errno is this thread's.
                unsafe { *libc::__errno_location() = errno };
                -1
            } else {
                0
            }
        }
    }

    #[test]
    fn a_busy_seal_is_tried_again() {
        let calls = std::cell::Cell::new(0);
        seal_retrying(failing(libc::EBUSY, 3, &calls)).unwrap();
        assert_eq!(calls.get(), 4);
    }

    #[test]
    fn a_seal_busy_every_time_fails_after_the_last_try_naming_the_step() {
        let calls = std::cell::Cell::new(0);
        let e = seal_retrying(failing(libc::EBUSY, u32::MAX, &calls)).unwrap_err();
        assert_eq!(calls.get(), SEAL_TRIES);
        assert!(e.to_string().starts_with("sealing the memfd: "), "{e}");
    }

    #[test]
    fn another_seal_error_is_not_tried_again() {
        let calls = std::cell::Cell::new(0);
        let e = seal_retrying(failing(libc::EPERM, u32::MAX, &calls)).unwrap_err();
        assert_eq!(calls.get(), 1);
        assert!(matches!(&e, Error::Io { source, .. } if source.raw_os_error() == Some(libc::EPERM)));
    }

    use std::io::Write;
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn a_copy_is_sealed_and_named_with_its_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("runtime");
        std::fs::File::create(&exe)
            .unwrap()
            .write_all(b"\x7fELF not really")
            .unwrap();
        let (fd, handed) = seal_runtime(&exe).unwrap();
        assert!(is_sealed(fd.as_fd()));
        // Writing through it is refused by the seal.
        let mut f = std::fs::File::from(fd.try_clone().unwrap());
        assert!(f.write_all(b"x").is_err());
        assert_eq!(Handed::from_env(&handed.to_env()), Some(handed.clone()));
        assert!(handed.current());
        std::fs::write(&exe, b"upgraded, another size").unwrap();
        assert!(!handed.current(), "a replaced file is no longer the copy's");
    }

    #[test]
    fn malformed_env_values_are_ignored() {
        for v in [
            "",
            "x 1-2-3-4 /r",
            "2 1-2-3-4 /r",
            "5 1-2-3 /r",
            "5 1-2-3-4 rel",
            "5 1-2-3-4-5 /r",
        ] {
            assert_eq!(Handed::from_env(v), None, "{v:?}");
        }
        assert!(Handed::from_env("5 1-2-3-4 /usr/bin/crius-runc").is_some());
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none");
        let e = seal_runtime(&missing).unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );
        assert!(
            e.to_string().starts_with(&format!("{}: ", missing.display())),
            "{e}"
        );
        let changed = Error::Changed {
            path: missing.clone(),
        };
        assert_eq!(
            changed.to_string(),
            format!("{} changed while it was copied", missing.display())
        );
    }

    #[test]
    fn a_plain_file_is_not_sealed() {
        let f = tempfile::tempfile().unwrap();
        // SAFETY: borrowed from a live file for the check.
        assert!(!is_sealed(unsafe { BorrowedFd::borrow_raw(f.as_raw_fd()) }));
    }
}
