//! Reading a checkpoint archive on restore. The archive is the tenant's input, so it is read as hostile:
//!
//! - it is read through crius-image's header gate ([`crius_image::entries`]: no extension header of more
//!   than 64 KiB, no name past PATH_MAX) and within caps: [`MAX_ENTRIES`] entries and [`MAX_BYTES`] bytes of
//!   files for the archive and again for its `rootfs-diff.tar`, [`MAX_DUMP_BYTES`] for each of
//!   `config.dump`, `spec.dump` and `deleted.files`;
//! - a name with `..`, or an absolute one, is refused;
//! - the archive itself holds only files and directories, unpacked into a new directory;
//! - `rootfs-diff.tar` is applied to the new rootfs entry by entry from file descriptors opened beneath it with
//!   no symlink followed (`RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS`): a symlink it makes is never followed, so
//!   `link -> /etc` then `link/passwd` is refused instead of writing the host's /etc; a hard link must name a
//!   file inside the rootfs reached the same way; device nodes are refused;
//! - a `deleted.files` path with `..`, or under a symlink, is refused.
//!
//! A refusal is InvalidArgument on CreateContainer's `image.image`, naming the archive, the entry and why.

use std::fmt::Display;
use std::fs::File;
use std::io::{BufReader, Read};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use crius_image::entries::{Source, each_entry};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{Mode, SFlag};
use nix::unistd::UnlinkatFlags;

use super::archive::{CONFIG_DUMP, ConfigDump, DELETED_FILES, ROOTFS_DIFF, SPEC_DUMP};
use crate::error::{Error, Result};

/// The most entries of an archive, and of its rootfs diff.
pub(crate) const MAX_ENTRIES: u64 = 1_000_000;
/// The most bytes of files of an archive (CRIU's images hold the process's memory), and of its rootfs diff.
pub(crate) const MAX_BYTES: u64 = 64 << 30;
/// The most bytes of each of `config.dump`, `spec.dump` and `deleted.files`.
pub(crate) const MAX_DUMP_BYTES: u64 = 16 << 20;

const CALL: &str = "CreateContainer";
const FIELD: &str = "image.image";

/// A refusal of `entry` of `archive`.
fn refused(archive: &Path, entry: impl Display, why: impl Display) -> Error {
    Error::invalid(
        CALL,
        FIELD,
        format!("checkpoint archive {}: entry {entry}: {why}", archive.display()),
    )
}

/// crius-image's error reading `archive`, as this crate's.
fn from_image(archive: &Path, e: crius_image::Error) -> Error {
    match e {
        // The system's errors; the tar reader's (a malformed archive) carry no errno.
        crius_image::Error::Io { context, source } if source.raw_os_error().is_some() => Error::io(
            format!("checkpoint archive {}: {context}", archive.display()),
            source,
        ),
        e => Error::invalid(
            CALL,
            FIELD,
            format!("checkpoint archive {}: {e}", archive.display()),
        ),
    }
}

/// The entry and byte count of one tar, against the caps.
struct Budget<'p> {
    archive: &'p Path,
    what: &'static str,
    entries: u64,
    bytes: u64,
}

impl<'p> Budget<'p> {
    fn new(archive: &'p Path, what: &'static str) -> Budget<'p> {
        Budget {
            archive,
            what,
            entries: 0,
            bytes: 0,
        }
    }

    fn take(&mut self, entry: &str, size: u64) -> Result<()> {
        self.entries += 1;
        self.bytes = self.bytes.saturating_add(size);
        if self.entries > MAX_ENTRIES {
            return Err(refused(
                self.archive,
                entry,
                format!("{} has more than {MAX_ENTRIES} entries, the cap", self.what),
            ));
        }
        if self.bytes > MAX_BYTES {
            return Err(refused(
                self.archive,
                entry,
                format!("{} has more than {MAX_BYTES} bytes of files, the cap", self.what),
            ));
        }
        Ok(())
    }
}

