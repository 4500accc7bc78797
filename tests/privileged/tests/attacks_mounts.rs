//! Attacks on the runtime's mounts (the CVE-2021-30465 class): a sibling container swapping a shared volume's
//! directory for a symlink to `/` while another container's mounts go through it, again and again; mounts at
//! and under /proc and through symlinks leading there. Nothing may land on the host, and every attempt either
//! mounts inside the container's root or fails cleanly.
//! Runs against crius-runc, and against runc with `CRIUS_TEST_RUNTIME=runc` (`crius_only_*` tests excepted:
//! see the swap test for why it is one).

use std::path::{Path, PathBuf};

use crius_test_support::{Bundle, Runtime, build_busybox_rootfs, unique};
use serde_json::json;

/// A private busybox rootfs: the mounts of these tests make their mount points in it, wherever they resolve.
fn private_rootfs(dir: &Path) -> PathBuf {
    let root = dir.join("rootfs");
    build_busybox_rootfs(&root).expect("busybox rootfs");
    root
}

fn bind(src: &Path, dest: &str) -> serde_json::Value {
    json!({"destination": dest, "type": "bind", "source": src, "options": ["rbind", "rw"]})
}

/// Host paths that must never exist, removed (with whatever was mounted on them here) when the test ends,
/// whether it passes or not.
struct HostMarkers(Vec<PathBuf>);

impl HostMarkers {
    fn escaped(&self) -> Vec<&PathBuf> {
        self.0.iter().filter(|p| p.symlink_metadata().is_ok()).collect()
    }
}

impl Drop for HostMarkers {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = nix::mount::umount2(p, nix::mount::MntFlags::MNT_DETACH);
            let _ = std::fs::remove_dir(p);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Mount points of the host's mount table whose path contains `needle`.
fn host_mounts_with(needle: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(needle))
        .map(String::from)
        .collect()
}

const ITERATIONS: usize = 200;
const MOUNTS_PER_ITERATION: usize = 16;

/// crius-runc only: the reference runc of the test machines (Debian's 1.1.5) fails it within a few hundred
/// iterations, making the mount point directories on the host (CVE-2024-45310, fixed in runc 1.1.14); the
/// crius-runc before mounts were made by fd failed it within a few iterations.
#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn crius_only_a_volume_directory_swapped_for_a_symlink_to_root_never_mounts_on_the_host() {
    let rt = Runtime::from_env();
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = private_rootfs(tmp.path());
    let vol = tmp.path().join("vol");
    std::fs::create_dir_all(vol.join("d")).unwrap();
    std::os::unix::fs::symlink("/", vol.join("link")).unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("marker"), "mounted").unwrap();
    let name = unique("crius-escape");
    let targets: Vec<String> = (0..MOUNTS_PER_ITERATION).map(|k| format!("{name}-{k}")).collect();
    let markers = HostMarkers(targets.iter().map(|t| Path::new("/").join(t)).collect());

    // The sibling: swaps /vol/d for a symlink to / and back, as fast as busybox goes; if the runtime made a
    // fresh d while it was away, it puts the real one back.
    let swap = "cd /vol; while :; do mv d t && ln -s / d && rm d && mv t d; \
                if [ -d t ]; then rm -rf d; mv t d; fi; done";
    let mut sibling = Bundle::new(&["sh", "-c", swap]);
    sibling.config["root"]["path"] = json!(rootfs);
    sibling.config["mounts"]
        .as_array_mut()
        .unwrap()
        .push(bind(&vol, "/vol"));
    let sib = unique("swapper");
    rt.create_started(&sib, &sibling);

    let (mut ok, mut refused, mut inside_root) = (0, 0, 0);
    let mut errors = Vec::new();
    for i in 0..ITERATIONS {
        let mut b = Bundle::new(&["true"]);
        b.config["root"]["path"] = json!(rootfs);
        let mounts = b.config["mounts"].as_array_mut().unwrap();
        mounts.push(bind(&vol, "/vol"));
        for t in &targets {
            mounts.push(bind(&src, &format!("/vol/d/{t}")));
        }
        let dir = b.write().to_str().unwrap().to_string();
        let out = rt.run(&["run", "--bundle", &dir, &unique("mounter")]);
        if out.status.success() {
            ok += 1;
        } else {
            refused += 1;
            if errors.len() < 3 {
                errors.push(String::from_utf8_lossy(&out.stderr).into_owned());
            }
        }
        // The swap led some mounts through the symlink: / was the container's root, so they are in it.
        if targets.iter().any(|t| rootfs.join(t).exists()) {
            inside_root += 1;
            for t in &targets {
                let _ = std::fs::remove_dir(rootfs.join(t));
            }
        }
        let escaped = markers.escaped();
        assert!(
            escaped.is_empty(),
            "iteration {i}: the runtime made {escaped:?} on the host through the swapped symlink"
        );
        let leaked = host_mounts_with(&name);
        assert!(leaked.is_empty(), "iteration {i}: host mounts {leaked:?}");
    }
    rt.ok(&["kill", &sib, "KILL"]);
    rt.wait_status(&sib, "stopped");
    rt.ok(&["delete", &sib]);
    eprintln!(
        "{ITERATIONS} iterations: {ok} mounted, {refused} failed cleanly, {inside_root} went through the \
         symlink into the container's root; first errors: {errors:#?}"
    );
    assert!(ok > 0, "no iteration mounted at all: {errors:#?}");
    for e in &errors {
        assert!(
            !e.contains("panicked"),
            "a refused iteration must fail with an error, not a panic: {e}"
        );
    }
    assert!(host_mounts_with(&name).is_empty());
}

