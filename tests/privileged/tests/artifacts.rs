//! OCI artifacts as image volumes (KEP-4639), end to end: an artifact of two files (a model and its config)
//! and a tar layer is pushed to a local registry by the test's own client, pulled through the CRI as kubelet
//! pulls an image volume, listed with its type, and mounted into a pod's container read-only and noexec, whole
//! and by a `sub_path` naming one file; a private one is pulled with credentials as an image is. An artifact
//! whose title would leave its directory is refused.

use crius_api::cri;
use crius_api::cri::image_service_client::ImageServiceClient;
use crius_privileged_tests::cri::{Pod, container, cremove, cstop};
use crius_test_support::registry::Registry;
use tonic::Code;

const MODEL_TYPE: &str = "application/vnd.example.model.v1";

fn volume(reference: &str, container_path: &str, sub: &str) -> cri::Mount {
    cri::Mount {
        container_path: container_path.into(),
        image: Some(cri::ImageSpec {
            image: reference.into(),
            ..Default::default()
        }),
        image_sub_path: sub.into(),
        readonly: true,
        ..Default::default()
    }
}

/// A tar holding `docs/README` (an artifact's layer that is unpacked).
fn docs_tar() -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let text = b"read me\n";
    let mut h = tar::Header::new_gnu();
    h.set_path("docs/README").unwrap();
    h.set_size(text.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append(&h, &text[..]).unwrap();
    b.into_inner().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry: run through hack/test.sh"]
async fn an_artifact_volume_mounts_its_files_read_only_and_noexec() {
    crius_test_support::require_root();
    let reg = Registry::start();
    let model: Vec<u8> = (0..100_000u32).map(|n| (n % 251) as u8).collect();
    let config = br#"{"layers": 4, "name": "tiny"}"#;
    let docs = docs_tar();
    let manifest = reg.push_artifact(
        "models/tiny",
        "1",
        MODEL_TYPE,
        &[
            ("model.bin", "application/octet-stream", &model),
            ("config.json", "application/json", config),
            ("", "application/vnd.oci.image.layer.v1.tar", &docs),
        ],
    );
    let reference = format!("{}/models/tiny:1", reg.host);
    let mut p = Pod::on_host_network("artifact").await;
    let mut images = ImageServiceClient::new(
        crius_api::connect(&p.d.socket().display().to_string())
            .await
            .unwrap(),
    );
    // kubelet pulls an image volume's reference as it pulls an image.
    let id = images
        .pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: reference.clone(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .image_ref;
    assert_eq!(id, manifest, "an artifact is known by its manifest digest");
    let status = images
        .image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: reference.clone(),
                ..Default::default()
            }),
            verbose: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.image.map(|i| i.id), Some(manifest.clone()));
    assert!(status.info["info"].contains(MODEL_TYPE), "{:?}", status.info);
    let listed = p.d.cli_ok(&["images", "ls"]);
    let line = listed
        .lines()
        .find(|l| l.contains("models/tiny"))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        listed.lines().next().unwrap().ends_with("ARTIFACT TYPE") && line.ends_with(MODEL_TYPE),
        "{listed}"
    );

    let mut c = container(
        "reader",
        "busybox",
        "wc -c < /models/model.bin; cat /models/config.json; echo; cat /models/docs/README; \
         cat /etc/model.json; echo; ls /models | tr '\\n' ' '; echo; \
         grep ' /models ' /proc/self/mounts; touch /models/x 2>/dev/null || echo read-only; echo done",
    );
    c.mounts = vec![
        volume(&reference, "/models", ""),
        volume(&reference, "/etc/model.json", "config.json"),
    ];
    let cid = p.started(c).await;
    p.wait_for_log("reader", "done").await;
    let log = p.log_text("reader");
    // What the pod saw, for the reader of `--nocapture`.
    eprintln!("the reader container's log (CRI format):\n{log}");
    // (A line without its newline is logged as a partial one, `P`, then the newline as `F`.)
    for want in [
        " stdout F 100000",
        " stdout F read me",
        " config.json docs model.bin ",
        " stdout F read-only",
    ] {
        assert!(log.contains(want), "{want}: {log}");
    }
    assert_eq!(
        log.matches(r#"{"layers": 4, "name": "tiny"}"#).count(),
        2,
        "the config, whole and by its sub path: {log}"
    );
    let mount_line = log
        .lines()
        .find(|l| l.contains(" /models "))
        .unwrap_or_else(|| panic!("{log}"));
    let options = mount_line.split_whitespace().nth(6).unwrap_or_default();
    assert!(
        options.split(',').any(|o| o == "ro") && options.split(',').any(|o| o == "noexec"),
        "{mount_line}"
    );
    cstop(&mut p.c, &cid, 2).await;
    cremove(&mut p.c, &cid).await;

    // Removed like an image.
    images
        .remove_image(cri::RemoveImageRequest {
            image: Some(cri::ImageSpec {
                image: reference.clone(),
                ..Default::default()
            }),
        })
        .await
        .unwrap();
    assert!(!p.d.cli_ok(&["images", "ls"]).contains("models/tiny"));
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry: run through hack/test.sh"]
async fn an_artifact_whose_title_leaves_its_directory_is_refused() {
    crius_test_support::require_root();
    let reg = Registry::start();
    reg.push_artifact(
        "models/evil",
        "1",
        MODEL_TYPE,
        &[(
            "../../etc/cron.d/x",
            "application/octet-stream",
            b"* * * * * root reboot\n",
        )],
    );
    let p = Pod::on_host_network("artifact-evil").await;
    let mut images = ImageServiceClient::new(
        crius_api::connect(&p.d.socket().display().to_string())
            .await
            .unwrap(),
    );
    let e = images
        .pull_image(cri::PullImageRequest {
            image: Some(cri::ImageSpec {
                image: format!("{}/models/evil:1", reg.host),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
    assert!(
        e.message().contains("models/evil") && e.message().contains("titled"),
        "{}",
        e.message()
    );
    assert!(!p.d.cli_ok(&["images", "ls"]).contains("models/evil"));
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, htpasswd: run through hack/test.sh"]
async fn an_artifact_is_pulled_with_the_credentials_an_image_would_be() {
    crius_test_support::require_root();
    let reg = Registry::start_with_basic_auth("alice", "s3cret");
    let manifest = reg.push_artifact(
        "private/model",
        "1",
        MODEL_TYPE,
        &[("model.bin", "application/octet-stream", b"weights")],
    );
    let p = Pod::on_host_network("artifact-auth").await;
    let mut images = ImageServiceClient::new(
        crius_api::connect(&p.d.socket().display().to_string())
            .await
            .unwrap(),
    );
    let pull = |auth: Option<cri::AuthConfig>| cri::PullImageRequest {
        image: Some(cri::ImageSpec {
            image: format!("{}/private/model:1", reg.host),
            ..Default::default()
        }),
        auth,
        ..Default::default()
    };
    let e = images.pull_image(pull(None)).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{}", e.message());
    let got = images
        .pull_image(pull(Some(cri::AuthConfig {
            username: "alice".into(),
            password: "s3cret".into(),
            ..Default::default()
        })))
        .await
        .unwrap()
        .into_inner()
        .image_ref;
    assert_eq!(got, manifest);
}