/// Calls `f` on each entry of the tar read from `reader` (`what`, of `archive`), with its name checked:
/// `f` gets the name for errors (quoted, after `rootfs-diff.tar:` for that one) and the path as components,
/// never empty.
fn walk<'a>(
    reader: impl Read + 'a,
    archive: &Path,
    budget: &mut Budget<'_>,
    mut f: impl FnMut(&mut tar::Entry<'_, Source<'a>>, &str, &Path) -> Result<bool>,
) -> Result<()> {
    let mut mine = None;
    let what = budget.what;
    let r = each_entry(reader, what, |e| {
        let step = (|| {
            let raw = e
                .path()
                .map_err(|err| refused(archive, "?", format!("an unreadable name: {err}")))?
                .into_owned();
            let name = match what {
                ROOTFS_DIFF => format!("{ROOTFS_DIFF}:{:?}", raw.display().to_string()),
                _ => format!("{:?}", raw.display().to_string()),
            };
            let rel = relative(&raw).map_err(|why| refused(archive, &name, why))?;
            if e.header().entry_type() == tar::EntryType::XGlobalHeader || rel.as_os_str().is_empty() {
                return Ok(true);
            }
            budget.take(&name, e.size())?;
            f(e, &name, &rel)
        })();
        step.map_err(|err| {
            mine = Some(err);
            crius_image::Error::InvalidArgument(String::new())
        })
    });
    match mine {
        Some(e) => Err(e),
        None => r.map_err(|e| from_image(archive, e)),
    }
}

/// A name in an archive as components under its root: `.` dropped; `..` and an absolute path refused.
fn relative(raw: &Path) -> std::result::Result<PathBuf, &'static str> {
    let mut out = PathBuf::new();
    for c in raw.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir => return Err("has a '..' component"),
            Component::RootDir | Component::Prefix(_) => return Err("is an absolute path"),
        }
    }
    Ok(out)
}

/// Opens `path` beneath `dir` with no symlink on the way nor at its end.
fn beneath(dir: BorrowedFd<'_>, path: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC | OFlag::O_NOFOLLOW)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS);
    let p = if path.as_os_str().is_empty() {
        Path::new(".")
    } else {
        path
    };
    nix::fcntl::openat2(dir, p, how)
}

/// Why a walk beneath a root failed: something on the way is not a real directory, or an I/O error.
enum Walk {
    NotDir,
    Io(Errno),
}

/// Opens directory `rel` beneath `root`, making the missing ones (`mode`) one at a time; a symlink or a
/// non-directory on the way is [`Walk::NotDir`].
fn dirs(root: BorrowedFd<'_>, rel: &Path, mode: u32) -> std::result::Result<OwnedFd, Walk> {
    let mut cur = beneath(root, Path::new(""), OFlag::O_PATH | OFlag::O_DIRECTORY).map_err(Walk::Io)?;
    for c in rel.components() {
        let c = Path::new(c.as_os_str());
        let open = |d: BorrowedFd<'_>| beneath(d, c, OFlag::O_PATH | OFlag::O_DIRECTORY);
        cur = match open(cur.as_fd()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => {
                match nix::sys::stat::mkdirat(cur.as_fd(), c, Mode::from_bits_truncate(mode)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(Walk::Io(e)),
                }
                open(cur.as_fd()).map_err(walk_err)?
            }
            Err(e) => return Err(walk_err(e)),
        };
    }
    Ok(cur)
}

fn walk_err(e: Errno) -> Walk {
    match e {
        Errno::ELOOP | Errno::ENOTDIR | Errno::EXDEV => Walk::NotDir,
        e => Walk::Io(e),
    }
}

