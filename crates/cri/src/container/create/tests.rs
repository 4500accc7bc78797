//! CreateContainer failing at each of its steps in turn, against the fake shim, a fake image store that
//! fails on demand and a tempdir root: after each failure nothing is left (no snapshot, no bundle, no task,
//! no record, no intent) and the name is free.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crius_api::cri;
use crius_image::{Digest, ImageRecord};

use crate::container::Containers;
use crate::container::tests::{config, open, ready_pod};
use crate::error::Error;
use crate::image_store::ImageStore;
use crate::image_store::fake::FakeImages;
use crate::shim::fake::FakeShim;
use crate::store::container::name_key;
use crate::store::sandbox::Sandbox;

/// Which snapshot [`Flaky`] fails to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fail {
    /// The container's rootfs.
    Rootfs,
    /// An image volume's (`<id>-vol<i>`).
    Volume,
}

/// The fake image store, failing to make the snapshot `fail` says.
#[derive(Default)]
struct Flaky {
    images: FakeImages,
    fail: Mutex<Option<Fail>>,
}

impl ImageStore for Flaky {
    fn find(&self, reference: &str) -> crius_image::Result<ImageRecord> {
        self.images.find(reference)
    }

    fn config(&self, image: &Digest) -> serde_json::Value {
        self.images.config(image)
    }

    fn prepare_snapshot(&self, id: &str, image: &ImageRecord) -> crius_image::Result<PathBuf> {
        let which = if id.contains("-vol") {
            Fail::Volume
        } else {
            Fail::Rootfs
        };
        // Made first, then failed: a store that gives up half-way leaves something to take apart.
        let made = self.images.prepare_snapshot(id, image)?;
        if *self.fail.lock().unwrap() == Some(which) {
            return Err(crius_image::Error::Io {
                context: format!("no room for {id}"),
                source: std::io::Error::from(std::io::ErrorKind::StorageFull),
            });
        }
        Ok(made)
    }

    fn remove_snapshot(&self, id: &str) -> crius_image::Result<()> {
        self.images.remove_snapshot(id)
    }

    fn snapshot_usage(&self, id: &str) -> (crius_image::gc::Usage, PathBuf) {
        self.images.snapshot_usage(id)
    }

    fn snapshots(&self) -> Vec<String> {
        self.images.snapshots()
    }
}

/// An adjuster that refuses every spec while its flag is set.
struct Refuse(Arc<AtomicBool>);

impl crate::container::adjust::Adjust for Refuse {
    fn name(&self) -> &'static str {
        "refuse"
    }

    fn adjust(
        &self,
        _: &mut oci_spec::runtime::Spec,
        _: &crate::container::adjust::Context<'_>,
    ) -> crate::error::Result<()> {
        if self.0.load(Ordering::Relaxed) {
            return Err(Error::invalid("CreateContainer", "adjust", "refused by a test"));
        }
        Ok(())
    }
}

struct Bench {
    dir: tempfile::TempDir,
    refuse: Arc<AtomicBool>,
    shim: Arc<FakeShim>,
    images: Arc<Flaky>,
    containers: Containers,
    sandbox: Sandbox,
}

impl Bench {
    fn new() -> Bench {
        let dir = tempfile::tempdir().unwrap();
        let shim = Arc::new(FakeShim::default());
        let images = Arc::new(Flaky::default());
        images
            .images
            .add("busybox", serde_json::json!({"config": {"Cmd": ["sh"]}}));
        let mut containers = open(&dir, shim.clone(), images.clone());
        let refuse = Arc::new(AtomicBool::new(false));
        containers.adjusters.push(Box::new(Refuse(refuse.clone())));
        let sandbox = ready_pod(&dir);
        Bench {
            dir,
            refuse,
            shim,
            images,
            containers,
            sandbox,
        }
    }

    fn create(&self, c: &cri::ContainerConfig) -> Result<String, Error> {
        self.containers.create(&self.sandbox, self.dir.path(), c.clone())
    }

    fn entries(&self, under: &str) -> Vec<String> {
        crate::store::list_dir(&self.dir.path().join(under))
    }

