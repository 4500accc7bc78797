//! Mount points made once per image: a small read-only layer, stacked above an image's layers, that holds the
//! files a runtime mounts over in every container (criusd's `/etc/hostname`, `/etc/hosts`,
//! `/etc/resolv.conf`) where the image has none. Without it each container's runtime makes them in the
//! container's writable layer, which costs an overlay copy-up of `/etc` and new inodes on the node's disk per
//! container, and as many removals at teardown.
//!
//! The layer changes nothing a container can see: it only adds empty files where the image has no entry at
//! all (a symlink, a file of the image or a whiteout is left as it is, and the runtime then does what it did
//! before), each under a bind mount once the container runs; its parent directory carries the image's own
//! mode and owner (root's 0755 where the image has no such directory, as the runtime would make it).
//!
//! Layers live in `<root>/mountpoints/<key>/`, the key a digest of the image's layer stack and the files, so
//! images that share a stack share the layer. Garbage collection keeps those of existing images and of
//! snapshots (their `layers` file names it); one is made under a temporary name and renamed into place.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::io;
use crate::unpack::{is_opaque, is_whiteout};
use crate::{Digest, ImageRecord, Result, Store};

/// The files criusd mounts over in every container, relative to its root.
pub const CONTAINER_FILES: &[&str] = &["etc/hostname", "etc/hosts", "etc/resolv.conf"];

/// The prefix of a mount-point layer's name in a snapshot's `layers` file.
pub(crate) const PREFIX: &str = "mountpoints/";

/// What the image's layers (top first) hold at one path.
enum Found {
    /// Nothing (never there, or whited out).
    Missing,
    /// A directory: its metadata in the topmost layer that has it, and the layers that merge into it.
    Dir(std::fs::Metadata, Vec<PathBuf>),
    /// Something else (a file, a symlink, a device).
    Other,
}

impl Found {
    fn is_missing(&self) -> bool {
        matches!(self, Found::Missing)
    }
}

/// What `name` is in the merged view of `layers` (top first), as overlayfs resolves one path component.
fn lookup(layers: &[PathBuf], name: &str) -> Found {
    for (i, l) in layers.iter().enumerate() {
        let p = l.join(name);
        let Ok(m) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if is_whiteout(&m) {
            return Found::Missing;
        }
        if !m.is_dir() {
            return Found::Other;
        }
        // The directories below merge into it until one is opaque or a lower entry is not a directory.
        let mut merged = vec![p.clone()];
        if !is_opaque(&p) {
            for lower in &layers[i + 1..] {
                let q = lower.join(name);
                match std::fs::symlink_metadata(&q) {
                    Ok(m) if m.is_dir() => {
                        let opaque = is_opaque(&q);
                        merged.push(q);
                        if opaque {
                            break;
                        }
                    }
                    Ok(_) => break,
                    Err(_) => continue,
                }
            }
        }
        return Found::Dir(m, merged);
    }
    Found::Missing
}

/// Files to make in one directory of a mount-point layer.
#[derive(Debug)]
struct Wanted {
    /// The directory, relative to the root.
    dir: String,
    /// The image's mode, uid and gid of it; none where the image lacks it.
    attrs: Option<(u32, u32, u32)>,
    /// The files it lacks.
    names: Vec<String>,
}

/// The files of `files` (each `dir/name`) that the image whose layer directories are `layers` (top first)
/// lacks, grouped by directory. A directory that is not one (a symlink, say) has nothing made in it.
fn wanted(layers: &[PathBuf], files: &[&str]) -> Vec<Wanted> {
    let mut out: Vec<Wanted> = Vec::new();
    for f in files {
        let Some((dir, name)) = f.split_once('/') else {
            continue;
        };
        let attrs = match lookup(layers, dir) {
            Found::Missing => None,
            Found::Dir(m, merged) => {
                if !lookup(&merged, name).is_missing() {
                    continue;
                }
                Some((m.mode() & 0o7777, m.uid(), m.gid()))
            }
            Found::Other => continue,
        };
        match out.iter_mut().find(|w| w.dir == dir) {
            Some(w) => w.names.push(name.to_string()),
            None => out.push(Wanted {
                dir: dir.to_string(),
                attrs,
                names: vec![name.to_string()],
            }),
        }
    }
    out
}

/// The key of the mount-point layer of the layer stack `diff_ids` with `files`.
fn key(diff_ids: &[Digest], files: &[&str]) -> String {
    let mut text = String::new();
    for d in diff_ids {
        text += d.hex();
        text.push('\n');
    }
    text += &files.join("\n");
    Digest::of(text.as_bytes()).hex().to_string()
}

