//! Telling a checkpoint image: CRI-O's format, as buildah and checkpointctl make it from a container
//! checkpoint archive. Its one layer holds the archive's contents (`checkpoint/`, `config.dump`, `spec.dump`,
//! `rootfs-diff.tar`, …) and its manifest carries [`NAME`] (the checkpointed container's name), with the
//! other `io.kubernetes.cri-o.annotations.checkpoint.*` keys below where the maker sets them. An image in
//! Docker's format has no manifest annotations: there the same key is looked for among its config's labels.
//!
//! Only telling one apart lives here; restoring from it is criusd's (the layer's blob is read as the archive).

use std::path::PathBuf;

use serde_json::Value;

use crate::{Error, ImageRecord, Result, Store};

/// The annotation that makes an image a checkpoint image: the checkpointed container's name.
pub const NAME: &str = "io.kubernetes.cri-o.annotations.checkpoint.name";
/// The image the container ran, as its config named it.
pub const RAW_IMAGE_NAME: &str = "io.kubernetes.cri-o.annotations.checkpoint.rawImageName";
/// The id of the image the container ran.
pub const ROOTFS_IMAGE_ID: &str = "io.kubernetes.cri-o.annotations.checkpoint.rootfsImageID";
/// The name of the image the container ran.
pub const ROOTFS_IMAGE_NAME: &str = "io.kubernetes.cri-o.annotations.checkpoint.rootfsImageName";
/// The version of CRIU that dumped it.
pub const CRIU_VERSION: &str = "io.kubernetes.cri-o.annotations.checkpoint.criu.version";

/// The checkpointed container's name, if `manifest` (or, for Docker's format, `config`'s labels) marks a
/// checkpoint image.
pub fn name(manifest: &Value, config: &Value) -> Option<String> {
    manifest["annotations"][NAME]
        .as_str()
        .or_else(|| config["config"]["Labels"][NAME].as_str())
        .map(str::to_string)
}

impl Store {
    /// The checkpoint archive image `rec` carries, if it is a checkpoint image: the blob of its one layer (a
    /// tar, maybe compressed). A checkpoint image of more than one layer is [`Error::InvalidArgument`].
    pub fn checkpoint_archive(&self, rec: &ImageRecord) -> Result<Option<PathBuf>> {
        if rec.artifact_type.is_some() {
            return Ok(None);
        }
        let json = |d| {
            self.read_blob(d)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .unwrap_or_default()
        };
        if name(&json(&rec.manifest), &json(&rec.id)).is_none() {
            return Ok(None);
        }
        match rec.layer_blobs.as_slice() {
            [one] => Ok(Some(self.blob_path(one))),
            layers => Err(Error::InvalidArgument(format!(
                "checkpoint image {} has {} layers: a checkpoint image has one, the archive's contents",
                rec.names.first().map(String::as_str).unwrap_or(rec.id.as_str()),
                layers.len()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_checkpoint_image_is_told_by_its_manifest_annotation_or_its_config_label() {
        let m = json!({"schemaVersion": 2, "annotations": {NAME: "counter", ROOTFS_IMAGE_NAME: "busybox"}});
        assert_eq!(name(&m, &json!({})).as_deref(), Some("counter"));
        let docker = json!({"config": {"Labels": {NAME: "counter"}}});
        assert_eq!(name(&json!({}), &docker).as_deref(), Some("counter"));
        // Another engine's key, or none: an ordinary image.
        let podman = json!({"annotations": {"io.podman.annotations.checkpoint.name": "counter"}});
        assert_eq!(name(&podman, &json!({})), None);
        assert_eq!(name(&json!({"annotations": {}}), &json!({"config": {}})), None);
        assert_eq!(name(&json!({"annotations": {NAME: 1}}), &json!({})), None);
    }

    #[test]
    fn the_store_hands_out_the_one_layer_of_a_checkpoint_image() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(d.path()).unwrap();
        let put = |v: &Value| {
            let b = serde_json::to_vec(v).unwrap();
            let dg = crate::Digest::of(&b);
            store.put_blob(&dg, &b, "test").unwrap();
            dg
        };
        let layer = put(&json!("the archive, as a stand-in"));
        let config = put(&json!({"config": {}}));
        let rec = |annotations: Value, layers: Vec<crate::Digest>| ImageRecord {
            id: config.clone(),
            names: vec!["ckpt:latest".into()],
            repo_digests: vec![],
            manifest: put(&json!({"schemaVersion": 2, "annotations": annotations})),
            diff_ids: layers.clone(),
            layer_blobs: layers,
            size: 0,
            artifact_type: None,
        };
        let ckpt = rec(json!({NAME: "counter"}), vec![layer.clone()]);
        assert_eq!(
            store.checkpoint_archive(&ckpt).unwrap(),
            Some(store.blob_path(&layer))
        );
        let plain = rec(json!({}), vec![layer.clone()]);
        assert_eq!(store.checkpoint_archive(&plain).unwrap(), None);
        let two = rec(json!({NAME: "counter"}), vec![layer.clone(), layer]);
        let e = store.checkpoint_archive(&two).unwrap_err();
        assert!(e.to_string().contains("ckpt:latest has 2 layers"), "{e}");
    }
}