    /// Nothing a create of `c` that failed at `step` made is left, and its name is free.
    fn nothing_left(&self, step: &str, c: &cri::ContainerConfig) {
        assert!(self.containers.list_all().is_empty(), "{step}: a record");
        assert_eq!(self.images.snapshots(), Vec::<String>::new(), "{step}: snapshots");
        assert_eq!(self.entries("bundles"), Vec::<String>::new(), "{step}: bundles");
        assert_eq!(self.entries("intents"), Vec::<String>::new(), "{step}: intents");
        for call in self.shim.calls() {
            if let Some(id) = call.strip_prefix("create ") {
                assert!(self.shim.task(id, "").is_none(), "{step}: task {id}");
            }
        }
        let key = name_key(&self.sandbox.record.id, c);
        let free = self.containers.names.reserve(&key, "probe", c.clone());
        assert!(free.is_ok(), "{step}: the name is still held");
    }
}

fn security(c: &mut cri::ContainerConfig) -> &mut cri::LinuxContainerSecurityContext {
    c.linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

fn image_mount(sub: &str) -> cri::Mount {
    crate::container::image_volumes::tests::mount("busybox", sub)
}

#[test]
fn a_create_that_fails_at_any_step_leaves_nothing() {
    let b = Bench::new();
    let web = config("web", 0, "busybox");
    let fails = |step: &str, c: &cri::ContainerConfig| {
        let e = b.create(c).unwrap_err();
        b.nothing_left(step, c);
        e
    };

    // The name: held by another request, so nothing is made.
    let key = name_key(&b.sandbox.record.id, &web);
    let mut other = web.clone();
    other.labels.insert("other".into(), "1".into());
    b.containers.names.hold(&key, "someone", other);
    let e = b.create(&web).unwrap_err();
    assert!(matches!(e, Error::AlreadyExists { .. }), "{e}");
    b.containers.names.release(&key, "someone");
    b.nothing_left("name", &web);

    // The snapshot: the rootfs, then an image volume's, then an image volume's sub path.
    *b.images.fail.lock().unwrap() = Some(Fail::Rootfs);
    assert!(matches!(fails("rootfs", &web), Error::Image { .. }));
    *b.images.fail.lock().unwrap() = Some(Fail::Volume);
    let mut with_volume = web.clone();
    with_volume.mounts.push(image_mount(""));
    assert!(matches!(fails("image volume", &with_volume), Error::Image { .. }));
    *b.images.fail.lock().unwrap() = None;
    with_volume.mounts[0] = image_mount("nope");
    let e = fails("image volume sub path", &with_volume);
    assert!(e.to_string().contains("image_sub_path"), "{e}");

    // The spec: PID mode TARGET naming no running container (this `?` leaked the rootfs snapshot), then a
    // seccomp profile that cannot be read.
    let mut target = web.clone();
    security(&mut target).namespace_options = Some(cri::NamespaceOption {
        pid: cri::NamespaceMode::Target as i32,
        target_id: "nope".into(),
        ..Default::default()
    });
    let e = fails("pid target", &target);
    assert!(e.to_string().contains("target_id"), "{e}");
    let mut seccomp = web.clone();
    security(&mut seccomp).seccomp = Some(cri::SecurityProfile {
        profile_type: cri::security_profile::ProfileType::Localhost as i32,
        localhost_ref: b.dir.path().join("absent.json").display().to_string(),
    });
    let e = fails("spec", &seccomp);
    assert!(e.to_string().contains("seccomp"), "{e}");

    // The adjust step: an adjuster refuses the spec (after the image volumes' mounts went in).
    with_volume.mounts[0] = image_mount("");
    b.refuse.store(true, Ordering::Relaxed);
    let e = fails("adjust", &with_volume);
    assert!(e.to_string().contains("refused by a test"), "{e}");
    b.refuse.store(false, Ordering::Relaxed);

    // The bundle: config.json is written, then the log's directory is a symlink planted out of the log
    // directory.
    let logs = b.dir.path().join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    std::os::unix::fs::symlink(b.dir.path(), logs.join("web")).unwrap();
    let e = fails("bundle", &web);
    assert!(e.to_string().contains("log_path"), "{e}");
    std::fs::remove_file(logs.join("web")).unwrap();

    // The task: the shim is gone.
    *b.shim.gone.lock().unwrap() = true;
    assert!(matches!(fails("task", &web), Error::Shim { .. }));
    *b.shim.gone.lock().unwrap() = false;

    // The record: the task the shim made is deleted again.
    b.containers.fail_record.store(true, Ordering::Relaxed);
    assert!(matches!(fails("record", &web), Error::Io { .. }));
    assert!(b.shim.calls().last().unwrap().starts_with("delete "));
    b.containers.fail_record.store(false, Ordering::Relaxed);

    // And then it is made, with its image volume.
    let id = b.create(&with_volume).unwrap();
    assert_eq!(b.containers.list_all().len(), 1);
    assert_eq!(b.images.snapshots().len(), 2, "{:?}", b.images.snapshots());
    assert_eq!(b.entries("bundles"), [id]);
    assert_eq!(b.entries("intents"), Vec::<String>::new());
}

#[test]
fn image_volumes_are_mounted_in_the_adjust_step_in_their_places() {
    let b = Bench::new();
    let host = |dest: &str| cri::Mount {
        host_path: b.dir.path().join("data").display().to_string(),
        container_path: dest.into(),
        ..Default::default()
    };
    let mut c = config("web", 0, "busybox");
    c.mounts = vec![host("/a"), image_mount(""), host("/b"), image_mount("etc")];
    c.mounts[3].container_path = "/etc-of-busybox".into();
    let id = b.create(&c).unwrap();
    let spec: oci_spec::runtime::Spec = serde_json::from_slice(
        &std::fs::read(b.dir.path().join("bundles").join(&id).join("config.json")).unwrap(),
    )
    .unwrap();
    let mounts = spec.mounts().clone().unwrap();
    let last: Vec<String> = mounts[mounts.len() - 4..]
        .iter()
        .map(|m| m.destination().display().to_string())
        .collect();
    assert_eq!(last, ["/a", "/v", "/b", "/etc-of-busybox"]);
    let vol = &mounts[mounts.len() - 3];
    assert!(
        vol.source()
            .as_ref()
            .unwrap()
            .ends_with(format!("{id}-vol1/rootfs")),
        "{vol:?}"
    );
    assert!(
        vol.options().as_ref().unwrap().iter().any(|o| o == "noexec"),
        "{vol:?}"
    );
    let sub = &mounts[mounts.len() - 1];
    assert!(
        sub.source()
            .as_ref()
            .unwrap()
            .ends_with(format!("{id}-vol3/rootfs/etc")),
        "{sub:?}"
    );
    // Without the adjust step the conversion leaves them out.
    let plain = b.containers.spec(
        &super::Request {
            id: &id,
            sandbox: &b.sandbox,
            sandbox_files: b.dir.path(),
            config: &c,
            image: &b.images.find("busybox").unwrap(),
            restore: None,
        },
        &b.images.images.dir.path().join(&id).join("rootfs"),
    );
    assert_eq!(plain.unwrap().mounts().as_ref().unwrap().len(), mounts.len() - 2);
}

/// Two sets of containers in one process, each with its own driver: their cgroups are named in its form.
#[test]
fn each_containers_names_cgroups_by_its_own_driver() {
    use crate::cgroup_driver::Driver;
    let path_of = |driver: Driver| {
        let mut b = Bench::new();
        b.containers = open(&b.dir, b.shim.clone(), b.images.clone()).with_cgroup_driver(driver);
        b.sandbox.config.linux = Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: "kubepods-pod1.slice".into(),
            ..Default::default()
        });
        let id = b.create(&config("web", 0, "busybox")).unwrap();
        let spec: serde_json::Value = serde_json::from_slice(
            &std::fs::read(b.dir.path().join("bundles").join(&id).join("config.json")).unwrap(),
        )
        .unwrap();
        (id, spec["linux"]["cgroupsPath"].as_str().unwrap().to_string())
    };
    let (id, systemd) = path_of(Driver::Systemd);
    assert_eq!(systemd, format!("kubepods-pod1.slice:crius:{id}"));
    let (id, cgroupfs) = path_of(Driver::Cgroupfs);
    assert_eq!(cgroupfs, format!("kubepods-pod1.slice/{id}"));
}
