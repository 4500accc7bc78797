//! CheckpointContainer, and what CreateContainer needs to restore one ([`Restore`]).
//!
//! A checkpoint: the pod's shim has the runtime dump the running container with CRIU, leaving it running
//! (kubelet's forensic checkpoint, as CRI-O does); then the archive ([`archive`]) is assembled in a scratch
//! directory in the container's bundle (CRIU's images, `config.dump`, `spec.dump`, the writable layer's
//! diff, the CRI log, CRIU's statistics) and packed to `location`. The request's `timeout` (seconds; 0:
//! [`DEFAULT_TIMEOUT`]) bounds the whole call: past it the answer is DeadlineExceeded and no archive is left.
//! A failure leaves the container running and names what failed (the runtime's and CRIU's messages).
//!
//! A restore is a CreateContainer whose image is a checkpoint archive's path, or a checkpoint image (CRI-O's
//! format, `crius_image::checkpoint`: its one layer's blob is read as the archive): its `config.dump` names the
//! image the container's rootfs is made of; the archive is unpacked into the new bundle, its rootfs diff
//! applied to the new snapshot, and the shim restores CRIU's images at StartContainer.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::error::{Error, Kind, Result};
use crate::image_store::ImageStore;
use crate::shim::CheckpointTask;
use crate::store::container::Container;

use super::Containers;

pub(crate) mod archive;
pub(crate) mod unpack;

const CALL: &str = "CheckpointContainer";
/// How long a checkpoint may take when the request sets no timeout.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// Where a restored container's unpacked archive is kept, in its bundle.
pub(crate) const RESTORE_DIR: &str = "restore";

/// A checkpoint a CreateContainer restores: the archive and its `config.dump`.
#[derive(Debug, Clone)]
pub(crate) struct Restore {
    /// The archive's path.
    pub archive: PathBuf,
    /// Its `config.dump`.
    pub config: archive::ConfigDump,
}

impl Restore {
    /// The checkpoint `image` (a CreateContainer's `image.image`) names, if it names one: an archive's path,
    /// or a checkpoint image in `images` (whose one layer is the archive).
    pub(crate) fn of(image: &str, images: &dyn ImageStore) -> Result<Option<Restore>> {
        let archive = if archive::is_archive_path(image) {
            PathBuf::from(image)
        } else {
            let Ok(rec) = images.find(image) else {
                return Ok(None);
            };
            match images.checkpoint_archive(&rec) {
                Ok(Some(layer)) => layer,
                Ok(None) => return Ok(None),
                Err(e) => return Err(Error::invalid("CreateContainer", "image.image", e.to_string())),
            }
        };
        let config = unpack::read_config(&archive)?;
        if config.rootfs_image_ref.is_empty() && config.rootfs_image_name.is_empty() {
            return Err(Error::invalid(
                "CreateContainer",
                "image.image",
                format!(
                    "{}: its {} names no image",
                    archive.display(),
                    archive::CONFIG_DUMP
                ),
            ));
        }
        Ok(Some(Restore { archive, config }))
    }

    /// The image the restored container's rootfs is made of: by id, else by name.
    pub(crate) fn image(&self) -> &str {
        if self.config.rootfs_image_ref.is_empty() {
            &self.config.rootfs_image_name
        } else {
            &self.config.rootfs_image_ref
        }
    }

    /// Unpacks the archive into `bundle`'s [`RESTORE_DIR`] and applies its rootfs changes to `rootfs`;
    /// returns the directory of CRIU's images for the shim.
    pub(crate) fn prepare(&self, bundle: &Path, rootfs: &Path) -> Result<PathBuf> {
        let dir = bundle.join(RESTORE_DIR);
        let io = |what: String| move |e| Error::io(what, e);
        crate::store::private_dir(bundle).map_err(io(format!("creating {}", bundle.display())))?;
        unpack::unpack(&self.archive, &dir)?;
        unpack::apply_rootfs_diff(&self.archive, &dir, rootfs)?;
        let images = dir.join(archive::CHECKPOINT_DIR);
        if !images.join("inventory.img").is_file() {
            return Err(Error::invalid(
                "CreateContainer",
                "image.image",
                format!(
                    "{}: no CRIU images in its {}/",
                    self.archive.display(),
                    archive::CHECKPOINT_DIR
                ),
            ));
        }
        Ok(images)
    }
}

