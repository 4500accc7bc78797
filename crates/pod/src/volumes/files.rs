//! Volumes of files written from the manifest's objects: `configMap` and `secret`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path};

use k8s_openapi::api::core::v1::KeyToPath;

use crate::Error;
use crate::manifest::PodDef;

/// The data of the ConfigMap or Secret (`what`) `name` in the pod's namespace; empty if missing and `optional`.
/// Errors are about `at` (the volume).
pub(super) fn object(
    def: &PodDef,
    objects: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    what: &str,
    name: &str,
    optional: Option<bool>,
    at: &str,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let key = crate::manifest::key(&Some(def.namespace.clone()), name);
    match objects.get(&key) {
        Some(d) => Ok(d.clone()),
        None if optional == Some(true) => Ok(BTreeMap::new()),
        None => Err(Error::manifest(
            at,
            format!("{what} {key} is not in the manifest (put it in the same file)"),
        )),
    }
}

/// Writes a configMap's or secret's keys as files (all keys, or `items` mapping keys to paths), for volume
/// `at`.
pub(super) fn write_files(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: i32,
    at: &str,
) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("{at}: creating {}", dir.display())))?;
    let all: Vec<KeyToPath> = data
        .keys()
        .map(|k| KeyToPath {
            key: k.clone(),
            path: k.clone(),
            mode: None,
        })
        .collect();
    for item in items.unwrap_or(&all) {
        let bytes = data
            .get(&item.key)
            .ok_or_else(|| Error::manifest(at, format!("no key {:?}", item.key)))?;
        let rel = Path::new(&item.path);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(Error::manifest(
                at,
                format!("item path {:?} must be relative, without `..`", item.path),
            ));
        }
        let file = dir.join(rel);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .map_err(Error::io(format!("{at}: creating {}", parent.display())))?;
        }
        std::fs::write(&file, bytes).map_err(Error::io(format!("{at}: writing {}", file.display())))?;
        std::fs::set_permissions(
            &file,
            std::fs::Permissions::from_mode(item.mode.unwrap_or(mode) as u32 & 0o7777),
        )
        .map_err(Error::io(format!("{at}: chmod {}", file.display())))?;
    }
    Ok(())
}
