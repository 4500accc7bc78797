//! Reclaiming space: blobs and unpacked layers that no image record (and no container snapshot) uses are
//! removed, and the store's disk usage is measured for the CRI's ImageFsInfo.
//!
//! Writers (pulls and imports) mark the store busy while they run: they store blobs and layers before the
//! image record that makes them used, so a collection is skipped while any writer is active through this store (or a clone of it).

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::io;
use crate::{Result, Store};

/// Marks the store busy while a pull or import into it runs: a count the store and its clones share.
pub(crate) struct Busy(Arc<AtomicUsize>);

impl Busy {
    pub(crate) fn enter(store: &Store) -> Busy {
        store.writers.fetch_add(1, Ordering::SeqCst);
        Busy(store.writers.clone())
    }

    /// True when no other writer is active in this store.
    pub(crate) fn alone(&self) -> bool {
        self.0.load(Ordering::SeqCst) == 1
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a collection removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Blobs removed.
    pub blobs: usize,
    /// Unpacked layers removed.
    pub layers: usize,
    /// Mount-point layers ([`crate::mount_points`]) removed.
    pub mount_points: usize,
}

/// Bytes and inodes a directory tree uses (hard links counted once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Allocated bytes (blocks × 512).
    pub bytes: u64,
    /// Inodes.
    pub inodes: u64,
}

