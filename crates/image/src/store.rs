//! The content store: blobs by digest, unpacked layers by diff id, image records by config digest.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::error::io;
use crate::{Digest, Error, Result};

/// A name for a temporary file or directory that no other writer in this process or another uses.
pub(crate) fn temp_name(base: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "{base}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// One image: its id is the config digest (what CRI reports as the image id); it may have several names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// Config digest.
    pub id: Digest,
    /// Every name (`repo:tag`) this image is known by.
    pub names: Vec<String>,
    /// Every `repo@manifest-digest` it was pulled or imported as.
    #[serde(default)]
    pub repo_digests: Vec<String>,
    /// Manifest digest (for `repo@digest` lookups).
    pub manifest: Digest,
    /// Uncompressed layer digests, lowest first (the layer directories).
    pub diff_ids: Vec<Digest>,
    /// Compressed layer blob digests, in the same order.
    pub layer_blobs: Vec<Digest>,
    /// Bytes of all blobs of the image.
    pub size: u64,
    /// For an OCI artifact ([`crate::artifact`]): its artifact type; its id is then its manifest digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
}

/// A store rooted at a directory.
#[derive(Debug, Clone)]
pub struct Store {
    root: PathBuf,
    /// Where containers' snapshots (their writable layers) live: `<root>/snapshots`, or a directory of its
    /// own ([`Store::with_snapshot_root`]).
    snapshots: PathBuf,
    /// What each unpacked layer uses on disk, by directory name: layers never change once placed, so
    /// [`Store::usage`] walks each one once.
    pub(crate) layer_usage:
        std::sync::Arc<std::sync::Mutex<std::collections::HashMap<String, crate::gc::Usage>>>,
    /// The caps on each layer unpacked, and on an archive imported.
    limits: crate::gate::Limits,
    /// Pulls and imports running through this store or a clone of it ([`crate::gc`] waits for none).
    pub(crate) writers: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Store {
    /// Opens (creating) the store at `root` and drops whatever a crash left half-written.
    pub fn open(root: &Path) -> Result<Store> {
        for d in ["blobs/sha256", "ingest", "layers", "images", "snapshots"] {
            std::fs::create_dir_all(root.join(d))
                .map_err(|e| io(format!("creating {}", root.join(d).display()), e))?;
        }
        let s = Store {
            root: root.to_path_buf(),
            snapshots: root.join("snapshots"),
            layer_usage: Default::default(),
            limits: Default::default(),
            writers: Default::default(),
        };
        let _ = std::fs::remove_dir_all(root.join("ingest"));
        std::fs::create_dir_all(root.join("ingest")).map_err(|e| io("creating ingest", e))?;
        if let Ok(entries) = std::fs::read_dir(root.join("layers")) {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
        Ok(s)
    }

    /// The store with `limits` on each layer it unpacks and each archive it imports.
    pub fn with_limits(mut self, limits: crate::gate::Limits) -> Store {
        self.limits = limits;
        self
    }

    /// The store with its containers' snapshots in `dir` (made if missing) instead of `<root>/snapshots`: the
    /// writable layers can then live on another filesystem than the images (KEP-4191's split image
    /// filesystem). The overlay takes its lower layers from anywhere, and keeps its upper and work directories
    /// together in `dir`. Snapshots made under another setting stay where they are and are not seen.
    pub fn with_snapshot_root(mut self, dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir).map_err(|e| io(format!("creating {}", dir.display()), e))?;
        self.snapshots = dir.to_path_buf();
        Ok(self)
    }

    /// Where containers' snapshots live.
    pub fn snapshot_root(&self) -> &Path {
        &self.snapshots
    }

    /// The caps on each layer unpacked.
    pub fn limits(&self) -> &crate::gate::Limits {
        &self.limits
    }

    /// The store's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where blob `d` lives (whether or not it exists).
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(d.hex())
    }

    /// True if blob `d` is stored.
    pub fn has_blob(&self, d: &Digest) -> bool {
        self.blob_path(d).exists()
    }

