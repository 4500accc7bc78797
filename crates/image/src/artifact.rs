//! OCI artifacts (KEP-4639's image volumes of any OCI object): a manifest with an `artifactType`, or whose
//! config is not an image config (the empty descriptor `application/vnd.oci.empty.v1+json`, or a type of its
//! own). An artifact is stored as an image whose id is its manifest digest (artifacts share the empty config)
//! and whose layers are directories made from its blobs, so an image volume mounts it as it mounts an image:
//!
//! - a tar layer (by media type: `…tar`, `…tar+gzip`, `…tar+zstd`) is unpacked as an image layer is, under the
//!   same caps;
//! - any other layer becomes one regular file, mode 0644, owned by root, named by its
//!   `org.opencontainers.image.title` annotation, or by its digest's hex without one. A title that is empty,
//!   `.`, `..` or holds a `/` or NUL is refused (InvalidArgument naming the layer).
//!
//! Each layer directory is keyed by a digest of what it is made from (the blob, and the title), so the same
//! blob under the same title is one directory for every artifact that has it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::PathBuf;

use serde_json::Value;

use crate::error::io;
use crate::{Digest, Error, Result, Store};

/// The annotation that names a layer's file.
pub const TITLE: &str = "org.opencontainers.image.title";

/// The media type of the empty config artifacts carry.
pub const EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";

const IMAGE_CONFIGS: &[&str] = &[
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
];

/// The artifact type of manifest `m`, None when it is an image: its `artifactType`, else its config's media
/// type when that is no image config.
pub fn artifact_type(m: &Value) -> Option<String> {
    if let Some(t) = m["artifactType"].as_str().filter(|t| !t.is_empty()) {
        return Some(t.to_string());
    }
    match m["config"]["mediaType"].as_str() {
        // Docker schema 2 manifests may leave the config's type out of older tools' output: an image.
        None | Some("") => None,
        Some(t) if IMAGE_CONFIGS.contains(&t) => None,
        Some(t) => Some(t.to_string()),
    }
}

/// What one layer of an artifact becomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A tar, unpacked.
    Tar,
    /// One file of this name.
    File(String),
}

/// One layer of an artifact: its blob, what it becomes, and the key of its directory.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub blob: Digest,
    pub kind: Kind,
    pub key: Digest,
}

/// Whether a layer of `media_type` is a tar (compressed or not): the OCI layer types, Docker's, `x-tar`.
fn is_tar(media_type: &str) -> bool {
    let base = media_type.split('+').next().unwrap_or_default();
    base.ends_with(".tar") || base.ends_with(".tar.gzip") || base == "application/x-tar"
}

/// The layers of artifact manifest `m` (of `whole`), each checked.
pub(crate) fn layers(m: &Value, whole: &str) -> Result<Vec<Layer>> {
    let list = m["layers"].as_array().map(Vec::as_slice).unwrap_or_default();
    if list.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "artifact {whole}: no layers, nothing to mount"
        )));
    }
    list.iter()
        .map(|l| {
            let blob = Digest::parse(l["digest"].as_str().unwrap_or_default())?;
            let kind = if is_tar(l["mediaType"].as_str().unwrap_or_default()) {
                Kind::Tar
            } else {
                let name = match l["annotations"][TITLE].as_str() {
                    Some(t) => t.to_string(),
                    None => blob.hex().to_string(),
                };
                if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
                    return Err(Error::InvalidArgument(format!(
                        "artifact {whole}: layer {blob} is titled {name:?}: a file name, without `/`, is needed"
                    )));
                }
                Kind::File(name)
            };
            let key = match &kind {
                Kind::Tar => Digest::of(format!("artifact tar\0{blob}").as_bytes()),
                Kind::File(name) => Digest::of(format!("artifact file\0{blob}\0{name}").as_bytes()),
            };
            Ok(Layer { blob, kind, key })
        })
        .collect()
}

