//! Tests of the volumes: each type made and removed, the files of configMap, secret, downwardAPI and projected
//! volumes as kubelet writes them, and subPaths kept inside their volume.

use super::sub_path::resolve_sub_path;
use super::*;
use crate::convert::PodIdentity;

/// The pod's identity in these tests: a generated name, uid `u-1`.
fn id() -> PodIdentity {
    PodIdentity {
        name: "p-x7k2q".into(),
        uid: "u-1".into(),
        log_directory: String::new(),
    }
}
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
    let mut v = Volumes::prepare(def, &m, &id(), &dir, NODE).unwrap();
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
    let e = Volumes::prepare(&bad, &m, &id(), &dir, NODE)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("volume \"cfg\": configMap default/nope is not in the manifest"),
        "{e}"
    );
    assert!(!dir.exists(), "nothing left on error");
    let mut nfs = def.clone();
    nfs.spec.volumes.as_mut().unwrap()[0] =
        serde_json::from_value(serde_json::json!({"name": "n", "nfs": {"server": "s", "path": "/"}}))
            .unwrap();
    let e = Volumes::prepare(&nfs, &m, &id(), &dir, NODE)
        .unwrap_err()
        .to_string();
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
    let g = Guard(
        Volumes::prepare(def, &m, &id(), &dir, NODE).unwrap(),
        stop.clone(),
    );
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

/// The pod `p` of `m`, its volumes made under `dir` as [`id`]'s.
/// What the node offers in these tests: not the machine's, so a downward value that read the machine shows.
const NODE: Allocatable = Allocatable {
    milli_cpu: 123_400,
    memory: 5 << 40,
};

fn prepared(m: &Manifest, dir: &Path) -> Result<Volumes, Error> {
    Volumes::prepare(&m.pods[0], m, &id(), dir, NODE)
}

fn read(dir: &Path, path: &str) -> (String, u32) {
    let p = dir.join(path);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let meta = std::fs::symlink_metadata(&p).unwrap();
    assert!(meta.file_type().is_file(), "{path} is a regular file");
    (text, meta.permissions().mode() & 0o7777)
}

