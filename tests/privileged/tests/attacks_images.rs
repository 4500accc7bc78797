//! Hostile images against a real criusd, built here and served from the real local registry (Debian's
//! docker-registry on 127.0.0.1, filled with skopeo) or given to `crius images import`:
//! - layers holding the whiteouts `.wh.`, `.wh..` and `.wh...` (which would name the layer directory or its
//!   parent) are refused, naming the entry;
//! - a layer the registry serves larger than its descriptor's size (1 GiB where busybox's is under 1 MiB) is
//!   cut off at its size and one byte and refused naming the blob; nothing of it is stored; likewise a layer
//!   of a layout bigger than its descriptor, and a manifest of more than 4 MiB, from a layout or from a
//!   registry turned hostile (a test server on 127.0.0.1 sending 1 GiB, or zeros without end);
//! - an image whose /etc/passwd is a symlink to /dev/zero (a device the image ships) or 2 MiB, or whose
//!   /etc/group is a FIFO, gets a clear error from CreateContainer at once, instead of a criusd hanging on
//!   the read or filling its memory.
//!
//! - a 2 MB gzip layer holding a GNU long name header that says 2 GiB (the tar crate would read all of it into
//!   memory; criusd once went past 15 GiB of RSS and logged a 2 GiB line) is refused on import (as a layer of
//!   an OCI layout, and as the archive itself) and on pull, with InvalidArgument naming the layer and the
//!   64 KiB cap, nothing stored, criusd's peak RSS small and no long line in its log;
//! - `crius images import` of a file only root can read, run by an unprivileged user, fails in the CLI
//!   with EACCES: criusd, which runs as root, no longer opens a path a client names.
//!
//! After each, criusd still answers Version promptly and its RSS did not balloon.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use crius_privileged_tests::cri::{Pod, container};
use crius_test_support::image::{self, ImageSpec};
use crius_test_support::registry::{HostileRegistry, Registry};
use crius_test_support::require_root;
use serde_json::Value;
use tonic::Code;

/// A process's resident set, KiB.
fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// A `/proc/<pid>/status` figure in KiB (`VmRSS:`, `VmHWM:`).
fn status_kib(pid: u32, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect(key)
}

/// criusd answers Version within a second, and its RSS is within 64 MiB of `before` (KiB).
async fn healthy(p: &mut Pod, before: u64) {
    let t = Instant::now();
    p.c.version(cri::VersionRequest::default()).await.unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "Version took {:?}",
        t.elapsed()
    );
    let now = rss_kib(p.d.pid());
    assert!(
        now < before + 64 * 1024,
        "criusd's RSS grew from {before} KiB to {now} KiB"
    );
}

/// An image named `name` of one layer, the directory `dir`, written into the layout at `layout`.
fn one_layer(layout: &Path, name: &str, dir: &Path) -> image::ImageInfo {
    let spec = ImageSpec {
        name: name.into(),
        layers: vec![dir.into()],
        cmd: vec!["sh".into()],
        ..Default::default()
    };
    image::write_layout(layout, &[spec]).unwrap().remove(0)
}

/// `crius images import` of `path`: it must fail, promptly; its stderr.
fn import_fails(p: &Pod, path: &Path) -> String {
    let t = Instant::now();
    let out = p.d.cli(&["images", "import", &path.display().to_string()]);
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "import took {:?}",
        t.elapsed()
    );
    assert!(!out.status.success(), "import of {} succeeded", path.display());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

async fn images(p: &Pod) -> ImageServiceClient<tonic::transport::Channel> {
    let ch = crius_api::connect(&p.d.socket().display().to_string())
        .await
        .unwrap();
    ImageServiceClient::new(ch)
}

