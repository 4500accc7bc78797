//! Importing images from an OCI image layout directory or an OCI archive (a tar of one), for offline nodes.
//! Every blob is checked against its digest before it is stored, every layer against its diff id.

use std::path::Path;

use serde_json::Value;

use crate::error::io;
use crate::{Digest, Error, ImageRecord, Result, Store};

const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

fn read_layout_blob(layout: &Path, d: &Digest) -> Result<Vec<u8>> {
    std::fs::read(layout.join("blobs/sha256").join(d.hex()))
        .map_err(|e| io(format!("reading blob {d} of the archive"), e))
}

fn descriptor_digest(v: &Value, what: &str) -> Result<Digest> {
    let s = v["digest"]
        .as_str()
        .ok_or_else(|| Error::InvalidArgument(format!("{what}: descriptor without a digest")))?;
    Digest::parse(s)
}

/// Imports every named image of the OCI layout at `layout`; returns the records (with all their names).
pub fn import_layout(store: &Store, layout: &Path) -> Result<Vec<ImageRecord>> {
    let index_bytes = std::fs::read(layout.join("index.json"))
        .map_err(|e| io(format!("reading {}/index.json", layout.display()), e))?;
    let index: Value = serde_json::from_slice(&index_bytes)
        .map_err(|e| Error::InvalidArgument(format!("{}/index.json: {e}", layout.display())))?;
    let mut out: Vec<ImageRecord> = Vec::new();
    for desc in index["manifests"].as_array().into_iter().flatten() {
        let name = desc["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(str::to_string);
        let mut digest = descriptor_digest(desc, "index.json")?;
        let mut bytes = read_layout_blob(layout, &digest)?;
        store.put_blob(&digest, &bytes, "manifest")?;
        let mut manifest: Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::InvalidArgument(format!("manifest {digest}: {e}")))?;
        let media = desc["mediaType"]
            .as_str()
            .or(manifest["mediaType"].as_str())
            .unwrap_or_default();
        if media == INDEX || media == DOCKER_LIST {
            let pick = manifest["manifests"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["platform"]["os"] == "linux" && m["platform"]["architecture"] == "amd64");
            let pick =
                pick.ok_or_else(|| Error::NotFound(format!("a linux/amd64 manifest in index {digest}")))?;
            digest = descriptor_digest(pick, "image index")?;
            bytes = read_layout_blob(layout, &digest)?;
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
    let cfg_bytes = read_layout_blob(layout, &cfg_digest)?;
    store.put_blob(&cfg_digest, &cfg_bytes, "image config")?;
    let cfg: Value = serde_json::from_slice(&cfg_bytes)
        .map_err(|e| Error::InvalidArgument(format!("config {cfg_digest}: {e}")))?;
    let diff_ids: Vec<Digest> = cfg["rootfs"]["diff_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| Digest::parse(d.as_str().unwrap_or_default()))
        .collect::<Result<_>>()?;
    let layers = m["layers"].as_array().cloned().unwrap_or_default();
    if layers.len() != diff_ids.len() {
        return Err(Error::InvalidArgument(format!(
            "manifest {digest}: {} layers but the config lists {} diff ids",
            layers.len(),
            diff_ids.len()
        )));
    }
    let mut size = (cfg_bytes.len()) as u64;
    let mut layer_blobs = Vec::new();
    for (l, diff_id) in layers.iter().zip(&diff_ids) {
        let d = descriptor_digest(l, "manifest layer")?;
        if !store.has_blob(&d) {
            let bytes = read_layout_blob(layout, &d)?;
            store.put_blob(&d, &bytes, "layer")?;
        }
        size += std::fs::metadata(store.blob_path(&d))
            .map(|m| m.len())
            .unwrap_or(0);
        store.ensure_layer(&d, diff_id)?;
        layer_blobs.push(d);
    }
    store.record_image(cfg_digest, digest.clone(), diff_ids, layer_blobs, size, name)
}

/// Imports an OCI archive (a tar of an OCI image layout).
pub fn import_archive(store: &Store, archive: &Path) -> Result<Vec<ImageRecord>> {
    let tmp = store
        .root()
        .join("ingest")
        .join(format!("archive-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| io("creating an ingest dir", e))?;
    let result = (|| {
        let f = std::fs::File::open(archive).map_err(|e| io(format!("opening {}", archive.display()), e))?;
        crate::unpack::unpack(f, &tmp)?;
        import_layout(store, &tmp)
    })();
    let _ = std::fs::remove_dir_all(&tmp);
    result
}