#[test]
fn downward_files_are_what_kubelet_writes() {
    let m = crate::manifest::parse(
        r#"
apiVersion: v1
kind: Pod
metadata:
  name: p
  labels: {tier: "a \"b\"\n\tc", app: web}
  annotations: {example.com/note: "é\u00a0x", build: "7"}
spec:
  containers:
  - name: c
    image: busybox
    resources:
      limits: {cpu: 1500m, memory: 64Mi, ephemeral-storage: 1Gi}
      requests: {cpu: 250m}
    volumeMounts: [{name: info, mountPath: /info, readOnly: false}]
  - name: d
    image: busybox
  volumes:
  - name: info
    downwardAPI:
      defaultMode: 0440
      items:
      - {path: name, fieldRef: {fieldPath: metadata.name}}
      - {path: ns, fieldRef: {fieldPath: metadata.namespace}}
      - {path: uid, fieldRef: {fieldPath: metadata.uid}}
      - {path: labels, fieldRef: {fieldPath: metadata.labels}, mode: 0400}
      - {path: annotations, fieldRef: {fieldPath: metadata.annotations}}
      - {path: by/key/app, fieldRef: {fieldPath: "metadata.labels['app']"}}
      - {path: note, fieldRef: {fieldPath: "metadata.annotations['example.com/note']"}}
      - {path: none, fieldRef: {fieldPath: "metadata.labels['none']"}}
      - {path: cpu_m, resourceFieldRef: {containerName: c, resource: limits.cpu, divisor: 1m}}
      - {path: cpu, resourceFieldRef: {containerName: c, resource: limits.cpu}}
      - {path: cpu_req, resourceFieldRef: {containerName: c, resource: requests.cpu, divisor: 1m}}
      - {path: mem_mi, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1Mi}}
      - {path: mem_m, resourceFieldRef: {containerName: c, resource: limits.memory, divisor: 1M}}
      - {path: mem_req, resourceFieldRef: {containerName: c, resource: requests.memory, divisor: 1Ki}}
      - {path: disk, resourceFieldRef: {containerName: c, resource: limits.ephemeral-storage, divisor: 1Gi}}
      - {path: node_cpu, resourceFieldRef: {containerName: d, resource: limits.cpu, divisor: 1m}}
      - {path: node_mem, resourceFieldRef: {containerName: d, resource: limits.memory}}
      - {path: no_req, resourceFieldRef: {containerName: d, resource: requests.cpu, divisor: 1m}}
"#,
        "t",
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pod");
    let mut v = prepared(&m, &dir).unwrap();
    let vol = dir.join("volumes/info");
    let node = NODE;
    let want = [
        ("name", "p-x7k2q".to_string(), 0o440),
        ("ns", "default".into(), 0o440),
        ("uid", "u-1".into(), 0o440),
        // Sorted by key, Go's %q quoting, no newline after the last.
        (
            "labels",
            r#"app="web"
tier="a \"b\"\n\tc""#
                .into(),
            0o400,
        ),
        (
            "annotations",
            "build=\"7\"\nexample.com/note=\"é\\u00a0x\"".into(),
            0o440,
        ),
        ("by/key/app", "web".into(), 0o440),
        ("note", "é\u{a0}x".into(), 0o440),
        ("none", "".into(), 0o440),
        ("cpu_m", "1500".into(), 0o440),
        ("cpu", "2".into(), 0o440),
        ("cpu_req", "250".into(), 0o440),
        ("mem_mi", "64".into(), 0o440),
        ("mem_m", "68".into(), 0o440),
        ("mem_req", "65536".into(), 0o440),
        ("disk", "1".into(), 0o440),
        ("node_cpu", node.milli_cpu.to_string(), 0o440),
        ("node_mem", node.memory.to_string(), 0o440),
        ("no_req", "0".into(), 0o440),
    ];
    for (path, text, mode) in want {
        assert_eq!(read(&vol, path), (text, mode), "{path}");
    }
    let mounts = v.mounts(&m.pods[0].spec.containers[0]).unwrap();
    assert!(mounts[0].readonly, "a downwardAPI volume is read-only");
    v.remove();
    assert!(!dir.exists());

    // A field a file may not name, and a resource without its container.
    let bad = |item: &str| {
        let text = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers: [{{name: c, image: x}}]\n  volumes:\n  - name: info\n    downwardAPI:\n      items: [{item}]\n"
        );
        let m = crate::manifest::parse(&text, "t").unwrap();
        let e = prepared(&m, &dir).unwrap_err().to_string();
        assert!(!dir.exists(), "nothing left on error");
        e
    };
    let e = bad("{path: ip, fieldRef: {fieldPath: status.podIP}}");
    assert!(
        e.contains("volume \"info\": downwardAPI: items[0] (ip): fieldRef \"status.podIP\" is not one a file may name"),
        "{e}"
    );
    let e = bad("{path: cpu, resourceFieldRef: {resource: limits.cpu}}");
    assert!(
        e.contains("items[0] (cpu): resourceFieldRef needs containerName"),
        "{e}"
    );
    let e = bad("{path: cpu, resourceFieldRef: {containerName: z, resource: limits.cpu}}");
    assert!(e.contains("resourceFieldRef names no container \"z\""), "{e}");
    let e = bad("{path: ../x, fieldRef: {fieldPath: metadata.name}}");
    assert!(e.contains("item path \"../x\" must be relative"), "{e}");
}

const PROJECTED_OBJECTS: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {a.conf: "x=1", b.conf: "y=2"}
---
apiVersion: v1
kind: Secret
metadata: {name: creds}
stringData: {token: s3cr3t, user: admin}
---
"#;

fn projected_pod(sources: &str) -> Manifest {
    let text = format!(
        "{PROJECTED_OBJECTS}apiVersion: v1\nkind: Pod\nmetadata: {{name: p, labels: {{app: web}}}}\nspec:\n  containers:\n  - name: c\n    image: x\n    volumeMounts: [{{name: all, mountPath: /all}}]\n  volumes:\n  - name: all\n    projected:\n      defaultMode: 0640\n      sources:\n{sources}"
    );
    crate::manifest::parse(&text, "t").unwrap()
}