async fn pull(p: &Pod, image: &str) -> Result<String, tonic::Status> {
    let mut c = images(p).await;
    c.pull_image(cri::PullImageRequest {
        image: Some(cri::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().image_ref)
}

/// The blobs criusd's store holds.
fn stored_blobs(p: &Pod) -> Vec<String> {
    crius_privileged_tests::cri::entries(&p.d.root().join("images/blobs/sha256"))
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn whiteouts_of_no_name_dot_or_dot_dot_are_refused() {
    require_root();
    let mut p = Pod::on_host_network("whiteouts").await;
    let before = rss_kib(p.d.pid());
    let reg = Registry::start();
    let dir = tempfile::tempdir().unwrap();
    for (i, wh) in [".wh.", ".wh..", ".wh..."].into_iter().enumerate() {
        let layer = dir.path().join(format!("layer{i}"));
        std::fs::create_dir_all(&layer).unwrap();
        std::fs::write(layer.join("keep"), "x").unwrap();
        std::fs::write(layer.join(wh), "").unwrap();
        let layout = dir.path().join(format!("layout{i}"));
        one_layer(&layout, "wh:latest", &layer);
        reg.push(&layout, "wh:latest", &format!("wh{i}:latest"));

        let t = Instant::now();
        let e = pull(&p, &format!("{}/wh{i}:latest", reg.host)).await.unwrap_err();
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "pull took {:?}",
            t.elapsed()
        );
        assert_eq!(e.code(), Code::InvalidArgument, "{wh}: {e:?}");
        assert!(
            e.message().contains("unsafe layer entry") && e.message().contains(&format!("{wh:?}")),
            "{wh}: {e:?}"
        );
        let said = import_fails(&p, &layout);
        assert!(said.contains("unsafe layer entry"), "{wh}: {said}");
        eprintln!(
            "attacks_images: {wh}: pull: {}; import: {}",
            e.message(),
            said.trim()
        );
        healthy(&mut p, before).await;
    }
    assert!(
        p.d.root().join("images/layers").is_dir(),
        "the layers directory is still there"
    );
}

/// Rewrites the manifest of image `name` in the layout at `layout` with `f`; the index follows.
fn rewrite_manifest(layout: &Path, name: &str, f: impl FnOnce(&mut Value)) {
    let index_path = layout.join("index.json");
    let mut index: Value = serde_json::from_slice(&std::fs::read(&index_path).unwrap()).unwrap();
    let entry = index["manifests"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == name)
        .unwrap();
    let old = entry["digest"].as_str().unwrap().to_string();
    let mut manifest = image::json_blob(layout, &old).unwrap();
    f(&mut manifest);
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let digest = format!("sha256:{}", sha256_hex(&bytes));
    std::fs::write(
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:")),
        &bytes,
    )
    .unwrap();
    entry["digest"] = Value::from(digest);
    entry["size"] = Value::from(bytes.len());
    std::fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
}

fn sha256_hex(bytes: &[u8]) -> String {
    use std::process::{Command, Stdio};
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), bytes).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn blobs_larger_than_their_descriptors_are_cut_off() {
    require_root();
    let mut p = Pod::on_host_network("oversized").await;
    let before = rss_kib(p.d.pid());
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    // A layer of its own: busybox's alone is the one the pod's criusd already holds (layers are built
    // reproducibly), which a pull would skip rather than download.
    let rootfs = tempfile::tempdir().unwrap();
    crius_test_support::build_busybox_rootfs(rootfs.path()).unwrap();
    std::fs::write(
        rootfs.path().join("unique"),
        crius_test_support::unique("oversized"),
    )
    .unwrap();
    let spec = ImageSpec {
        name: "big:latest".into(),
        layers: vec![rootfs.path().into()],
        cmd: vec!["sh".into()],
        ..Default::default()
    };
    let bb = image::write_layout(&layout, &[spec]).unwrap().remove(0);
    let hex = bb.layers[0].trim_start_matches("sha256:").to_string();
    assert!(!stored_blobs(&p).contains(&hex), "the layer is new to criusd");
    let reg = Registry::start();
    reg.push(&layout, "big:latest", "big:latest");
    // The registry now serves 1 GiB for the layer its manifest says is under 1 MiB.
    let data = reg.blob_data(&bb.layers[0]);
    let real = std::fs::metadata(&data).unwrap().len();
    std::fs::File::create(&data).unwrap().set_len(1 << 30).unwrap();
    let t = Instant::now();
    let e = pull(&p, &format!("{}/big:latest", reg.host)).await.unwrap_err();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(20), "pull took {took:?}");
    eprintln!("attacks_images: pull, 1 GiB layer: {}", e.message());
    assert_eq!(e.code(), Code::DataLoss, "{e:?}");
    assert!(
        e.message().contains("size mismatch") && e.message().contains(&bb.layers[0]),
        "the error names the blob: {e:?}"
    );
    assert!(!stored_blobs(&p).contains(&hex), "nothing of it is stored");
    assert_eq!(
        crius_privileged_tests::cri::entries(&p.d.root().join("images/ingest")),
        Vec::<String>::new(),
        "no partial download left"
    );
    healthy(&mut p, before).await;
    eprintln!("attacks_images: a 1 GiB layer of {real} bytes described refused in {took:?}");

    // A layout's layer bigger than its descriptor says: refused on import, naming it.
    rewrite_manifest(&layout, "big:latest", |m| {
        m["layers"][0]["size"] = Value::from(real - 100);
    });
    let said = import_fails(&p, &layout);
    assert!(
        said.contains("size mismatch") && said.contains(&bb.layers[0]),
        "{said}"
    );
    eprintln!(
        "attacks_images: import, layer bigger than described: {}",
        said.trim()
    );
    assert!(!stored_blobs(&p).contains(&hex), "nothing of it is stored");
    // A manifest of more than 4 MiB: refused before it is read.
    rewrite_manifest(&layout, "big:latest", |m| {
        m["layers"][0]["size"] = Value::from(real);
        m["annotations"] = serde_json::json!({"padding": "x".repeat(5 << 20)});
    });
    let said = import_fails(&p, &layout);
    assert!(said.contains("more than the 4194304"), "{said}");
    eprintln!("attacks_images: import, 5 MiB manifest: {}", said.trim());
    healthy(&mut p, before).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn a_registry_serving_a_huge_manifest_is_cut_off_at_4_mib() {
    require_root();
    let mut p = Pod::on_host_network("manifests").await;
    let before = rss_kib(p.d.pid());
    let reg = HostileRegistry::start();
    for repo in ["sized", "endless"] {
        let t = Instant::now();
        let e = pull(&p, &format!("{}/{repo}:latest", reg.host))
            .await
            .unwrap_err();
        let took = t.elapsed();
        // Whatever the socket buffers took before criusd hung up.
        let sent = reg.sent.swap(0, std::sync::atomic::Ordering::Relaxed);
        eprintln!(
            "attacks_images: pull, {repo} manifest: {} ({took:?}, {sent} bytes sent)",
            e.message()
        );
        assert!(took < Duration::from_secs(20), "pull took {took:?}");
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("more than the 4194304"), "{e:?}");
        assert!(sent < 64 << 20, "criusd read on: {sent} bytes sent");
        healthy(&mut p, before).await;
    }
}

