//! Paths resolved inside a root by file descriptor, never as strings on the host: the runtime's mount
//! destinations in a rootfs (the CVE-2021-30465 class) and the pod engine's subPaths in a volume (the
//! CVE-2017-1002101 class). A path is opened with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)` from an
//! fd of the root, so `..` and symlinks (absolute or relative) resolve as if the root were `/`; missing
//! directories are made one at a time by fd and opened with no symlink allowed, so a component swapped for a
//! symlink meanwhile fails the call instead of leading elsewhere. The caller then acts on the fd
//! (`/proc/self/fd/N`, [`fd_path`]), never on the path again.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::Mode;

/// How many symlinks [`create`] follows to make a dangling one's target.
const MAX_LINKS: usize = 40;

/// `path` as components under a root: `.` and the leading `/` dropped, `..` removing the previous one (never
/// above the root). Lexical: callers resolve symlinks with [`open`].
pub fn clean(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

fn in_root(flags: OFlag) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS)
}

/// One component directly under `dir`, no symlink and no `..` allowed.
fn beneath(flags: OFlag) -> OpenHow {
    OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS)
}

fn name(p: &Path) -> &Path {
    if p.as_os_str().is_empty() {
        Path::new(".")
    } else {
        p
    }
}

/// openat2, tried again while it says EAGAIN: with RESOLVE_IN_ROOT the kernel refuses a walk that raced a
/// rename or a mount anywhere on the system, and asks to be called again.
fn openat2<P: ?Sized + nix::NixPath, Fd: AsFd>(dirfd: Fd, path: &P, how: OpenHow) -> nix::Result<OwnedFd> {
    let mut left = 64;
    loop {
        match nix::fcntl::openat2(dirfd.as_fd(), path, how) {
            Err(Errno::EAGAIN) if left > 0 => left -= 1,
            r => return r,
        }
    }
}

fn io_err(e: Errno, what: &Path) -> io::Error {
    io::Error::new(io::Error::from(e).kind(), format!("/{}: {e}", what.display()))
}

/// Opens `path` inside `root` (`O_PATH`): symlinks resolved in the root, magic links refused.
pub fn open(root: BorrowedFd<'_>, path: &Path) -> io::Result<OwnedFd> {
    let p = clean(path);
    openat2(root, name(&p), in_root(OFlag::O_PATH)).map_err(|e| io_err(e, &p))
}

/// Opens `path` beneath `root` with `flags` (`O_PATH`, `O_DIRECTORY`...) when no component of it is a symlink or
/// a way out of `root`: for a file the container may have swapped for a symlink meanwhile (its /dev/null, its
/// /dev), which is then never followed, even inside the root. A symlink before the last component fails the
/// call (ELOOP); a last one is refused too, but with `O_PATH` the kernel opens the link itself, so the caller
/// checks the file's type on the fd (as the masks check for char 1:3).
pub fn open_no_symlinks(root: BorrowedFd<'_>, path: &Path, flags: OFlag) -> io::Result<OwnedFd> {
    let p = clean(path);
    openat2(root, name(&p), beneath(flags)).map_err(|e| io_err(e, &p))
}

/// Opens directory `path` inside `root`, making the missing ones with `mode` one at a time by fd.
pub fn mkdir_all(root: BorrowedFd<'_>, path: &Path, mode: u32) -> io::Result<OwnedFd> {
    let p = clean(path);
    let parts: Vec<_> = p.components().collect();
    // The longest prefix that exists, resolved in the root; the rest is made under it.
    let mut k = parts.len();
    let mut dir = loop {
        let prefix: PathBuf = parts[..k].iter().collect();
        match openat2(root, name(&prefix), in_root(OFlag::O_PATH | OFlag::O_DIRECTORY)) {
            Ok(fd) => break fd,
            Err(Errno::ENOENT) if k > 0 => k -= 1,
            Err(e) => return Err(io_err(e, &prefix)),
        }
    };
    for part in &parts[k..] {
        match nix::sys::stat::mkdirat(dir.as_fd(), part.as_os_str(), Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(io_err(e, &p)),
        }
        dir = openat2(
            dir.as_fd(),
            part.as_os_str(),
            beneath(OFlag::O_PATH | OFlag::O_DIRECTORY),
        )
        .map_err(|e| io_err(e, &p))?;
    }
    Ok(dir)
}