/// The spec annotation runc (1.1 and later) and crun read the name of an extra CRIU configuration file from.
pub(crate) const CRIU_CONFIG_ANNOTATION: &str = "org.criu.config";
/// That file, in the restored container's [`RESTORE_DIR`].
const CRIU_CONFIG: &str = "criu.conf";

/// Points the restored container's CRIU at its own cgroup: a CRIU configuration file in `dir` saying
/// `cgroup-root <the container's cgroup>`, named in `spec`'s [`CRIU_CONFIG_ANNOTATION`].
///
/// Without it runc 1.1 on cgroup v2 (which gives CRIU no cgroup root there, and CRIU's default `soft`
/// cgroup mode) has CRIU put the restored processes back into the cgroup they were dumped from (the
/// original container's, made again if it is gone), while runc's state names the new one: a StopContainer's
/// `kill --all` then finds nothing to kill in it and the process runs on; and stopping the original killed
/// the copy with it. crius-runc reads the file too, as runc does, but restores in `ignore` mode into the new
/// cgroup, where its `cgroup-root` changes nothing.
pub(crate) fn point_criu_at_cgroup(
    spec: &mut oci_spec::runtime::Spec,
    dir: &Path,
    driver: crate::cgroup_driver::Driver,
) -> Result<()> {
    let Some(path) = spec.linux().as_ref().and_then(|l| l.cgroups_path().clone()) else {
        return Ok(());
    };
    let path = path.display().to_string();
    let root = match driver {
        crate::cgroup_driver::Driver::Cgroupfs => path,
        crate::cgroup_driver::Driver::Systemd => {
            // `slice:prefix:name`: the scope `prefix-name.scope` in the slice's directory.
            let mut parts = path.splitn(3, ':');
            let (Some(slice), Some(prefix), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
                return Ok(());
            };
            let Ok(dir) = crius_oci::cgroup::systemd::expand_slice(slice) else {
                return Ok(());
            };
            format!("/{}", dir.join(format!("{prefix}-{name}.scope")).display())
        }
    };
    let file = dir.join(CRIU_CONFIG);
    crate::store::write_private(&file, format!("cgroup-root {root}\n").as_bytes())
        .map_err(|e| Error::io(format!("writing {}", file.display()), e))?;
    let mut annotations = spec.annotations().clone().unwrap_or_default();
    annotations.insert(CRIU_CONFIG_ANNOTATION.into(), file.display().to_string());
    spec.set_annotations(Some(annotations));
    Ok(())
}

