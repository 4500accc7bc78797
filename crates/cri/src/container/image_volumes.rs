//! Image volumes (KEP-4639, CRI `Mount.image` and `image_sub_path`): each such mount of a container gets a
//! snapshot of its image of its own, `<container id>-vol<i>`, taken apart with the container. The container
//! binds the snapshot (or the directory `image_sub_path` names in it) read-only, `noexec`, `nosuid` and
//! `nodev`, as Kubernetes documents image volumes. The sub path is relative without `..`, resolved inside
//! the snapshot by fd (a symlink in the image stays in the image), and must exist: a missing one fails
//! CreateContainer naming it. Their mounts go into the spec in CreateContainer's adjust step ([`Mounts`]),
//! each in its place among kubelet's mounts.

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};

use crius_api::cri;
use oci_spec::runtime::Spec;

use crate::error::{Error, Result};
use crate::image_store::ImageStore;

const CALL: &str = "CreateContainer";
const SUFFIX: &str = "-vol";

/// The snapshot of container `id`'s mount `i`.
fn snapshot_id(id: &str, i: usize) -> String {
    format!("{id}{SUFFIX}{i}")
}

/// The container a snapshot belongs to: itself, or the container of an image volume's snapshot.
pub(crate) fn owner(snapshot: &str) -> &str {
    match snapshot.rsplit_once(SUFFIX) {
        Some((id, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => id,
        _ => snapshot,
    }
}

/// Whether mount `m` is an image volume.
pub(crate) use crate::convert::is_image_volume as is_image;

/// Makes the snapshots of container `id`'s image volumes, each given to `idmap` once mounted (the pod's user
/// namespace idmaps it); returns where each mount (by index) is on the host. On error what was made is left
/// for the caller's undo ([`remove`]).
pub(crate) fn prepare(
    images: &dyn ImageStore,
    id: &str,
    mounts: &[cri::Mount],
    idmap: &dyn Fn(&Path) -> Result<()>,
) -> Result<BTreeMap<usize, PathBuf>> {
    let mut out = BTreeMap::new();
    for (i, m) in mounts.iter().enumerate() {
        let Some(spec) = m.image.as_ref().filter(|_| is_image(m)) else {
            continue;
        };
        let field = |f: &str| format!("mounts[{i}].{f}");
        let sub = Path::new(&m.image_sub_path);
        if sub.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(Error::invalid(
                CALL,
                field("image_sub_path"),
                format!("{:?} must be relative, without `..`", m.image_sub_path),
            ));
        }
        let image = images.find(&spec.image).map_err(|e| match e {
            crius_image::Error::NotFound(_) => Error::ImageNotPulled {
                call: CALL,
                reference: spec.image.clone(),
            },
            source => Error::Image { call: CALL, source },
        })?;
        let root = images
            .prepare_snapshot(&snapshot_id(id, i), &image)
            .map_err(|source| Error::Image { call: CALL, source })?;
        idmap(&root)?;
        out.insert(i, resolve(&root, sub, &spec.image, &field("image_sub_path"))?);
    }
    Ok(out)
}

/// `sub` inside the image's snapshot `root`, by fd: a directory or file that exists.
fn resolve(root: &Path, sub: &Path, image: &str, field: &str) -> Result<PathBuf> {
    if sub.as_os_str().is_empty() {
        return Ok(root.to_path_buf());
    }
    let dir =
        std::fs::File::open(root).map_err(|e| Error::io(format!("opening the snapshot of {image}"), e))?;
    let fd = crius_common::inroot::open(dir.as_fd(), sub).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::invalid(
            CALL,
            field,
            format!("{} does not exist in image {image}", sub.display()),
        ),
        _ => Error::io(format!("resolving {} in image {image}", sub.display()), e),
    })?;
    crius_common::inroot::real_path(&fd)
        .map_err(|e| Error::io(format!("resolving {} in image {image}", sub.display()), e))
}

/// The adjuster that mounts the image volumes (by the [`super::adjust::Context`]'s `image_volumes`): each
/// in the place of its mount in the request, among kubelet's mounts, which the conversion left out.
pub(crate) struct Mounts;