#[test]
fn projected_sources_merge_into_one_directory() {
    let m = projected_pod(
        r#"      - configMap: {name: cfg}
      - secret: {name: creds, items: [{key: token, path: auth/token, mode: 0400}]}
      - downwardAPI:
          items:
          - {path: labels, fieldRef: {fieldPath: metadata.labels}}
          - {path: pod/name, fieldRef: {fieldPath: metadata.name}, mode: 0444}
      - configMap: {name: gone, optional: true, items: [{key: k, path: k}]}
"#,
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pod");
    let mut v = prepared(&m, &dir).unwrap();
    let vol = dir.join("volumes/all");
    assert_eq!(read(&vol, "a.conf"), ("x=1".into(), 0o640));
    assert_eq!(read(&vol, "b.conf"), ("y=2".into(), 0o640));
    assert_eq!(read(&vol, "auth/token"), ("s3cr3t".into(), 0o400));
    assert!(!vol.join("user").exists(), "only the secret's listed items");
    assert_eq!(read(&vol, "labels"), ("app=\"web\"".into(), 0o640));
    assert_eq!(read(&vol, "pod/name"), ("p-x7k2q".into(), 0o444));
    assert!(
        !vol.join("k").exists(),
        "an optional source that is missing gives nothing"
    );
    let mounts = v.mounts(&m.pods[0].spec.containers[0]).unwrap();
    assert!(mounts[0].readonly, "a projected volume is read-only");
    v.remove();
    assert!(!dir.exists());
}

#[test]
fn a_projected_path_clash_names_both_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pod");
    let m = projected_pod(
        r#"      - configMap: {name: cfg}
      - downwardAPI: {items: [{path: b.conf, fieldRef: {fieldPath: metadata.name}}]}
"#,
    );
    let e = prepared(&m, &dir).unwrap_err().to_string();
    assert!(
        e.contains(
            "volume \"all\": path \"b.conf\" clash: sources[0] (configMap \"cfg\") and sources[1] (downwardAPI) \
             both write there"
        ),
        "{e}"
    );
    assert!(!dir.exists(), "nothing left on error");
    // A file where another source's directory is.
    let m = projected_pod(
        r#"      - secret: {name: creds, items: [{key: token, path: a.conf/token}]}
      - configMap: {name: cfg}
"#,
    );
    let e = prepared(&m, &dir).unwrap_err().to_string();
    assert!(
        e.contains("paths \"a.conf/token\" and \"a.conf\" clash: sources[0] (secret \"creds\") and sources[1] (configMap \"cfg\")"),
        "{e}"
    );
}

#[test]
fn projections_that_need_an_api_server_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pod");
    let cases = [
        (
            "      - serviceAccountToken: {path: token, expirationSeconds: 3600}\n",
            "volume \"all\": projected sources[1]: serviceAccountToken: crius has no API server to issue a service account token",
        ),
        (
            "      - clusterTrustBundle: {path: ca.pem, signerName: example.com/ca}\n",
            "projected sources[1]: clusterTrustBundle: crius has no API server",
        ),
        (
            "      - podCertificate: {signerName: example.com/s, keyType: ED25519, credentialBundlePath: c.pem}\n",
            "projected sources[1]: podCertificate: crius has no API server to issue a pod certificate",
        ),
    ];
    for (source, want) in cases {
        let m = projected_pod(&format!("      - configMap: {{name: cfg}}\n{source}"));
        let e = prepared(&m, &dir).unwrap_err().to_string();
        assert!(e.contains(want), "{e}");
        assert!(!dir.exists(), "nothing left on error");
    }
}

#[test]
fn an_image_volume_is_a_cri_mount_of_its_pulled_image_with_its_sub_path() {
    let tmp = tempfile::tempdir().unwrap();
    let m = crate::manifest::parse(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    image: x\n    \
         volumeMounts:\n    - {name: tools, mountPath: /tools}\n    - {name: tools, mountPath: /bin2, subPath: bin}\n  \
         volumes:\n  - {name: tools, image: {reference: 'tools:1', pullPolicy: IfNotPresent}}\n",
        "t.yaml",
    )
    .unwrap();
    let mut v = prepared(&m, tmp.path()).unwrap();
    v.resolve_images(&[("tools:1".to_string(), "sha256:abc".to_string())].into());
    let mounts = v.mounts(&m.pods[0].spec.containers[0]).unwrap();
    let image = |i: usize| mounts[i].image.as_ref().map(|s| s.image.clone());
    assert_eq!(image(0).as_deref(), Some("sha256:abc"));
    assert_eq!((mounts[0].readonly, mounts[0].host_path.as_str()), (true, ""));
    assert_eq!(
        (
            mounts[1].container_path.as_str(),
            mounts[1].image_sub_path.as_str()
        ),
        ("/bin2", "bin")
    );
    let mut up = m.pods[0].spec.containers[0].clone();
    up.volume_mounts.as_mut().unwrap()[1].sub_path = Some("../etc".into());
    let e = v.mounts(&up).unwrap_err().to_string();
    assert!(e.contains("subPath \"../etc\" must be relative"), "{e}");
    v.remove();
}
