//! The CRI ImageService over a real registry: pull, status by every kind of reference, list, remove, image
//! fs info, credentials, restarts.

use super::*;

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
