//! Applying a layer tar to its own directory, the way overlayfs expects it: `.wh.<name>` becomes a whiteout
//! (a 0:0 character device), `.wh..wh..opq` marks its directory opaque (`trusted.overlay.opaque=y`).
//! Hard links, symlinks, device nodes, ownership, setuid bits and xattrs are kept. No entry writes outside the
//! layer directory: `..` components are refused, absolute paths are taken relative to it, and no parent may be
//! a symlink (so `link -> /etc` followed by `link/passwd` fails instead of writing to /etc).

use std::ffi::CString;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Component, Path, PathBuf};

use std::rc::Rc;

use sha2::{Digest as _, Sha256};

use crate::error::io;
use crate::gate::{Gate, Limits, PATH_MAX, Shared};
use crate::{Digest, Error, Result};

/// A reader that hashes what passes through it.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: Read> Read for Hashing<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

/// Unpacks a layer (gzip, zstd or plain tar) from `reader` into `dest` under the default [`Limits`]; returns
/// the digest of the uncompressed tar (the layer's diff id).
pub fn unpack(reader: impl Read, dest: &Path) -> Result<Digest> {
    unpack_layer(reader, dest, "the layer", &Limits::default())
}

/// Unpacks `what` (gzip, zstd or plain tar; `layer sha256:…`, or an archive) from `reader` into `dest`;
/// returns the digest of the uncompressed tar (the layer's diff id). A layer past `limits`, an extension header over
/// [`MAX_EXTENSION`](crate::gate::MAX_EXTENSION) or a name too long for PATH_MAX is [`Error::LayerRefused`],
/// found before more than the cap was read or held.
pub fn unpack_layer(reader: impl Read, dest: &Path, what: &str, limits: &Limits) -> Result<Digest> {
    let plain = decompressed(reader)?;
    let shared = Rc::new(Shared::default());
    let mut hashing = Hashing {
        inner: Gate::new(plain, shared.clone(), limits.max_bytes),
        hasher: Sha256::new(),
    };
    let refused = |e: Error| match shared.refusal() {
        Some(why) => Error::LayerRefused {
            layer: what.to_string(),
            why,
        },
        None => e,
    };
    {
        let mut archive = tar::Archive::new(&mut hashing);
        let mut entries = archive
            .entries()
            .map_err(|e| refused(io("reading layer tar", e)))?;
        let mut count = 0u64;
        while let Some(entry) = shared.headers(|| entries.next()) {
            let mut entry = entry.map_err(|e| refused(io("reading layer tar", e)))?;
            count += 1;
            if count > limits.max_entries {
                return Err(Error::LayerRefused {
                    layer: what.to_string(),
                    why: format!(
                        "more than {} entries, the cap ([image] max_layer_entries)",
                        limits.max_entries
                    ),
                });
            }
            check_names(&entry, what)?;
            apply(&mut entry, dest).map_err(refused)?;
            // Whatever the entry holds that was not written is read too: the next header follows it.
            std::io::copy(&mut entry, &mut std::io::sink())
                .map_err(|e| refused(io("reading layer tar", e)))?;
        }
    }
    // Hash the rest of the stream (end-of-archive blocks and padding) too.
    std::io::copy(&mut hashing, &mut std::io::sink()).map_err(|e| refused(io("reading layer tar", e)))?;
    Ok(Digest::from_hasher(hashing.hasher))
}

/// `reader` unzipped by its magic bytes: gzip, zstd, or as it is.
pub(crate) fn decompressed<'a>(reader: impl Read + 'a) -> Result<Box<dyn Read + 'a>> {
    let mut buffered = BufReader::new(reader);
    let head = buffered.fill_buf().map_err(|e| io("reading layer", e))?;
    Ok(match head {
        [0x1f, 0x8b, ..] => Box::new(flate2::read::GzDecoder::new(buffered)),
        [0x28, 0xb5, 0x2f, 0xfd, ..] => Box::new(
            zstd::stream::read::Decoder::with_buffer(buffered).map_err(|e| io("reading zstd layer", e))?,
        ),
        _ => Box::new(buffered),
    })
}

/// Refuses an entry or link name that does not fit PATH_MAX with its NUL.
pub(crate) fn check_names<R: Read>(entry: &tar::Entry<'_, R>, what: &str) -> Result<()> {
    let names = [
        ("name", Some(entry.path_bytes())),
        ("link name", entry.link_name_bytes()),
    ];
    for (kind, name) in names {
        if let Some(n) = name.filter(|n| n.len() >= PATH_MAX) {
            return Err(Error::LayerRefused {
                layer: what.to_string(),
                why: format!(
                    "an entry {kind} of {} bytes, more than PATH_MAX ({PATH_MAX}) holds with its NUL",
                    n.len()
                ),
            });
        }
    }
    Ok(())
}

