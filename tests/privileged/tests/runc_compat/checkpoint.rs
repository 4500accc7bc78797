//! `checkpoint` and `restore` on the host: runc's flags in their help, and refusals that come before CRIU runs
//! (CRIU itself is tested in the VM: vm_checkpoint).

use crius_test_support::{Bundle, Runtime, unique};

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn checkpoint_and_restore_have_runcs_flags_and_refuse_bad_ones() {
    let rt = Runtime::from_env();
    let help = rt.ok(&["checkpoint", "-h"]);
    for flag in [
        "--image-path",
        "--work-path",
        "--parent-path",
        "--leave-running",
        "--tcp-established",
        "--ext-unix-sk",
        "--shell-job",
        "--lazy-pages",
        "--file-locks",
        "--pre-dump",
        "--manage-cgroups-mode",
        "--empty-ns",
        "--auto-dedup",
    ] {
        assert!(help.contains(flag), "checkpoint -h lacks {flag}: {help}");
    }
    let help = rt.ok(&["restore", "-h"]);
    for flag in [
        "--console-socket",
        "--image-path",
        "--work-path",
        "--bundle",
        "--detach",
        "--pid-file",
        "--no-subreaper",
        "--no-pivot",
        "--tcp-established",
        "--file-locks",
        "--manage-cgroups-mode",
        "--lsm-profile",
    ] {
        assert!(help.contains(flag), "restore -h lacks {flag}: {help}");
    }
    let said = rt.fails(&["checkpoint", "--no-such-flag", "c1"]);
    assert!(said.contains("no-such-flag"), "{said}");
    let said = rt.fails(&["checkpoint", "nosuch"]);
    assert!(said.contains("does not exist"), "{said}");
    // A restore without images names the file it lacks and leaves nothing under the root.
    let empty = tempfile::tempdir().unwrap();
    let b = Bundle::new(&["true"]);
    let dir = b.write().to_str().unwrap().to_string();
    let images = empty.path().to_str().unwrap();
    let said = rt.fails(&["restore", "-d", "--image-path", images, "--bundle", &dir, "r1"]);
    assert!(said.contains("descriptors.json"), "{said}");
    assert!(rt.ids().is_empty(), "{:?}", rt.ids());
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_checkpoint_refuses_what_it_does_not_support_before_criu_runs() {
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "100"]);
    let id = unique("ck");
    rt.create_started(&id, &b);
    let images = tempfile::tempdir().unwrap();
    let img = images.path().to_str().unwrap();
    for (flags, says) in [
        (&["--lazy-pages"][..], "--lazy-pages is not supported"),
        (&["--page-server", "10.0.0.1:27"][..], "--page-server"),
        (
            &["--manage-cgroups-mode", "hard"][..],
            "--manage-cgroups-mode \"hard\"",
        ),
        (&["--empty-ns", "ipc"][..], "only the network namespace"),
    ] {
        let mut args = vec!["checkpoint", "--image-path", img];
        args.extend_from_slice(flags);
        args.push(&id);
        let said = rt.fails(&args);
        assert!(said.contains(says), "{flags:?}: {said}");
        assert_eq!(rt.status(&id), "running");
    }
    let said = rt.fails(&[
        "checkpoint",
        "--criu",
        "/nonexistent/criu",
        "--image-path",
        img,
        &id,
    ]);
    assert!(
        said.contains("CRIU (/nonexistent/criu) is not installed"),
        "{said}"
    );
    assert_eq!(rt.status(&id), "running");
    rt.ok(&["delete", "--force", &id]);
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn a_bad_parent_path_is_refused_before_criu_runs() {
    // runc's checkpoint.bats "checkpoint --pre-dump (bad --parent-path)": an absolute --parent-path, and one
    // that is not a directory under the image path, are refused, naming the flag; the container runs on.
    let rt = Runtime::from_env();
    let b = Bundle::new(&["sleep", "100"]);
    let id = unique("ckp");
    rt.create_started(&id, &b);
    let images = tempfile::tempdir().unwrap();
    let img = images.path().to_str().unwrap();
    let absolute = images.path().join("parent");
    std::fs::create_dir(&absolute).unwrap();
    std::fs::write(images.path().join("file"), "").unwrap();
    for parent in [absolute.to_str().unwrap(), "missing", "file"] {
        let said = rt.fails(&["checkpoint", "--parent-path", parent, "--image-path", img, &id]);
        assert!(said.contains("--parent-path"), "{parent}: {said}");
        assert_eq!(rt.status(&id), "running", "{parent}");
    }
    rt.ok(&["delete", "--force", &id]);
}
