//! Pulls from a real registry (Debian's docker-registry on 127.0.0.1, filled with skopeo): by tag, by digest,
//! a multi-arch index, nothing fetched twice, shared layers fetched once by concurrent pulls, and errors that
//! leave the store unchanged.

use crius_image::pull::{PullOptions, pull};
use crius_image::{Error, Store};
use crius_test_support::registry::Registry;
use crius_test_support::{image, require_root, testprog_binary};

struct Fixture {
    _dir: tempfile::TempDir,
    layout: std::path::PathBuf,
    store: Store,
    bb: image::ImageInfo,
    tp: image::ImageInfo,
}

fn fixture() -> Fixture {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let bb = image::busybox(&layout, "busybox:latest").unwrap();
    let tp = image::testprog(&layout, "crius-testprog:latest", &testprog_binary()).unwrap();
    let store = Store::open(&dir.path().join("store")).unwrap();
    Fixture {
        _dir: dir,
        layout,
        store,
        bb,
        tp,
    }
}

fn blobs(store: &Store) -> usize {
    std::fs::read_dir(store.root().join("blobs/sha256"))
        .unwrap()
        .count()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn pull_by_tag_then_by_digest_fetches_each_blob_once() {
    let f = fixture();
    let reg = Registry::start();
    reg.push(&f.layout, "busybox:latest", "tools/busybox:1.0");
    let name = format!("{}/tools/busybox:1.0", reg.host);
    let opts = PullOptions::default();

    let first = pull(&f.store, &name, &opts).await.unwrap();
    assert_eq!(first.image.id.as_str(), f.bb.config, "image id = config digest");
    assert_eq!(first.image.names, vec![name.clone()]);
    assert_eq!(first.blobs_fetched, 2, "config and one layer");
    assert!(
        f.store
            .layer_dir(&first.image.diff_ids[0])
            .join("bin/busybox")
            .exists()
    );

    let again = pull(&f.store, &name, &opts).await.unwrap();
    assert_eq!(again.blobs_fetched, 0, "a second pull downloads nothing");
    let by_digest = format!("{}/tools/busybox@{}", reg.host, first.image.manifest);
    let d = pull(&f.store, &by_digest, &opts).await.unwrap();
    assert_eq!((d.image.id.clone(), d.blobs_fetched), (first.image.id.clone(), 0));
    assert_eq!(f.store.find(&by_digest).unwrap().id, first.image.id);
    assert_eq!(
        f.store.images().unwrap().len(),
        1,
        "one image however it was pulled"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn a_multi_arch_index_resolves_to_linux_amd64() {
    let f = fixture();
    let reg = Registry::start();
    image::write_index(&f.layout, "multi:latest", &[(&f.tp, "arm64"), (&f.bb, "amd64")]).unwrap();
    reg.push(&f.layout, "multi:latest", "multi:latest");
    let got = pull(
        &f.store,
        &format!("{}/multi:latest", reg.host),
        &PullOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(got.image.id.as_str(), f.bb.config, "the amd64 entry is picked");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn concurrent_pulls_sharing_a_layer_fetch_it_once() {
    let f = fixture();
    let reg = Registry::start();
    // Two images over the same busybox layer: the second adds a layer of its own.
    let extra = tempfile::tempdir().unwrap();
    std::fs::write(extra.path().join("extra"), "x").unwrap();
    let rootfs = tempfile::tempdir().unwrap();
    crius_test_support::build_busybox_rootfs(rootfs.path()).unwrap();
    let spec = image::ImageSpec {
        name: "stacked:latest".into(),
        layers: vec![rootfs.path().into(), extra.path().into()],
        cmd: vec!["sh".into()],
        ..Default::default()
    };
    let stacked = image::write_layout(&f.layout, &[spec]).unwrap().remove(0);
    assert_eq!(
        stacked.layers[0], f.bb.layers[0],
        "the base layer is byte-identical"
    );
    reg.push(&f.layout, "busybox:latest", "a:1");
    reg.push(&f.layout, "stacked:latest", "b:1");
    let opts = PullOptions::default();
    let (ra, rb) = (format!("{}/a:1", reg.host), format!("{}/b:1", reg.host));
    let (a, b) = tokio::join!(pull(&f.store, &ra, &opts), pull(&f.store, &rb, &opts));
    let (a, b) = (a.unwrap(), b.unwrap());
    // Distinct blobs: two configs, the shared layer, the extra layer.
    assert_eq!(
        a.blobs_fetched + b.blobs_fetched,
        4,
        "the shared layer is downloaded once"
    );
    assert_eq!(
        std::fs::read_dir(f.store.root().join("layers")).unwrap().count(),
        2,
        "each layer unpacked once"
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn bad_references_unknown_images_and_a_registry_that_went_away() {
    let f = fixture();
    let mut reg = Registry::start();
    reg.push(&f.layout, "busybox:latest", "busybox:1");
    let opts = PullOptions::default();
    let err = pull(&f.store, "Not A Reference", &opts).await.unwrap_err();
    assert!(
        matches!(err, Error::InvalidArgument(_)) && err.to_string().contains("Not A Reference"),
        "{err}"
    );
    let err = pull(&f.store, &format!("{}/nothing:here", reg.host), &opts)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::NotFound(_)), "{err}");

    reg.stop();
    let name = format!("{}/busybox:1", reg.host);
    assert!(pull(&f.store, &name, &opts).await.is_err());
    assert!(f.store.images().unwrap().is_empty(), "store unchanged");
    assert_eq!(blobs(&f.store), 0, "no stray blob");
    reg.restart();
    let ok = pull(&f.store, &name, &opts).await.unwrap();
    assert_eq!(ok.image.id.as_str(), f.bb.config);
}

/// Pull options with alice's name and `password`.
fn alice(password: &str) -> PullOptions {
    PullOptions {
        auth: crius_image::pull::Auth::Basic("alice".into(), password.into()),
        ..Default::default()
    }
}

/// A pull of `name` without credentials: refused (the registry's refusal, not a bad request), storing nothing.
async fn anonymous_refused(f: &Fixture, name: &str) {
    let e = pull(&f.store, name, &PullOptions::default()).await.unwrap_err();
    assert!(!matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(f.store.images().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo, htpasswd: run through hack/test.sh"]
async fn basic_auth_is_required_and_accepted() {
    let f = fixture();
    let reg = Registry::start_with_basic_auth("alice", "s3cret");
    reg.push(&f.layout, "busybox:latest", "private/busybox:1");
    let name = format!("{}/private/busybox:1", reg.host);
    anonymous_refused(&f, &name).await;
    let wrong = alice("wrong");
    assert!(pull(&f.store, &name, &wrong).await.is_err());
    assert!(f.store.images().unwrap().is_empty());
    let right = alice("s3cret");
    let got = pull(&f.store, &name, &right).await.unwrap();
    assert_eq!(got.image.id.as_str(), f.bb.config);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn bearer_token_auth_is_required_and_accepted() {
    let f = fixture();
    let reg = Registry::start_with_token_auth("alice", "s3cret");
    let issuer = reg.token_issuer().unwrap();
    reg.push(&f.layout, "busybox:latest", "private/busybox:1");
    assert!(
        issuer.issued() > 0,
        "skopeo pushed with a token: {:?}",
        issuer.log()
    );
    let name = format!("{}/private/busybox:1", reg.host);
    anonymous_refused(&f, &name).await;
    let wrong = alice("wrong");
    let before = issuer.issued();
    assert!(pull(&f.store, &name, &wrong).await.is_err());
    assert_eq!(
        issuer.issued(),
        before,
        "no token for a wrong password: {:?}",
        issuer.log()
    );
    assert!(f.store.images().unwrap().is_empty());
    let right = alice("s3cret");
    let got = pull(&f.store, &name, &right)
        .await
        .unwrap_or_else(|e| panic!("{e}\nissuer: {:?}\nregistry: {}", issuer.log(), reg.log()));
    assert_eq!(got.image.id.as_str(), f.bb.config);
    let layer_blobs: Vec<&str> = got.image.layer_blobs.iter().map(|d| d.as_str()).collect();
    assert_eq!(layer_blobs, f.bb.layers);
    assert!(
        f.store
            .layer_dir(&got.image.diff_ids[0])
            .join("bin/busybox")
            .exists()
    );
    assert!(
        issuer.issued() > before,
        "the client fetched a token for the pull: {:?}",
        issuer.log()
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn short_names_are_normalised_and_pulled_through_a_mirror() {
    let f = fixture();
    let reg = Registry::start();
    reg.push(&f.layout, "busybox:latest", "library/busybox:latest");
    let mut opts = PullOptions::default();
    opts.mirrors.insert("docker.io".into(), reg.host.clone());
    let got = pull(&f.store, "busybox", &opts).await.unwrap();
    assert_eq!(
        got.image.names,
        vec!["docker.io/library/busybox:latest".to_string()]
    );
    assert_eq!(
        f.store
            .find("docker.io/library/busybox:latest")
            .unwrap()
            .id
            .as_str(),
        f.bb.config
    );
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn a_blob_failing_mid_pull_leaves_the_store_as_it_was() {
    let f = fixture();
    let reg = Registry::start();
    reg.push(&f.layout, "busybox:latest", "busybox:1");
    // The manifest and config are served, the layer is gone: the pull fails after storing the config.
    let layer = reg.blob_data(&f.bb.layers[0]);
    let saved = std::fs::read(&layer).unwrap();
    std::fs::remove_file(&layer).unwrap();
    let name = format!("{}/busybox:1", reg.host);
    let err = pull(&f.store, &name, &PullOptions::default()).await.unwrap_err();
    assert!(
        err.to_string().contains(&f.bb.layers[0]),
        "the error names the blob: {err}"
    );
    assert!(f.store.images().unwrap().is_empty());
    assert_eq!(
        blobs(&f.store),
        0,
        "the config fetched before the failure is removed again"
    );
    assert_eq!(
        std::fs::read_dir(f.store.root().join("ingest")).unwrap().count(),
        0,
        "no partial download left"
    );
    std::fs::write(&layer, saved).unwrap();
    let ok = pull(&f.store, &name, &PullOptions::default()).await.unwrap();
    assert_eq!(ok.image.id.as_str(), f.bb.config);
}

/// Pushes an image of five layers (busybox and four of 256 KiB) as `repo_tag`.
fn push_five_layers(f: &Fixture, reg: &Registry, repo_tag: &str) -> image::ImageInfo {
    let info = image::layered(&f.layout, "five:latest", 5, 256 << 10).unwrap();
    reg.push(&f.layout, "five:latest", repo_tag);
    info
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn a_blob_that_stalls_mid_download_is_cancelled_naming_it_and_nothing_stays() {
    use crius_test_support::proxy::RegistryProxy;
    let f = fixture();
    let reg = Registry::start();
    reg.push(&f.layout, "busybox:latest", "stalls/busybox:1");
    let proxy = RegistryProxy::start(&reg.host);
    proxy.stall_blob(&f.bb.layers[0]);
    let opts = PullOptions {
        progress_timeout: Some(std::time::Duration::from_secs(2)),
        ..Default::default()
    };
    let name = format!("{}/stalls/busybox:1", proxy.host);
    let started = std::time::Instant::now();
    let err = pull(&f.store, &name, &opts).await.unwrap_err();
    let took = started.elapsed();
    assert!(matches!(err, Error::DeadlineExceeded(_)), "{err}");
    let said = err.to_string();
    assert!(
        said.contains(&f.bb.layers[0]) && said.contains("repository stalls/busybox"),
        "names the blob and its repository: {said}"
    );
    assert!(
        took >= std::time::Duration::from_secs(2) && took < std::time::Duration::from_secs(20),
        "{took:?}"
    );
    assert!(f.store.images().unwrap().is_empty());
    assert_eq!(blobs(&f.store), 0, "the config stored before is removed again");
    assert_eq!(
        std::fs::read_dir(f.store.root().join("ingest")).unwrap().count(),
        0,
        "the partial blob is removed"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !proxy.stalled_download_abandoned() {
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled connection was not closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Straight from the registry the same pull works.
    let ok = pull(&f.store, &format!("{}/stalls/busybox:1", reg.host), &opts)
        .await
        .unwrap();
    assert_eq!(ok.image.id.as_str(), f.bb.config);
}

#[test]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
fn criusd_cancels_a_stalled_pull_after_the_configured_progress_timeout() {
    use crius_test_support::daemon::Daemon;
    use crius_test_support::proxy::RegistryProxy;
    let f = fixture();
    let reg = Registry::start();
    reg.push(&f.layout, "busybox:latest", "stalls/busybox:1");
    let proxy = RegistryProxy::start(&reg.host);
    proxy.stall_blob(&f.bb.layers[0]);
    let mut d = Daemon::start(&[]);
    std::fs::write(d.config_path(), "[image]\npull_progress_timeout = 2\n").unwrap();
    d.restart(&[]);
    let started = std::time::Instant::now();
    let out = d.cli(&["images", "pull", &format!("{}/stalls/busybox:1", proxy.host)]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains(&f.bb.layers[0]) && said.contains("pull_progress_timeout"),
        "{said}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(d.cli_ok(&["images", "ls", "-q"]).trim().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn layers_download_a_few_at_a_time_and_unpack_in_order_meanwhile() {
    use crius_image::pull::{Progress, pull_with_progress};
    use crius_test_support::proxy::RegistryProxy;
    let f = fixture();
    let reg = Registry::start();
    let five = push_five_layers(&f, &reg, "five:1");
    let proxy = RegistryProxy::start(&reg.host);
    proxy.delay_blobs(std::time::Duration::from_millis(400));
    let name = format!("{}/five:1", proxy.host);
    let seen = std::sync::Mutex::new(Vec::new());
    let log = |p: Progress| seen.lock().unwrap().push(p);
    let got = pull_with_progress(&f.store, &name, &PullOptions::default(), &log)
        .await
        .unwrap();
    assert_eq!(got.blobs_fetched, 6, "the config and five layers");
    assert_eq!(
        proxy.max_blobs_in_flight(),
        3,
        "max_concurrent_downloads' default"
    );
    let layer_blobs: Vec<&str> = got.image.layer_blobs.iter().map(|d| d.as_str()).collect();
    assert_eq!(layer_blobs, five.layers);
    for (i, diff) in got.image.diff_ids.iter().enumerate().skip(1) {
        assert!(f.store.layer_dir(diff).join(format!("layer{i}")).exists());
    }
    let seen = seen.into_inner().unwrap();
    let unpacked: Vec<_> = seen
        .iter()
        .filter_map(|p| match p {
            Progress::Unpacking { diff_id } => Some(diff_id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(unpacked, got.image.diff_ids, "unpacked lowest first");
    let first_unpack = seen
        .iter()
        .position(|p| matches!(p, Progress::Unpacking { .. }))
        .unwrap();
    let last_stored = seen
        .iter()
        .rposition(|p| matches!(p, Progress::Stored { .. }))
        .unwrap();
    assert!(
        first_unpack < last_stored,
        "unpacking starts while layers still download: {seen:?}"
    );

    // One at a time when the config says so.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let proxy = RegistryProxy::start(&reg.host);
    proxy.delay_blobs(std::time::Duration::from_millis(100));
    let one = PullOptions {
        max_concurrent_downloads: 1,
        ..Default::default()
    };
    pull(&store, &format!("{}/five:1", proxy.host), &one)
        .await
        .unwrap();
    assert_eq!((proxy.blob_gets(), proxy.max_blobs_in_flight()), (6, 1));
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn image_calls_naming_a_runtime_handler_share_the_one_store() {
    use crius_api::cri;
    use crius_api::cri::image_service_client::ImageServiceClient;
    use crius_test_support::daemon::Daemon;
    let f = fixture();
    let reg = Registry::start();
    reg.push(&f.layout, "busybox:latest", "handlers/busybox:1");
    let d = Daemon::start(&["--log-level", "debug"]);
    let mut c = ImageServiceClient::new(
        crius_api::connect(&d.socket().display().to_string())
            .await
            .unwrap(),
    );
    let name = format!("{}/handlers/busybox:1", reg.host);
    let spec = |h: &str| {
        Some(cri::ImageSpec {
            image: name.clone(),
            runtime_handler: h.into(),
            ..Default::default()
        })
    };
    let pulled = c
        .pull_image(cri::PullImageRequest {
            image: spec("kata"),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .image_ref;
    assert_eq!(pulled, f.bb.config);
    for h in ["kata", "runc", ""] {
        let st = c
            .image_status(cri::ImageStatusRequest {
                image: spec(h),
                verbose: false,
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(st.image.map(|i| i.id), Some(f.bb.config.clone()), "handler {h:?}");
        let listed = c
            .list_images(cri::ListImagesRequest {
                filter: Some(cri::ImageFilter { image: spec(h) }),
            })
            .await
            .unwrap()
            .into_inner()
            .images;
        assert_eq!(listed.len(), 1, "handler {h:?}");
    }
    let log = d.log();
    assert_eq!(
        log.matches("runtime_handler=\"kata\"").count(),
        1,
        "logged once for kata: {log}"
    );
    assert_eq!(log.matches("runtime_handler=\"runc\"").count(), 1, "{log}");
    c.remove_image(cri::RemoveImageRequest { image: spec("runc") })
        .await
        .unwrap();
    let gone = c
        .image_status(cri::ImageStatusRequest {
            image: spec("kata"),
            verbose: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(gone.image.is_none(), "removed for every handler");
}