impl Store {
    fn mount_points_dir(&self) -> PathBuf {
        self.root().join("mountpoints")
    }

    /// The names (as a snapshot's `layers` file gives them) of the mount-point layers of `images`.
    pub(crate) fn mount_point_names(&self, images: &[ImageRecord]) -> Vec<String> {
        images
            .iter()
            .map(|i| format!("{PREFIX}{}", key(&i.diff_ids, CONTAINER_FILES)))
            .collect()
    }

    /// The mount-point layer of `image` for `files` (made now if missing), with its name for the snapshot's
    /// `layers` file; none when the image has all of them. `lowers` are the image's layer directories, top
    /// first.
    pub(crate) fn mount_point_layer(
        &self,
        image: &ImageRecord,
        lowers: &[PathBuf],
        files: &[&str],
    ) -> Result<Option<(PathBuf, String)>> {
        let k = key(&image.diff_ids, files);
        let parent = self.mount_points_dir();
        let dir = parent.join(&k);
        let name = format!("{PREFIX}{k}");
        // Made already (every container of the image but its first): one look, no stat besides.
        if let Some(empty) = emptiness(&dir) {
            return Ok((!empty).then_some((dir, name)));
        }
        let wanted = wanted(lowers, files);
        std::fs::create_dir_all(&parent).map_err(|e| io(format!("creating {}", parent.display()), e))?;
        // Unique per call: creates of one image's containers on parallel streams make it at the same time.
        static MADE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = MADE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = parent.join(format!(".tmp-{k}-{}-{n}", std::process::id()));
        let made = (|| -> std::io::Result<()> {
            std::fs::DirBuilder::new().mode(0o755).create(&tmp)?;
            for w in &wanted {
                let (mode, uid, gid) = w.attrs.unwrap_or((0o755, 0, 0));
                let at = tmp.join(&w.dir);
                std::fs::DirBuilder::new().mode(0o700).create(&at)?;
                std::os::unix::fs::lchown(&at, Some(uid), Some(gid))?;
                std::fs::set_permissions(&at, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
                for n in &w.names {
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o644)
                        .open(at.join(n))?;
                }
            }
            Ok(())
        })();
        if let Err(e) = made {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(io(format!("making the mount points of image {}", image.id), e));
        }
        // Another caller may have made it meanwhile: theirs stands, ours goes.
        if std::fs::rename(&tmp, &dir).is_err() {
            let _ = std::fs::remove_dir_all(&tmp);
            if !dir.is_dir() {
                return Err(io(
                    format!("placing the mount points of image {}", image.id),
                    std::io::Error::other(format!("{} is not a directory", dir.display())),
                ));
            }
        }
        Ok((!emptiness(&dir).unwrap_or(true)).then_some((dir, name)))
    }

    /// Removes the mount-point layers not in `keep` (names as in a snapshot's `layers` file), and what a
    /// crash left of one being made; returns how many went.
    pub(crate) fn collect_mount_points(&self, keep: &std::collections::HashSet<String>) -> usize {
        let Ok(entries) = std::fs::read_dir(self.mount_points_dir()) else {
            return 0;
        };
        let ours = format!("-{}-", std::process::id());
        let mut n = 0;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stale = match name.strip_prefix(".tmp-") {
                // Being made by this process now, or left by an earlier one.
                Some(rest) => !rest.contains(&ours),
                None => !keep.contains(&format!("{PREFIX}{name}")),
            };
            if stale && std::fs::remove_dir_all(e.path()).is_ok() {
                n += 1;
            }
        }
        n
    }
}

