//! Files opened beneath a directory without following symlinks: a CRI log file (`log_directory` +
//! `log_path`) is created by root in a directory others may write to, so a symlink planted there (in place of
//! the file or of a directory on the way to it) must not make root write somewhere else. Each component of
//! the relative path is opened from the one before with `O_NOFOLLOW` (a symlink anywhere is ELOOP or
//! ENOTDIR), and `..`, `.`, empty components and absolute paths are refused: nothing resolves outside the
//! base. criusd makes the directories and checks the file at CreateContainer; the shim opens the file the
//! same way, so a symlink swapped in between is refused too.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Why a relative path was refused.
fn bad(rel: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("{}: {why}", rel.display()))
}

/// The names of `rel`'s components, each a plain name: no root, `.`, `..` or empty component.
fn names(rel: &Path) -> io::Result<Vec<CString>> {
    let raw = rel.as_os_str().as_bytes();
    if raw.is_empty() || raw.starts_with(b"/") {
        return Err(bad(rel, "not a relative path"));
    }
    raw.split(|&b| b == b'/')
        .map(|part| match part {
            b"" => Err(bad(rel, "has an empty component")),
            b"." | b".." => Err(bad(rel, "has a \".\" or \"..\" component")),
            name => CString::new(name).map_err(|_| bad(rel, "has a NUL byte")),
        })
        .collect()
}

fn openat(dir: &OwnedFd, name: &CString, flags: libc::c_int, mode: libc::mode_t) -> io::Result<OwnedFd> {
    let flags = flags | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: a valid dir fd and NUL-terminated name; the returned fd is ours alone.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags, libc::c_uint::from(mode)) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A clearer error for a symlink met where a directory or file was wanted.
fn symlink_error(e: io::Error, rel: &Path, name: &CString) -> io::Error {
    match e.raw_os_error() {
        Some(libc::ELOOP) | Some(libc::ENOTDIR) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: {:?} is a symlink (or not a directory): not followed ({e})",
                rel.display(),
                name.to_string_lossy()
            ),
        ),
        _ => io::Error::new(
            e.kind(),
            format!("{}: {:?}: {e}", rel.display(), name.to_string_lossy()),
        ),
    }
}

/// Opens (making it, mode `dir_mode`, when missing) each directory of `names` in turn from `base`.
fn walk(base: &Path, rel: &Path, names: &[CString], dir_mode: Option<u32>) -> io::Result<OwnedFd> {
    let mut dir: OwnedFd = File::open(base)
        .map_err(|e| io::Error::new(e.kind(), format!("opening {}: {e}", base.display())))?
        .into();
    for name in names {
        if let Some(mode) = dir_mode {
            // SAFETY: a valid dir fd and NUL-terminated name.
            let r = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), mode as libc::mode_t) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(symlink_error(e, rel, name));
                }
            }
        }
        dir = openat(&dir, name, libc::O_RDONLY | libc::O_DIRECTORY, 0)
            .map_err(|e| symlink_error(e, rel, name))?;
    }
    Ok(dir)
}

/// Makes the directories of `rel`'s parent beneath `base` (mode `mode` for new ones) and checks its last
/// component: missing, or a regular file. A symlink on the way or in its place is an error naming it.
pub fn prepare(base: &Path, rel: &Path, mode: u32) -> io::Result<()> {
    let names = names(rel)?;
    let (last, dirs) = names.split_last().ok_or_else(|| bad(rel, "is empty"))?;
    let dir = walk(base, rel, dirs, Some(mode))?;
    // SAFETY: stat is plain data; fstatat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: valid fd, name and out pointer.
    let r = unsafe { libc::fstatat(dir.as_raw_fd(), last.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::NotFound => Ok(()),
            _ => Err(symlink_error(e, rel, last)),
        };
    }
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Ok(()),
        libc::S_IFLNK => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: is a symlink: not followed", rel.display()),
        )),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: is not a regular file", rel.display()),
        )),
    }
}

/// Opens `rel` beneath `base` for appending, creating it (mode `mode`) and its directories (0755) when
/// missing; a symlink anywhere in `rel` is an error.
pub fn open_append(base: &Path, rel: &Path, mode: u32) -> io::Result<File> {
    let names = names(rel)?;
    let (last, dirs) = names.split_last().ok_or_else(|| bad(rel, "is empty"))?;
    let dir = walk(base, rel, dirs, Some(0o755))?;
    // O_NONBLOCK: a FIFO in the log's place fails the open (ENXIO, no reader) or returns at once instead of
    // blocking the shim; whatever was opened must then be a regular file, checked on the descriptor.
    let fd = openat(
        &dir,
        last,
        libc::O_WRONLY | libc::O_APPEND | libc::O_CREAT | libc::O_NONBLOCK,
        mode as libc::mode_t,
    )
    .map_err(|e| match e.raw_os_error() {
        Some(libc::ENXIO) => io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: is not a regular file (a FIFO with no reader)", rel.display()),
        ),
        _ => symlink_error(e, rel, last),
    })?;
    let f = File::from(fd);
    if !f.metadata()?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: is not a regular file", rel.display()),
        ));
    }
    // A regular file: back to blocking writes.
    // SAFETY: F_SETFL on a descriptor we own.
    if unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, libc::O_APPEND) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    #[test]
    fn opens_and_makes_beneath() {
        let d = tempfile::tempdir().unwrap();
        let mut f = open_append(d.path(), Path::new("a/b/0.log"), 0o640).unwrap();
        f.write_all(b"x").unwrap();
        assert_eq!(std::fs::read(d.path().join("a/b/0.log")).unwrap(), b"x");
        prepare(d.path(), Path::new("a/b/0.log"), 0o755).unwrap();
        prepare(d.path(), Path::new("c/1.log"), 0o755).unwrap();
        assert!(d.path().join("c").is_dir());
    }

    #[test]
    fn a_fifo_in_the_logs_place_is_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(
            &d.path().join("p.log"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let base = d.path().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // No reader: the open itself fails.
            let lone = open_append(&base, Path::new("p.log"), 0o640).map(drop);
            // With a reader: it opens, and the type check refuses it.
            let reader = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(base.join("p.log"))
                .unwrap();
            let read = open_append(&base, Path::new("p.log"), 0o640).map(drop);
            drop(reader);
            let _ = tx.send((lone, read));
        });
        let (lone, read) = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("open_append blocked on a FIFO");
        for e in [lone.unwrap_err(), read.unwrap_err()] {
            assert!(e.to_string().contains("p.log: is not a regular file"), "{e}");
        }
    }

    #[test]
    fn refuses_symlinks_and_escapes() {
        let d = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), d.path().join("dir")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("f"), d.path().join("f.log")).unwrap();
        for rel in ["dir/0.log", "f.log", "dir/sub/0.log"] {
            let e = open_append(d.path(), Path::new(rel), 0o640).unwrap_err();
            assert!(e.to_string().contains("symlink"), "{rel}: {e}");
            let e = prepare(d.path(), Path::new(rel), 0o755).unwrap_err();
            assert!(e.to_string().contains("symlink"), "{rel}: {e}");
        }
        for rel in ["../x", "/abs", "a//b", "a/", "./a", "a/./b", "a/../b", ""] {
            assert!(open_append(d.path(), Path::new(rel), 0o640).is_err(), "{rel}");
            assert!(prepare(d.path(), Path::new(rel), 0o755).is_err(), "{rel}");
        }
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }
}
