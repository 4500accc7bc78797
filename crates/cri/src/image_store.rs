//! The seam between the container lifecycle and the image store: finding a container's image, its config,
//! and the container's overlay snapshot. [`crius_image::Store`] is the real one (overlay mounts need root);
//! tests use a fake that hands out plain directories.

use std::path::PathBuf;

use crius_image::gc::Usage;
use crius_image::{Digest, ImageRecord, Store};

/// What containers need of images.
pub trait ImageStore: Send + Sync {
    /// The image `reference` names (a name, `repo@digest` or id).
    fn find(&self, reference: &str) -> crius_image::Result<ImageRecord>;
    /// The image's config JSON (`{}` if it cannot be read).
    fn config(&self, image: &Digest) -> serde_json::Value;
    /// A container's rootfs: as [`ImageStore::prepare_snapshot`], with the image's mount points for the files
    /// criusd mounts over (`crius_image::mount_points`).
    fn prepare_rootfs(&self, id: &str, image: &ImageRecord) -> crius_image::Result<PathBuf> {
        self.prepare_snapshot(id, image)
    }
    /// Mounts snapshot `id` over `image`'s layers (exactly the image's content); returns it.
    fn prepare_snapshot(&self, id: &str, image: &ImageRecord) -> crius_image::Result<PathBuf>;
    /// Unmounts and deletes container `id`'s snapshot (none is fine).
    fn remove_snapshot(&self, id: &str) -> crius_image::Result<()>;
    /// What container `id`'s writable layer uses, and where it is.
    fn snapshot_usage(&self, id: &str) -> (Usage, PathBuf);
    /// The ids of the snapshots there are.
    fn snapshots(&self) -> Vec<String>;
    /// The checkpoint archive `image` carries if it is a checkpoint image (`crius_image::checkpoint`).
    fn checkpoint_archive(&self, image: &ImageRecord) -> crius_image::Result<Option<PathBuf>> {
        let _ = image;
        Ok(None)
    }
}

impl ImageStore for Store {
    fn find(&self, reference: &str) -> crius_image::Result<ImageRecord> {
        Store::find(self, reference)
    }

    fn config(&self, image: &Digest) -> serde_json::Value {
        self.read_blob(image)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    }

    fn prepare_snapshot(&self, id: &str, image: &ImageRecord) -> crius_image::Result<PathBuf> {
        Store::prepare_snapshot(self, id, image)
    }

    fn prepare_rootfs(&self, id: &str, image: &ImageRecord) -> crius_image::Result<PathBuf> {
        Store::prepare_rootfs(self, id, image)
    }

    fn remove_snapshot(&self, id: &str) -> crius_image::Result<()> {
        Store::remove_snapshot(self, id)
    }

    fn snapshot_usage(&self, id: &str) -> (Usage, PathBuf) {
        Store::snapshot_usage(self, id)
    }

    fn snapshots(&self) -> Vec<String> {
        Store::snapshots(self)
    }

    fn checkpoint_archive(&self, image: &ImageRecord) -> crius_image::Result<Option<PathBuf>> {
        Store::checkpoint_archive(self, image)
    }
}

/// An in-memory image store for tests: images by name, snapshots as directories under a tempdir.
#[cfg(test)]
pub mod fake {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use super::*;

    /// Images by reference, with their configs; snapshots as plain directories.
    pub struct FakeImages {
        /// Where snapshots go.
        pub dir: tempfile::TempDir,
        images: Mutex<HashMap<String, (ImageRecord, serde_json::Value)>>,
        /// Checkpoint images: the archive each carries, by image id.
        checkpoints: Mutex<HashMap<String, PathBuf>>,
    }

    impl Default for FakeImages {
        fn default() -> FakeImages {
            FakeImages {
                dir: tempfile::tempdir().unwrap(),
                images: Mutex::new(HashMap::new()),
                checkpoints: Mutex::new(HashMap::new()),
            }
        }
    }

    impl FakeImages {
        /// A store whose snapshots go in `dir` (a tmpfs, for tests that make thousands).
        pub fn in_dir(dir: tempfile::TempDir) -> FakeImages {
            FakeImages {
                dir,
                ..FakeImages::default()
            }
        }

        /// Adds an image named `name` with `config`; returns its id.
        pub fn add(&self, name: &str, config: serde_json::Value) -> Digest {
            let id = Digest::of(config.to_string().as_bytes());
            let rec = ImageRecord {
                id: id.clone(),
                names: vec![name.to_string()],
                repo_digests: vec![],
                manifest: id.clone(),
                diff_ids: vec![],
                layer_blobs: vec![],
                size: 0,
                artifact_type: None,
            };
            let mut images = self.images.lock().unwrap();
            images.insert(name.to_string(), (rec.clone(), config.clone()));
            images.insert(id.to_string(), (rec, config));
            id
        }

        /// Adds a checkpoint image `name` whose one layer is the archive at `archive`.
        pub fn add_checkpoint(&self, name: &str, archive: &std::path::Path) {
            let id = self.add(name, serde_json::json!({"checkpoint": archive}));
            self.checkpoints
                .lock()
                .unwrap()
                .insert(id.to_string(), archive.to_path_buf());
        }

        /// Marks image `name` (added with [`FakeImages::add`]) an OCI artifact of type `artifact_type`.
        pub fn make_artifact(&self, name: &str, artifact_type: &str) {
            let mut images = self.images.lock().unwrap();
            let (rec, _) = images.get_mut(name).expect("an image added before");
            rec.artifact_type = Some(artifact_type.into());
            let (id, rec) = (rec.id.to_string(), rec.clone());
            images.get_mut(&id).unwrap().0 = rec;
        }
    }

    impl ImageStore for FakeImages {
        fn find(&self, reference: &str) -> crius_image::Result<ImageRecord> {
            self.images
                .lock()
                .unwrap()
                .get(reference)
                .map(|(r, _)| r.clone())
                .ok_or_else(|| crius_image::Error::NotFound(format!("image {reference:?} not found")))
        }

        fn config(&self, image: &Digest) -> serde_json::Value {
            self.images
                .lock()
                .unwrap()
                .get(&image.to_string())
                .map(|(_, c)| c.clone())
                .unwrap_or_default()
        }

        fn prepare_snapshot(&self, id: &str, _: &ImageRecord) -> crius_image::Result<PathBuf> {
            let root = self.dir.path().join(id).join("rootfs");
            std::fs::create_dir_all(root.join("etc")).map_err(|source| crius_image::Error::Io {
                context: format!("creating {}", root.join("etc").display()),
                source,
            })?;
            Ok(root)
        }

        fn remove_snapshot(&self, id: &str) -> crius_image::Result<()> {
            let _ = std::fs::remove_dir_all(self.dir.path().join(id));
            Ok(())
        }

        fn snapshot_usage(&self, id: &str) -> (Usage, PathBuf) {
            (Usage::default(), self.dir.path().join(id).join("upper"))
        }

        fn snapshots(&self) -> Vec<String> {
            crate::store::list_dir(self.dir.path())
        }

        fn checkpoint_archive(&self, image: &ImageRecord) -> crius_image::Result<Option<PathBuf>> {
            Ok(self.checkpoints.lock().unwrap().get(image.id.as_str()).cloned())
        }
    }
}
