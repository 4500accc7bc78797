//! Reading what image manifests, indexes and configs say, shared by pull and import.

use serde_json::Value;

use crate::{Digest, Error, Result};

/// The layer diff ids (`rootfs.diff_ids`) of an image config.
pub fn diff_ids(config: &Value) -> Result<Vec<Digest>> {
    config["rootfs"]["diff_ids"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|d| Digest::parse(d.as_str().unwrap_or_default()))
        .collect()
}

/// True if `m` is an image index or a Docker manifest list.
pub fn is_index(m: &Value) -> bool {
    m["manifests"].is_array()
}

/// The digest of the linux/amd64 manifest of an index; `what` names the index in the error.
pub fn pick_linux_amd64(index: &Value, what: &str) -> Result<Digest> {
    let pick = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["platform"]["os"] == "linux" && m["platform"]["architecture"] == "amd64")
        .ok_or_else(|| Error::NotFound(format!("{what}: no linux/amd64 image in its index")))?;
    Digest::parse(pick["digest"].as_str().unwrap_or_default())
}