/// Reads `config.dump` out of the archive at `path` without unpacking it.
pub(crate) fn read_config(path: &Path) -> Result<ConfigDump> {
    let file = File::open(path).map_err(|e| Error::io(format!("opening {}", path.display()), e))?;
    let mut budget = Budget::new(path, "the archive");
    let mut found = None;
    walk(BufReader::new(file), path, &mut budget, |e, name, rel| {
        if rel != Path::new(CONFIG_DUMP) {
            return Ok(true);
        }
        let text = read_dump(e, path, name)?;
        let config = serde_json::from_slice(&text)
            .map_err(|err| refused(path, name, format!("not {CONFIG_DUMP}'s JSON: {err}")))?;
        found = Some(config);
        Ok(false)
    })?;
    found.ok_or_else(|| {
        Error::invalid(
            CALL,
            FIELD,
            format!(
                "{} holds no {CONFIG_DUMP}: not a checkpoint archive",
                path.display()
            ),
        )
    })
}

/// The whole of a dump entry, refused past [`MAX_DUMP_BYTES`].
fn read_dump(e: &mut impl Read, archive: &Path, name: &str) -> Result<Vec<u8>> {
    let mut text = Vec::new();
    e.take(MAX_DUMP_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|err| Error::io(format!("reading {name} of {}", archive.display()), err))?;
    if text.len() as u64 > MAX_DUMP_BYTES {
        return Err(too_big(archive, name));
    }
    Ok(text)
}

fn too_big(archive: &Path, name: &str) -> Error {
    refused(
        archive,
        name,
        format!(
            "more than {MAX_DUMP_BYTES} bytes, the cap of {CONFIG_DUMP}, {SPEC_DUMP} and {DELETED_FILES}"
        ),
    )
}

/// Unpacks the archive at `path` into `dir` (which it makes): files and directories only, within the caps.
pub(crate) fn unpack(path: &Path, dir: &Path) -> Result<()> {
    let io = |what: String| move |e| Error::io(what, e);
    crius_common::private::dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let root = File::open(dir).map_err(io(format!("opening {}", dir.display())))?;
    let file = File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let mut budget = Budget::new(path, "the archive");
    walk(BufReader::new(file), path, &mut budget, |e, name, rel| {
        let dump = [CONFIG_DUMP, SPEC_DUMP, DELETED_FILES]
            .iter()
            .any(|d| rel == Path::new(d));
        if dump && e.size() > MAX_DUMP_BYTES {
            return Err(too_big(path, name));
        }
        let not_dir = |w: Walk| match w {
            Walk::NotDir => refused(path, name, "a parent is not a directory"),
            Walk::Io(err) => Error::io(format!("unpacking {name} of {}", path.display()), err.into()),
        };
        match e.header().entry_type() {
            tar::EntryType::Directory => {
                dirs(root.as_fd(), rel, 0o700).map_err(not_dir)?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let parent =
                    dirs(root.as_fd(), rel.parent().unwrap_or(Path::new("")), 0o700).map_err(not_dir)?;
                let leaf = Path::new(rel.file_name().unwrap_or_default());
                let flags =
                    OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let fd = nix::fcntl::openat(parent.as_fd(), leaf, flags, Mode::from_bits_truncate(0o600))
                    .map_err(|err| match err {
                        Errno::EEXIST => refused(path, name, "appears twice"),
                        err => Error::io(format!("creating {name} of {}", path.display()), err.into()),
                    })?;
                let mut f = File::from(fd);
                let copied = std::io::copy(e, &mut f);
                copied.map_err(io(format!("unpacking {name} of {}", path.display())))?;
            }
            kind => {
                return Err(refused(
                    path,
                    name,
                    format!("a {kind:?} entry: a checkpoint archive holds only files and directories"),
                ));
            }
        }
        Ok(true)
    })
}

