//! CreateContainer, as named steps under a [`Rollback`] guard:
//!
//! ```text
//!  check ─ reserve name ─ intent ─ snapshot ─ restore ─ spec ─ adjust ─ bundle ─ task ─ record ─ commit
//!                                      │          │                        │       │
//!                          undo:  remove snapshots  remove dir        remove dir  delete task
//!
//!  on an error after the intent: the undos pushed so far run, last first; then the intent goes
//! ```
//!
//! Nothing is made before the name is reserved and the intent written (`store::intents`: a crash after it is
//! undone at the next start). From the snapshot on, each step that makes something pushes its undo before
//! it makes it (a half-made snapshot is taken apart too), so an error at any later step, or a `?` added to
//! one, leaves nothing: no snapshot, no bundle, no task, no record, no intent, and the name is free again.
//! The steps:
//! - **snapshot**: the image's rootfs and the image volumes' snapshots ([`super::image_volumes`]), idmapped
//!   for a pod with a user namespace;
//! - **restore** (only when the image is a checkpoint archive, [`super::checkpoint`]): the archive unpacked
//!   into the bundle, its rootfs changes applied to the snapshot; the task then restores CRIU's images at
//!   StartContainer instead of starting afresh;
//! - **spec**: the OCI spec from the request ([`crate::convert::spec`], a pure function of it and the
//!   [`crate::convert::Host`] facts, the target container of PID mode TARGET among them);
//! - **adjust**: the one place where the spec changes for what the request points at outside itself
//!   ([`super::adjust`]: the image volumes' mounts, CDI devices, then NRI plugins' adjustment);
//! - **bundle**: `<bundles>/<id>/config.json`, the mounts' missing host paths, the log's directories and
//!   the stdin FIFO;
//! - **task**: the shim creates the task;
//! - **record**: the container's record, the point after which the container exists.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crius_api::cri;
use crius_image::ImageRecord;
use oci_spec::runtime::Spec;

use super::checkpoint::Restore;
use super::{Containers, adjust, image_volumes, stream};
use crate::error::{Error, Kind, Result};
use crate::rollback::Rollback;
use crate::shim::CreateTask;
use crate::store::container::{Container, ProcessUser, Record, name_key};
use crate::store::intents::{Intent, Op};
use crate::store::names::Taken;
use crate::store::sandbox::Sandbox;
use crate::store::{now_ns, random_id};

const CALL: &str = "CreateContainer";

/// What a CreateContainer works on once its name is reserved.
struct Request<'a> {
    id: &'a str,
    sandbox: &'a Sandbox,
    /// Where the pod's hostname, hosts and resolv.conf are.
    sandbox_files: &'a Path,
    config: &'a cri::ContainerConfig,
    image: &'a ImageRecord,
    /// The checkpoint the container is restored from (its image was a checkpoint archive).
    restore: Option<&'a Restore>,
}