/// Opens `path` inside `root`, making it (a directory when `dir`, else an empty file with its parents)
/// if it is missing. A dangling symlink's target is made, inside the root.
pub fn create(root: BorrowedFd<'_>, path: &Path, dir: bool) -> io::Result<OwnedFd> {
    if dir {
        return mkdir_all(root, path, 0o755);
    }
    let mut p = clean(path);
    for _ in 0..MAX_LINKS {
        match open(root, &p) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            r => return r,
        }
        let parent = p.parent().unwrap_or(Path::new("")).to_path_buf();
        mkdir_all(root, &parent, 0o755)?;
        // O_CREAT follows a trailing symlink, in the root; O_NONBLOCK so a FIFO raced in does not block.
        let how = in_root(OFlag::O_CREAT | OFlag::O_RDONLY | OFlag::O_NONBLOCK)
            .mode(Mode::from_bits_truncate(0o644));
        match openat2(root, name(&p), how) {
            Err(Errno::ENOENT) => {}
            r => return r.map_err(|e| io_err(e, &p)),
        }
        // A dangling symlink whose target's directory is missing: make that, then the target.
        let link =
            openat2(root, name(&p), in_root(OFlag::O_PATH | OFlag::O_NOFOLLOW)).map_err(|e| io_err(e, &p))?;
        let target = nix::fcntl::readlinkat(link.as_fd(), "").map_err(|e| io_err(e, &p))?;
        let target = Path::new(&target);
        p = if target.is_absolute() {
            clean(target)
        } else {
            clean(&parent.join(target))
        };
    }
    Err(io::Error::other(format!("/{}: too many symlinks", p.display())))
}

/// The path naming `fd` for calls that take a path: `/proc/self/fd/N` (a magic link to that very file).
pub fn fd_path(fd: &impl AsRawFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Where `fd` is, as the kernel names it in this mount namespace.
pub fn real_path(fd: &impl AsRawFd) -> io::Result<PathBuf> {
    std::fs::read_link(fd_path(fd))
}

/// The id of the mount `fd` is on, as /proc/self/mountinfo numbers it.
pub fn mount_id(fd: &impl AsRawFd) -> io::Result<u64> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))?;
    info.lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no mnt_id in fdinfo"))
}

/// The files under /proc a container may have mounted over (lxcfs emulates them), as runc allows.
pub const PROC_FILES: &[&str] = &[
    "/proc/cpuinfo",
    "/proc/diskstats",
    "/proc/meminfo",
    "/proc/stat",
    "/proc/swaps",
    "/proc/uptime",
    "/proc/loadavg",
    "/proc/slabinfo",
    "/proc/net/dev",
    "/proc/sys/kernel/ns_last_pid",
    "/proc/sys/crypto/fips_enabled",
];

/// Where a mount destination is relative to /proc (after [`clean`]).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum ProcPlace {
    /// Not /proc nor under it.
    Outside,
    /// /proc itself: only a procfs may go there.
    Proc,
    /// One of the [`PROC_FILES`].
    Allowed,
    /// Anything else under /proc: refused.
    Inside,
}

