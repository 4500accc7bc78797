//! Importing images from an OCI image layout directory or an OCI archive (a tar of one), for offline nodes.
//! Every blob is checked against its digest before it is stored, every layer against its diff id.

use std::path::Path;

use serde_json::Value;

use crate::bounded::{MAX_CONFIG, MAX_MANIFEST, descriptor_size, read_capped, size_mismatch, store_file};
use crate::error::io;
use crate::{Digest, Error, ImageRecord, Result, Store};

fn layout_blob(layout: &Path, d: &Digest) -> std::path::PathBuf {
    layout.join("blobs/sha256").join(d.hex())
}

/// A manifest, index or config of the layout, `size` bytes as its descriptor says (at most
/// [`MAX_MANIFEST`]): at most that and one byte is read.
fn read_layout_blob(layout: &Path, d: &Digest, size: u64) -> Result<Vec<u8>> {
    let what = format!("blob {d} of the archive");
    if size > MAX_MANIFEST {
        return Err(Error::InvalidArgument(format!(
            "{what}: its descriptor says {size} bytes, more than the {MAX_MANIFEST} a manifest or config may \
             have"
        )));
    }
    let bytes = read_capped(&layout_blob(layout, d), size + 1, &what)?;
    if bytes.len() as u64 != size {
        let actual = if bytes.len() as u64 > size {
            "more".to_string()
        } else {
            bytes.len().to_string()
        };
        return Err(size_mismatch(what, size, actual));
    }
    Ok(bytes)
}

fn descriptor_digest(v: &Value, what: &str) -> Result<Digest> {
    let s = v["digest"]
        .as_str()
        .ok_or_else(|| Error::InvalidArgument(format!("{what}: descriptor without a digest")))?;
    Digest::parse(s)
}

/// The name an index entry gives its image: containerd's `io.containerd.image.name` (a full reference, as `ctr
/// images export` and Docker 25's `docker save` write it next to a bare tag in `org.opencontainers.image.ref.name`),
/// else `org.opencontainers.image.ref.name`.
fn archive_name(desc: &Value) -> Option<String> {
    let a = &desc["annotations"];
    a["io.containerd.image.name"]
        .as_str()
        .or_else(|| a["org.opencontainers.image.ref.name"].as_str())
        .map(str::to_string)
}

/// Imports every named image of the OCI layout at `layout`; returns the records (with all their names).
pub fn import_layout(store: &Store, layout: &Path) -> Result<Vec<ImageRecord>> {
    let _busy = crate::gc::Busy::enter(store);
    let index_bytes = read_capped(
        &layout.join("index.json"),
        MAX_MANIFEST,
        &format!("{}/index.json", layout.display()),
    )?;
    let index: Value = serde_json::from_slice(&index_bytes)
        .map_err(|e| Error::InvalidArgument(format!("{}/index.json: {e}", layout.display())))?;
    let mut out: Vec<ImageRecord> = Vec::new();
    for desc in index["manifests"].as_array().into_iter().flatten() {
        let name = archive_name(desc);
        let mut digest = descriptor_digest(desc, "index.json")?;
        let mut bytes = read_layout_blob(layout, &digest, descriptor_size(desc, "index.json")?)?;
        store.put_blob(&digest, &bytes, "manifest")?;
        let mut manifest: Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::InvalidArgument(format!("manifest {digest}: {e}")))?;
        if crate::manifest::is_index(&manifest) {
            let index = format!("index {digest}");
            digest = crate::manifest::pick_linux_amd64(&manifest, &index)?;
            let size = manifest["manifests"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["digest"].as_str() == Some(digest.as_str()))
                .map(|m| descriptor_size(m, &index))
                .transpose()?
                .unwrap_or_default();
            bytes = read_layout_blob(layout, &digest, size)?;
            store.put_blob(&digest, &bytes, "manifest")?;
            manifest = serde_json::from_slice(&bytes)
                .map_err(|e| Error::InvalidArgument(format!("manifest {digest}: {e}")))?;
        }
        let rec = import_manifest(store, layout, &digest, &manifest, name)?;
        match out.iter_mut().find(|r| r.id == rec.id) {
            Some(r) => *r = rec,
            None => out.push(rec),
        }
    }
    if out.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{}: the index names no image",
            layout.display()
        )));
    }
    Ok(out)
}