fn unsafe_entry(path: &Path, why: &'static str) -> Error {
    Error::UnsafeEntry {
        path: path.display().to_string(),
        why,
    }
}

/// The entry path relative to the layer root: leading `/` and `.` dropped, `..` refused.
pub fn clean(path: &Path) -> Result<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir => return Err(unsafe_entry(path, "contains '..'")),
            Component::Prefix(_) => return Err(unsafe_entry(path, "has a prefix")),
        }
    }
    Ok(out)
}

/// Makes sure every parent of `rel` under `dest` is a real directory (creating missing ones); a symlink parent
/// is refused.
fn parents(dest: &Path, rel: &Path, create: bool) -> Result<()> {
    let mut cur = dest.to_path_buf();
    let Some(parent) = rel.parent() else { return Ok(()) };
    for c in parent.components() {
        cur.push(c);
        match std::fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(unsafe_entry(rel, "a parent directory is a symlink"));
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) if create => {
                std::fs::remove_file(&cur).map_err(|e| io(format!("replacing {}", cur.display()), e))?;
                std::fs::create_dir(&cur).map_err(|e| io(format!("creating {}", cur.display()), e))?;
            }
            Ok(_) => return Err(unsafe_entry(rel, "a parent is not a directory")),
            Err(_) if create => {
                std::fs::create_dir(&cur).map_err(|e| io(format!("creating {}", cur.display()), e))?;
            }
            Err(_) => return Err(unsafe_entry(rel, "a parent directory does not exist")),
        }
    }
    Ok(())
}

fn remove_any(p: &Path) -> Result<()> {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
        Ok(_) => std::fs::remove_file(p),
        Err(_) => return Ok(()),
    }
    .map_err(|e| io(format!("replacing {}", p.display()), e))
}

fn cpath(p: &Path) -> Result<CString> {
    CString::new(p.as_os_str().as_bytes())
        .map_err(|_| Error::InvalidArgument(format!("{} has a NUL byte", p.display())))
}

/// The xattr (value `y`) that marks a directory opaque: the layers below it add nothing to it.
pub(crate) const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// Whether `m` is a whiteout as a layer holds it: a 0:0 character device.
pub(crate) fn is_whiteout(m: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    m.file_type().is_char_device() && m.rdev() == 0
}