/// Where `dest` (a path in the container) is relative to /proc.
pub fn proc_place(dest: &Path) -> ProcPlace {
    let p = Path::new("/").join(clean(dest));
    if p == Path::new("/proc") {
        ProcPlace::Proc
    } else if !p.starts_with("/proc") {
        ProcPlace::Outside
    } else if PROC_FILES.iter().any(|f| p == Path::new(f)) {
        ProcPlace::Allowed
    } else {
        ProcPlace::Inside
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root(dir: &Path) -> OwnedFd {
        std::fs::File::open(dir).unwrap().into()
    }

    #[test]
    fn clean_never_leaves_the_root() {
        assert_eq!(clean(Path::new("/../a/./b/../c")), Path::new("a/c"));
        assert_eq!(clean(Path::new("../../..")), Path::new(""));
    }

    #[test]
    fn symlinks_resolve_inside_the_root() {
        let t = tempfile::tempdir().unwrap();
        let r = t.path();
        std::fs::create_dir_all(r.join("a/b")).unwrap();
        symlink("/", r.join("a/slash")).unwrap();
        symlink("../../../../..", r.join("a/up")).unwrap();
        symlink("/run/stub.conf", r.join("a/dangling")).unwrap();
        symlink("/proc/self/root", r.join("a/magic")).unwrap();
        let fd = root(r);
        // Through a symlink to / : made in the root, not on the host.
        let made = mkdir_all(fd.as_fd(), Path::new("/a/slash/escape-test-dir"), 0o755).unwrap();
        assert_eq!(real_path(&made).unwrap(), r.join("escape-test-dir"));
        assert!(!Path::new("/escape-test-dir").exists());
        let up = mkdir_all(fd.as_fd(), Path::new("/a/up/x/y"), 0o755).unwrap();
        assert_eq!(real_path(&up).unwrap(), r.join("x/y"));
        let f = create(fd.as_fd(), Path::new("/a/dangling"), false).unwrap();
        assert_eq!(real_path(&f).unwrap(), r.join("run/stub.conf"));
        assert!(r.join("run/stub.conf").is_file());
        // The path is what /proc/self/root would lead to in the root: nothing, and no magic link is followed.
        assert!(open(fd.as_fd(), Path::new("/a/magic/etc")).is_err());
        assert_eq!(real_path(&open(fd.as_fd(), Path::new("/")).unwrap()).unwrap(), r);
    }

    #[test]
    fn open_no_symlinks_refuses_a_link_anywhere_on_the_path() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("dev")).unwrap();
        std::fs::write(t.path().join("dev/null"), "").unwrap();
        symlink("dev", t.path().join("link")).unwrap();
        symlink("null", t.path().join("dev/swapped")).unwrap();
        let root = nix::fcntl::open(t.path(), OFlag::O_PATH | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        open_no_symlinks(root.as_fd(), Path::new("/dev/null"), OFlag::O_PATH).unwrap();
        // clean() drops a .. at the root: the plain file.
        open_no_symlinks(root.as_fd(), Path::new("/../dev/null"), OFlag::O_PATH).unwrap();
        assert!(open_no_symlinks(root.as_fd(), Path::new("/link/null"), OFlag::O_PATH).is_err());
        assert!(open_no_symlinks(root.as_fd(), Path::new("/dev/swapped"), OFlag::O_RDONLY).is_err());
        // With O_PATH, a last component that is a link is the link itself, never its target.
        let fd = open_no_symlinks(root.as_fd(), Path::new("/dev/swapped"), OFlag::O_PATH).unwrap();
        let st = nix::sys::stat::fstat(fd.as_fd()).unwrap();
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFLNK);
    }

    #[test]
    fn proc_places() {
        assert_eq!(proc_place(Path::new("/proc")), ProcPlace::Proc);
        assert_eq!(proc_place(Path::new("/proc/../proc/")), ProcPlace::Proc);
        assert_eq!(proc_place(Path::new("/proc/cpuinfo")), ProcPlace::Allowed);
        assert_eq!(proc_place(Path::new("/proc/net/dev")), ProcPlace::Allowed);
        assert_eq!(proc_place(Path::new("/proc/sys/kernel")), ProcPlace::Inside);
        assert_eq!(proc_place(Path::new("/x/../proc/self")), ProcPlace::Inside);
        assert_eq!(proc_place(Path::new("/procfoo")), ProcPlace::Outside);
    }
}
