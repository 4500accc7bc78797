//! Reading a file of a container's image (its /etc/passwd and /etc/group) as the image cannot turn against
//! criusd: resolved inside the rootfs from a descriptor of it (`openat2` with `RESOLVE_IN_ROOT`, so a symlink
//! to `/etc/shadow` or `../../..` stays in the image), opened without blocking (a FIFO does not wait for a
//! writer), read only if it is a regular file (not `/dev/zero`, not a FIFO) and at most a cap of bytes (a
//! 10 GiB passwd does not fill criusd's memory). The same cap and checks serve host files a request names
//! ([`read_capped`]).

use std::ffi::CString;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Why a file was not read; shown after the file's name ("the image's /etc/passwd is a FIFO...").
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// The rootfs itself could not be opened.
    #[error("opening the rootfs {}: {source}", .rootfs.display())]
    Rootfs {
        /// The rootfs.
        rootfs: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The path holds a NUL byte.
    #[error("has a NUL byte")]
    Nul,
    /// Opening or reading it failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// It is not a regular file: a FIFO, a device, a directory, a socket.
    #[error("is not a regular file (it is {0})")]
    NotRegular(&'static str),
    /// It is larger than the cap.
    #[error("is {len} bytes, more than the {max} read")]
    TooLarge {
        /// Its size.
        len: u64,
        /// The cap.
        max: u64,
    },
    /// It grew past the cap while it was read.
    #[error("is more than the {0} bytes read")]
    Grew(u64),
    /// It is not text.
    #[error("is not UTF-8 text")]
    NotUtf8,
}

/// The most read of an image's passwd or group file (containerd reads them whole; real ones are kilobytes).
pub const MAX_IMAGE_FILE: u64 = 1 << 20;

/// The text of `rel` (e.g. `etc/passwd`) inside the image rootfs at `rootfs`: empty if it does not exist, an
/// error saying why if it is not a regular file, is larger than `max` bytes, or cannot be read.
pub fn read_in_root(rootfs: &Path, rel: &str, max: u64) -> Result<String, Unreadable> {
    let root = File::open(rootfs).map_err(|source| Unreadable::Rootfs {
        rootfs: rootfs.to_path_buf(),
        source,
    })?;
    let path = CString::new(rel).map_err(|_| Unreadable::Nul)?;
    // SAFETY: open_how is plain integers, for which zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: a live directory descriptor, a NUL-terminated path and an open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            path.as_ptr(),
            &how as *const libc::open_how,
            size_of::<libc::open_how>(),
        )
    };
    let file = if fd >= 0 {
        // SAFETY: openat2 returned a new descriptor that nothing else owns.
        unsafe { File::from_raw_fd(fd as i32) }
    } else {
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => return Ok(String::new()),
            // A kernel before 5.6: the path as it is, its last component not followed.
            Some(libc::ENOSYS) => match open_nonblocking(&rootfs.join(rel), libc::O_NOFOLLOW) {
                Ok(f) => f,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(String::new()),
                Err(e) => return Err(e.into()),
            },
            _ => return Err(e.into()),
        }
    };
    read_regular(file, max)
}

/// The regular file at host path `p`, at most `max` bytes; a FIFO, device or larger file is refused without
/// blocking.
pub fn read_capped(p: &Path, max: u64) -> Result<String, Unreadable> {
    let file = open_nonblocking(p, 0)?;
    read_regular(file, max)
}

fn open_nonblocking(p: &Path, extra: i32) -> std::io::Result<File> {
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | extra)
        .open(p)
}

fn read_regular(file: File, max: u64) -> Result<String, Unreadable> {
    let meta = file.metadata()?;
    let kind = meta.file_type();
    if !kind.is_file() {
        use std::os::unix::fs::FileTypeExt;
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "a socket or other special file"
        };
        return Err(Unreadable::NotRegular(what));
    }
    if meta.len() > max {
        return Err(Unreadable::TooLarge { len: meta.len(), max });
    }
    let mut bytes = Vec::new();
    // The size can grow after the stat: never more than the cap is read.
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(Unreadable::Grew(max));
    }
    String::from_utf8(bytes).map_err(|_| Unreadable::NotUtf8)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rootfs() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("etc")).unwrap();
        d
    }

    #[test]
    fn a_regular_file_is_read_and_a_missing_one_is_empty() {
        let r = rootfs();
        std::fs::write(r.path().join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
        assert_eq!(
            read_in_root(r.path(), "etc/passwd", MAX_IMAGE_FILE).unwrap(),
            "root:x:0:0::/:/bin/sh\n"
        );
        assert_eq!(read_in_root(r.path(), "etc/group", MAX_IMAGE_FILE).unwrap(), "");
    }

    #[test]
    fn symlinks_resolve_inside_the_rootfs() {
        let r = rootfs();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "host:x:0:0::/:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), r.path().join("etc/passwd")).unwrap();
        // Absolute: looked up in the rootfs, where there is no such file.
        assert_eq!(read_in_root(r.path(), "etc/passwd", MAX_IMAGE_FILE).unwrap(), "");
        std::fs::write(r.path().join("real"), "app:x:1:1::/:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink("../../../../../real", r.path().join("etc/group")).unwrap();
        assert_eq!(
            read_in_root(r.path(), "etc/group", MAX_IMAGE_FILE).unwrap(),
            "app:x:1:1::/:/bin/sh\n",
            "`..` stops at the rootfs"
        );
    }

    #[test]
    fn fifos_devices_and_huge_files_are_refused_at_once() {
        let r = rootfs();
        nix::unistd::mkfifo(
            &r.path().join("etc/group"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        let e = read_in_root(r.path(), "etc/group", MAX_IMAGE_FILE).unwrap_err();
        assert!(matches!(e, Unreadable::NotRegular("a FIFO")), "{e}");
        assert_eq!(e.to_string(), "is not a regular file (it is a FIFO)");
        std::fs::create_dir_all(r.path().join("dev")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", r.path().join("etc/passwd")).unwrap();
        // In the rootfs, /dev/zero is whatever the image has: here nothing; the host's /dev/zero is not read.
        assert_eq!(read_in_root(r.path(), "etc/passwd", MAX_IMAGE_FILE).unwrap(), "");
        let e = read_capped(Path::new("/dev/zero"), MAX_IMAGE_FILE).unwrap_err();
        assert!(matches!(e, Unreadable::NotRegular("a device")), "{e}");
        let big = r.path().join("etc/big");
        File::create(&big).unwrap().set_len(MAX_IMAGE_FILE + 1).unwrap();
        let e = read_in_root(r.path(), "etc/big", MAX_IMAGE_FILE).unwrap_err();
        assert!(
            matches!(
                e,
                Unreadable::TooLarge {
                    max: MAX_IMAGE_FILE,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("more than"), "{e}");
    }
}
