//! Volumes of files: `configMap` and `secret` (keys of the manifest's objects), `downwardAPI` (the pod's fields
//! and its containers' resources, read by [`crate::downward`]). Each source gives a [`Payload`], the files it
//! wants by path; a `projected` volume merges several (`super::projected`); [`write`] makes them, as the
//! regular files kubelet's atomic writer leaves the container to see, each with its mode.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path};

use k8s_openapi::api::core::v1::{DownwardAPIVolumeFile, KeyToPath};

use crate::Error;
use crate::downward::{self, PodFields, Reader};
use crate::manifest::PodDef;

/// kubelet's mode for the files of configMap, secret, downwardAPI and projected volumes.
pub(super) const DEFAULT_MODE: i32 = 0o644;

/// One file of a volume, before it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct File {
    pub(super) bytes: Vec<u8>,
    pub(super) mode: u32,
    /// The source it comes from (`configMap "cfg"`), for a clash's message.
    pub(super) from: String,
}

/// A volume's files by their path in it.
pub(super) type Payload = BTreeMap<String, File>;

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

/// The files of a configMap's or secret's keys (`from` names it): every key under its own name, or `items`
/// mapping keys to paths, each of mode `mode` unless the item has its own. A key the items name that is not
/// there is an error, unless the source is `optional` (then it is left out, as kubelet does). For volume `at`.
pub(super) fn keys(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: i32,
    optional: Option<bool>,
    from: &str,
    at: &str,
) -> Result<Payload, Error> {
    let all: Vec<KeyToPath> = data
        .keys()
        .map(|k| KeyToPath {
            key: k.clone(),
            path: k.clone(),
            mode: None,
        })
        .collect();
    let mut out = Payload::new();
    for item in items.unwrap_or(&all) {
        let Some(bytes) = data.get(&item.key) else {
            if optional == Some(true) {
                continue;
            }
            return Err(Error::manifest(at, format!("{from}: no key {:?}", item.key)));
        };
        let file = File {
            bytes: bytes.clone(),
            mode: file_mode(item.mode.unwrap_or(mode)),
            from: from.to_string(),
        };
        add(&mut out, &item.path, file, at)?;
    }
    Ok(out)
}

/// The files of a downwardAPI volume or projection's `items` (`from` names the source): each a field of the
/// pod (`fieldRef`) or a resource of one of its containers (`resourceFieldRef`, which names it), as kubelet
/// writes them, of mode `mode` unless the item has its own. For volume `at`.
pub(super) fn downward(
    def: &PodDef,
    fields: &PodFields,
    items: &[DownwardAPIVolumeFile],
    mode: i32,
    from: &str,
    at: &str,
) -> Result<Payload, Error> {
    let mut out = Payload::new();
    for (i, item) in items.iter().enumerate() {
        let bad = |why: String| Error::manifest(at, format!("{from}: items[{i}] ({}): {why}", item.path));
        let value = match (&item.field_ref, &item.resource_field_ref) {
            (Some(f), None) => {
                downward::field(def, fields, &f.field_path, Reader::File).ok_or_else(|| {
                    bad(format!(
                        "fieldRef {:?} is not one a file may name ({}, or a label or annotation by key)",
                        f.field_path,
                        downward::FILE_FIELDS.join(", ")
                    ))
                })?
            }
            (None, Some(r)) => downward::resource(
                def,
                None,
                r.container_name.as_deref(),
                &r.resource,
                r.divisor.as_ref(),
                fields.allocatable,
            )
            .map_err(bad)?,
            _ => return Err(bad("needs one of fieldRef and resourceFieldRef".into())),
        };
        let file = File {
            bytes: value.into_bytes(),
            mode: file_mode(item.mode.unwrap_or(mode)),
            from: from.to_string(),
        };
        add(&mut out, &item.path, file, at)?;
    }
    Ok(out)
}

/// The permission bits of a manifest's `mode`.
fn file_mode(mode: i32) -> u32 {
    mode as u32 & 0o7777
}

/// Adds `file` at `path` to `payload`, `path` checked as kubelet checks it: relative, without `..`, not
/// starting with `..` (its atomic writer's own names). A path taken already, or a file where another's
/// directory is, is an error naming both sources. For volume `at`.
pub(super) fn add(payload: &mut Payload, path: &str, file: File, at: &str) -> Result<(), Error> {
    let rel = Path::new(path);
    if path.is_empty()
        || path.starts_with("..")
        || rel.components().any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(Error::manifest(
            at,
            format!(
                "{}: item path {path:?} must be relative, without `..`, and not start with `..`",
                file.from
            ),
        ));
    }
    let path = rel.to_string_lossy().into_owned();
    let under = |dir: &str, p: &str| p.strip_prefix(dir).is_some_and(|r| r.starts_with('/'));
    let clash = payload
        .iter()
        .find(|(p, _)| **p == path || under(p, &path) || under(&path, p));
    if let Some((p, other)) = clash {
        let what = if *p == path {
            format!("path {path:?}")
        } else {
            format!("paths {p:?} and {path:?}")
        };
        return Err(Error::manifest(
            at,
            format!("{what} clash: {} and {} both write there", other.from, file.from),
        ));
    }
    payload.insert(path, file);
    Ok(())
}

/// Writes `payload` under `dir` (made if missing): each file whole, then given its mode (which the umask
/// does not narrow). For volume `at`.
pub(super) fn write(dir: &Path, payload: &Payload, at: &str) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("{at}: creating {}", dir.display())))?;
    for (path, f) in payload {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .map_err(Error::io(format!("{at}: creating {}", parent.display())))?;
        }
        // Made with the mode asked for (no moment with wider bits than a secret's 0400), replacing what a
        // pod taken back had.
        let _ = std::fs::remove_file(&file);
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(f.mode & 0o777)
            .open(&file)
            .and_then(|mut out| out.write_all(&f.bytes))
            .map_err(Error::io(format!("{at}: writing {}", file.display())))?;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(f.mode))
            .map_err(Error::io(format!("{at}: chmod {}", file.display())))?;
    }
    Ok(())
}
