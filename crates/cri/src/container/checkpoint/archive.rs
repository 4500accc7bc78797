//! The checkpoint archive, in the layout of kubelet's and CRI-O's container checkpoints (what checkpointctl
//! reads): a tar, gzip-compressed when its name ends in `.gz` or `.tgz`, holding
//!
//! - `checkpoint/`: CRIU's images;
//! - `config.dump`: [`ConfigDump`], the container's identity and its image, as JSON;
//! - `spec.dump`: the container's OCI spec (its `config.json`);
//! - `rootfs-diff.tar`: what the container changed in its rootfs (its writable layer, overlayfs' upper
//!   directory), with the files it deleted listed in `deleted.files` (a JSON array of paths from the root);
//! - `container.log`: its CRI log;
//! - `stats-dump`: CRIU's statistics of the dump.
//!
//! Here: the names, writing the rootfs diff from an upper directory, packing the archive, and telling whether
//! an image reference is an archive's path. Reading one back, as hostile input, is [`super::unpack`]'s.

use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// CRIU's images.
pub(crate) const CHECKPOINT_DIR: &str = "checkpoint";
/// The container's identity and image.
pub(crate) const CONFIG_DUMP: &str = "config.dump";
/// The container's OCI spec.
pub(crate) const SPEC_DUMP: &str = "spec.dump";
/// The writable layer's changes.
pub(crate) const ROOTFS_DIFF: &str = "rootfs-diff.tar";
/// The files the container deleted.
pub(crate) const DELETED_FILES: &str = "deleted.files";
/// The container's CRI log.
pub(crate) const CONTAINER_LOG: &str = "container.log";
/// CRIU's statistics of the dump.
pub(crate) const STATS_DUMP: &str = "stats-dump";

/// `config.dump`: the fields CRI-O writes and checkpointctl reads, in their JSON names.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ConfigDump {
    /// The container's id.
    pub id: String,
    /// Its name (the CRI metadata's).
    pub name: String,
    /// The image as the container's config named it.
    #[serde(default)]
    pub rootfs_image: String,
    /// The image's id.
    #[serde(default)]
    pub rootfs_image_ref: String,
    /// The image's name (its first tag, else the reference).
    #[serde(default)]
    pub rootfs_image_name: String,
    /// The OCI runtime that ran it.
    #[serde(default, rename = "runtime")]
    pub runtime: String,
    /// When it was created (RFC 3339).
    #[serde(default)]
    pub created_time: String,
    /// When it was checkpointed (RFC 3339).
    #[serde(default)]
    pub checkpointed_time: String,
}

/// Whether `image` (a CreateContainer's `image.image`) names a checkpoint archive: an absolute path to a file.
pub(crate) fn is_archive_path(image: &str) -> bool {
    image.starts_with('/') && Path::new(image).is_file()
}

fn gz(path: &Path) -> bool {
    let n = path.to_string_lossy();
    n.ends_with(".gz") || n.ends_with(".tgz")
}