/// Whether directory `dir` is empty; none if it cannot be read (it is not there).
fn emptiness(dir: &Path) -> Option<bool> {
    std::fs::read_dir(dir).ok().map(|mut d| d.next().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layer(root: &Path, name: &str) -> PathBuf {
        let p = root.join(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    fn names(w: &[Wanted]) -> Vec<(String, Vec<String>)> {
        w.iter().map(|w| (w.dir.clone(), w.names.clone())).collect()
    }

    #[test]
    fn only_files_the_merged_image_lacks_are_wanted() {
        let t = tempfile::tempdir().unwrap();
        let (top, low) = (layer(t.path(), "top"), layer(t.path(), "low"));
        std::fs::create_dir_all(low.join("etc")).unwrap();
        std::fs::write(low.join("etc/hosts"), "x").unwrap();
        std::os::unix::fs::symlink("../run/resolv.conf", low.join("etc/resolv.conf")).unwrap();
        std::fs::create_dir_all(top.join("etc")).unwrap();
        std::fs::set_permissions(
            top.join("etc"),
            std::os::unix::fs::PermissionsExt::from_mode(0o750),
        )
        .unwrap();
        let w = wanted(&[top.clone(), low.clone()], CONTAINER_FILES);
        assert_eq!(names(&w), [("etc".to_string(), vec!["hostname".to_string()])]);
        assert_eq!(w[0].attrs.unwrap().0, 0o750, "the topmost /etc's mode");

        // A whiteout of the lower hosts file: it is missing now.
        nix::sys::stat::mknod(
            &top.join("etc/hosts"),
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .unwrap();
        let w = wanted(&[top.clone(), low.clone()], CONTAINER_FILES);
        assert_eq!(
            names(&w),
            [("etc".to_string(), vec!["hostname".into(), "hosts".into()])]
        );
    }

    #[test]
    fn callers_at_the_same_time_get_one_whole_layer() {
        let t = tempfile::tempdir().unwrap();
        let store = Store::open(&t.path().join("store")).unwrap();
        let low = layer(t.path(), "low");
        std::fs::create_dir_all(low.join("etc")).unwrap();
        let image = ImageRecord {
            id: Digest::of(b"config"),
            names: vec![],
            repo_digests: vec![],
            manifest: Digest::of(b"manifest"),
            diff_ids: vec![Digest::of(b"layer")],
            layer_blobs: vec![],
            size: 0,
            artifact_type: None,
        };
        let start = std::sync::Barrier::new(8);
        let made: Vec<PathBuf> = std::thread::scope(|s| {
            let calls: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        let lowers = [low.clone()];
                        store
                            .mount_point_layer(&image, &lowers, CONTAINER_FILES)
                            .unwrap()
                            .unwrap()
                            .0
                    })
                })
                .collect();
            calls.into_iter().map(|c| c.join().unwrap()).collect()
        });
        assert!(made.iter().all(|p| p == &made[0]));
        for f in ["hostname", "hosts", "resolv.conf"] {
            assert!(made[0].join("etc").join(f).is_file(), "{f}");
        }
        let left: Vec<_> = std::fs::read_dir(store.root().join("mountpoints"))
            .unwrap()
            .collect();
        assert_eq!(left.len(), 1, "no temporary directory left");
        let keep = std::collections::HashSet::new();
        assert_eq!(store.collect_mount_points(&keep), 1);
    }

    #[test]
    fn an_opaque_or_missing_or_odd_directory_is_judged_as_overlayfs_would() {
        let t = tempfile::tempdir().unwrap();
        let (top, low) = (layer(t.path(), "top"), layer(t.path(), "low"));
        std::fs::create_dir_all(low.join("etc")).unwrap();
        for f in ["hostname", "hosts", "resolv.conf"] {
            std::fs::write(low.join("etc").join(f), "x").unwrap();
        }
        assert!(
            wanted(&[top.clone(), low.clone()], CONTAINER_FILES).is_empty(),
            "all there"
        );
        // An opaque /etc on top hides the lower one's files.
        std::fs::create_dir_all(top.join("etc")).unwrap();
        let p = std::ffi::CString::new(top.join("etc").to_str().unwrap()).unwrap();
        // SAFETY: NUL-terminated strings and a buffer of the length given.
        let set = unsafe {
            libc::setxattr(
                p.as_ptr(),
                c"trusted.overlay.opaque".as_ptr(),
                b"y".as_ptr().cast(),
                1,
                0,
            )
        };
        assert_eq!(set, 0, "setting the opaque xattr (needs root)");
        assert_eq!(
            wanted(&[top.clone(), low.clone()], CONTAINER_FILES)[0]
                .names
                .len(),
            3
        );
        // No /etc at all: root's 0755.
        let empty = layer(t.path(), "empty");
        let w = wanted(std::slice::from_ref(&empty), CONTAINER_FILES);
        assert_eq!(w[0].attrs, None);
        assert_eq!(w[0].names.len(), 3);
        // /etc a symlink: nothing made in it.
        let odd = layer(t.path(), "odd");
        std::os::unix::fs::symlink("/elsewhere", odd.join("etc")).unwrap();
        assert!(wanted(&[odd], CONTAINER_FILES).is_empty());
    }
}