/// A removal's result: true if this call removed it, false if it was gone already.
fn gone_or(r: std::io::Result<()>) -> std::io::Result<bool> {
    match r {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

fn walk(path: &Path, seen: &mut HashSet<(u64, u64)>, u: &mut Usage) {
    if let Some(md) = walk_one(path, seen, u)
        && md.is_dir()
        && let Ok(entries) = std::fs::read_dir(path)
    {
        for e in entries.flatten() {
            walk(&e.path(), seen, u);
        }
    }
}

/// Counts `path` itself (not what a directory holds); its metadata.
fn walk_one(path: &Path, seen: &mut HashSet<(u64, u64)>, u: &mut Usage) -> Option<std::fs::Metadata> {
    let md = std::fs::symlink_metadata(path).ok()?;
    if seen.insert((md.dev(), md.ino())) {
        u.bytes += md.blocks() * 512;
        u.inodes += 1;
    }
    Some(md)
}

impl Store {
    /// Removes blobs and layers that no image and no snapshot uses. Skipped (returns nothing collected)
    /// while a pull or import through this store (or a clone of it) runs.
    pub fn collect_garbage(&self) -> Result<Collected> {
        let guard = Busy::enter(self);
        let mut out = Collected::default();
        if !guard.alone() {
            return Ok(out);
        }
        let images = self.images()?;
        let mut blobs: HashSet<String> = HashSet::new();
        let mut layers: HashSet<String> = HashSet::new();
        for i in &images {
            blobs.insert(i.id.hex().to_string());
            blobs.insert(i.manifest.hex().to_string());
            blobs.extend(i.layer_blobs.iter().map(|d| d.hex().to_string()));
            layers.extend(i.diff_ids.iter().map(|d| d.hex().to_string()));
        }
        layers.extend(self.snapshot_layers());
        let mut mount_points: HashSet<String> = self.mount_point_names(&images).into_iter().collect();
        mount_points.extend(
            layers
                .iter()
                .filter(|l| l.starts_with(crate::mount_points::PREFIX))
                .cloned(),
        );
        out.mount_points = self.collect_mount_points(&mount_points);
        let dir = self.root().join("blobs/sha256");
        for e in std::fs::read_dir(&dir)
            .map_err(|e| io(format!("reading {}", dir.display()), e))?
            .flatten()
        {
            // A file gone already: another collection (a concurrent removal) got there first.
            if !blobs.contains(&*e.file_name().to_string_lossy())
                && gone_or(std::fs::remove_file(e.path()))
                    .map_err(|err| io(format!("removing {}", e.path().display()), err))?
            {
                out.blobs += 1;
            }
        }
        let dir = self.root().join("layers");
        for e in std::fs::read_dir(&dir)
            .map_err(|e| io(format!("reading {}", dir.display()), e))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.')
                && !layers.contains(&name)
                && gone_or(std::fs::remove_dir_all(e.path()))
                    .map_err(|err| io(format!("removing {}", e.path().display()), err))?
            {
                out.layers += 1;
            }
        }
        Ok(out)
    }

    /// What container `id`'s writable layer (its snapshot's upper directory) holds, and where it is.
    pub fn snapshot_usage(&self, id: &str) -> (Usage, PathBuf) {
        let upper = self.snapshot_root().join(id).join("upper");
        let mut u = Usage::default();
        walk(&upper, &mut HashSet::new(), &mut u);
        (u, upper)
    }

    /// Disk use of the containers' snapshots (their upper and work directories, not the overlays mounted
    /// over them, which would count the image's layers again).
    pub fn snapshots_usage(&self) -> Usage {
        let mut seen = HashSet::new();
        let mut u = Usage::default();
        let root = self.snapshot_root();
        walk_one(root, &mut seen, &mut u);
        for snap in std::fs::read_dir(root).into_iter().flatten().flatten() {
            walk_one(&snap.path(), &mut seen, &mut u);
            for e in std::fs::read_dir(snap.path()).into_iter().flatten().flatten() {
                if e.file_name() == "rootfs" {
                    walk_one(&e.path(), &mut seen, &mut u);
                } else {
                    walk(&e.path(), &mut seen, &mut u);
                }
            }
        }
        u
    }

    /// Disk use of the image content (blobs, layers, records), without container snapshots. A placed
    /// layer is walked the first time only (it never changes); a layer being unpacked, blobs and records
    /// are walked each time.
    pub fn usage(&self) -> Usage {
        let mut seen = HashSet::new();
        let mut u = Usage::default();
        for d in ["blobs", "images"] {
            walk(&self.root().join(d), &mut seen, &mut u);
        }
        let layers = self.root().join("layers");
        walk_one(&layers, &mut seen, &mut u);
        let mut cache = self.layer_usage.lock().unwrap_or_else(|p| p.into_inner());
        let mut present = HashSet::new();
        for e in std::fs::read_dir(&layers).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let path = e.path();
            let one = |seen: &mut HashSet<(u64, u64)>| {
                let mut l = Usage::default();
                walk(&path, seen, &mut l);
                l
            };
            let l = if name.starts_with('.') {
                one(&mut seen)
            } else {
                // A layer's own hard links stay inside it, so its own set of seen inodes counts it right.
                *cache
                    .entry(name.clone())
                    .or_insert_with(|| one(&mut HashSet::new()))
            };
            u.bytes += l.bytes;
            u.inodes += l.inodes;
            present.insert(name);
        }
        cache.retain(|name, _| present.contains(name));
        u
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_count_their_own_files_wherever_they_live_but_not_their_overlay() {
        let root = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        let store = Store::open(root.path())
            .unwrap()
            .with_snapshot_root(&elsewhere.path().join("containers"))
            .unwrap();
        assert_eq!(store.snapshot_root(), elsewhere.path().join("containers"));
        let empty = store.snapshots_usage();
        assert_eq!(empty.inodes, 1, "the snapshot root itself");
        let snap = store.snapshot_root().join("c1");
        for d in ["upper/etc", "work/work", "rootfs/usr"] {
            std::fs::create_dir_all(snap.join(d)).unwrap();
        }
        std::fs::write(snap.join("upper/etc/written"), vec![1u8; 64 << 10]).unwrap();
        // What the overlay shows (the image's files) is not the container's.
        std::fs::write(snap.join("rootfs/usr/from-the-image"), vec![1u8; 1 << 20]).unwrap();
        let u = store.snapshots_usage();
        // root, c1, upper, upper/etc, written, work, work/work, rootfs: not rootfs/usr nor its file.
        assert_eq!(u.inodes, 8);
        assert!(u.bytes >= 64 << 10 && u.bytes < 1 << 20, "{u:?}");
        assert_eq!(store.snapshots(), ["c1"]);
        assert_eq!(store.snapshot_usage("c1").1, snap.join("upper"));
        assert!(!root.path().join("snapshots/c1").exists());
    }
}
