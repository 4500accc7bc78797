//! criusd end to end: its config file, flags and socket; the CRI ImageService over a real registry (pull, status
//! by every kind of reference, list, remove, image fs info, credentials); and the `crius images` CLI.

use std::os::unix::fs::PermissionsExt;
use std::process::Command;

use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use crius_test_support::daemon::{Daemon, built_binary};
use crius_test_support::registry::Registry;
use crius_test_support::{image, require_root, testprog_binary};
use tonic::Code;

type Client = ImageServiceClient<tonic::transport::Channel>;

async fn client(d: &Daemon) -> Client {
    let ch = crius_api::connect(&d.socket().display().to_string())
        .await
        .unwrap();
    ImageServiceClient::new(ch)
}

fn spec(image: &str) -> Option<cri::ImageSpec> {
    Some(cri::ImageSpec {
        image: image.into(),
        ..Default::default()
    })
}

async fn pull(c: &mut Client, image: &str, auth: Option<cri::AuthConfig>) -> Result<String, tonic::Status> {
    c.pull_image(cri::PullImageRequest {
        image: spec(image),
        auth,
        sandbox_config: None,
    })
    .await
    .map(|r| r.into_inner().image_ref)
}

async fn status(c: &mut Client, image: &str) -> Option<cri::Image> {
    c.image_status(cri::ImageStatusRequest {
        image: spec(image),
        verbose: false,
    })
    .await
    .unwrap()
    .into_inner()
    .image
}

async fn remove(c: &mut Client, image: &str) {
    c.remove_image(cri::RemoveImageRequest { image: spec(image) })
        .await
        .unwrap();
}

async fn fs_info(c: &mut Client) -> cri::FilesystemUsage {
    c.image_fs_info(cri::ImageFsInfoRequest {})
        .await
        .unwrap()
        .into_inner()
        .image_filesystems
        .remove(0)
}

fn count(dir: std::path::PathBuf) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// The test images' layout, and their digests.
struct Images {
    layout: std::path::PathBuf,
    bb: image::ImageInfo,
    tp: image::ImageInfo,
}

