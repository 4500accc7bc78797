//! A pod's volumes on this machine, under `<pods_dir>/<uid>/volumes/<name>`: `emptyDir` (a directory, or a
//! tmpfs for `medium: Memory`), `hostPath` (with its `type` checks and creations), `configMap`/`secret` (files
//! written from the manifest's objects), `downwardAPI` (files of the pod's fields and its containers'
//! resources), `projected` (configMap, secret and downwardAPI sources in one directory) and `image` (an image
//! the runtime mounts read-only, KEP-4639: a CRI mount naming the image, its subPath the runtime's to resolve).
//! The volumes of files are mounted read-only. Other volume types, and the projections that need an API server
//! (serviceAccountToken, clusterTrustBundle, podCertificate), are refused by name.
//! A volumeMount's subPath is resolved inside its volume by fd and bound under `<uid>/subpaths`, which is
//! what the container mounts.
//!
//! Each kind has its file: `files` (configMap, secret and downwardAPI), `projected`, `host_path`, `sub_path`.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crius_api::cri;
use k8s_openapi::api::core::v1::{Container, Volume};
use nix::mount::{MntFlags, MsFlags};

use crate::Error;
use crate::convert::PodIdentity;
use crate::downward::PodFields;
use crate::manifest::{Manifest, PodDef};
use crate::node::Allocatable;

mod files;
mod host_path;
mod projected;
mod sub_path;
#[cfg(test)]
mod tests;

use files::{DEFAULT_MODE, object};
use host_path::host_path;

/// A volume made ready.
#[derive(Debug, Clone)]
struct Ready {
    path: PathBuf,
    /// Volumes of files (configMap, secret, downwardAPI, projected) are mounted read-only, whatever the
    /// mount asks.
    read_only: bool,
    /// An image volume's image: the reference as written, then its id once pulled.
    image: Option<String>,
}

/// The volumes of one pod.
#[derive(Debug)]
pub struct Volumes {
    dir: PathBuf,
    ready: BTreeMap<String, Ready>,
    tmpfs: Vec<PathBuf>,
    /// SubPaths bound under `<dir>/subpaths`, unmounted before the directory is deleted.
    pinned: Mutex<Vec<PathBuf>>,
}

impl Volumes {
    /// Makes the volumes of `def`, the pod `id`, under `dir` (the pod's own directory); `node` is what the
    /// node offers pods (a downwardAPI file of a limit not set reads it). On error, what was made is undone.
    pub fn prepare(
        def: &PodDef,
        manifest: &Manifest,
        id: &PodIdentity,
        dir: &Path,
        node: Allocatable,
    ) -> Result<Volumes, Error> {
        // What a downwardAPI file may read: the pod's metadata, and the node's allocatable resources.
        let fields = PodFields {
            name: id.name.clone(),
            namespace: def.namespace.clone(),
            uid: id.uid.clone(),
            allocatable: node,
            ..Default::default()
        };
        let mut v = Volumes {
            dir: dir.to_path_buf(),
            ready: BTreeMap::new(),
            tmpfs: Vec::new(),
            pinned: Mutex::new(Vec::new()),
        };
        std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        for vol in def.spec.volumes.iter().flatten() {
            if let Err(e) = v.add(def, manifest, &fields, vol) {
                v.remove();
                return Err(e);
            }
        }
        Ok(v)
    }