impl Containers {
    /// CreateContainer in `sandbox` (READY), whose files (hostname, hosts, resolv.conf) are in
    /// `sandbox_files`; returns the new id. A retry of a create (the same config) gets the id of the
    /// container the first call made.
    pub fn create(
        &self,
        sandbox: &Sandbox,
        sandbox_files: &Path,
        config: cri::ContainerConfig,
    ) -> Result<String> {
        let meta = check(sandbox, &config)?;
        let id = random_id().map_err(|e| Error::io("reading /dev/urandom", e))?;
        // The name is taken here, before anything is made: a concurrent create of the same name with another
        // config fails now, and a retry of this one (the same config) gets the container the first call makes.
        let reservation = match self.names.reserve(
            &name_key(&sandbox.record.id, &config),
            &id,
            config.clone(),
        ) {
            Ok(r) => r,
            Err(Taken::Same(made)) => {
                tracing::info!(container = %made, name = %meta.name, "CreateContainer retried: the container made");
                return Ok(made);
            }
            Err(Taken::By(holder)) => {
                return Err(Error::AlreadyExists {
                    call: CALL,
                    kind: Kind::Container,
                    name: format!(
                        "{} (attempt {}) in sandbox {}",
                        meta.name, meta.attempt, sandbox.record.id
                    ),
                    holder,
                });
            }
        };
        let named = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        // A checkpoint archive's path or image: the container is made of the image its checkpoint names.
        let restore = Restore::of(&named, &*self.images)?;
        let image_ref = restore.as_ref().map(|r| r.image().to_string()).unwrap_or(named);
        let image = self.images.find(&image_ref).map_err(|e| match e {
            crius_image::Error::NotFound(_) => Error::ImageNotPulled {
                call: CALL,
                reference: image_ref.clone(),
            },
            source => Error::Image { call: CALL, source },
        })?;
        if let Some(t) = &image.artifact_type {
            return Err(Error::invalid(
                CALL,
                "image",
                format!(
                    "{image_ref} is an OCI artifact ({t}): it can be mounted as an image volume, not run"
                ),
            ));
        }
        // From here on a crash leaves the intent, and the next start undoes what was made. It goes once the
        // steps are done, made or undone: `make` returns only after its guard ran.
        let intent = self.intents.begin(&Intent {
            op: Op::CreateContainer,
            id: id.clone(),
            sandbox_id: sandbox.record.id.clone(),
        })?;
        let made = self.make(&Request {
            id: &id,
            sandbox,
            sandbox_files,
            config: &config,
            image: &image,
            restore: restore.as_ref(),
        });
        intent.done();
        let record = made?;
        let c = Container { record, config };
        reservation.commit();
        tracing::info!(container = %id, sandbox = %sandbox.record.id, name = %meta.name, "container created");
        self.emit(&c, cri::ContainerEventType::ContainerCreatedEvent);
        if let Some(nri) = self.nri() {
            nri.container(crate::nri::ContainerEvent::PostCreate, &c);
        }
        Ok(id)
    }

