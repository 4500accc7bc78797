//! The image store on a real filesystem: OCI archive import, layers unpacked once, whiteouts and opaque
//! directories through a real overlay mount, hard links, setuid and device nodes kept, malicious tars refused
//! without writing outside, digest mismatches storing nothing, and a container run over the snapshot.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crius_image::{Error, Store, import, unpack};
use crius_test_support::{Bundle, Runtime, image, require_root, testprog_binary, unique};

fn write(p: &Path, text: &str) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// A layout in `dir` holding busybox (`busybox:latest`) and the test program (`crius-testprog:latest`), and
/// an empty store beside it: the layout's path, busybox's image, the store.
fn two_images(dir: &Path) -> (PathBuf, image::ImageInfo, Store) {
    let layout = dir.join("layout");
    let bb = image::busybox(&layout, "busybox:latest").unwrap();
    image::testprog(&layout, "crius-testprog:latest", &testprog_binary()).unwrap();
    let store = Store::open(&dir.join("store")).unwrap();
    (layout, bb, store)
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn import_an_oci_archive_and_run_a_container_over_its_snapshot() {
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    let (layout, bb, store) = two_images(dir.path());
    let archive = dir.path().join("images.tar");
    image::write_archive(&layout, &archive).unwrap();

    let recs = import::import_archive(&store, &archive).unwrap();
    assert_eq!(recs.len(), 2);
    let rec = store.find("busybox:latest").unwrap();
    assert_eq!(rec.id.as_str(), bb.config);
    assert_eq!(store.find(&bb.config).unwrap(), rec);
    let blob_len = |d: &crius_image::Digest| std::fs::metadata(store.blob_path(d)).unwrap().len();
    assert_eq!(
        rec.size,
        blob_len(&rec.id) + rec.layer_blobs.iter().map(blob_len).sum::<u64>(),
        "size = config + layers"
    );
    assert_eq!(store.find(&format!("busybox@{}", bb.manifest)).unwrap(), rec);

    // Importing again unpacks nothing: the layer directory is the same inode.
    let layer = store.layer_dir(&rec.diff_ids[0]);
    let ino = std::fs::metadata(&layer).unwrap().ino();
    import::import_archive(&store, &archive).unwrap();
    assert_eq!(std::fs::metadata(&layer).unwrap().ino(), ino);

    let id = unique("snap");
    let rootfs = store.prepare_snapshot(&id, &rec).unwrap();
    let mut b = Bundle::new(&["sh", "-c", "echo written > /root/file; cat /root/file"]);
    b.config["root"] = serde_json::json!({"path": rootfs, "readonly": false});
    let bundle = b.write().to_str().unwrap().to_string();
    let out = rt.run(&["run", "--bundle", &bundle, &unique("over")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "written\n");
    // The write went to the snapshot's upper dir, not to the shared layer.
    assert!(!layer.join("root/file").exists());
    store.remove_snapshot(&id).unwrap();
    assert!(!rootfs.exists());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!mounts.contains(&id), "snapshot still mounted");

    let removed = store
        .remove_image(&bb.manifest.replace("sha256:", "busybox@sha256:"))
        .unwrap();
    assert_eq!(removed.id, rec.id);
    assert!(matches!(store.find("busybox:latest"), Err(Error::NotFound(_))));
}

/// Bytes and inodes under the store's content directories, hard links once: what ImageFsInfo reports.
fn du(store: &Store) -> (u64, u64) {
    fn walk(p: &Path, seen: &mut std::collections::HashSet<u64>, out: &mut (u64, u64)) {
        let md = std::fs::symlink_metadata(p).unwrap();
        if seen.insert(md.ino()) {
            *out = (out.0 + md.blocks() * 512, out.1 + 1);
        }
        if md.is_dir() {
            for e in std::fs::read_dir(p).unwrap() {
                walk(&e.unwrap().path(), seen, out);
            }
        }
    }
    let (mut seen, mut out) = (Default::default(), (0, 0));
    for d in ["blobs", "layers", "images"] {
        walk(&store.root().join(d), &mut seen, &mut out);
    }
    out
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn image_usage_walks_each_layer_once_and_follows_imports_and_removals() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (layout, _, store) = two_images(dir.path());
    let usage = |s: &Store| {
        let u = s.usage();
        (u.bytes, u.inodes)
    };
    let empty = usage(&store);
    assert_eq!(empty, du(&store));
    import::import_layout(&store, &layout).unwrap();
    let full = usage(&store);
    assert_eq!(full, du(&store));
    assert!(full.0 > empty.0 + 1_000_000, "busybox's binary counted: {full:?}");

    // A placed layer is not walked again: a file slipped into one (nothing does that) goes uncounted by this
    // store, while a store opened afresh walks it.
    let bb = store.find("busybox").unwrap();
    write(&store.layer_dir(&bb.diff_ids[0]).join("extra"), "x");
    assert_eq!(usage(&store), full);
    assert_eq!(usage(&Store::open(store.root()).unwrap()), du(&store));
    std::fs::remove_file(store.layer_dir(&bb.diff_ids[0]).join("extra")).unwrap();

    // Removals and imports show at once.
    store.remove_image("busybox").unwrap();
    let less = usage(&store);
    assert_eq!(less, du(&store));
    assert!(
        less.0 + 1_000_000 < full.0,
        "busybox's layer gone: {less:?} of {full:?}"
    );
    import::import_layout(&store, &layout).unwrap();
    assert_eq!(usage(&store), du(&store));
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn removing_an_image_collects_what_nothing_else_uses() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (layout, _, store) = two_images(dir.path());
    import::import_layout(&store, &layout).unwrap();
    let count = |d: &str| std::fs::read_dir(store.root().join(d)).unwrap().count();
    assert_eq!((count("blobs/sha256"), count("layers")), (6, 2));
    let bb = store.find("busybox").unwrap();

    // A container's snapshot keeps its layer while the image goes.
    let id = unique("gc");
    store.prepare_snapshot(&id, &bb).unwrap();
    store.remove_image("busybox").unwrap();
    assert_eq!(
        (count("blobs/sha256"), count("layers")),
        (3, 2),
        "busybox's blobs gone, its layer kept"
    );
    assert!(store.layer_dir(&bb.diff_ids[0]).join("bin/busybox").exists());
    store.remove_snapshot(&id).unwrap();
    assert_eq!(store.collect_garbage().unwrap().layers, 1);
    assert_eq!((count("blobs/sha256"), count("layers")), (3, 1));
    store.remove_image("crius-testprog:latest").unwrap();
    assert_eq!((count("blobs/sha256"), count("layers")), (0, 0));

    // Removals of one image at the same moment (critest does that): each finds it gone or removes it; none
    // fails on what another removed. The race is narrow: several rounds.
    for round in 0..10 {
        import::import_layout(&store, &layout).unwrap();
        let start = std::sync::Arc::new(std::sync::Barrier::new(8));
        let results: Vec<_> = (0..8)
            .map(|_| {
                let (store, start) = (store.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    store.remove_image("busybox")
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(results.iter().any(|r| r.is_ok()), "round {round}");
        for r in &results {
            assert!(
                matches!(r, Ok(_) | Err(Error::NotFound(_))),
                "round {round}: {r:?}"
            );
        }
        assert!(store.find("busybox").is_err());
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn whiteouts_opaque_dirs_hard_links_setuid_and_devices() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let (lower, upper) = (dir.path().join("lower"), dir.path().join("upper"));
    write(&lower.join("a/keep"), "k");
    write(&lower.join("a/gone"), "g");
    write(&lower.join("d/old1"), "1");
    write(&lower.join("d/old2"), "2");
    write(&lower.join("bin/su"), "suid");
    std::fs::set_permissions(lower.join("bin/su"), std::fs::Permissions::from_mode(0o4755)).unwrap();
    write(&lower.join("f1"), "same");
    std::fs::hard_link(lower.join("f1"), lower.join("f2")).unwrap();
    std::fs::create_dir_all(lower.join("dev")).unwrap();
    nix::sys::stat::mknod(
        &lower.join("dev/null"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    write(&upper.join("a/.wh.gone"), "");
    write(&upper.join("d/.wh..wh..opq"), "");
    write(&upper.join("d/new"), "n");

    let layout = dir.path().join("layout");
    let spec = image::ImageSpec {
        name: "layers:1".into(),
        layers: vec![lower, upper],
        ..Default::default()
    };
    image::write_layout(&layout, &[spec]).unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let rec = import::import_layout(&store, &layout).unwrap().remove(0);

    let base = store.layer_dir(&rec.diff_ids[0]);
    let su = std::fs::metadata(base.join("bin/su")).unwrap();
    assert_eq!(su.mode() & 0o7777, 0o4755, "setuid survives");
    let (f1, f2) = (
        std::fs::metadata(base.join("f1")).unwrap(),
        std::fs::metadata(base.join("f2")).unwrap(),
    );
    assert_eq!(f1.ino(), f2.ino(), "hard link survives");
    let null = std::fs::metadata(base.join("dev/null")).unwrap();
    assert_eq!(
        (
            nix::sys::stat::major(null.rdev()),
            nix::sys::stat::minor(null.rdev())
        ),
        (1, 3)
    );

    let id = unique("wh");
    let root = store.prepare_snapshot(&id, &rec).unwrap();
    let ls = |d: &str| {
        let mut v: Vec<String> = std::fs::read_dir(root.join(d))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    assert_eq!(ls("a"), ["keep"], "the whiteout deletes a/gone");
    assert_eq!(ls("d"), ["new"], "the opaque dir hides d/old*");
    store.remove_snapshot(&id).unwrap();
}

/// A tar entry written byte by byte, so that paths the tar crate would refuse can be made.
fn raw_entry(out: &mut Vec<u8>, path: &str, kind: tar::EntryType, link: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..path.len()].copy_from_slice(path.as_bytes());
    h.as_old_mut().linkname[..link.len()].copy_from_slice(link.as_bytes());
    h.set_entry_type(kind);
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    h.set_cksum();
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn malicious_tars_write_nothing_outside_the_layer() {
    require_root();
    let sandbox = tempfile::tempdir().unwrap();
    let outside = sandbox.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("dot-dot", {
            let mut t = Vec::new();
            raw_entry(&mut t, "../outside/evil", tar::EntryType::Regular, "", b"x");
            t
        }),
        ("symlink then write through it", {
            let mut t = Vec::new();
            raw_entry(
                &mut t,
                "link",
                tar::EntryType::Symlink,
                outside.to_str().unwrap(),
                b"",
            );
            raw_entry(&mut t, "link/evil", tar::EntryType::Regular, "", b"x");
            t
        }),
        ("hard link out", {
            let mut t = Vec::new();
            raw_entry(&mut t, "hl", tar::EntryType::Link, "../../../../etc/passwd", b"");
            t
        }),
    ];
    for (name, mut tar_bytes) in cases {
        tar_bytes.extend_from_slice(&[0u8; 1024]);
        let layer = sandbox.path().join(format!("layer-{}", name.replace(' ', "-")));
        std::fs::create_dir(&layer).unwrap();
        let err = unpack::unpack(&tar_bytes[..], &layer).unwrap_err();
        assert!(matches!(err, Error::UnsafeEntry { .. }), "{name}: {err}");
        assert_eq!(
            std::fs::read_dir(&outside).unwrap().count(),
            0,
            "{name} wrote outside"
        );
    }
    // An absolute path is taken relative to the layer.
    let mut t = Vec::new();
    raw_entry(&mut t, "/abs/file", tar::EntryType::Regular, "", b"x");
    t.extend_from_slice(&[0u8; 1024]);
    let layer = sandbox.path().join("layer-abs");
    std::fs::create_dir(&layer).unwrap();
    unpack::unpack(&t[..], &layer).unwrap();
    assert!(layer.join("abs/file").exists());
    assert!(!Path::new("/abs/file").exists());
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_blob_that_does_not_match_its_digest_stores_nothing() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let info = image::busybox(&layout, "busybox:latest").unwrap();
    let blob = layout
        .join("blobs/sha256")
        .join(info.layers[0].trim_start_matches("sha256:"));
    let mut bytes = std::fs::read(&blob).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&blob, bytes).unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    let err = import::import_layout(&store, &layout).unwrap_err();
    assert!(matches!(err, Error::DigestMismatch { .. }), "{err}");
    assert!(
        err.to_string().contains(&info.layers[0]),
        "the error names the blob: {err}"
    );
    assert!(store.images().unwrap().is_empty());
    assert!(!store.has_blob(&crius_image::Digest::parse(&info.layers[0]).unwrap()));
    assert_eq!(
        std::fs::read_dir(dir.path().join("store/layers"))
            .unwrap()
            .count(),
        0
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn zstd_layers_unpack_like_gzip_ones() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    write(&src.join("etc/motd"), "zstd layer\n");
    let layout = dir.path().join("layout");
    let spec = image::ImageSpec {
        name: "z:1".into(),
        layers: vec![src],
        zstd: true,
        ..Default::default()
    };
    let info = image::write_layout(&layout, &[spec]).unwrap().remove(0);
    let manifest = image::json_blob(&layout, &info.manifest).unwrap();
    assert_eq!(
        manifest["layers"][0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+zstd"
    );
    let store = Store::open(&dir.path().join("store")).unwrap();
    let rec = import::import_layout(&store, &layout).unwrap().remove(0);
    let motd = std::fs::read_to_string(store.layer_dir(&rec.diff_ids[0]).join("etc/motd")).unwrap();
    assert_eq!(motd, "zstd layer\n");
}

#[test]
#[ignore = "needs root, skopeo: run through hack/test.sh"]
fn docker_archives_import_with_their_tags() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let bb = image::busybox(&layout, "busybox:latest").unwrap();
    let archive = dir.path().join("docker.tar");
    let out = std::process::Command::new(crius_test_support::which("skopeo"))
        .args(["copy", "--quiet"])
        .arg(format!("oci:{}:busybox:latest", layout.display()))
        .arg(format!(
            "docker-archive:{}:example.test/busybox:v1",
            archive.display()
        ))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let store = Store::open(&dir.path().join("store")).unwrap();
    let recs = import::import_docker_archive(&store, &archive).unwrap();
    assert_eq!(recs.len(), 1);
    let rec = store.find("example.test/busybox:v1").unwrap();
    assert_eq!(rec.diff_ids.len(), 1);
    assert!(store.layer_dir(&rec.diff_ids[0]).join("bin/busybox").exists());
    // The config travels unchanged, so the image id is the same as from the OCI layout.
    assert_eq!(rec.id.as_str(), bb.config);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_rootfs_stands_on_its_images_mount_points_which_go_with_the_image() {
    let rt = Runtime::from_env();
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    image::busybox(&layout, "busybox:latest").unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    import::import_layout(&store, &layout).unwrap();
    let bb = store.find("busybox").unwrap();
    assert!(
        !store.layer_dir(&bb.diff_ids[0]).join("etc/hostname").exists(),
        "the image has no /etc/hostname of its own"
    );
    let points = store.root().join("mountpoints");
    let count = || std::fs::read_dir(&points).map(|d| d.count()).unwrap_or(0);

    // Two containers' rootfs share one mount-point layer, made once; an image volume's snapshot has none.
    let (a, b, vol) = (unique("mp"), unique("mp"), unique("mpvol"));
    let root_a = store.prepare_rootfs(&a, &bb).unwrap();
    let made = std::fs::read_dir(&points)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let ino = std::fs::metadata(&made).unwrap().ino();
    let root_b = store.prepare_rootfs(&b, &bb).unwrap();
    assert_eq!((count(), std::fs::metadata(&made).unwrap().ino()), (1, ino));
    for f in ["etc/hostname", "etc/hosts", "etc/resolv.conf"] {
        let m = std::fs::symlink_metadata(root_b.join(f)).unwrap();
        assert!(m.is_file() && m.len() == 0, "{f}: an empty file to mount over");
    }
    let image_etc = std::fs::metadata(store.layer_dir(&bb.diff_ids[0]).join("etc")).unwrap();
    let etc = std::fs::metadata(root_a.join("etc")).unwrap();
    assert_eq!(
        (etc.mode(), etc.uid(), etc.gid()),
        (image_etc.mode(), image_etc.uid(), image_etc.gid()),
        "/etc keeps the image's mode and owner"
    );
    assert!(
        root_a.join("etc/passwd").exists(),
        "the image's /etc shows through"
    );
    let root_vol = store.prepare_snapshot(&vol, &bb).unwrap();
    assert!(
        !root_vol.join("etc/hostname").exists(),
        "an image volume is the image alone"
    );

    // A container that binds a file over /etc/hostname writes nothing to its upper directory for it.
    let host_file = dir.path().join("hostname");
    write(&host_file, "pod-a\n");
    let mut bundle = Bundle::new(&["cat", "/etc/hostname"]);
    bundle.config["root"] = serde_json::json!({"path": root_a, "readonly": false});
    bundle.config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "destination": "/etc/hostname", "type": "bind", "source": host_file, "options": ["rbind", "ro"]
        }));
    let path = bundle.write().to_str().unwrap().to_string();
    let out = rt.run(&["run", "--bundle", &path, &unique("mp")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pod-a\n");
    let upper = store.root().join("snapshots").join(&a).join("upper");
    assert!(!upper.join("etc").exists(), "no copy-up of /etc");

    // The layer outlives the image while a snapshot stands on it, and goes with the last of them.
    store.remove_image("busybox").unwrap();
    assert_eq!(count(), 1);
    for id in [&a, &b, &vol] {
        store.remove_snapshot(id).unwrap();
    }
    assert_eq!(store.collect_garbage().unwrap().mount_points, 1);
    assert_eq!(count(), 0);
}
