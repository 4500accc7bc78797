//! CheckpointContainer and a restoring CreateContainer against the fake shim and image store: the archive's
//! layout, what a failure leaves, and the restore detected from the image.

use std::path::{Path, PathBuf};

use tonic::Code;

use super::archive;
use crate::container::tests::{World, config};
use crate::image_store::fake::FakeImages;
use crate::store::container::State;

/// A running container `name` whose writable layer holds a file and a whiteout, and whose log has a line.
fn running(w: &World, name: &str) -> String {
    let id = w.create(name).unwrap();
    w.containers.start(&id).unwrap();
    let upper = w.images.snapshot_usage_dir(&id);
    std::fs::create_dir_all(upper.join("data")).unwrap();
    std::fs::write(upper.join("data/count"), "41").unwrap();
    let log = w.containers.get(&id).unwrap().record.log_path;
    std::fs::write(&log, "2026-01-01T00:00:00Z stdout F 41\n").unwrap();
    id
}

/// A CreateContainer of `name` whose image is `image` (a checkpoint archive or image): the new container's id.
fn restore(w: &World, name: &str, image: &str) -> String {
    w.create_with(config(name, 0, image)).unwrap()
}

/// `restored` is the checkpoint of `original` restored: the shim was asked to create it from the CRIU images
/// unpacked in its bundle, and its rootfs is the image the checkpoint names (not a checkpoint image) with the
/// changes `original` had made. The restored container's bundle.
fn assert_restored(w: &World, original: &str, restored: &str) -> PathBuf {
    let bundle = w.containers.bundle(restored);
    let images = bundle.join(super::RESTORE_DIR).join(archive::CHECKPOINT_DIR);
    assert!(
        images.join("inventory.img").is_file(),
        "no CRIU images in {}",
        images.display()
    );
    assert!(
        w.shim
            .calls()
            .contains(&format!("create {restored} {}", images.display())),
        "{:?}",
        w.shim.calls()
    );
    let rec = w.containers.get(restored).unwrap().record;
    assert_eq!(rec.image_id, w.containers.get(original).unwrap().record.image_id);
    let rootfs = w.images.snapshot_usage_dir(restored).with_file_name("rootfs");
    assert_eq!(std::fs::read_to_string(rootfs.join("data/count")).unwrap(), "41");
    bundle
}

impl FakeImages {
    fn snapshot_usage_dir(&self, id: &str) -> PathBuf {
        crate::image_store::ImageStore::snapshot_usage(self, id).1
    }
}

fn entries(archive: &Path) -> Vec<String> {
    let mut a = tar::Archive::new(std::fs::File::open(archive).unwrap());
    let mut v: Vec<String> = a
        .entries()
        .unwrap()
        .map(|e| e.unwrap().path().unwrap().display().to_string())
        .filter(|p| p == "checkpoint/" || !p.starts_with("checkpoint/"))
        .collect();
    v.sort();
    v
}

#[test]
fn a_checkpoint_archive_has_kubelets_layout_and_the_container_runs_on() {
    let w = World::new();
    let id = running(&w, "counter");
    let at = w.dir.path().join("checkpoint-counter.tar");
    w.containers
        .checkpoint(&id, &at.display().to_string(), 0)
        .unwrap();
    assert_eq!(
        entries(&at),
        [
            "checkpoint/",
            archive::CONFIG_DUMP,
            archive::CONTAINER_LOG,
            archive::DELETED_FILES,
            archive::ROOTFS_DIFF,
            archive::SPEC_DUMP,
            archive::STATS_DUMP,
        ]
    );
    let dump = super::unpack::read_config(&at).unwrap();
    assert_eq!((dump.id.as_str(), dump.name.as_str()), (id.as_str(), "counter"));
    assert_eq!(dump.rootfs_image, "busybox");
    assert_eq!(dump.rootfs_image_name, "busybox");
    assert!(dump.rootfs_image_ref.starts_with("sha256:"), "{dump:?}");
    let out = w.dir.path().join("out");
    super::unpack::unpack(&at, &out).unwrap();
    assert_eq!(
        std::fs::read_to_string(out.join(archive::CONTAINER_LOG)).unwrap(),
        "2026-01-01T00:00:00Z stdout F 41\n"
    );
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join(archive::SPEC_DUMP)).unwrap()).unwrap();
    assert!(spec["process"]["args"].is_array());
    // The fake's CRIU leaves the container running (leave-running), and the scratch directories are gone.
    assert!(
        w.shim
            .calls()
            .iter()
            .any(|c| c.starts_with(&format!("checkpoint {id}")))
    );
    assert_eq!(w.containers.get(&id).unwrap().record.state(), State::Running);
    let bundle: Vec<String> = crate::store::list_dir(&w.containers.bundle(&id));
    assert!(bundle.iter().all(|f| !f.starts_with("checkpoint-")), "{bundle:?}");
}