fn import_manifest(
    store: &Store,
    layout: &Path,
    digest: &Digest,
    m: &Value,
    name: Option<String>,
) -> Result<ImageRecord> {
    let cfg_digest = descriptor_digest(&m["config"], "manifest config")?;
    let cfg_bytes = read_layout_blob(
        layout,
        &cfg_digest,
        descriptor_size(&m["config"], "manifest config")?,
    )?;
    store.put_blob(&cfg_digest, &cfg_bytes, "image config")?;
    let cfg: Value = serde_json::from_slice(&cfg_bytes)
        .map_err(|e| Error::InvalidArgument(format!("config {cfg_digest}: {e}")))?;
    let diff_ids = crate::manifest::diff_ids(&cfg)?;
    let layers = m["layers"].as_array().cloned().unwrap_or_default();
    if layers.len() != diff_ids.len() {
        return Err(Error::InvalidArgument(format!(
            "manifest {digest}: {} layers but the config lists {} diff ids",
            layers.len(),
            diff_ids.len()
        )));
    }
    let mut layer_blobs = Vec::new();
    for (l, diff_id) in layers.iter().zip(&diff_ids) {
        let d = descriptor_digest(l, "manifest layer")?;
        let size = descriptor_size(l, "manifest layer")?;
        store_file(store, &layout_blob(layout, &d), &d, size, &format!("layer {d}"))?;
        store.ensure_layer(&d, diff_id)?;
        layer_blobs.push(d);
    }
    store.record_image(
        cfg_digest,
        digest.clone(),
        diff_ids,
        layer_blobs,
        name.map(normalized),
    )
}

/// A name from an archive as the store keeps it: `busybox:1` is `docker.io/library/busybox:1`. A name that is
/// not a reference is kept as it is.
fn normalized(name: String) -> String {
    match crate::reference::normalize(&name) {
        Ok(n) => n.tagged().unwrap_or(name),
        Err(_) => name,
    }
}

/// Imports an OCI archive (a tar of an OCI image layout).
pub fn import_archive(store: &Store, archive: &Path) -> Result<Vec<ImageRecord>> {
    let what = archive.display().to_string();
    with_unpacked(store, open_stream(archive)?, &what, |tmp| {
        import_layout(store, tmp)
    })
}

/// Unpacks the archive read from `reader` (named `what`) into a fresh ingest directory, under the store's
/// layer caps, runs `f` on it, and removes the directory again.
fn with_unpacked<T>(
    store: &Store,
    reader: impl std::io::Read,
    what: &str,
    f: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let tmp = store
        .root()
        .join("ingest")
        .join(format!("archive-{}", crate::store::temp_name("x")));
    std::fs::create_dir_all(&tmp).map_err(|e| io("creating an ingest dir", e))?;
    let result = crate::unpack::unpack_layer(reader, &tmp, what, store.limits()).and_then(|_| f(&tmp));
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

/// Opens an archive file to read it once, start to end. A FIFO is opened without waiting for a writer, so one
/// that no writer opens reads as an empty archive, not a thread blocked in open(2).
fn open_stream(archive: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let what = || format!("opening {}", archive.display());
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(archive)
        .map_err(|e| io(what(), e))?;
    // Reads block again: the archive is read as fast as its writer gives it.
    let flags = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFL).map_err(|e| io(what(), e))?;
    let flags = nix::fcntl::OFlag::from_bits_truncate(flags) - nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(|e| io(what(), e))?;
    Ok(file)
}

/// Imports a docker-archive (`docker save` / `skopeo copy … docker-archive:`): `manifest.json` lists each
/// image's config file, its layer tars and its tags. A manifest is synthesised for the store's record.
pub fn import_docker_archive(store: &Store, archive: &Path) -> Result<Vec<ImageRecord>> {
    let what = archive.display().to_string();
    with_unpacked(store, open_stream(archive)?, &what, |tmp| {
        import_docker_dir(store, tmp, archive)
    })
}

/// Imports an OCI archive or a docker-archive read from `reader`, start to end (what `crius images import`
/// streams to criusd: criusd opens no path a client names). `what` names the archive in errors. The archive
/// is held to the store's layer caps as a layer is; a failed import removes the blobs it stored that no
/// image uses (unless another pull or import into the store is running, which may be counting on them).
pub fn import_stream(store: &Store, reader: impl std::io::Read, what: &str) -> Result<Vec<ImageRecord>> {
    let busy = crate::gc::Busy::enter(store);
    let before = blob_names(store);
    let result = with_unpacked(store, reader, what, |tmp| {
        if tmp.join("index.json").exists() {
            import_layout(store, tmp)
        } else if tmp.join("manifest.json").exists() {
            import_docker_dir(store, tmp, Path::new(what))
        } else {
            Err(Error::InvalidArgument(format!(
                "{what}: neither an OCI archive (index.json) nor a docker-archive (manifest.json)"
            )))
        }
    });
    if result.is_err() && busy.alone() {
        let new: Vec<Digest> = blob_names(store)
            .difference(&before)
            .filter_map(|hex| Digest::parse(&format!("sha256:{hex}")).ok())
            .collect();
        store.remove_unreferenced(&new);
    }
    result
}

