//! The test images (busybox and crius-testprog, built offline by crius-test-support) checked by real clients:
//! skopeo reads and copies them (so manifests, configs and blob digests are valid), umoci unpacks them into
//! runtime bundles, and the runtime under test runs them.

use std::path::Path;
use std::process::Command;

use crius_test_support::{Runtime, image, testprog_binary, unique};
use serde_json::Value;

fn tool(name: &str, args: &[&str]) -> String {
    let out = Command::new(crius_test_support::which(name))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{name} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn layout() -> (tempfile::TempDir, image::ImageInfo, image::ImageInfo) {
    let dir = tempfile::tempdir().unwrap();
    let bb = image::busybox(&dir.path().join("layout"), "busybox:latest").unwrap();
    let tp = image::testprog(
        &dir.path().join("layout"),
        "crius-testprog:latest",
        &testprog_binary(),
    )
    .unwrap();
    (dir, bb, tp)
}

#[test]
#[ignore = "needs skopeo (hack/install-deps.sh): run through hack/test.sh"]
fn skopeo_reads_and_copies_the_test_images() {
    let (dir, bb, tp) = layout();
    let l = dir.path().join("layout");
    for (name, info) in [("busybox:latest", &bb), ("crius-testprog:latest", &tp)] {
        let v: Value = serde_json::from_str(&tool(
            "skopeo",
            &["inspect", &format!("oci:{}:{name}", l.display())],
        ))
        .unwrap();
        assert_eq!(v["Digest"], info.manifest.as_str());
        assert_eq!(v["Architecture"], "amd64");
        let raw: Value = serde_json::from_str(&tool(
            "skopeo",
            &["inspect", "--raw", &format!("oci:{}:{name}", l.display())],
        ))
        .unwrap();
        assert_eq!(raw["config"]["digest"], info.config.as_str());
    }
    // A copy re-reads every blob and checks it against its digest.
    let copy = dir.path().join("copy");
    tool(
        "skopeo",
        &[
            "copy",
            &format!("oci:{}:busybox:latest", l.display()),
            &format!("oci:{}:bb", copy.display()),
        ],
    );
    assert!(copy.join("index.json").exists());
}

fn unpack(dir: &Path, name: &str) -> std::path::PathBuf {
    let bundle = dir.join(unique("bundle"));
    tool(
        "umoci",
        &[
            "unpack",
            "--image",
            &format!("{}:{name}", dir.join("layout").display()),
            bundle.to_str().unwrap(),
        ],
    );
    bundle
}

fn set_args(bundle: &Path, args: &[&str]) {
    let path = bundle.join("config.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    cfg["process"]["args"] = serde_json::json!(args);
    cfg["process"]["terminal"] = serde_json::json!(false);
    std::fs::write(&path, serde_json::to_vec(&cfg).unwrap()).unwrap();
}

#[test]
#[ignore = "needs root, umoci: run through hack/test.sh"]
fn the_test_images_run_after_umoci_unpack() {
    let rt = Runtime::from_env();
    let (dir, _, _) = layout();
    let tp = unpack(dir.path(), "crius-testprog:latest");
    set_args(
        &tp,
        &[
            "/crius-testprog",
            "--print-env",
            "--exit-after",
            "0",
            "--exit-code",
            "7",
        ],
    );
    let out = rt.run(&["run", "--bundle", tp.to_str().unwrap(), &unique("tp")]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.lines().any(|l| l == "PATH=/"), "{stdout}");

    let bb = unpack(dir.path(), "busybox:latest");
    set_args(
        &bb,
        &[
            "sh",
            "-c",
            "id -u; ls -i /bin/sh /bin/busybox | awk '{print $1}' | uniq | wc -l",
        ],
    );
    let out = rt.run(&["run", "--bundle", bb.to_str().unwrap(), &unique("bb")]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Root in the image, and the applets are hard links to one inode.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\n1\n");
}