#[test]
fn a_failed_checkpoint_names_why_and_leaves_no_archive() {
    let w = World::new();
    let id = running(&w, "counter");
    let at = w.dir.path().join("c.tar");
    let loc = at.display().to_string();
    *w.shim.checkpoint_refusal.lock().unwrap() = Some("criu failed: can't dump unix socket".into());
    let e = w.containers.checkpoint(&id, &loc, 5).unwrap_err();
    assert!(e.to_string().contains("can't dump unix socket"), "{e}");
    assert!(e.to_string().contains("CheckpointContainer"), "{e}");
    assert!(!at.exists());
    assert_eq!(w.containers.get(&id).unwrap().record.state(), State::Running);
    *w.shim.checkpoint_refusal.lock().unwrap() = None;

    // What the request gets wrong is named.
    let e = w.containers.checkpoint(&id, "", 0).unwrap_err();
    assert_eq!(
        (e.code(), e.to_string().contains("location")),
        (Code::InvalidArgument, true)
    );
    let e = w.containers.checkpoint(&id, "relative.tar", 0).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    let e = w
        .containers
        .checkpoint(&id, "/nonexistent/dir/c.tar", 0)
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    let e = w.containers.checkpoint("nope", &loc, 0).unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e}");
    // Only a running container is checkpointed.
    let created = w
        .containers
        .create(&w.sandbox, w.dir.path(), config("idle", 0, "busybox"))
        .unwrap();
    let e = w.containers.checkpoint(&created, &loc, 0).unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e}");
}

#[test]
fn a_create_whose_image_is_an_archive_restores_with_the_rootfs_changes() {
    let w = World::new();
    let id = running(&w, "counter");
    let at = w.dir.path().join("c.tar.gz");
    w.containers
        .checkpoint(&id, &at.display().to_string(), 0)
        .unwrap();

    let restored = restore(&w, "again", &at.display().to_string());
    let bundle = assert_restored(&w, &id, &restored);
    // CRIU is pointed at the new container's cgroup (runc 1.1 on cgroup v2 leaves it the dumped one).
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(bundle.join("config.json")).unwrap()).unwrap();
    let conf = spec["annotations"][super::CRIU_CONFIG_ANNOTATION]
        .as_str()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(conf).unwrap(),
        format!("cgroup-root {}\n", spec["linux"]["cgroupsPath"].as_str().unwrap())
    );
    assert!(conf.starts_with(&bundle.display().to_string()), "{conf}");

    // A file that is no archive is an image reference (not found); an archive without CRIU images is refused.
    let junk = w.dir.path().join("junk.tar");
    std::fs::write(&junk, b"not a tar").unwrap();
    let e = w
        .containers
        .create(
            &w.sandbox,
            w.dir.path(),
            config("junk", 0, &junk.display().to_string()),
        )
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.to_string().contains("junk.tar"), "{e}");
    // The failed create left nothing: its name is free.
    assert!(
        w.containers
            .of_sandbox("sb1")
            .iter()
            .all(|c| c.config.metadata.as_ref().unwrap().name != "junk")
    );
}

#[test]
fn a_create_whose_image_is_a_checkpoint_image_restores_as_from_its_archive() {
    let w = World::new();
    let id = running(&w, "counter");
    // The archive as a checkpoint image's one layer (gzip, as buildah writes it).
    let layer = w.dir.path().join("layer-blob");
    let at = w.dir.path().join("c.tar.gz");
    w.containers
        .checkpoint(&id, &at.display().to_string(), 0)
        .unwrap();
    std::fs::rename(&at, &layer).unwrap();
    w.images.add_checkpoint("localhost/ckpt:latest", &layer);

    // Made of the image the checkpoint names, not of the checkpoint image, with the container's changes.
    let restored = restore(&w, "again", "localhost/ckpt:latest");
    assert_restored(&w, &id, &restored);
    // An ordinary image is no checkpoint.
    let plain = w
        .containers
        .create(&w.sandbox, w.dir.path(), config("plain", 0, "busybox"))
        .unwrap();
    assert!(
        !w.shim
            .calls()
            .iter()
            .any(|c| c.starts_with(&format!("create {plain} /"))),
        "{:?}",
        w.shim.calls()
    );
}

#[test]
fn under_systemd_crius_cgroup_root_is_the_scope_of_the_container() {
    let d = tempfile::tempdir().unwrap();
    let mut spec = oci_spec::runtime::Spec::default();
    let mut linux = spec.linux().clone().unwrap_or_default();
    linux.set_cgroups_path(Some("kubepods-besteffort.slice:crius:c1".into()));
    spec.set_linux(Some(linux));
    super::point_criu_at_cgroup(&mut spec, d.path(), crate::cgroup_driver::Driver::Systemd).unwrap();
    assert_eq!(
        std::fs::read_to_string(d.path().join("criu.conf")).unwrap(),
        "cgroup-root /kubepods.slice/kubepods-besteffort.slice/crius-c1.scope\n"
    );
    let a = spec.annotations().clone().unwrap();
    assert_eq!(
        a[super::CRIU_CONFIG_ANNOTATION],
        d.path().join("criu.conf").display().to_string()
    );
}