/// The names (hex digests) of the blobs in the store.
fn blob_names(store: &Store) -> std::collections::HashSet<String> {
    std::fs::read_dir(store.root().join("blobs/sha256"))
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// Imports the docker-archive `archive`, unpacked at `tmp`.
fn import_docker_dir(store: &Store, tmp: &Path, archive: &Path) -> Result<Vec<ImageRecord>> {
    let _busy = crate::gc::Busy::enter(store);
    {
        let path_of = |name: &str| -> Result<std::path::PathBuf> {
            let rel = crate::unpack::clean(Path::new(name))?;
            let path = tmp
                .join(rel)
                .canonicalize()
                .map_err(|e| io(format!("{name} in the archive"), e))?;
            if !path.starts_with(tmp.canonicalize().map_err(|e| io("ingest dir", e))?) {
                return Err(Error::UnsafeEntry {
                    path: name.to_string(),
                    why: "points outside the archive",
                });
            }
            Ok(path)
        };
        let read = |name: &str, max: u64| -> Result<Vec<u8>> {
            read_capped(&path_of(name)?, max, &format!("{name} of the archive"))
        };
        let manifest: Value = serde_json::from_slice(&read("manifest.json", MAX_MANIFEST)?)
            .map_err(|e| Error::InvalidArgument(format!("{}: manifest.json: {e}", archive.display())))?;
        let mut out = Vec::new();
        for entry in manifest.as_array().into_iter().flatten() {
            let cfg_bytes = read(entry["Config"].as_str().unwrap_or_default(), MAX_CONFIG)?;
            let cfg_digest = Digest::of(&cfg_bytes);
            store.put_blob(&cfg_digest, &cfg_bytes, "image config")?;
            let cfg: Value = serde_json::from_slice(&cfg_bytes)
                .map_err(|e| Error::InvalidArgument(format!("config {cfg_digest}: {e}")))?;
            let diff_ids = crate::manifest::diff_ids(&cfg)?;
            let layer_files: Vec<&str> = entry["Layers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if layer_files.len() != diff_ids.len() {
                return Err(Error::InvalidArgument(format!(
                    "{}: {} layers but the config lists {} diff ids",
                    archive.display(),
                    layer_files.len(),
                    diff_ids.len()
                )));
            }
            let mut layer_blobs = Vec::new();
            let mut descriptors = Vec::new();
            for (file, diff_id) in layer_files.iter().zip(&diff_ids) {
                // Streamed: hashed first, then stored (checked again) without being held in memory.
                let path = path_of(file)?;
                let what = format!("{file} of the archive");
                let (f, size) = crate::bounded::open_regular(&path, &what)?;
                let mut hasher = sha2::Sha256::default();
                std::io::copy(
                    &mut std::io::Read::take(f, size + 1),
                    &mut HashWriter(&mut hasher),
                )
                .map_err(|e| io(format!("reading {what}"), e))?;
                let d = Digest::from_hasher(hasher);
                store_file(store, &path, &d, size, &what)?;
                store.ensure_layer(&d, diff_id)?;
                descriptors.push(serde_json::json!({
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar", "digest": d, "size": size}));
                layer_blobs.push(d);
            }
            let m = serde_json::json!({
                "schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": cfg_digest,
                           "size": cfg_bytes.len()},
                "layers": descriptors,
            });
            let m_bytes = serde_json::to_vec(&m).map_err(|e| io("encoding a manifest", e))?;
            let m_digest = Digest::of(&m_bytes);
            store.put_blob(&m_digest, &m_bytes, "manifest")?;
            let tags: Vec<String> = entry["RepoTags"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(String::from)
                .collect();
            let mut rec = None;
            for tag in tags.iter().map(Some).chain(tags.is_empty().then_some(None)) {
                rec = Some(store.record_image(
                    cfg_digest.clone(),
                    m_digest.clone(),
                    diff_ids.clone(),
                    layer_blobs.clone(),
                    tag.cloned().map(normalized),
                )?);
            }
            out.extend(rec);
        }
        if out.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "{}: manifest.json lists no image",
                archive.display()
            )));
        }
        Ok(out)
    }
}

/// A writer into a sha256 hasher.
struct HashWriter<'a>(&'a mut sha2::Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        sha2::Digest::update(self.0, buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_entry_is_named_by_containerd_s_full_name_before_its_bare_tag() {
        let docker25 = serde_json::json!({"annotations": {
            "io.containerd.image.name": "docker.io/kindest/kindnetd:v20250512",
            "org.opencontainers.image.ref.name": "v20250512"}});
        assert_eq!(
            archive_name(&docker25).as_deref(),
            Some("docker.io/kindest/kindnetd:v20250512")
        );
        let oci =
            serde_json::json!({"annotations": {"org.opencontainers.image.ref.name": "example.test/a:v1"}});
        assert_eq!(archive_name(&oci).as_deref(), Some("example.test/a:v1"));
        assert_eq!(archive_name(&serde_json::json!({"digest": "x"})), None);
    }

    #[test]
    fn a_fifo_without_a_writer_opens_as_an_empty_stream() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("archive");
        nix::unistd::mkfifo(
            &fifo,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        let mut f = open_stream(&fifo).unwrap();
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut buf).unwrap();
        assert!(buf.is_empty());
    }
}
