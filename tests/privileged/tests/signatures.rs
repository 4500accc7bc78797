//! The signature policy (containers-policy.json) against a real registry: a test image signed in the test,
//! cosign's way (a P-256 key made here, the signature pushed tag-based, or as an OCI 1.1 referrer listed by the
//! referrers tag schema, Debian's registry having no referrers API), is pulled; an unsigned image, one
//! signed with another key (either way), one whose signature names another repository, and one a `reject` scope covers are
//! refused before any of the image's blobs is fetched (the registry proxy lists blob downloads), naming the image and why;
//! criusd reads the policy from `[image] signature_policy` and answers PermissionDenied.

use std::sync::Arc;

use crius_image::Error;
use crius_image::policy::Policy;
use crius_image::pull::{PullOptions, pull};
use crius_test_support::cosign::{SigningKey, sign_and_push, sign_and_push_referrer};
use crius_test_support::proxy::RegistryProxy;
use crius_test_support::registry::Registry;
use crius_test_support::{image, require_root};

struct Fixture {
    dir: tempfile::TempDir,
    reg: Registry,
    proxy: RegistryProxy,
    bb: image::ImageInfo,
}

/// busybox pushed as `signed/bb:1` (signed with the fixture's key), `unsigned/bb:1`, `other/bb:1` (signed with
/// another key), `elsewhere/bb:1` (signed naming another repository), `blocked/bb:1`, `referred/bb:1` (signed
/// with the fixture's key as a referrer) and `wrongref/bb:1` (another key's referrer), behind a proxy.
fn fixture() -> Fixture {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let layout = dir.path().join("layout");
    let bb = image::busybox(&layout, "busybox:latest").unwrap();
    let reg = Registry::start();
    let proxy = RegistryProxy::start(&reg.host);
    for repo in [
        "signed/bb",
        "unsigned/bb",
        "other/bb",
        "elsewhere/bb",
        "blocked/bb",
        "referred/bb",
        "wrongref/bb",
    ] {
        reg.push(&layout, "busybox:latest", &format!("{repo}:1"));
    }
    let key = SigningKey::generate();
    // The identity names the registry as the client sees it: the proxy.
    let id = |repo: &str| format!("{}/{repo}", proxy.host);
    sign_and_push(&reg, "signed/bb", &bb.manifest, &id("signed/bb"), &key);
    sign_and_push(
        &reg,
        "other/bb",
        &bb.manifest,
        &id("other/bb"),
        &SigningKey::generate(),
    );
    sign_and_push(&reg, "elsewhere/bb", &bb.manifest, &id("signed/bb"), &key);
    let hex = bb.manifest.trim_start_matches("sha256:");
    let size = std::fs::metadata(layout.join("blobs/sha256").join(hex))
        .unwrap()
        .len();
    let subject = (bb.manifest.as_str(), size);
    sign_and_push_referrer(&reg, "referred/bb", subject, &id("referred/bb"), &key);
    let other = SigningKey::generate();
    sign_and_push_referrer(&reg, "wrongref/bb", subject, &id("wrongref/bb"), &other);
    std::fs::write(dir.path().join("cosign.pub"), key.public_pem()).unwrap();
    let policy = serde_json::json!({
        "default": [{"type": "sigstoreSigned", "keyPath": "cosign.pub",
            "signedIdentity": {"type": "matchRepository"}}],
        "transports": {"docker": {
            format!("{}/blocked", proxy.host): [{"type": "reject"}],
            format!("{}/open", proxy.host): [{"type": "insecureAcceptAnything"}],
        }}
    });
    std::fs::write(dir.path().join("policy.json"), policy.to_string()).unwrap();
    Fixture { dir, reg, proxy, bb }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
async fn only_images_the_policy_accepts_are_pulled_and_refusals_fetch_no_layer() {
    let f = fixture();
    let store = crius_image::Store::open(&f.dir.path().join("store")).unwrap();
    let opts = PullOptions {
        policy: Some(Arc::new(Policy::load(&f.dir.path().join("policy.json")).unwrap())),
        ..Default::default()
    };
    let name = |repo: &str| format!("{}/{repo}:1", f.proxy.host);
    for (repo, says) in [
        ("unsigned/bb", "no signature"),
        ("other/bb", "not signed by the policy's key"),
        ("wrongref/bb", "not signed by the policy's key"),
        ("elsewhere/bb", "does not accept"),
        ("blocked/bb", "rejects"),
    ] {
        let e = pull(&store, &name(repo), &opts).await.unwrap_err();
        assert!(matches!(e, Error::PolicyRefused(_)), "{repo}: {e}");
        assert!(
            e.to_string().contains(repo) && e.to_string().contains(says),
            "{repo}: {e}"
        );
    }
    // Only signature payloads were read: no config, no layer.
    let image_blobs: Vec<&str> = std::iter::once(f.bb.config.as_str())
        .chain(f.bb.layers.iter().map(String::as_str))
        .collect();
    let fetched = f.proxy.blobs_fetched();
    assert!(
        !fetched.iter().any(|d| image_blobs.contains(&d.as_str())),
        "refused before any of the image's blobs was fetched: {fetched:?}"
    );
    assert!(store.images().unwrap().is_empty());

    let ok = pull(&store, &name("signed/bb"), &opts).await.unwrap();
    assert_eq!(ok.image.id.as_str(), f.bb.config);
    // Signed as a referrer (found through the referrers tag schema).
    let ok = pull(&store, &name("referred/bb"), &opts).await.unwrap();
    assert_eq!(ok.image.id.as_str(), f.bb.config);
    // By digest too.
    let by_digest = format!("{}/signed/bb@{}", f.proxy.host, f.bb.manifest);
    pull(&store, &by_digest, &opts).await.unwrap();
    // A scope of insecureAcceptAnything takes an unsigned image.
    let layout = f.dir.path().join("layout");
    f.reg.push(&layout, "busybox:latest", "open/bb:1");
    pull(&store, &name("open/bb"), &opts).await.unwrap();
}

#[test]
#[ignore = "needs root, docker-registry, skopeo: run through hack/test.sh"]
fn criusd_reads_the_policy_from_its_config_and_answers_permission_denied() {
    use crius_test_support::daemon::Daemon;
    let f = fixture();
    let mut d = Daemon::start(&[]);
    std::fs::write(
        d.config_path(),
        format!(
            "[image]\nsignature_policy = \"{}\"\n",
            f.dir.path().join("policy.json").display()
        ),
    )
    .unwrap();
    d.restart(&[]);
    let out = d.cli(&["images", "pull", &format!("{}/unsigned/bb:1", f.proxy.host)]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("signature policy") && said.contains("unsigned/bb") && said.contains("no signature"),
        "{said}"
    );
    let got = d.cli_ok(&["images", "pull", "-q", &format!("{}/signed/bb:1", f.proxy.host)]);
    assert_eq!(got.trim(), f.bb.config);
}