/// Applies a checkpoint's rootfs changes to `rootfs` (a new container's, mounted) from `dir` (the archive
/// at `archive`, unpacked): `rootfs-diff.tar` unpacked over it, then the paths of `deleted.files` removed.
/// Either file may be missing (nothing changed).
pub(crate) fn apply_rootfs_diff(archive: &Path, dir: &Path, rootfs: &Path) -> Result<()> {
    let io = |what: String| move |e| Error::io(what, e);
    let root = File::open(rootfs).map_err(io(format!("opening {}", rootfs.display())))?;
    let diff = dir.join(ROOTFS_DIFF);
    if diff.exists() {
        let file = File::open(&diff).map_err(io(format!("opening {}", diff.display())))?;
        let mut budget = Budget::new(archive, ROOTFS_DIFF);
        walk(BufReader::new(file), archive, &mut budget, |e, name, rel| {
            apply(e, root.as_fd(), rel).map_err(|err| match err {
                Apply::Refused(why) => refused(archive, name, why),
                Apply::Io(what, err) => Error::io(
                    format!(
                        "applying {name} of {} to {}: {what}",
                        archive.display(),
                        rootfs.display()
                    ),
                    err.into(),
                ),
            })?;
            Ok(true)
        })?;
    }
    let listed = dir.join(DELETED_FILES);
    if !listed.exists() {
        return Ok(());
    }
    let mut file = File::open(&listed).map_err(io(format!("opening {}", listed.display())))?;
    let text = read_dump(&mut file, archive, DELETED_FILES)?;
    let paths: Vec<String> = serde_json::from_slice(&text)
        .map_err(|e| refused(archive, DELETED_FILES, format!("not a JSON array of paths: {e}")))?;
    for p in paths {
        let entry = format!("{DELETED_FILES}:{p:?}");
        let rel = relative(Path::new(p.trim_start_matches('/')))
            .map_err(|why| refused(archive, &entry, format!("{why}: it would escape the rootfs")))?;
        let (Some(parent), Some(leaf)) = (rel.parent(), rel.file_name()) else {
            continue;
        };
        let dir = match beneath(root.as_fd(), parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
            Ok(d) => d,
            Err(Errno::ENOENT) => continue,
            Err(e) => {
                return Err(match walk_err(e) {
                    Walk::NotDir => refused(archive, &entry, "a parent is a symlink or not a directory"),
                    Walk::Io(e) => Error::io(format!("resolving {entry} in {}", rootfs.display()), e.into()),
                });
            }
        };
        remove_any(dir.as_fd(), Path::new(leaf))
            .map_err(|e| Error::io(format!("removing {entry} from {}", rootfs.display()), e.into()))?;
    }
    Ok(())
}

/// Why an entry of the rootfs diff was not applied.
enum Apply {
    Refused(String),
    Io(&'static str, Errno),
}

/// Removes `leaf` of `dir` whatever it is (a directory with what it holds); nothing there is fine.
fn remove_any(dir: BorrowedFd<'_>, leaf: &Path) -> nix::Result<()> {
    match nix::sys::stat::fstatat(dir, leaf, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(e),
        Ok(st) if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) == SFlag::S_IFDIR => {
            // Through the directory's fd: `leaf` is the last component, which std does not follow.
            let at = crius_common::inroot::fd_path(&dir).join(leaf);
            std::fs::remove_dir_all(&at).map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
        }
        Ok(_) => nix::unistd::unlinkat(dir, leaf, UnlinkatFlags::NoRemoveDir),
    }
}