impl Store {
    /// Makes the directory of artifact layer `l` once (kept if there): its tar unpacked, or its one file.
    pub(crate) fn ensure_artifact_layer(&self, l: &Layer) -> Result<PathBuf> {
        let dir = self.layer_dir(&l.key);
        if dir.exists() {
            return Ok(dir);
        }
        let parent = self.root().join("layers");
        let tmp = parent.join(crate::store::temp_name(&format!(".tmp-{}", l.key.hex())));
        std::fs::create_dir_all(tmp.join("fs")).map_err(|e| io("creating layer dir", e))?;
        let result = (|| {
            let (blob, what) = (self.blob_path(&l.blob), format!("layer {}", l.blob));
            let f = std::fs::File::open(&blob).map_err(|e| io(format!("opening {what}"), e))?;
            match &l.kind {
                Kind::Tar => {
                    crate::unpack::unpack_layer(f, &tmp.join("fs"), &what, self.limits())?;
                }
                Kind::File(name) => {
                    let target = tmp.join("fs").join(name);
                    let mut out = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o644)
                        .open(&target)
                        .map_err(|e| io(format!("creating {}", target.display()), e))?;
                    std::io::copy(&mut std::io::BufReader::new(f), &mut out)
                        .and_then(|_| out.flush())
                        .and_then(|_| out.set_permissions(std::fs::Permissions::from_mode(0o644)))
                        .map_err(|e| io(format!("writing {what} as {name}"), e))?;
                }
            }
            match std::fs::rename(&tmp, parent.join(l.key.hex())) {
                Err(_) if dir.exists() => {
                    let _ = std::fs::remove_dir_all(&tmp);
                    Ok(())
                }
                r => r.map_err(|e| io(format!("placing layer {}", l.key), e)),
            }
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_dir_all(&tmp);
            return Err(e);
        }
        Ok(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn artifacts_are_told_from_images() {
        let image = json!({"config": {"mediaType": "application/vnd.oci.image.config.v1+json"}});
        assert_eq!(artifact_type(&image), None);
        let docker = json!({"config": {"mediaType": "application/vnd.docker.container.image.v1+json"}});
        assert_eq!(artifact_type(&docker), None);
        let typed = json!({"artifactType": "application/x-model", "config": {"mediaType": EMPTY_CONFIG}});
        assert_eq!(artifact_type(&typed).as_deref(), Some("application/x-model"));
        let empty = json!({"config": {"mediaType": EMPTY_CONFIG}});
        assert_eq!(artifact_type(&empty).as_deref(), Some(EMPTY_CONFIG));
    }

    #[test]
    fn titles_name_files_and_tars_are_unpacked_and_unsafe_titles_are_refused() {
        let d = Digest::of(b"x");
        let m = |title: Value, mt: &str| {
            json!({"layers": [{"mediaType": mt, "digest": d.as_str(), "size": 1,
                "annotations": {TITLE: title}}]})
        };
        let got = layers(&m(json!("model.bin"), "application/octet-stream"), "a").unwrap();
        assert_eq!(got[0].kind, Kind::File("model.bin".into()));
        let got = layers(&m(json!("x"), "application/vnd.oci.image.layer.v1.tar+gzip"), "a").unwrap();
        assert_eq!(got[0].kind, Kind::Tar);
        let untitled = json!({"layers": [{"mediaType": "text/plain", "digest": d.as_str(), "size": 1}]});
        assert_eq!(
            layers(&untitled, "a").unwrap()[0].kind,
            Kind::File(d.hex().into())
        );
        for bad in ["", ".", "..", "a/b", "../etc/passwd", "/etc"] {
            let e = layers(&m(json!(bad), "text/plain"), "reg/art:1").unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(s) if s.contains("reg/art:1") && s.contains(d.as_str())),
                "{bad}: {e}"
            );
        }
        assert!(layers(&json!({"layers": []}), "a").is_err(), "nothing to mount");
    }

    #[test]
    fn a_file_layer_is_one_read_only_file_and_is_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let blob = Digest::of(b"weights");
        store.put_blob(&blob, b"weights", "test").unwrap();
        let l = layers(
            &json!({"layers": [{"mediaType": "application/octet-stream", "digest": blob.as_str(), "size": 7,
                "annotations": {TITLE: "model.bin"}}]}),
            "a",
        )
        .unwrap()
        .remove(0);
        let at = store.ensure_artifact_layer(&l).unwrap();
        let file = at.join("model.bin");
        assert_eq!(std::fs::read(&file).unwrap(), b"weights");
        assert_eq!(
            std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777,
            0o644
        );
        assert_eq!(store.ensure_artifact_layer(&l).unwrap(), at, "kept");
    }
}
