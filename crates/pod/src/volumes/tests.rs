//! Tests of the volumes: each type made and removed, and subPaths kept inside their volume.

use super::sub_path::resolve_sub_path;
use super::*;
use crius_common::inroot;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

#[test]
fn empty_dirs_host_paths_and_configmaps() {
    let tmp = tempfile::tempdir().unwrap();
    let host = tmp.path().join("host/made");
    let m = crate::manifest::parse(
        &format!(
            r#"
apiVersion: v1
kind: ConfigMap
metadata: {{name: cfg}}
data: {{a.conf: "x=1", b.conf: "y=2"}}
---
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  containers:
  - name: c
    image: busybox
    volumeMounts:
    - {{name: scratch, mountPath: /scratch}}
    - {{name: cfg, mountPath: /etc/app}}
    - {{name: host, mountPath: /host, readOnly: true, mountPropagation: HostToContainer}}
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
  - {{name: cfg, configMap: {{name: cfg, items: [{{key: b.conf, path: sub/b.conf, mode: 0600}}]}}}}
  - {{name: host, hostPath: {{path: {}, type: DirectoryOrCreate}}}}
"#,
            host.display()
        ),
        "t",
    )
    .unwrap();
    let def = &m.pods[0];
    let dir = tmp.path().join("pod");
    let mut v = Volumes::prepare(def, &m, &dir).unwrap();
    assert!(host.is_dir());
    let mounts = v.mounts(&def.spec.containers[0]).unwrap();
    assert_eq!(mounts[0].host_path, dir.join("volumes/scratch").to_str().unwrap());
    assert!(mounts[1].readonly && mounts[2].readonly && !mounts[0].readonly);
    assert_eq!(
        mounts[2].propagation,
        cri::MountPropagation::PropagationHostToContainer as i32
    );
    let b = dir.join("volumes/cfg/sub/b.conf");
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "y=2");
    assert_eq!(std::fs::metadata(&b).unwrap().permissions().mode() & 0o777, 0o600);
    assert!(!dir.join("volumes/cfg/a.conf").exists(), "only the listed items");
    v.remove();
    assert!(!dir.exists() && host.is_dir());

    let mut bad = def.clone();
    bad.spec.volumes.as_mut().unwrap()[1]
        .config_map
        .as_mut()
        .unwrap()
        .name = "nope".into();
    let e = Volumes::prepare(&bad, &m, &dir).unwrap_err().to_string();
    assert!(
        e.contains("volume \"cfg\": configMap default/nope is not in the manifest"),
        "{e}"
    );
    assert!(!dir.exists(), "nothing left on error");
    let mut nfs = def.clone();
    nfs.spec.volumes.as_mut().unwrap()[0] =
        serde_json::from_value(serde_json::json!({"name": "n", "nfs": {"server": "s", "path": "/"}}))
            .unwrap();
    let e = Volumes::prepare(&nfs, &m, &dir).unwrap_err().to_string();
    assert!(e.contains("type nfs is not supported"), "{e}");
}

#[test]
fn sub_paths_resolve_inside_their_volume() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = tmp.path();
    std::os::unix::fs::symlink("/", vol.join("slash")).unwrap();
    std::os::unix::fs::symlink("../../..", vol.join("up")).unwrap();
    let at = |sub: &str| inroot::real_path(&resolve_sub_path(vol, Path::new(sub)).unwrap()).unwrap();
    assert_eq!(at("slash"), vol);
    assert_eq!(at("up"), vol);
    assert_eq!(at("slash/etc"), vol.join("etc"), "made inside the volume");
    assert!(vol.join("etc").is_dir());
    assert_eq!(at("logs/app"), vol.join("logs/app"));
}

/// A container swaps its volume's subPath directory for a symlink to `/` while the engine makes the
/// mounts of another container: what the engine hands to CRI is always inside the volume, never the
/// host's / (nor a directory made on the host), however late the runtime looks at it. Needs root (bind
/// mounts); skipped loudly otherwise.
#[test]
fn a_sub_path_swapped_for_a_symlink_to_root_never_exposes_the_host() {
    use std::os::unix::fs::MetadataExt;
    use std::sync::atomic::{AtomicBool, Ordering};
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: binding subPaths needs root (hack/test.sh runs the unit tests as root)");
        return;
    }
    /// Stops the swapper and unmounts the pins even when an assertion fails.
    struct Guard(Volumes, std::sync::Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.1.store(true, Ordering::Relaxed);
            self.0.remove();
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let deep = format!("crius-subpath-{}", std::process::id());
    let m = crate::manifest::parse(
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: p}}
spec:
  containers:
  - name: c
    image: busybox
    volumeMounts:
    - {{name: scratch, mountPath: /sub, subPath: d}}
    - {{name: scratch, mountPath: /deep, subPath: d/{deep}}}
  volumes:
  - {{name: scratch, emptyDir: {{}}}}
"#
        ),
        "t",
    )
    .unwrap();
    let def = &m.pods[0];
    let dir = tmp.path().join("pod");
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let g = Guard(Volumes::prepare(def, &m, &dir).unwrap(), stop.clone());
    let vol = dir.join("volumes/scratch");
    std::fs::create_dir_all(vol.join("d")).unwrap();
    let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).unwrap();
    let host_root = id(Path::new("/"));
    let swapper = {
        let (vol, stop) = (vol.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut swaps = 0;
            while !stop.load(Ordering::Relaxed) {
                if std::fs::rename(vol.join("d"), vol.join("t")).is_ok() {
                    let _ = std::os::unix::fs::symlink("/", vol.join("d"));
                    let _ = std::fs::remove_file(vol.join("d"));
                    if std::fs::rename(vol.join("t"), vol.join("d")).is_err() {
                        // The engine made a fresh d meanwhile: put the real one back.
                        let _ = std::fs::remove_dir_all(vol.join("d"));
                        let _ = std::fs::rename(vol.join("t"), vol.join("d"));
                    }
                    swaps += 1;
                }
            }
            swaps
        })
    };
    let (mut pinned, mut failed) = (0, 0);
    for _ in 0..200 {
        match g.0.mounts(&def.spec.containers[0]) {
            Ok(mounts) => {
                pinned += 1;
                std::thread::yield_now();
                for mount in &mounts {
                    let now = id(Path::new(&mount.host_path));
                    assert_ne!(now, host_root, "{} is the host's /", mount.host_path);
                }
            }
            // The subPath was missing or a symlink at the instant it was made: a clean refusal.
            Err(_) => failed += 1,
        }
        assert!(
            !Path::new("/").join(&deep).exists(),
            "a subPath was made on the host"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let swaps = swapper.join().unwrap();
    eprintln!("200 tries: {pinned} pinned inside the volume, {failed} refused, {swaps} swaps");
    assert!(pinned > 0 && swaps > 0);
    drop(g);
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(!table.contains(dir.to_str().unwrap()), "a subPath mount is left");
    assert!(!dir.exists());
}
