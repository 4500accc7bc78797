//! A container's root filesystem: an overlay of its image's layer directories (read-only, top layer first)
//! with its own upper and work directories under `<snapshot root>/<id>/` (`<root>/snapshots/<id>/` unless
//! [`Store::with_snapshot_root`] moved them); a container's also stands on its
//! image's mount points ([`crate::mount_points`]). Removing it unmounts and deletes.

use std::path::PathBuf;

use nix::mount::{MntFlags, MsFlags, mount, umount2};

use crate::error::io;
use crate::{Error, ImageRecord, Result, Store};

fn check_id(id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 256
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "snapshot id {id:?}: use letters, digits, '-', '_', '.'"
        )))
    }
}

impl Store {
    fn snapshot_dir(&self, id: &str) -> PathBuf {
        self.snapshot_root().join(id)
    }

    /// Mounts a snapshot `id` of `image`, exactly the image's content (an image volume's), and returns its
    /// path. Every layer must be unpacked.
    pub fn prepare_snapshot(&self, id: &str, image: &ImageRecord) -> Result<PathBuf> {
        self.prepare(id, image, &[])
    }

    /// Mounts the rootfs of container `id` from `image` and returns its path: the image's layers, under the
    /// image's mount-point layer ([`crate::mount_points`]) for the files criusd mounts over in every
    /// container. Every layer must be unpacked.
    pub fn prepare_rootfs(&self, id: &str, image: &ImageRecord) -> Result<PathBuf> {
        self.prepare(id, image, crate::mount_points::CONTAINER_FILES)
    }

    fn prepare(&self, id: &str, image: &ImageRecord, mount_points: &[&str]) -> Result<PathBuf> {
        check_id(id)?;
        let dir = self.snapshot_dir(id);
        if dir.exists() {
            return Err(Error::InvalidArgument(format!("snapshot {id:?} already exists")));
        }
        let mut lowers: Vec<PathBuf> = image
            .diff_ids
            .iter()
            .rev()
            .map(|d| {
                let l = self.layer_dir(d);
                if l.exists() {
                    Ok(l)
                } else {
                    Err(Error::NotFound(format!("layer {d}")))
                }
            })
            .collect::<Result<_>>()?;
        let mut names: Vec<String> = image.diff_ids.iter().map(|d| d.hex().to_string()).collect();
        if !mount_points.is_empty()
            && let Some((dir, name)) = self.mount_point_layer(image, &lowers, mount_points)?
        {
            lowers.insert(0, dir);
            names.push(name);
        }
        let (upper, work, rootfs) = (dir.join("upper"), dir.join("work"), dir.join("rootfs"));
        for d in [&upper, &work, &rootfs] {
            std::fs::create_dir_all(d).map_err(|e| io(format!("creating {}", d.display()), e))?;
        }
        // The layers it stands on, so garbage collection leaves them alone.
        std::fs::write(dir.join("layers"), names.join("\n"))
            .map_err(|e| io(format!("recording the layers of snapshot {id}"), e))?;
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            lowers
                .iter()
                .map(|l| l.display().to_string())
                .collect::<Vec<_>>()
                .join(":"),
            upper.display(),
            work.display()
        );
        if let Err(e) = mount(
            Some("overlay"),
            &rootfs,
            Some("overlay"),
            MsFlags::empty(),
            Some(data.as_str()),
        ) {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(io(format!("mounting the overlay for {id} ({data})"), e));
        }
        Ok(rootfs)
    }

    /// The diff id hexes of the layers every snapshot stands on.
    pub(crate) fn snapshot_layers(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.snapshot_root()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter_map(|e| std::fs::read_to_string(e.path().join("layers")).ok())
            .flat_map(|s| s.lines().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    /// The ids of the snapshots there are (made, or left by a crash part-way through making one).
    pub fn snapshots(&self) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(self.snapshot_root()) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    }

    /// Unmounts and deletes the snapshot of `id`; a missing one is fine.
    pub fn remove_snapshot(&self, id: &str) -> Result<()> {
        check_id(id)?;
        let dir = self.snapshot_dir(id);
        if !dir.exists() {
            return Ok(());
        }
        match umount2(&dir.join("rootfs"), MntFlags::MNT_DETACH) {
            Ok(()) | Err(nix::Error::EINVAL) | Err(nix::Error::ENOENT) => {}
            Err(e) => return Err(io(format!("unmounting snapshot {id}"), e)),
        }
        std::fs::remove_dir_all(&dir).map_err(|e| io(format!("removing snapshot {id}"), e))
    }
}