fn run(rt: &Runtime, b: &Bundle) -> (bool, String, String) {
    let dir = b.write().to_str().unwrap().to_string();
    let out = rt.run(&["run", "--bundle", &dir, &unique("proc")]);
    let text = |v: &[u8]| String::from_utf8_lossy(v).into_owned();
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

#[test]
#[ignore = "needs root: run through hack/test.sh"]
fn mounts_inside_proc_are_refused_but_the_lxcfs_files() {
    let rt = Runtime::from_env();
    let tmp = tempfile::tempdir().unwrap();
    let rootfs = private_rootfs(tmp.path());
    std::os::unix::fs::symlink("/proc/sys", rootfs.join("sysdir")).unwrap();
    let file = tmp.path().join("cpuinfo");
    std::fs::write(&file, "emulated cpuinfo\n").unwrap();
    let dir = tmp.path().join("dir");
    std::fs::create_dir_all(&dir).unwrap();
    let with = |m: serde_json::Value, script: &str| {
        let mut b = Bundle::new(&["sh", "-c", script]);
        b.config["root"]["path"] = json!(rootfs);
        b.config["mounts"].as_array_mut().unwrap().push(m);
        b
    };

    // lxcfs's files: allowed.
    let (ok, out, err) = run(&rt, &with(bind(&file, "/proc/cpuinfo"), "cat /proc/cpuinfo"));
    assert!(ok, "{err}");
    assert_eq!(out, "emulated cpuinfo\n");

    // Anything else under /proc, directly or through a symlink in the image: refused.
    for (m, why) in [
        (bind(&dir, "/proc/sys/kernel"), "is inside /proc"),
        (bind(&file, "/proc/self/attr/current"), "is inside /proc"),
        (bind(&dir, "/sysdir"), "resolves to /proc/sys"),
        (
            json!({"destination": "/proc", "type": "tmpfs", "source": "tmpfs"}),
            "only a procfs may be mounted on /proc",
        ),
    ] {
        let dest = m["destination"].as_str().unwrap().to_string();
        let (ok, _, err) = run(&rt, &with(m, "echo ran"));
        assert!(!ok, "a mount on {dest} must be refused");
        if rt.is_crius {
            assert!(
                err.contains(&format!("mount {dest}")) && err.contains(why),
                "{dest}: {err}"
            );
        }
    }
    assert!(!Path::new("/proc/sys/kernel/marker").exists());
}