/// Applies one entry of the rootfs diff at `rel` beneath `root`.
fn apply<R: Read>(
    e: &mut tar::Entry<'_, R>,
    root: BorrowedFd<'_>,
    rel: &Path,
) -> std::result::Result<(), Apply> {
    let parent = dirs(root, rel.parent().unwrap_or(Path::new("")), 0o755).map_err(|w| match w {
        Walk::NotDir => Apply::Refused("a parent is a symlink or not a directory".into()),
        Walk::Io(err) => Apply::Io("opening its directory", err),
    })?;
    let dir = parent.as_fd();
    let leaf = Path::new(rel.file_name().unwrap_or_default());
    let h = e.header().clone();
    let mode = Mode::from_bits_truncate(h.mode().unwrap_or(0o644) & 0o7777);
    let replace = |what| remove_any(dir, leaf).map_err(|err| Apply::Io(what, err));
    let kind = h.entry_type();
    match kind {
        tar::EntryType::Directory => {
            let st = nix::sys::stat::fstatat(dir, leaf, AtFlags::AT_SYMLINK_NOFOLLOW);
            let is_dir = st.is_ok_and(|st| st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits());
            if !is_dir {
                replace("replacing it")?;
                nix::sys::stat::mkdirat(dir, leaf, Mode::from_bits_truncate(0o700))
                    .map_err(|err| Apply::Io("making the directory", err))?;
            }
        }
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            replace("replacing it")?;
            let flags =
                OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let fd = nix::fcntl::openat(dir, leaf, flags, Mode::from_bits_truncate(0o600))
                .map_err(|err| Apply::Io("creating the file", err))?;
            let mut f = File::from(fd);
            std::io::copy(e, &mut f).map_err(|err| {
                Apply::Io(
                    "writing the file",
                    Errno::from_raw(err.raw_os_error().unwrap_or(libc::EIO)),
                )
            })?;
        }
        tar::EntryType::Symlink => {
            let target = e
                .link_name()
                .map_err(|err| Apply::Refused(format!("an unreadable symlink target: {err}")))?
                .unwrap_or_default()
                .into_owned();
            replace("replacing it")?;
            // Made, never followed here: where it points is the container's business.
            nix::unistd::symlinkat(&target, dir, leaf).map_err(|err| Apply::Io("making the symlink", err))?;
        }
        tar::EntryType::Link => {
            let target = e
                .link_name()
                .map_err(|err| Apply::Refused(format!("an unreadable hard link target: {err}")))?
                .unwrap_or_default()
                .into_owned();
            let target_rel = relative(&target)
                .map_err(|why| Apply::Refused(format!("a hard link whose target {target:?} {why}")))?;
            let src = beneath(root, &target_rel, OFlag::O_PATH).map_err(|err| {
                Apply::Refused(format!(
                    "a hard link to {target:?}, which is not a file reached inside the rootfs without symlinks ({err})"
                ))
            })?;
            let st = nix::sys::stat::fstat(&src).map_err(|err| Apply::Io("reading its target", err))?;
            if st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFDIR.bits() {
                return Err(Apply::Refused(format!("a hard link to directory {target:?}")));
            }
            replace("replacing it")?;
            let from = crius_common::inroot::fd_path(&src);
            nix::unistd::linkat(nix::fcntl::AT_FDCWD, &from, dir, leaf, AtFlags::AT_SYMLINK_FOLLOW)
                .map_err(|err| Apply::Io("making the hard link", err))?;
            return Ok(());
        }
        tar::EntryType::Fifo => {
            replace("replacing it")?;
            nix::sys::stat::mknodat(dir, leaf, SFlag::S_IFIFO, mode, 0)
                .map_err(|err| Apply::Io("making the fifo", err))?;
        }
        tar::EntryType::Char | tar::EntryType::Block => {
            return Err(Apply::Refused(
                "a device node: a rootfs diff may not make one".into(),
            ));
        }
        kind => {
            return Err(Apply::Refused(format!(
                "a {kind:?} entry, which a rootfs diff does not hold"
            )));
        }
    }
    let (uid, gid) = (h.uid().unwrap_or(0) as u32, h.gid().unwrap_or(0) as u32);
    nix::unistd::fchownat(
        dir,
        leaf,
        Some(uid.into()),
        Some(gid.into()),
        AtFlags::AT_SYMLINK_NOFOLLOW,
    )
    .map_err(|err| Apply::Io("setting its owner", err))?;
    if kind != tar::EntryType::Symlink {
        // After the chown, which clears setuid and setgid. `leaf` was just made here and is no symlink.
        nix::sys::stat::fchmodat(dir, leaf, mode, nix::sys::stat::FchmodatFlags::FollowSymlink)
            .map_err(|err| Apply::Io("setting its mode", err))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "unpack_tests.rs"]
mod tests;