    /// The steps that make something, under one guard: on an error each one made is taken apart.
    fn make(&self, r: &Request<'_>) -> Result<Record> {
        let mut undo = Rollback::new();
        let (rootfs, volumes) = self.snapshot(&mut undo, r)?;
        let checkpoint = self.restore(&mut undo, r, &rootfs)?;
        let mut spec = self.spec(r, &rootfs)?;
        if checkpoint.is_some() {
            let dir = self.bundle(r.id).join(super::checkpoint::RESTORE_DIR);
            super::checkpoint::point_criu_at_cgroup(&mut spec, &dir, self.cgroup_driver)?;
        }
        let cx = adjust::Context {
            id: r.id,
            config: r.config,
            sandbox: r.sandbox,
            image_volumes: &volumes,
        };
        adjust::adjust(&self.adjusters, &mut spec, &cx)?;
        if let Some(nri) = self.nri() {
            // The plugins saw the create: if a later step fails, they hear the container is gone.
            let (pod, id, config) = (r.sandbox, r.id, r.config);
            undo.push("NRI", move || nri.undo_create(pod, id, config));
        }
        let (mut task, user, log_path) = self.write_bundle(&mut undo, r, &spec)?;
        task.checkpoint = checkpoint;
        self.task(&mut undo, r, &task)?;
        let record = Record {
            id: r.id.to_string(),
            sandbox_id: r.sandbox.record.id.clone(),
            image_id: r.image.id.to_string(),
            created_at: now_ns(),
            log_path,
            user: Some(user),
            ..Default::default()
        };
        #[cfg(test)]
        if self.fail_record.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::io("recording", std::io::Error::other("a test's failure")));
        }
        self.records.insert(&Container {
            record: record.clone(),
            config: r.config.clone(),
        })?;
        undo.commit();
        Ok(record)
    }

    /// The snapshot step: the container's rootfs, then its image volumes' snapshots (by mount index), each
    /// idmapped for a pod with a user namespace.
    fn snapshot<'a>(
        &'a self,
        undo: &mut Rollback<'a>,
        r: &Request<'_>,
    ) -> Result<(PathBuf, BTreeMap<usize, PathBuf>)> {
        let id = r.id.to_string();
        undo.push("snapshot", move || self.remove_snapshots(&id));
        let rootfs = self
            .images
            .prepare_rootfs(r.id, r.image)
            .map_err(|source| Error::Image { call: CALL, source })?;
        let idmap = |root: &Path| crate::sandbox::userns::idmap_rootfs(root, r.sandbox);
        idmap(&rootfs)?;
        let volumes = image_volumes::prepare(&*self.images, r.id, &r.config.mounts, &idmap)?;
        Ok((rootfs, volumes))
    }

    /// The restore step, for a container restored from a checkpoint: the archive unpacked into its bundle and
    /// its rootfs changes applied to the new snapshot; returns the CRIU images the shim restores at start.
    fn restore<'a>(
        &'a self,
        undo: &mut Rollback<'a>,
        r: &Request<'_>,
        rootfs: &Path,
    ) -> Result<Option<PathBuf>> {
        let Some(restore) = r.restore else {
            return Ok(None);
        };
        let id = r.id.to_string();
        undo.push("restore", move || self.remove_bundle(&id));
        tracing::info!(container = %r.id, archive = %restore.archive.display(), "restoring a checkpoint");
        restore.prepare(&self.bundle(r.id), rootfs).map(Some)
    }

    /// The spec step: the facts read, then the pure conversion.
    fn spec(&self, r: &Request<'_>, rootfs: &Path) -> Result<Spec> {
        let pid_target = self.pid_target(r.config)?;
        let image_config = self.images.config(&r.image.id);
        let input = crate::convert::Input {
            id: r.id,
            config: r.config,
            sandbox: r.sandbox,
            sandbox_files: r.sandbox_files,
            image_config: &image_config,
            rootfs,
            pid_target: pid_target.as_deref(),
        };
        let host = crate::convert::Host::probe(&input, self.cgroup_driver)?;
        crate::convert::spec(&input, &host)
    }

    /// The bundle step: config.json written, the mounts' host paths and the log's directories made; returns
    /// the task to create, the process's user and the log's path (empty: none).
    fn write_bundle<'a>(
        &'a self,
        undo: &mut Rollback<'a>,
        r: &Request<'_>,
        spec: &Spec,
    ) -> Result<(CreateTask, ProcessUser, String)> {
        let (config, sandbox) = (r.config, r.sandbox);
        let user = spec.process().as_ref().map(|p| p.user()).map(|u| ProcessUser {
            uid: u.uid(),
            gid: u.gid(),
            groups: u.additional_gids().clone().unwrap_or_default(),
        });
        crate::convert::create_mount_sources(config)?;
        let json = serde_json::to_vec(spec).map_err(|e| Error::io("serializing config.json", e.into()))?;
        let bundle = self.bundle(r.id);
        let id = r.id.to_string();
        undo.push("bundle", move || self.remove_bundle(&id));
        let io = |what: String| move |e| Error::io(what, e);
        crate::store::private_dir(&bundle).map_err(io(format!("creating {}", bundle.display())))?;
        crate::store::write_private(&bundle.join("config.json"), &json)
            .map_err(io(format!("writing {}/config.json", bundle.display())))?;
        let log_dir = &sandbox.config.log_directory;
        let log_path = match (log_dir, &config.log_path) {
            (d, l) if !d.is_empty() && !l.is_empty() => Path::new(d).join(l).display().to_string(),
            _ => String::new(),
        };
        // The log's directories are made beneath log_directory, a symlink planted on the way or in the
        // file's place refused; the shim opens it the same way (`log_directory//log_path`).
        if !log_path.is_empty() {
            std::fs::create_dir_all(log_dir).map_err(io(format!("creating log dir {log_dir}")))?;
            crius_shim::beneath::prepare(Path::new(log_dir), Path::new(&config.log_path), 0o755).map_err(
                |e| match e.kind() {
                    std::io::ErrorKind::InvalidInput => Error::invalid(CALL, "log_path", e.to_string()),
                    _ => Error::io(format!("preparing the log under {log_dir}"), e),
                },
            )?;
        }
        let task = CreateTask {
            id: r.id.to_string(),
            bundle: bundle.clone(),
            terminal: config.tty,
            // No log file of its own: output goes to a capped one of criusd's, which attach follows.
            log_path: Some(if log_path.is_empty() {
                bundle.join(stream::ATTACH_LOG)
            } else {
                PathBuf::from(format!("{}//{}", log_dir.trim_end_matches('/'), config.log_path))
            }),
            capped_log: log_path.is_empty(),
            stdin: if config.stdin {
                Some(stream::make_stdin_fifo(&bundle)?)
            } else {
                None
            },
            runtime: sandbox.record.runtime.clone(),
            checkpoint: None,
        };
        Ok((task, user.unwrap_or_default(), log_path))
    }

    /// The task step: the shim creates the task (deleted again if a later step fails).
    fn task<'a>(&'a self, undo: &mut Rollback<'a>, r: &Request<'_>, task: &CreateTask) -> Result<()> {
        let sandbox = r.sandbox.record.id.clone();
        self.shims.create(&sandbox, task).map_err(|source| Error::Shim {
            call: CALL,
            id: r.id.to_string(),
            source,
        })?;
        let id = r.id.to_string();
        undo.push("task", move || self.delete_task(&sandbox, &id));
        Ok(())
    }

    /// For a container whose PID mode is TARGET: the PID namespace of its target, which must be running.
    fn pid_target(&self, config: &cri::ContainerConfig) -> Result<Option<PathBuf>> {
        let Some(ns) = config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.as_ref())
            .filter(|o| o.pid == cri::NamespaceMode::Target as i32)
        else {
            return Ok(None);
        };
        const FIELD: &str = "linux.security_context.namespace_options.target_id";
        if ns.target_id.is_empty() {
            return Err(Error::invalid(CALL, FIELD, "is empty for PID mode TARGET"));
        }
        let target = self
            .get(&ns.target_id)
            .filter(|c| c.record.pid > 0 && c.record.finished_at == 0);
        match target {
            Some(t) => Ok(Some(PathBuf::from(format!("/proc/{}/ns/pid", t.record.pid)))),
            None => Err(Error::invalid(
                CALL,
                FIELD,
                format!("{:?} is no running container", ns.target_id),
            )),
        }
    }
}