/// A busybox rootfs at `dir`, with `etc` made and `etc/passwd`, `etc/group` removed.
fn busybox_rootfs(dir: &Path) -> PathBuf {
    crius_test_support::build_busybox_rootfs(dir).unwrap();
    std::fs::create_dir_all(dir.join("etc")).unwrap();
    for f in ["etc/passwd", "etc/group"] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    dir.to_path_buf()
}

/// CreateContainer of `image` (container named as the image) run as `user` (`run_as_username`): refused at
/// once (within 10 s) with InvalidArgument, its message holding each of `says`; criusd stays healthy.
async fn refused_as(p: &mut Pod, before: u64, image: &str, user: &str, says: &[&str]) {
    let name = image.split(':').next().unwrap();
    let mut c = container(name, image, "id");
    c.linux = Some(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            run_as_username: user.into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    let t = Instant::now();
    let e = p.create(c).await.unwrap_err();
    eprintln!(
        "attacks_images: {image} as {user}: {} ({:?})",
        e.message(),
        t.elapsed()
    );
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "CreateContainer took {:?}",
        t.elapsed()
    );
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(says.iter().all(|w| e.message().contains(w)), "{e:?}");
    healthy(p, before).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn passwd_a_device_and_group_a_fifo_are_refused_at_once() {
    require_root();
    let mut p = Pod::on_host_network("passwd").await;
    let before = rss_kib(p.d.pid());
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");

    // /etc/passwd -> /dev/zero, and the image ships /dev/zero (1:5): inside the rootfs, it is a device.
    let zero = busybox_rootfs(&dir.path().join("zero"));
    std::fs::create_dir_all(zero.join("dev")).unwrap();
    nix::sys::stat::mknod(
        &zero.join("dev/zero"),
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o666),
        nix::sys::stat::makedev(1, 5),
    )
    .unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero.join("etc/passwd")).unwrap();
    one_layer(&layout, "zero:latest", &zero);
    // /etc/group a FIFO (nobody writes to it).
    let fifo = busybox_rootfs(&dir.path().join("fifo"));
    std::fs::write(fifo.join("etc/passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
    nix::unistd::mkfifo(
        &fifo.join("etc/group"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    one_layer(&layout, "fifo:latest", &fifo);
    // /etc/passwd of 2 MiB, over the 1 MiB read.
    let huge = busybox_rootfs(&dir.path().join("huge"));
    let line = "app:x:1000:1000::/home/app:/bin/sh\n";
    std::fs::write(huge.join("etc/passwd"), line.repeat((2 << 20) / line.len() + 1)).unwrap();
    one_layer(&layout, "huge:latest", &huge);
    p.d.cli_ok(&["images", "import", &layout.display().to_string()]);

    refused_as(
        &mut p,
        before,
        "zero:latest",
        "app",
        &["/etc/passwd", "not a regular file"],
    )
    .await;
    refused_as(&mut p, before, "fifo:latest", "root", &["/etc/group", "FIFO"]).await;
    refused_as(
        &mut p,
        before,
        "huge:latest",
        "app",
        &["/etc/passwd", "more than the 1048576"],
    )
    .await;
    // The failed creates left no container behind.
    let left =
        p.c.list_containers(cri::ListContainersRequest::default())
            .await
            .unwrap()
            .into_inner()
            .containers;
    assert!(left.is_empty(), "{left:?}");
}

/// Writes the bomb at `path`: the gzip stream of a tar whose first header is a GNU long name (`L`) saying
/// 2 GiB, its 2 GiB of zeros, and the end blocks, compressed by `gzip -9` as it is written (2.1 MB, and
/// nothing of 2 GiB on disk or in memory). Returns its sha256 digest and size.
fn write_bomb(path: &Path) -> (String, u64) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut h = tar::Header::new_gnu();
    h.as_old_mut().name[..13].copy_from_slice(b"././@LongLink");
    h.set_entry_type(tar::EntryType::GNULongName);
    h.set_size(2 << 30);
    h.set_mode(0o644);
    h.set_cksum();
    let mut gz = Command::new("gzip")
        .arg("-9")
        .stdin(Stdio::piped())
        .stdout(std::fs::File::create(path).unwrap())
        .spawn()
        .expect("gzip");
    let mut w = gz.stdin.take().unwrap();
    w.write_all(h.as_bytes()).unwrap();
    std::io::copy(
        &mut std::io::Read::take(std::io::repeat(0), (2 << 30) + 1024),
        &mut w,
    )
    .unwrap();
    drop(w);
    assert!(gz.wait().unwrap().success());
    let bytes = std::fs::read(path).unwrap();
    (format!("sha256:{}", sha256_hex(&bytes)), bytes.len() as u64)
}

/// criusd's log has no line longer than 4 KiB.
fn no_long_log_line(p: &Pod) {
    let log = p.d.log();
    let longest = log.lines().map(str::len).max().unwrap_or(0);
    assert!(longest < 4096, "criusd logged a line of {longest} bytes");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo, gzip: run through hack/test.sh"]
async fn a_gnu_long_name_header_of_2_gib_is_refused_on_import_and_pull() {
    require_root();
    let mut p = Pod::on_host_network("tarbomb").await;
    let before = rss_kib(p.d.pid());
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let small = dir.path().join("small");
    std::fs::create_dir_all(&small).unwrap();
    std::fs::write(small.join("f"), crius_test_support::unique("tarbomb")).unwrap();
    one_layer(&layout, "bomb:latest", &small);
    let t = Instant::now();
    let bomb = dir.path().join("bomb.tar.gz");
    let (digest, size) = write_bomb(&bomb);
    eprintln!(
        "attacks_images: the bomb: {size} bytes of gzip, made in {:?}",
        t.elapsed()
    );
    assert!(size < 4 << 20, "{size}");
    let hex = digest.trim_start_matches("sha256:").to_string();
    std::fs::copy(&bomb, layout.join("blobs/sha256").join(&hex)).unwrap();
    rewrite_manifest(&layout, "bomb:latest", |m| {
        m["layers"][0]["digest"] = Value::from(digest.clone());
        m["layers"][0]["size"] = Value::from(size);
        m["layers"][0]["mediaType"] = Value::from("application/vnd.oci.image.layer.v1.tar+gzip");
    });
    let blobs_before = stored_blobs(&p);
    let images_before = p.d.cli_ok(&["images", "ls", "-q"]);
    let layers_before = crius_privileged_tests::cri::entries(&p.d.root().join("images/layers"));
    let cap = "a GNU long name header of 2147483648 bytes, more than the 65536 one may have";
    let nothing_stored = |p: &Pod| {
        assert_eq!(stored_blobs(p), blobs_before, "nothing is stored");
        assert_eq!(
            crius_privileged_tests::cri::entries(&p.d.root().join("images/layers")),
            layers_before
        );
        assert_eq!(
            crius_privileged_tests::cri::entries(&p.d.root().join("images/ingest")),
            Vec::<String>::new()
        );
        assert_eq!(p.d.cli_ok(&["images", "ls", "-q"]), images_before);
    };

    // The layout, streamed by the CLI: the layer is refused, named.
    let said = import_fails(&p, &layout);
    eprintln!("attacks_images: import of the bomb layer: {}", said.trim());
    assert!(
        said.contains("InvalidArgument") && said.contains(&format!("layer {digest} refused: {cap}")),
        "{said}"
    );
    nothing_stored(&p);
    // The bomb as the archive itself.
    let said = import_fails(&p, &bomb);
    eprintln!(
        "attacks_images: import of the bomb as an archive: {}",
        said.trim()
    );
    assert!(
        said.contains("InvalidArgument")
            && said.contains(&format!("archive \"{}\" refused: {cap}", bomb.display())),
        "{said}"
    );
    nothing_stored(&p);

    // Pulled from the registry.
    let reg = Registry::start();
    reg.push(&layout, "bomb:latest", "bomb:latest");
    let t = Instant::now();
    let e = pull(&p, &format!("{}/bomb:latest", reg.host)).await.unwrap_err();
    eprintln!(
        "attacks_images: pull of the bomb layer: {} ({:?})",
        e.message(),
        t.elapsed()
    );
    assert!(
        t.elapsed() < Duration::from_secs(20),
        "pull took {:?}",
        t.elapsed()
    );
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains(&format!("layer {digest} refused: {cap}")),
        "{e:?}"
    );
    nothing_stored(&p);

    let (hwm, rss) = (status_kib(p.d.pid(), "VmHWM:"), rss_kib(p.d.pid()));
    eprintln!("attacks_images: criusd after the bombs: VmHWM {hwm} KiB, VmRSS {rss} KiB (at start {before})");
    assert!(
        hwm < before + 128 * 1024,
        "criusd's peak RSS went from {before} KiB to {hwm} KiB"
    );
    no_long_log_line(&p);
    healthy(&mut p, before).await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root: run through hack/test.sh"]
async fn import_reads_the_archive_with_the_callers_rights() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    require_root();
    let p = Pod::on_host_network("import-rights").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let layout = dir.path().join("layout");
    let small = dir.path().join("small");
    std::fs::create_dir_all(&small).unwrap();
    std::fs::write(small.join("f"), "secret").unwrap();
    one_layer(&layout, "secret:latest", &small);
    let archive = dir.path().join("secret.tar");
    image::write_archive(&layout, &archive).unwrap();
    std::fs::set_permissions(&archive, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The socket is root's (0660): let the user in to criusd, as a node's admin group would be.
    std::fs::set_permissions(p.d.socket(), std::fs::Permissions::from_mode(0o666)).unwrap();
    let images_before = p.d.cli_ok(&["images", "ls", "-q"]);
    let nobody = 65534;
    let out = std::process::Command::new(crius_test_support::daemon::built_binary("crius"))
        .env("CRIUS_ADDRESS", p.d.socket())
        .args(["images", "import", &archive.display().to_string()])
        .uid(nobody)
        .gid(nobody)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    eprintln!(
        "attacks_images: import of a root-only file by uid {nobody}: {}",
        said.trim()
    );
    assert!(!out.status.success(), "imported a file its caller cannot read");
    assert!(said.contains("Permission denied"), "{said}");
    assert_eq!(p.d.cli_ok(&["images", "ls", "-q"]), images_before);
    // The same file, by root, imports.
    let out = p.d.cli_ok(&["images", "import", &archive.display().to_string()]);
    assert!(out.contains("secret:latest"), "{out}");
}