/// Packs the contents of `dir` into the archive `to` (written beside it, then renamed), gzip by its name.
pub(crate) fn pack(dir: &Path, to: &Path) -> std::io::Result<()> {
    let tmp = to.with_file_name(format!(
        ".{}.part",
        to.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()
    ));
    let f = crius_common::private::create(&tmp)?;
    let result = (|| {
        let w: Box<dyn Write> = if gz(to) {
            Box::new(flate2::write::GzEncoder::new(f, flate2::Compression::fast()))
        } else {
            Box::new(f)
        };
        let mut b = tar::Builder::new(w);
        b.follow_symlinks(false);
        let mut names: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
        // The small JSON files first: a restore reads config.dump without going through CRIU's images.
        names.sort_by_key(|e| {
            let n = e.file_name();
            (n != CONFIG_DUMP && n != SPEC_DUMP, n)
        });
        for e in names {
            let name = e.file_name();
            if e.file_type()?.is_dir() {
                b.append_dir_all(&name, e.path())?;
            } else {
                b.append_path_with_name(e.path(), &name)?;
            }
        }
        b.into_inner()?.flush()
    })();
    match result.and_then(|_| std::fs::rename(&tmp, to)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

/// Whether an upper directory's entry is an overlayfs whiteout: a character device 0/0.
fn whiteout(m: &std::fs::Metadata) -> bool {
    m.file_type().is_char_device() && m.rdev() == 0
}

/// Writes `rootfs-diff.tar` (`tar`) of the overlayfs upper directory `upper`: its files, directories and
/// symlinks; returns the paths its whiteouts delete (for `deleted.files`), `/`-rooted.
pub(crate) fn write_rootfs_diff(upper: &Path, tar: &Path) -> std::io::Result<Vec<String>> {
    let mut b = tar::Builder::new(crius_common::private::create(tar)?);
    b.follow_symlinks(false);
    let mut deleted = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let mut entries: Vec<_> = std::fs::read_dir(upper.join(&rel))?.collect::<Result<_, _>>()?;
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = rel.join(e.file_name());
            let m = std::fs::symlink_metadata(e.path())?;
            if whiteout(&m) {
                deleted.push(format!("/{}", name.display()));
                continue;
            }
            b.append_path_with_name(e.path(), &name)?;
            if m.is_dir() {
                stack.push(name);
            }
        }
    }
    b.into_inner()?.flush()?;
    deleted.sort();
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::super::unpack::{apply_rootfs_diff, read_config, unpack};
    use super::*;
    use std::fs::File;
    use std::io::{BufReader, Read};

    /// A reader of `path`, unzipped when it is gzip (by its magic bytes, whatever its name).
    fn open(path: &Path) -> std::io::Result<Box<dyn Read>> {
        let mut f = BufReader::new(File::open(path)?);
        let mut magic = [0u8; 2];
        let n = f.read(&mut magic)?;
        let head = std::io::Cursor::new(magic[..n].to_vec());
        let chained = head.chain(f);
        if n == 2 && magic == [0x1f, 0x8b] {
            Ok(Box::new(flate2::read::GzDecoder::new(chained)))
        } else {
            Ok(Box::new(chained))
        }
    }

    fn entries(archive: &Path) -> Vec<String> {
        let mut a = tar::Archive::new(open(archive).unwrap());
        let mut v: Vec<String> = a
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn the_archive_has_the_layout_checkpointctl_reads_and_round_trips() {
        let d = tempfile::tempdir().unwrap();
        let src = d.path().join("src");
        std::fs::create_dir_all(src.join(CHECKPOINT_DIR)).unwrap();
        std::fs::write(src.join(CHECKPOINT_DIR).join("inventory.img"), b"criu").unwrap();
        let config = ConfigDump {
            id: "abc".into(),
            name: "counter".into(),
            rootfs_image_ref: "sha256:1".into(),
            ..Default::default()
        };
        std::fs::write(src.join(CONFIG_DUMP), serde_json::to_vec(&config).unwrap()).unwrap();
        for f in [SPEC_DUMP, ROOTFS_DIFF, DELETED_FILES, CONTAINER_LOG, STATS_DUMP] {
            std::fs::write(src.join(f), f).unwrap();
        }
        for name in ["c.tar", "c.tar.gz"] {
            let to = d.path().join(name);
            pack(&src, &to).unwrap();
            assert_eq!(
                entries(&to),
                [
                    "checkpoint/",
                    "checkpoint/inventory.img",
                    CONFIG_DUMP,
                    CONTAINER_LOG,
                    DELETED_FILES,
                    ROOTFS_DIFF,
                    SPEC_DUMP,
                    STATS_DUMP
                ]
            );
            let raw = std::fs::read(&to).unwrap();
            assert_eq!(raw.starts_with(&[0x1f, 0x8b]), name.ends_with(".gz"), "{name}");
            assert_eq!(read_config(&to).unwrap(), config);
            assert!(is_archive_path(&to.display().to_string()));
            let out = d.path().join(format!("out-{name}"));
            unpack(&to, &out).unwrap();
            assert_eq!(
                std::fs::read(out.join("checkpoint/inventory.img")).unwrap(),
                b"criu"
            );
        }
        assert!(!is_archive_path("busybox:latest"));
        assert!(!is_archive_path(&d.path().join("none.tar").display().to_string()));
        let e = read_config(&d.path().join("src").join(SPEC_DUMP)).unwrap_err();
        assert!(
            e.to_string().contains("not a checkpoint archive") || e.code() != tonic::Code::NotFound,
            "{e}"
        );
        // The config's JSON names are CRI-O's.
        let json = serde_json::to_value(&config).unwrap();
        assert_eq!(json["rootfsImageRef"], "sha256:1");
        assert!(json.get("runtime").is_some() && json.get("createdTime").is_some());
    }

    #[test]
    fn the_rootfs_diff_carries_changes_and_deletions_onto_a_new_rootfs() {
        let d = tempfile::tempdir().unwrap();
        let upper = d.path().join("upper");
        std::fs::create_dir_all(upper.join("data/sub")).unwrap();
        std::fs::write(upper.join("data/sub/new.txt"), b"written").unwrap();
        std::os::unix::fs::symlink("sub/new.txt", upper.join("data/link")).unwrap();
        // A whiteout, as overlayfs makes it for a deleted file (needs root: a device node).
        let can_mknod = nix::sys::stat::mknod(
            &upper.join("gone.txt"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(0o600),
            0,
        )
        .is_ok();
        let dir = d.path().join("ckpt");
        std::fs::create_dir_all(&dir).unwrap();
        let deleted = write_rootfs_diff(&upper, &dir.join(ROOTFS_DIFF)).unwrap();
        let want: Vec<String> = if can_mknod {
            vec!["/gone.txt".into()]
        } else {
            vec![]
        };
        assert_eq!(deleted, want);
        let mut listed = entries(&dir.join(ROOTFS_DIFF));
        listed.retain(|e| !e.starts_with("gone"));
        assert_eq!(listed, ["data", "data/link", "data/sub", "data/sub/new.txt"]);

        let rootfs = d.path().join("rootfs");
        std::fs::create_dir_all(rootfs.join("etc")).unwrap();
        std::fs::write(rootfs.join("gone.txt"), b"old").unwrap();
        std::fs::write(rootfs.join("etc/also-gone"), b"old").unwrap();
        // A symlink that would lead out of the rootfs if followed on the host.
        let outside = d.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep"), b"host").unwrap();
        std::os::unix::fs::symlink(&outside, rootfs.join("escape")).unwrap();
        std::fs::write(
            dir.join(DELETED_FILES),
            serde_json::to_vec(&["/gone.txt", "etc/also-gone", "/not/there"]).unwrap(),
        )
        .unwrap();
        let archive = d.path().join("c.tar");
        apply_rootfs_diff(&archive, &dir, &rootfs).unwrap();
        assert_eq!(
            std::fs::read(rootfs.join("data/sub/new.txt")).unwrap(),
            b"written"
        );
        assert_eq!(
            std::fs::read_link(rootfs.join("data/link")).unwrap(),
            Path::new("sub/new.txt")
        );
        assert!(!rootfs.join("gone.txt").exists());
        assert!(!rootfs.join("etc/also-gone").exists());
        // A deletion through a symlink is refused, and nothing outside is touched.
        std::fs::write(
            dir.join(DELETED_FILES),
            serde_json::to_vec(&["/escape/keep"]).unwrap(),
        )
        .unwrap();
        let e = apply_rootfs_diff(&archive, &dir, &rootfs).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e}");
        assert!(e.to_string().contains("\"/escape/keep\""), "{e}");
        assert!(
            outside.join("keep").exists(),
            "a deletion followed a symlink out of the rootfs"
        );
    }
}