/// The checks made before anything is: the request, and the sandbox it is for. Returns its metadata.
fn check(sandbox: &Sandbox, config: &cri::ContainerConfig) -> Result<cri::ContainerMetadata> {
    let meta = config
        .metadata
        .clone()
        .ok_or_else(|| Error::invalid(CALL, "config.metadata", "is missing"))?;
    if meta.name.is_empty() {
        return Err(Error::invalid(CALL, "metadata.name", "is empty"));
    }
    crate::validate::container_config(config)?;
    if !sandbox.record.ready {
        return Err(Error::FailedPrecondition {
            call: CALL,
            kind: Kind::Sandbox,
            id: sandbox.record.id.clone(),
            reason: "is not ready".into(),
        });
    }
    // The pod's sysctls go into every container's config.json: judged again against the namespaces the
    // container joins (a pod recorded before RunPodSandbox judged them).
    if let Some(l) = &sandbox.config.linux {
        let pins = &sandbox.record.namespaces;
        let own = crate::validate::Own {
            net: pins.net.is_some(),
            ipc: pins.ipc.is_some(),
            uts: pins.uts.is_some(),
        };
        crate::validate::sysctls(CALL, &l.sysctls, own)?;
    }
    Ok(meta)
}

#[cfg(test)]
mod tests;