    /// Reads blob `d`.
    pub fn read_blob(&self, d: &Digest) -> Result<Vec<u8>> {
        std::fs::read(self.blob_path(d)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Error::NotFound(format!("blob {d}")),
            _ => io(format!("reading blob {d}"), e),
        })
    }

    /// Stores `bytes` as blob `expected` after checking the digest; a mismatch stores nothing.
    pub fn put_blob(&self, expected: &Digest, bytes: &[u8], what: &str) -> Result<()> {
        let actual = Digest::of(bytes);
        if &actual != expected {
            return Err(Error::DigestMismatch {
                what: what.to_string(),
                expected: expected.to_string(),
                actual: actual.to_string(),
            });
        }
        if self.has_blob(expected) {
            return Ok(());
        }
        let mut w = self.blob_writer(expected)?;
        w.write_all(bytes)
            .map_err(|e| io(format!("writing blob {expected}"), e))?;
        w.commit(self, expected, what).map(drop)
    }

    /// The directory holding the unpacked layer `diff_id` (it exists once unpacked).
    pub fn layer_dir(&self, diff_id: &Digest) -> PathBuf {
        self.root.join("layers").join(diff_id.hex()).join("fs")
    }

    /// Unpacks the compressed layer blob `blob` as `diff_id`, once: a layer already present is kept. The
    /// uncompressed stream must hash to `diff_id`, or nothing is kept.
    pub fn ensure_layer(&self, blob: &Digest, diff_id: &Digest) -> Result<PathBuf> {
        let dir = self.layer_dir(diff_id);
        if dir.exists() {
            return Ok(dir);
        }
        let tmp = self
            .root
            .join("layers")
            .join(temp_name(&format!(".tmp-{}", diff_id.hex())));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(tmp.join("fs")).map_err(|e| io("creating layer dir", e))?;
        let result = (|| {
            let f = std::fs::File::open(self.blob_path(blob))
                .map_err(|e| io(format!("opening layer {blob}"), e))?;
            let got =
                crate::unpack::unpack_layer(f, &tmp.join("fs"), &format!("layer {blob}"), &self.limits)?;
            if &got != diff_id {
                return Err(Error::DigestMismatch {
                    what: format!("layer {blob} (uncompressed)"),
                    expected: diff_id.to_string(),
                    actual: got.to_string(),
                });
            }
            match std::fs::rename(&tmp, self.root.join("layers").join(diff_id.hex())) {
                // Another pull unpacked the same layer meanwhile: keep theirs.
                Err(_) if dir.exists() => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    Ok(())
                }
                r => r.map_err(|e| io(format!("placing layer {diff_id}"), e)),
            }
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        Ok(dir)
    }

    fn image_path(&self, id: &Digest) -> PathBuf {
        self.root.join("images").join(format!("{}.json", id.hex()))
    }

    /// Saves an image record atomically.
    pub fn save_image(&self, rec: &ImageRecord) -> Result<()> {
        let path = self.image_path(&rec.id);
        let tmp = self.root.join("images").join(temp_name(".record"));
        let bytes = serde_json::to_vec_pretty(rec).map_err(|e| io("encoding image record", e))?;
        std::fs::write(&tmp, bytes)
            .and_then(|_| std::fs::rename(&tmp, &path))
            .map_err(|e| io(format!("saving image {}", rec.id), e))
    }

    /// Every image, sorted by id.
    pub fn images(&self) -> Result<Vec<ImageRecord>> {
        let mut out = Vec::new();
        let dir = self.root.join("images");
        for e in std::fs::read_dir(&dir)
            .map_err(|e| io(format!("reading {}", dir.display()), e))?
            .flatten()
        {
            if e.path().extension().is_some_and(|x| x == "json") {
                let bytes = match std::fs::read(e.path()) {
                    Ok(b) => b,
                    // Removed since the listing (a concurrent RemoveImage): not an image any more.
                    Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(err) => return Err(io(format!("reading {}", e.path().display()), err)),
                };
                out.push(
                    serde_json::from_slice(&bytes)
                        .map_err(|err| io(format!("corrupt {}", e.path().display()), err))?,
                );
            }
        }
        out.sort_by(|a: &ImageRecord, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Finds an image by id (`sha256:…`, its hex, or a unique prefix of at least 12 hex digits), by name
    /// (`busybox` is `docker.io/library/busybox:latest`), or by `repo@manifest-digest`.
    pub fn find(&self, reference: &str) -> Result<ImageRecord> {
        let all = self.images()?;
        let exact = |i: &&ImageRecord| {
            i.id.as_str() == reference
                || i.id.hex() == reference
                || i.names.iter().any(|n| n == reference)
                || i.repo_digests.iter().any(|n| n == reference)
        };
        if let Some(hit) = all.iter().find(exact) {
            return Ok(hit.clone());
        }
        if let Ok(n) = crate::reference::normalize(reference) {
            let hit = all.iter().find(|i| match &n.digest {
                Some(d) => {
                    i.repo_digests.contains(&n.with_digest(d))
                        || (i.manifest.as_str() == d
                            && i.names.iter().any(|x| crate::reference::repo_of(x) == n.repo))
                }
                None => n.tagged().is_some_and(|t| i.names.contains(&t)),
            });
            if let Some(hit) = hit {
                return Ok(hit.clone());
            }
        }
        let hex = reference.strip_prefix("sha256:").unwrap_or(reference);
        if hex.len() >= 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let mut hits = all.iter().filter(|i| i.id.hex().starts_with(hex));
            if let (Some(hit), None) = (hits.next(), hits.next()) {
                return Ok(hit.clone());
            }
        }
        Err(Error::NotFound(format!("image {reference:?}")))
    }

    /// Records image `id` (its size is that of its stored config and layer blobs) and gives it `name`:
    /// a `repo:tag` joins its names (moving from any other image that had it) and adds `repo@manifest` to its
    /// repo digests; a `repo@digest` name only adds that repo digest.
    pub fn record_image(
        &self,
        id: Digest,
        manifest: Digest,
        diff_ids: Vec<Digest>,
        layer_blobs: Vec<Digest>,
        name: Option<String>,
    ) -> Result<ImageRecord> {
        self.record(id, manifest, diff_ids, layer_blobs, name, None)
    }

    /// [`Store::record_image`] for an image or, with `artifact_type`, an OCI artifact (whose id is its manifest
    /// digest); a record already there keeps its artifact type.
    pub fn record(
        &self,
        id: Digest,
        manifest: Digest,
        diff_ids: Vec<Digest>,
        layer_blobs: Vec<Digest>,
        name: Option<String>,
        artifact_type: Option<String>,
    ) -> Result<ImageRecord> {
        // Size is derived from the stored blobs (config and layers), the same for pulls and imports.
        let size = std::iter::once(&id)
            .chain(&layer_blobs)
            .map(|d| std::fs::metadata(self.blob_path(d)).map(|m| m.len()).unwrap_or(0))
            .sum();
        let old = self.find(id.as_str()).ok();
        let artifact_type = artifact_type.or_else(|| old.as_ref().and_then(|r| r.artifact_type.clone()));
        let mut names = old.as_ref().map(|r| r.names.clone()).unwrap_or_default();
        let mut repo_digests = old.map(|r| r.repo_digests).unwrap_or_default();
        if let Some(n) = &name {
            let rd = format!("{}@{manifest}", crate::reference::repo_of(n));
            if !repo_digests.contains(&rd) {
                repo_digests.push(rd);
            }
        }
        if let Some(n) = name.filter(|n| !n.contains('@')) {
            for mut other in self
                .images()?
                .into_iter()
                .filter(|o| o.id != id && o.names.contains(&n))
            {
                other.names.retain(|x| x != &n);
                self.save_image(&other)?;
            }
            if !names.contains(&n) {
                names.push(n);
            }
        }
        let rec = ImageRecord {
            id,
            names,
            repo_digests,
            manifest,
            diff_ids,
            layer_blobs,
            size,
            artifact_type,
        };
        self.save_image(&rec)?;
        Ok(rec)
    }

    /// Gives the image `source` names the name `target` (`repo[:tag]`, normalized), moving it from any image
    /// that had it.
    pub fn tag(&self, source: &str, target: &str) -> Result<ImageRecord> {
        let n = crate::reference::normalize(target)?;
        let (None, Some(name)) = (&n.digest, n.tagged()) else {
            return Err(Error::InvalidArgument(format!(
                "tag target {target:?}: use repo[:tag], not a digest"
            )));
        };
        let src = self.find(source)?;
        self.record_image(src.id, src.manifest, src.diff_ids, src.layer_blobs, Some(name))
    }

    /// Removes those of `blobs` that no image record refers to.
    pub fn remove_unreferenced(&self, blobs: &[Digest]) {
        let images = self.images().unwrap_or_default();
        for d in blobs {
            let used = images
                .iter()
                .any(|i| &i.id == d || &i.manifest == d || i.layer_blobs.contains(d));
            if !used {
                let _ = std::fs::remove_file(self.blob_path(d));
            }
        }
    }

    /// Removes an image (all its names) found by any reference, then the blobs and layers that no other
    /// image or snapshot uses.
    pub fn remove_image(&self, reference: &str) -> Result<ImageRecord> {
        let rec = self.find(reference)?;
        match std::fs::remove_file(self.image_path(&rec.id)) {
            // A concurrent removal of the same image got there first.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound(format!("image {reference:?}")));
            }
            r => r.map_err(|e| io(format!("removing image {}", rec.id), e))?,
        }
        self.collect_garbage()?;
        Ok(rec)
    }
}