impl super::adjust::Adjust for Mounts {
    fn name(&self) -> &'static str {
        "image volumes"
    }

    fn adjust(&self, spec: &mut Spec, cx: &super::adjust::Context<'_>) -> Result<()> {
        if cx.image_volumes.is_empty() {
            return Ok(());
        }
        let asked = &cx.config.mounts;
        let mut mounts = spec.mounts().clone().unwrap_or_default();
        // kubelet's mounts are the spec's last ones, in the request's order: volume `i` goes before those
        // of the mounts after it (the image volumes before it are in place already).
        for (&i, source) in cx.image_volumes {
            let Some(m) = asked.get(i) else { continue };
            let after = asked[i + 1..].iter().filter(|m| !is_image(m)).count();
            let at = mounts.len().saturating_sub(after);
            mounts.insert(at, crate::convert::image_volume_mount(i, m, source)?);
        }
        spec.set_mounts(Some(mounts));
        Ok(())
    }
}

/// Takes apart container `id`'s image volume snapshots (none is fine).
pub(crate) fn remove(images: &dyn ImageStore, id: &str) -> Result<()> {
    for s in images.snapshots() {
        if s != id && owner(&s) == id {
            images
                .remove_snapshot(&s)
                .map_err(|source| Error::Image { call: CALL, source })?;
        }
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::image_store::fake::FakeImages;

    /// An image volume of `image` (its `sub` path) at `/v`.
    pub(in crate::container) fn mount(image: &str, sub: &str) -> cri::Mount {
        cri::Mount {
            container_path: "/v".into(),
            image: Some(cri::ImageSpec {
                image: image.into(),
                ..Default::default()
            }),
            image_sub_path: sub.into(),
            readonly: true,
            ..Default::default()
        }
    }

    #[test]
    fn snapshots_are_named_after_their_container() {
        let id = "a".repeat(64);
        assert_eq!(owner(&snapshot_id(&id, 3)), id);
        assert_eq!(owner(&id), id);
        assert_eq!(owner("x-volume"), "x-volume");
    }

    #[test]
    fn each_image_mount_gets_a_snapshot_and_its_sub_path_must_exist_inside_it() {
        let images = FakeImages::default();
        images.add("tools:1", serde_json::json!({}));
        let id = "c".repeat(64);
        let plain = cri::Mount {
            host_path: "/tmp".into(),
            container_path: "/t".into(),
            ..Default::default()
        };
        let got = prepare(&images, &id, &[plain, mount("tools:1", "")], &|_| Ok(())).unwrap();
        assert_eq!(got.keys().copied().collect::<Vec<_>>(), [1]);
        assert!(got[&1].ends_with(format!("{id}-vol1/rootfs")), "{:?}", got[&1]);
        // A symlink in the image resolves inside the image, never on the host.
        let other = "b".repeat(64);
        let root = images.dir.path().join(format!("{other}-vol0/rootfs"));
        std::fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::os::unix::fs::symlink("/usr", root.join("link")).unwrap();
        let p = prepare(&images, &other, &[mount("tools:1", "link/bin")], &|_| Ok(())).unwrap();
        assert_eq!(p[&0], root.join("usr/bin"));
        let e = prepare(&images, "d", &[mount("tools:1", "nope")], &|_| Ok(())).unwrap_err();
        assert!(
            e.to_string().contains("mounts[0].image_sub_path") && e.to_string().contains("does not exist"),
            "{e}"
        );
        let e = prepare(&images, "e", &[mount("tools:1", "../etc")], &|_| Ok(())).unwrap_err();
        assert!(e.to_string().contains("must be relative"), "{e}");
        let e = prepare(&images, "f", &[mount("absent:1", "")], &|_| Ok(())).unwrap_err();
        assert!(matches!(e, Error::ImageNotPulled { .. }), "{e}");
        remove(&images, &id).unwrap();
        assert!(!images.snapshots().iter().any(|s| owner(s) == id));
    }
}
