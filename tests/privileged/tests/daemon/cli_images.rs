//! The `crius images` CLI: pull with progress, import, list, inspect, remove and tag.

use super::*;

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