    /// Makes volume `vol` ready; its errors start with `volume "<name>"`.
    fn add(
        &mut self,
        def: &PodDef,
        manifest: &Manifest,
        fields: &PodFields,
        vol: &Volume,
    ) -> Result<(), Error> {
        let at = &format!("volume {:?}", vol.name);
        let own = self.dir.join("volumes").join(&vol.name);
        let ready = if let Some(e) = &vol.empty_dir {
            std::fs::create_dir_all(&own).map_err(Error::io(format!("{at}: creating {}", own.display())))?;
            // A pod taken back after a restart of the engine's caller has its tmpfs already.
            if e.medium.as_deref() == Some("Memory") && is_mount_point(&own) {
                self.tmpfs.push(own.clone());
            } else if e.medium.as_deref() == Some("Memory") {
                let size = match &e.size_limit {
                    Some(q) => {
                        let bytes = crate::quantity::value(q).map_err(|e| Error::manifest(at, e))?;
                        format!(",size={bytes}")
                    }
                    None => String::new(),
                };
                nix::mount::mount(
                    Some("tmpfs"),
                    &own,
                    Some("tmpfs"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                    Some(format!("mode=0777{size}").as_str()),
                )
                .map_err(|e| Error::Io {
                    context: format!("{at}: mounting a tmpfs on {}", own.display()),
                    source: e.into(),
                })?;
                self.tmpfs.push(own.clone());
            }
            std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o777))
                .map_err(Error::io(format!("{at}: chmod {}", own.display())))?;
            Ready {
                path: own,
                read_only: false,
                image: None,
            }
        } else if let Some(h) = &vol.host_path {
            host_path(Path::new(&h.path), h.type_.as_deref().unwrap_or(""), at)?;
            Ready {
                path: PathBuf::from(&h.path),
                read_only: false,
                image: None,
            }
        } else if let Some(c) = &vol.config_map {
            let data = object(def, &manifest.config_maps, "configMap", &c.name, c.optional, at)?;
            let mode = c.default_mode.unwrap_or(DEFAULT_MODE);
            let from = format!("configMap {:?}", c.name);
            let files = files::keys(&data, c.items.as_deref(), mode, c.optional, &from, at)?;
            files_of(own, &files, at)?
        } else if let Some(s) = &vol.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = object(def, &manifest.secrets, "secret", &name, s.optional, at)?;
            let mode = s.default_mode.unwrap_or(DEFAULT_MODE);
            let from = format!("secret {name:?}");
            let files = files::keys(&data, s.items.as_deref(), mode, s.optional, &from, at)?;
            files_of(own, &files, at)?
        } else if let Some(d) = &vol.downward_api {
            let items = d.items.as_deref().unwrap_or(&[]);
            let mode = d.default_mode.unwrap_or(DEFAULT_MODE);
            let files = files::downward(def, fields, items, mode, "downwardAPI", at)?;
            files_of(own, &files, at)?
        } else if let Some(p) = &vol.projected {
            let files = projected::payload(def, manifest, fields, p, at)?;
            files_of(own, &files, at)?
        } else if let Some(i) = &vol.image {
            Ready {
                path: PathBuf::new(),
                read_only: true,
                image: Some(i.reference.clone().unwrap_or_default()),
            }
        } else {
            let v = serde_json::to_value(vol).unwrap_or_default();
            let kind = v
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
                .unwrap_or_else(|| "(none)".into());
            return Err(Error::manifest(
                at,
                format!(
                    "type {kind} is not supported (crius runs emptyDir, hostPath, configMap, secret, downwardAPI, \
                     projected and image volumes)"
                ),
            ));
        };
        self.ready.insert(vol.name.clone(), ready);
        Ok(())
    }

    /// The CRI mounts of container `c`'s volumeMounts.
    pub fn mounts(&self, c: &Container) -> Result<Vec<cri::Mount>, Error> {
        let at = format!("container {:?}", c.name);
        let mut out = Vec::new();
        for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
            let v = self.ready.get(&m.name).ok_or_else(|| {
                Error::manifest(
                    &at,
                    format!("volumeMount {:?} names no volume of the pod", m.name),
                )
            })?;
            if let Some(image) = &v.image {
                // The runtime mounts the image and resolves the subPath inside it (read-only, no `..`).
                let sub = m.sub_path.clone().unwrap_or_default();
                if Path::new(&sub)
                    .components()
                    .any(|c| !matches!(c, Component::Normal(_)))
                {
                    return Err(Error::manifest(
                        &at,
                        format!("subPath {sub:?} must be relative, without `..`"),
                    ));
                }
                out.push(cri::Mount {
                    container_path: m.mount_path.clone(),
                    readonly: true,
                    image: Some(cri::ImageSpec {
                        image: image.clone(),
                        ..Default::default()
                    }),
                    image_sub_path: sub,
                    ..Default::default()
                });
                continue;
            }
            let mut host = v.path.clone();
            if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                let p = Path::new(sub);
                if p.components().any(|c| !matches!(c, Component::Normal(_))) {
                    return Err(Error::manifest(
                        &at,
                        format!("subPath {sub:?} must be relative, without `..`"),
                    ));
                }
                let pin = self.dir.join("subpaths").join(&c.name).join(i.to_string());
                host = self.pin_sub_path(&v.path, p, &pin, &at)?;
            }
            let propagation = match m.mount_propagation.as_deref() {
                None | Some("None") => cri::MountPropagation::PropagationPrivate,
                Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional,
                Some(other) => return Err(Error::manifest(&at, format!("mountPropagation {other:?}"))),
            };
            out.push(cri::Mount {
                container_path: m.mount_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                readonly: v.read_only || m.read_only == Some(true),
                propagation: propagation as i32,
                ..Default::default()
            });
        }
        Ok(out)
    }

    /// Replaces each image volume's reference by the image id it was pulled or found as (`pulled`: reference
    /// → id).
    pub fn resolve_images(&mut self, pulled: &std::collections::HashMap<String, String>) {
        for r in self.ready.values_mut() {
            if let Some(id) = r.image.as_ref().and_then(|i| pulled.get(i)) {
                r.image = Some(id.clone());
            }
        }
    }

    /// Unmounts and deletes the pod's own directory (hostPath volumes stay).
    pub fn remove(&mut self) {
        for p in self.pinned.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = nix::mount::umount2(&p, MntFlags::MNT_DETACH);
        }
        for t in self.tmpfs.drain(..) {
            let _ = nix::mount::umount2(&t, MntFlags::MNT_DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Volume `at`'s `files` written in `dir`, which is then mounted read-only.
fn files_of(dir: PathBuf, files: &files::Payload, at: &str) -> Result<Ready, Error> {
    files::write(&dir, files, at)?;
    Ok(Ready {
        path: dir,
        read_only: true,
        image: None,
    })
}

/// Whether `dir` is a mount point: on another device than its parent.
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    match (dev(dir), dir.parent().and_then(dev)) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}