fn images() -> Images {
    require_root();
    let layout = image::test_images_layout(&testprog_binary());
    Images {
        bb: image::info(&layout, "busybox:latest").unwrap(),
        tp: image::info(&layout, "crius-testprog:latest").unwrap(),
        layout,
    }
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn print_config_shows_the_files_keys_under_the_flags_and_names_what_is_wrong() {
    require_root();
    let criusd = built_binary("criusd");
    // --print-config: the file's keys with flags on top; a missing --config file and unknown keys are named.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.toml");
    std::fs::write(
        &cfg,
        "log_level = \"debug\"\n[image]\ninsecure_registries = [\"reg.test:5000\"]\n",
    )
    .unwrap();
    let out = Command::new(&criusd)
        .arg("--config")
        .arg(&cfg)
        .args([
            "--print-config",
            "--root",
            "/srv/crius",
            "--registry-mirror",
            "docker.io=http://127.0.0.1:1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for want in [
        "root = \"/srv/crius\"",
        "log_level = \"debug\"",
        "insecure_registries = [\"reg.test:5000\"]",
        "\"docker.io\" = \"http://127.0.0.1:1\"",
        "# default: \"/run/crius/crius.sock\"",
        "listen_mode = 0o660",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    std::fs::write(&cfg, &*text).unwrap();
    let again = Command::new(&criusd)
        .arg("--config")
        .arg(&cfg)
        .arg("--print-config")
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        text,
        "the printed config is a config file"
    );
    let missing = Command::new(&criusd)
        .args(["--config", "/nonexistent/crius.toml", "--print-config"])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("/nonexistent/crius.toml"));
    std::fs::write(&cfg, "roots = \"/x\"\n").unwrap();
    let bad = Command::new(&criusd)
        .arg("--config")
        .arg(&cfg)
        .arg("--print-config")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("roots"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    let bad = Command::new(&criusd)
        .args(["--print-config", "--registry-mirror", "nohost"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("HOST=MIRROR"));
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn the_socket_is_0660_and_a_second_daemon_on_its_state_or_socket_is_refused() {
    let criusd = built_binary("criusd");
    // The socket is 0660; a second daemon on the same state dir, or on a live socket, is refused.
    let d = Daemon::start(&[]);
    let mode = std::fs::metadata(d.socket()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    let second = Command::new(&criusd)
        .arg("--state")
        .arg(d.state())
        .arg("--root")
        .arg(d.root())
        .arg("--listen")
        .arg(d.dir().join("other.sock"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(!second.status.success());
    assert!(
        err.contains("another criusd") && err.contains(&d.pid().to_string()),
        "{err}"
    );
    let other_state = d.dir().join("other-state");
    let third = Command::new(&criusd)
        .arg("--state")
        .arg(&other_state)
        .arg("--root")
        .arg(d.root())
        .arg("--listen")
        .arg(d.socket())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&third.stderr);
    assert!(!third.status.success() && err.contains("in use"), "{err}");
    assert!(
        d.cli(&["images", "ls"]).status.success(),
        "the first daemon still serves"
    );
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn sigterm_removes_the_socket_and_a_stale_one_is_replaced_at_start() {
    let mut d = Daemon::start(&[]);
    // SIGTERM: exit 0, socket removed; the CLI then names the socket it could not reach.
    let st = d.stop().unwrap();
    assert!(st.success(), "criusd exited with {st}: {}", d.log());
    assert!(!d.socket().exists(), "socket removed on shutdown");
    assert!(d.log().contains("shutting down"), "{}", d.log());
    let out = d.cli(&["images", "ls"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains(&d.socket().display().to_string()),
        "{err}"
    );
    // A stale socket file left by a crash is replaced.
    std::os::unix::net::UnixListener::bind(d.socket())
        .map(drop)
        .unwrap();
    d.restart(&[]);
    assert!(d.cli(&["images", "ls"]).status.success());
}

/// criusd pulling docker.io through a registry holding busybox and the test program, with both pulled, and
/// ImageFsInfo of the empty store before. A case destructuring it binds `d` and `_reg`, which must live as long.
struct Pulled {
    c: Client,
    d: Daemon,
    mirror: String,
    local_bb: String,
    tp_name: String,
    empty: cri::FilesystemUsage,
    _reg: Registry,
    imgs: Images,
}

async fn pulled() -> Pulled {
    let imgs = images();
    let reg = Registry::start();
    reg.push(&imgs.layout, "busybox:latest", "library/busybox:latest");
    reg.push(&imgs.layout, "crius-testprog:latest", "tools/testprog:v1");
    let mirror = format!("docker.io={}", reg.host);
    let d = Daemon::start(&["--registry-mirror", &mirror]);
    let mut c = client(&d).await;
    let empty = fs_info(&mut c).await;

    // A short name goes through the docker.io mirror; the image id is the config digest.
    assert_eq!(pull(&mut c, "busybox", None).await.unwrap(), imgs.bb.config);
    let local_bb = format!("{}/library/busybox:latest", reg.host);
    assert_eq!(pull(&mut c, &local_bb, None).await.unwrap(), imgs.bb.config);
    let tp_name = format!("{}/tools/testprog:v1", reg.host);
    assert_eq!(pull(&mut c, &tp_name, None).await.unwrap(), imgs.tp.config);
    Pulled {
        c,
        d,
        mirror,
        local_bb,
        tp_name,
        empty,
        _reg: reg,
        imgs,
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn cri_pulls_through_the_mirror_and_every_kind_of_reference_finds_the_image() {
    let Pulled {
        mut c,
        d: _d,
        local_bb,
        tp_name,
        imgs,
        _reg,
        ..
    } = pulled().await;
    // One image with two names; every kind of reference finds it.
    let list = c
        .list_images(cri::ListImagesRequest { filter: None })
        .await
        .unwrap()
        .into_inner()
        .images;
    assert_eq!(list.len(), 2, "{list:?}");
    let bb = status(&mut c, &imgs.bb.config).await.expect("by id");
    let mut tags = bb.repo_tags.clone();
    tags.sort();
    assert_eq!(
        tags,
        vec![local_bb.clone(), "docker.io/library/busybox:latest".to_string()]
    );
    assert!(
        bb.repo_digests
            .contains(&format!("docker.io/library/busybox@{}", imgs.bb.manifest)),
        "{bb:?}"
    );
    assert!(bb.size > 0 && bb.uid.is_none() && bb.username.is_empty() && !bb.pinned);
    let hex = imgs.bb.config.trim_start_matches("sha256:");
    for r in [
        hex.to_string(),
        hex[..12].to_string(),
        "busybox".to_string(),
        "busybox:latest".to_string(),
        "docker.io/library/busybox:latest".to_string(),
        local_bb.clone(),
        format!("docker.io/library/busybox@{}", imgs.bb.manifest),
        format!("busybox@{}", imgs.bb.manifest),
    ] {
        assert_eq!(
            status(&mut c, &r).await.as_ref().map(|i| &i.id),
            Some(&bb.id),
            "ImageStatus({r})"
        );
    }
    // The test program's image runs as uid 1000.
    let tp = status(&mut c, &tp_name).await.unwrap();
    assert_eq!(tp.uid.map(|u| u.value), Some(1000));
    // Verbose: the image config.
    let verbose = c
        .image_status(cri::ImageStatusRequest {
            image: spec("busybox"),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    let info: serde_json::Value = serde_json::from_str(&verbose.info["info"]).unwrap();
    assert_eq!(info["imageSpec"]["config"]["Cmd"][0], "sh");
    assert_eq!(info["manifestDigest"], imgs.bb.manifest.as_str());
    // Unknown: an empty answer, not an error; filters select.
    assert!(status(&mut c, "busybox:nope").await.is_none());
    assert!(
        status(&mut c, &format!("sha256:{}", "0".repeat(64)))
            .await
            .is_none()
    );
    let filtered = c
        .list_images(cri::ListImagesRequest {
            filter: Some(cri::ImageFilter {
                image: spec(&tp_name),
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .images;
    assert_eq!(filtered.iter().map(|i| &i.id).collect::<Vec<_>>(), vec![&tp.id]);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn cri_refuses_bad_references_and_absent_images_with_their_codes() {
    require_root();
    let reg = Registry::start();
    let mirror = format!("docker.io={}", reg.host);
    let d = Daemon::start(&["--registry-mirror", &mirror]);
    let mut c = client(&d).await;
    // Bad input: named, with the right codes; nothing stored.
    let e = pull(&mut c, "Not A/Reference!", None).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("Not A/Reference!"), "{e:?}");
    let e = pull(&mut c, &format!("{}/nope/nothing:v1", reg.host), None)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = pull(&mut c, "", None).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn cri_image_fs_info_counts_what_is_stored_and_what_a_removal_frees() {
    let Pulled {
        mut c,
        d,
        local_bb,
        empty,
        _reg,
        ..
    } = pulled().await;
    // ImageFsInfo counts what is stored.
    let full = fs_info(&mut c).await;
    assert_eq!(
        full.fs_id.as_ref().unwrap().mountpoint,
        d.root().join("images").display().to_string()
    );
    let bytes = |u: &cri::FilesystemUsage| u.used_bytes.as_ref().unwrap().value;
    let inodes = |u: &cri::FilesystemUsage| u.inodes_used.as_ref().unwrap().value;
    assert!(bytes(&full) > bytes(&empty) + 1_000_000, "{full:?}");
    assert!(
        inodes(&full) > inodes(&empty) + 20,
        "busybox's tree counts (its applets are hard links: one inode): {full:?}"
    );
    assert!(full.timestamp > 0);
    remove(&mut c, &local_bb).await;
    let after = fs_info(&mut c).await;
    assert!(
        bytes(&after) < bytes(&full) && inodes(&after) < inodes(&full),
        "{after:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn cri_images_survive_a_restart_and_a_removal_takes_all_names_blobs_and_layer() {
    let Pulled {
        mut c,
        mut d,
        mirror,
        local_bb,
        tp_name,
        imgs,
        _reg,
        ..
    } = pulled().await;
    let bb = status(&mut c, &imgs.bb.config).await.expect("by id");
    let tp = status(&mut c, &tp_name).await.unwrap();
    // Images survive a restart of criusd.
    d.restart(&["--registry-mirror", &mirror]);
    let mut c = client(&d).await;
    assert_eq!(status(&mut c, "busybox").await.unwrap().id, bb.id);

    // Removing by one tag removes the image with all its names, its blobs and its layer; twice is fine.
    remove(&mut c, &local_bb).await;
    for r in ["busybox", imgs.bb.config.as_str(), local_bb.as_str()] {
        assert!(status(&mut c, r).await.is_none(), "{r} still there");
    }
    remove(&mut c, &local_bb).await;
    let store = d.root().join("images");
    assert_eq!(
        count(store.join("blobs/sha256")),
        3,
        "only the test program's manifest, config and layer"
    );
    assert_eq!(count(store.join("layers")), 1);
    // By repo@digest.
    let tp_digest = tp.repo_digests[0].clone();
    remove(&mut c, &tp_digest).await;
    assert!(status(&mut c, &tp_name).await.is_none());
    assert_eq!(count(store.join("blobs/sha256")) + count(store.join("layers")), 0);
    assert!(
        c.list_images(cri::ListImagesRequest { filter: None })
            .await
            .unwrap()
            .into_inner()
            .images
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn cri_pulls_with_credentials_from_a_token_registry_and_reports_pinned_images() {
    use base64::Engine as _;
    let imgs = images();
    let reg = Registry::start_with_token_auth("bob", "hunter2");
    reg.push(&imgs.layout, "busybox:latest", "private/busybox:1");
    let name = format!("{}/private/busybox:1", reg.host);
    let d = Daemon::start(&["--pinned-image", &name]);
    let mut c = client(&d).await;
    let e = pull(&mut c, &name, None).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    let wrong = cri::AuthConfig {
        username: "bob".into(),
        password: "wrong".into(),
        ..Default::default()
    };
    assert_eq!(
        pull(&mut c, &name, Some(wrong)).await.unwrap_err().code(),
        Code::Unauthenticated
    );
    assert!(status(&mut c, &name).await.is_none());
    let right = cri::AuthConfig {
        auth: base64::engine::general_purpose::STANDARD.encode("bob:hunter2"),
        server_address: reg.host.clone(),
        ..Default::default()
    };
    assert_eq!(pull(&mut c, &name, Some(right)).await.unwrap(), imgs.bb.config);
    let img = status(&mut c, &name).await.unwrap();
    assert!(img.pinned, "the pinned image is reported pinned: {img:?}");
}

#[test]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
fn cli_pulls_with_progress_imports_lists_inspects_and_removes() {
    let imgs = images();
    let reg = Registry::start();
    reg.push(&imgs.layout, "busybox:latest", "library/busybox:1.36");
    // The mirror comes from the config file this time.
    let mut d = Daemon::start(&[]);
    std::fs::write(
        d.config_path(),
        format!("[image.mirrors]\n\"docker.io\" = \"http://{}\"\n", reg.host),
    )
    .unwrap();
    d.restart(&[]);

    let out = d.cli(&["images", "pull", "busybox:1.36"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}\n{}", d.log());
    assert_eq!(stdout.trim(), imgs.bb.config);
    assert!(
        stderr.contains(&format!("manifest {}", imgs.bb.manifest)),
        "{stderr}"
    );
    for l in &imgs.bb.layers {
        assert!(stderr.contains(&format!("stored {l}")), "{stderr}");
    }
    assert!(
        stderr.contains("unpacking sha256:")
            && stderr.contains("pulled docker.io/library/busybox:1.36 (2 blobs"),
        "{stderr}"
    );
    let again = d.cli(&["images", "pull", "busybox:1.36"]);
    assert!(String::from_utf8_lossy(&again.stderr).contains("(0 blobs, 0B fetched)"));
    let quiet = d.cli_ok(&["images", "pull", "-q", "busybox:1.36"]);
    assert_eq!(quiet.trim(), imgs.bb.config);

    // Import an OCI archive and a docker-archive.
    let archive = d.dir().join("testprog.tar");
    let tp_layout = d.dir().join("tp-layout");
    image::testprog(&tp_layout, "example.test/crius-testprog:v1", &testprog_binary()).unwrap();
    image::write_archive(&tp_layout, &archive).unwrap();
    let out = d.cli_ok(&["images", "import", archive.to_str().unwrap()]);
    assert_eq!(
        out.trim(),
        format!("{} example.test/crius-testprog:v1", imgs.tp.config)
    );
    let bad = d.cli(&["images", "import", "/nonexistent.tar"]);
    // The CLI reads the archive itself, and says what it could not open.
    let said = String::from_utf8_lossy(&bad.stderr);
    assert!(
        !bad.status.success() && said.contains("/nonexistent.tar: No such file or directory"),
        "{said}"
    );

    let ls = d.cli_ok(&["images", "ls"]);
    let lines: Vec<&str> = ls.lines().collect();
    assert_eq!(lines.len(), 3, "{ls}");
    assert!(
        lines[0].starts_with("IMAGE") && ls.contains("docker.io/library/busybox") && ls.contains("1.36"),
        "{ls}"
    );
    assert!(ls.contains(&imgs.tp.config[7..20]), "short ids: {ls}");
    let ids = d.cli_ok(&["images", "ls", "-q"]);
    assert_eq!(ids.lines().count(), 2);
    let digests = d.cli_ok(&["images", "ls", "--digests", "busybox:1.36"]);
    assert!(
        digests.contains(&imgs.bb.manifest[7..20]) && digests.lines().count() == 2,
        "{digests}"
    );

    let inspect: serde_json::Value =
        serde_json::from_str(&d.cli_ok(&["images", "inspect", "example.test/crius-testprog:v1"])).unwrap();
    assert_eq!(inspect["status"]["id"], imgs.tp.config.as_str());
    assert_eq!(inspect["info"]["imageSpec"]["config"]["User"], "1000");
    let missing = d.cli(&["images", "inspect", "nope"]);
    assert!(
        !missing.status.success() && String::from_utf8_lossy(&missing.stderr).contains("\"nope\" not found")
    );

    let rm = d.cli(&["images", "rm", "busybox:1.36", "nope"]);
    assert!(!rm.status.success());
    assert!(String::from_utf8_lossy(&rm.stdout).contains(&format!("removed {}", imgs.bb.config)));
    assert!(String::from_utf8_lossy(&rm.stderr).contains("image \"nope\" not found"));
    d.cli_ok(&["images", "rm", &imgs.tp.config]);
    assert_eq!(d.cli_ok(&["images", "ls", "-q"]), "");
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn cli_imports_an_archive_from_stdin_and_tags_images_as_kind_load_needs() {
    require_root();
    let d = Daemon::start(&[]);
    let layout = d.dir().join("tp-layout");
    let archive = d.dir().join("tp.tar");
    image::testprog(&layout, "example.test/crius-testprog:v1", &testprog_binary()).unwrap();
    image::write_archive(&layout, &archive).unwrap();
    let file = std::fs::File::open(&archive).unwrap();
    let out = d.cli_with_stdin(&["images", "import", "-"], file);
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        d.log()
    );
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    let id = out.split_whitespace().next().unwrap().to_string();
    assert!(out.contains("example.test/crius-testprog:v1"), "{out}");
    let spooled = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("crius-import-"))
        .count();
    assert_eq!(spooled, 0, "the spooled archive is removed");
    let empty = d.cli(&["images", "import", "-"]);
    let err = String::from_utf8_lossy(&empty.stderr);
    assert!(!empty.status.success() && err.contains("stdin is empty"), "{err}");

    let out = d.cli_ok(&[
        "images",
        "tag",
        "example.test/crius-testprog:v1",
        "kind.local/app:dev",
    ]);
    assert!(
        out.starts_with(&id) && out.contains("kind.local/app:dev"),
        "{out}"
    );
    let out = d.cli_ok(&["images", "tag", &id, "short"]);
    assert!(out.contains("docker.io/library/short:latest"), "{out}");
    let ls = d.cli_ok(&["images", "ls"]);
    assert!(ls.contains("kind.local/app") && ls.contains("dev"), "{ls}");
    let missing = d.cli(&["images", "tag", "nope:1", "x:1"]);
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        !missing.status.success() && err.contains("NotFound") && err.contains("nope:1"),
        "{err}"
    );
    let digest = format!("x@sha256:{}", "a".repeat(64));
    let bad = d.cli(&["images", "tag", &id, &digest]);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(!bad.status.success() && err.contains("InvalidArgument"), "{err}");
}