/// Removes a directory when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl Containers {
    /// CheckpointContainer: the archive of running container `id` written at `location`, within `timeout`
    /// seconds (0: 300 s). The container keeps running.
    pub fn checkpoint(&self, id: &str, location: &str, timeout: i64) -> Result<()> {
        let c = self.get_or_not_found(CALL, id)?;
        if location.is_empty() {
            return Err(Error::invalid(CALL, "location", "is empty"));
        }
        let location = PathBuf::from(location);
        if !location.is_absolute() {
            return Err(Error::invalid(
                CALL,
                "location",
                format!("{location:?} is not an absolute path"),
            ));
        }
        let parent = location.parent().unwrap_or(Path::new("/"));
        if !parent.is_dir() {
            return Err(Error::NoSuchPath {
                call: CALL,
                path: parent.to_path_buf(),
            });
        }
        let timeout = match u64::try_from(timeout) {
            Ok(0) | Err(_) => DEFAULT_TIMEOUT,
            Ok(s) => Duration::from_secs(s),
        };
        let deadline = Instant::now() + timeout;
        // Shared with Stop; a Remove waits for it.
        let lock = self.busy.of(&c.record.id);
        let _held = lock.read().unwrap_or_else(|p| p.into_inner());
        let c = self.get_or_not_found(CALL, id)?;
        Self::running(CALL, &c)?;
        let bundle = self.bundle(id);
        let scratch = Scratch(bundle.join(format!("checkpoint-{}", crate::store::now_ns())));
        let work = scratch.0.with_extension("work");
        let _work = Scratch(work.clone());
        let task = CheckpointTask {
            image_path: scratch.0.join(archive::CHECKPOINT_DIR),
            work_path: work,
            exit: false,
        };
        self.shims
            .checkpoint(&c.record.sandbox_id, id, &task, timeout)
            .map_err(Self::shim_err(CALL, &c))?;
        tracing::info!(container = %id, "CRIU dumped the container; writing the archive");
        self.fill_archive(&c, &bundle, &scratch.0, &task.work_path)?;
        if Instant::now() > deadline {
            return Err(Error::DeadlineExceeded {
                call: CALL,
                kind: Kind::Container,
                id: id.to_string(),
                reason: format!("was not checkpointed within {timeout:?}"),
            });
        }
        archive::pack(&scratch.0, &location).map_err(|e| {
            Error::io(
                format!("writing the checkpoint archive {}", location.display()),
                e,
            )
        })?;
        tracing::info!(container = %id, archive = %location.display(), "checkpointed");
        Ok(())
    }

    /// Writes the archive's files beside CRIU's images in `dir` (CRIU's statistics from its `work` directory).
    fn fill_archive(&self, c: &Container, bundle: &Path, dir: &Path, work: &Path) -> Result<()> {
        let io = |what: String| move |e| Error::io(what, e);
        let spec_path = bundle.join("config.json");
        let spec = std::fs::read(&spec_path).map_err(io(format!("reading {}", spec_path.display())))?;
        crate::store::write_private(&dir.join(archive::SPEC_DUMP), &spec)
            .map_err(io(format!("writing {}", archive::SPEC_DUMP)))?;
        let config = self.config_dump(c, bundle);
        let json = serde_json::to_vec_pretty(&config).map_err(|e| Error::io("config.dump", e.into()))?;
        crate::store::write_private(&dir.join(archive::CONFIG_DUMP), &json)
            .map_err(io(format!("writing {}", archive::CONFIG_DUMP)))?;
        // The writable layer: the snapshot's overlayfs upper directory.
        let (_, upper) = self.images.snapshot_usage(&c.record.id);
        if upper.is_dir() {
            let deleted = archive::write_rootfs_diff(&upper, &dir.join(archive::ROOTFS_DIFF))
                .map_err(io(format!("writing the rootfs diff of {}", upper.display())))?;
            let list = serde_json::to_vec(&deleted).map_err(|e| Error::io("deleted.files", e.into()))?;
            crate::store::write_private(&dir.join(archive::DELETED_FILES), &list)
                .map_err(io(format!("writing {}", archive::DELETED_FILES)))?;
        }
        let log = Path::new(&c.record.log_path);
        if !c.record.log_path.is_empty() && log.is_file() {
            std::fs::copy(log, dir.join(archive::CONTAINER_LOG))
                .map_err(io(format!("copying the log {}", log.display())))?;
        }
        // CRIU writes its statistics to its work directory (runc's `--work-path`), or else with the images.
        let stats = [work.to_path_buf(), dir.join(archive::CHECKPOINT_DIR)]
            .into_iter()
            .map(|d| d.join(archive::STATS_DUMP))
            .find(|p| p.is_file());
        if let Some(stats) = stats {
            std::fs::copy(&stats, dir.join(archive::STATS_DUMP))
                .map_err(io(format!("copying {}", stats.display())))?;
        }
        Ok(())
    }

    /// `config.dump` of `c`.
    fn config_dump(&self, c: &Container, bundle: &Path) -> archive::ConfigDump {
        use crius_common::time::{Fraction, rfc3339};
        let at = |ns: i64| {
            rfc3339(
                ns.div_euclid(1_000_000_000),
                ns.rem_euclid(1_000_000_000) as u32,
                Fraction::Trimmed,
            )
        };
        let image = c
            .config
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default();
        let name = self
            .images
            .find(&c.record.image_id)
            .ok()
            .and_then(|i| i.names.first().cloned())
            .unwrap_or_else(|| image.clone());
        // The runtime the shim noted in the bundle.
        let runtime = std::fs::read(bundle.join("crius-runtime.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
            .and_then(|v| {
                v["binary"]
                    .as_str()
                    .map(|b| b.rsplit('/').next().unwrap_or(b).to_string())
            })
            .unwrap_or_else(|| "crius-runc".into());
        archive::ConfigDump {
            id: c.record.id.clone(),
            name: c
                .config
                .metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default(),
            rootfs_image: image,
            rootfs_image_ref: c.record.image_id.clone(),
            rootfs_image_name: name,
            runtime,
            created_time: at(c.record.created_at),
            checkpointed_time: at(crate::store::now_ns()),
        }
    }
}

#[cfg(test)]
mod tests;