/// Whether directory `p` of a layer is opaque ([`OPAQUE_XATTR`]); unreadable counts as not.
pub(crate) fn is_opaque(p: &Path) -> bool {
    let (Ok(cp), Ok(cn)) = (cpath(p), CString::new(OPAQUE_XATTR)) else {
        return false;
    };
    let mut buf = [0u8; 2];
    // SAFETY: valid NUL-terminated strings and a live buffer of the length given.
    let n = unsafe { libc::lgetxattr(cp.as_ptr(), cn.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    n == 1 && buf[0] == b'y'
}

fn set_xattr(p: &Path, name: &str, value: &[u8]) -> Result<()> {
    let (cp, cn) = (
        cpath(p)?,
        CString::new(name).map_err(|_| Error::InvalidArgument(format!("xattr {name:?}")))?,
    );
    // SAFETY: valid NUL-terminated strings and a live buffer.
    let r = unsafe { libc::lsetxattr(cp.as_ptr(), cn.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    if r != 0 {
        return Err(io(
            format!("setting xattr {name} on {}", p.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn mknod(p: &Path, kind: nix::sys::stat::SFlag, mode: u32, major: u64, minor: u64) -> Result<()> {
    let perm = nix::sys::stat::Mode::from_bits_truncate(mode);
    nix::sys::stat::mknod(p, kind, perm, nix::sys::stat::makedev(major, minor))
        .map_err(|e| io(format!("mknod {}", p.display()), e))
}

fn apply<R: Read>(entry: &mut tar::Entry<'_, R>, dest: &Path) -> Result<()> {
    let raw = entry
        .path()
        .map_err(|e| io("reading entry path", e))?
        .into_owned();
    let rel = clean(&raw)?;
    if rel.as_os_str().is_empty() {
        return Ok(());
    }
    parents(dest, &rel, true)?;
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = dest.join(rel.parent().unwrap_or(Path::new("")));
    if name == ".wh..wh..opq" {
        return set_xattr(&parent, OPAQUE_XATTR, b"y");
    }
    if let Some(hidden) = name.strip_prefix(".wh.") {
        // `.wh.`, `.wh..` and `.wh...` would name the directory itself or its parent: without this, `.wh...` at
        // the top removed the directory holding the layer.
        if matches!(hidden, "" | "." | "..") {
            return Err(unsafe_entry(&rel, "a whiteout of no name, '.' or '..'"));
        }
        let target = parent.join(hidden);
        remove_any(&target)?;
        return mknod(&target, nix::sys::stat::SFlag::S_IFCHR, 0, 0, 0);
    }
    let target = dest.join(&rel);
    let h = entry.header().clone();
    let mode = h.mode().map_err(|e| io("entry mode", e))? & 0o7777;
    let (uid, gid) = (h.uid().unwrap_or(0) as u32, h.gid().unwrap_or(0) as u32);
    let mut xattrs = Vec::new();
    if let Ok(Some(exts)) = entry.pax_extensions() {
        for ext in exts.flatten() {
            if let Some(key) = ext.key().ok().and_then(|k| k.strip_prefix("SCHILY.xattr.")) {
                xattrs.push((key.to_string(), ext.value_bytes().to_vec()));
            }
        }
    }
    let kind = h.entry_type();
    match kind {
        tar::EntryType::Directory => {
            if !std::fs::symlink_metadata(&target).is_ok_and(|m| m.is_dir()) {
                remove_any(&target)?;
                std::fs::create_dir(&target).map_err(|e| io(format!("creating {}", target.display()), e))?;
            }
        }
        tar::EntryType::Regular | tar::EntryType::Continuous => {
            remove_any(&target)?;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&target)
                .map_err(|e| io(format!("creating {}", target.display()), e))?;
            std::io::copy(entry, &mut f).map_err(|e| io(format!("writing {}", target.display()), e))?;
        }
        tar::EntryType::Symlink => {
            let link = entry
                .link_name()
                .map_err(|e| io("symlink target", e))?
                .unwrap_or_default()
                .into_owned();
            remove_any(&target)?;
            symlink(&link, &target).map_err(|e| io(format!("symlink {}", target.display()), e))?;
        }
        tar::EntryType::Link => {
            let link = entry
                .link_name()
                .map_err(|e| io("hard link target", e))?
                .unwrap_or_default()
                .into_owned();
            let src_rel = clean(&link)?;
            parents(dest, &src_rel, false)?;
            let src = dest.join(&src_rel);
            if std::fs::symlink_metadata(&src).is_err() {
                return Err(unsafe_entry(&rel, "hard link to a file not in this layer"));
            }
            remove_any(&target)?;
            std::fs::hard_link(&src, &target)
                .map_err(|e| io(format!("hard link {}", target.display()), e))?;
            return Ok(());
        }
        tar::EntryType::Char | tar::EntryType::Block | tar::EntryType::Fifo => {
            let sflag = match kind {
                tar::EntryType::Char => nix::sys::stat::SFlag::S_IFCHR,
                tar::EntryType::Block => nix::sys::stat::SFlag::S_IFBLK,
                _ => nix::sys::stat::SFlag::S_IFIFO,
            };
            let major = h.device_major().ok().flatten().unwrap_or(0);
            let minor = h.device_minor().ok().flatten().unwrap_or(0);
            remove_any(&target)?;
            mknod(&target, sflag, mode, major.into(), minor.into())?;
        }
        _ => return Ok(()),
    }
    std::os::unix::fs::lchown(&target, Some(uid), Some(gid))
        .map_err(|e| io(format!("chown {}", target.display()), e))?;
    if kind != tar::EntryType::Symlink {
        // After chown, which clears setuid/setgid.
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(mode))
            .map_err(|e| io(format!("chmod {}", target.display()), e))?;
    }
    for (k, v) in xattrs {
        set_xattr(&target, &k, &v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_refuses_parent_components() {
        assert_eq!(
            clean(Path::new("/etc/passwd")).unwrap(),
            PathBuf::from("etc/passwd")
        );
        assert_eq!(clean(Path::new("./a/./b")).unwrap(), PathBuf::from("a/b"));
        for bad in ["../x", "a/../../x", ".."] {
            assert!(clean(Path::new(bad)).is_err(), "{bad}");
        }
    }

    /// Found by tests/unpack_props.rs: `.wh.` removed the layer directory, `.wh...` the one holding it.
    #[test]
    fn whiteouts_of_no_name_dot_or_dot_dot_are_refused() {
        for bad in [".wh.", ".wh..", ".wh...", "a/.wh.", "a/.wh..."] {
            let root = tempfile::tempdir().unwrap();
            let dest = root.path().join("layer");
            std::fs::create_dir_all(dest.join("a")).unwrap();
            std::fs::write(root.path().join("sentinel"), b"keep").unwrap();
            let mut h = tar::Header::new_gnu();
            h.set_path(bad).unwrap();
            h.set_size(0);
            h.set_cksum();
            let mut b = tar::Builder::new(Vec::new());
            b.append(&h, &[][..]).unwrap();
            let tar = b.into_inner().unwrap();
            assert!(
                matches!(unpack(&tar[..], &dest), Err(Error::UnsafeEntry { .. })),
                "{bad}"
            );
            assert!(dest.join("a").is_dir(), "{bad}");
            assert_eq!(std::fs::read(root.path().join("sentinel")).unwrap(), b"keep");
        }
    }
}
