//! A pod's volumes on this machine, under `<pods_dir>/<uid>/volumes/<name>`: `emptyDir` (a directory, or a
//! tmpfs for `medium: Memory`), `hostPath` (with its `type` checks and creations), and `configMap`/`secret`
//! (files written from the manifest's objects). Other volume types need a cluster and are refused by name.
//! A volumeMount's subPath is resolved inside its volume by fd and bound under `<uid>/subpaths`, which is
//! what the container mounts.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

use crius_common::inroot;

use k8s_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, KeyToPath, Volume};
use nix::mount::{MntFlags, MsFlags};

use crate::Error;
use crate::manifest::{Manifest, PodDef};

/// A volume made ready.
#[derive(Debug, Clone)]
struct Ready {
    path: PathBuf,
    /// configMaps and secrets are mounted read-only, whatever the mount asks.
    read_only: bool,
}

/// The volumes of one pod.
#[derive(Debug)]
pub struct Volumes {
    dir: PathBuf,
    ready: BTreeMap<String, Ready>,
    tmpfs: Vec<PathBuf>,
    /// SubPaths bound under `<dir>/subpaths`, unmounted before the directory is deleted.
    pinned: Mutex<Vec<PathBuf>>,
}

impl Volumes {
    /// Makes the volumes of `def` under `dir` (the pod's own directory). On error, what was made is undone.
    pub fn prepare(def: &PodDef, manifest: &Manifest, dir: &Path) -> Result<Volumes, Error> {
        let mut v = Volumes {
            dir: dir.to_path_buf(),
            ready: BTreeMap::new(),
            tmpfs: Vec::new(),
            pinned: Mutex::new(Vec::new()),
        };
        std::fs::create_dir_all(dir).map_err(Error::io(format!("creating {}", dir.display())))?;
        for vol in def.spec.volumes.iter().flatten() {
            if let Err(e) = v.add(def, manifest, vol) {
                v.remove();
                return Err(e);
            }
        }
        Ok(v)
    }

    /// Makes volume `vol` ready; its errors start with `volume "<name>"`.
    fn add(&mut self, def: &PodDef, manifest: &Manifest, vol: &Volume) -> Result<(), Error> {
        let at = &format!("volume {:?}", vol.name);
        let own = self.dir.join("volumes").join(&vol.name);
        let ready = if let Some(e) = &vol.empty_dir {
            std::fs::create_dir_all(&own).map_err(Error::io(format!("{at}: creating {}", own.display())))?;
            // A pod taken back after a restart of the engine's caller has its tmpfs already.
            if e.medium.as_deref() == Some("Memory") && is_mount_point(&own) {
                self.tmpfs.push(own.clone());
            } else if e.medium.as_deref() == Some("Memory") {
                let size = match &e.size_limit {
                    Some(q) => {
                        let bytes = crate::quantity::value(q).map_err(|e| Error::manifest(at, e))?;
                        format!(",size={bytes}")
                    }
                    None => String::new(),
                };
                nix::mount::mount(
                    Some("tmpfs"),
                    &own,
                    Some("tmpfs"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                    Some(format!("mode=0777{size}").as_str()),
                )
                .map_err(|e| Error::Io {
                    context: format!("{at}: mounting a tmpfs on {}", own.display()),
                    source: e.into(),
                })?;
                self.tmpfs.push(own.clone());
            }
            std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o777))
                .map_err(Error::io(format!("{at}: chmod {}", own.display())))?;
            Ready {
                path: own,
                read_only: false,
            }
        } else if let Some(h) = &vol.host_path {
            host_path(Path::new(&h.path), h.type_.as_deref().unwrap_or(""), at)?;
            Ready {
                path: PathBuf::from(&h.path),
                read_only: false,
            }
        } else if let Some(c) = &vol.config_map {
            let data = object(def, &manifest.config_maps, "configMap", &c.name, c.optional, at)?;
            write_files(
                &own,
                &data,
                c.items.as_deref(),
                c.default_mode.unwrap_or(0o644),
                at,
            )?;
            Ready {
                path: own,
                read_only: true,
            }
        } else if let Some(s) = &vol.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = object(def, &manifest.secrets, "secret", &name, s.optional, at)?;
            write_files(
                &own,
                &data,
                s.items.as_deref(),
                s.default_mode.unwrap_or(0o644),
                at,
            )?;
            Ready {
                path: own,
                read_only: true,
            }
        } else {
            let v = serde_json::to_value(vol).unwrap_or_default();
            let kind = v
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
                .unwrap_or_else(|| "(none)".into());
            return Err(Error::manifest(
                at,
                format!(
                    "type {kind} is not supported (crius runs emptyDir, hostPath, configMap and secret volumes)"
                ),
            ));
        };
        self.ready.insert(vol.name.clone(), ready);
        Ok(())
    }

    /// The CRI mounts of container `c`'s volumeMounts.
    pub fn mounts(&self, c: &Container) -> Result<Vec<cri::Mount>, Error> {
        let at = format!("container {:?}", c.name);
        let mut out = Vec::new();
        for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
            let v = self.ready.get(&m.name).ok_or_else(|| {
                Error::manifest(
                    &at,
                    format!("volumeMount {:?} names no volume of the pod", m.name),
                )
            })?;
            let mut host = v.path.clone();
            if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                let p = Path::new(sub);
                if p.components().any(|c| !matches!(c, Component::Normal(_))) {
                    return Err(Error::manifest(
                        &at,
                        format!("subPath {sub:?} must be relative, without `..`"),
                    ));
                }
                let pin = self.dir.join("subpaths").join(&c.name).join(i.to_string());
                host = self.pin_sub_path(&v.path, p, &pin, &at)?;
            }
            let propagation = match m.mount_propagation.as_deref() {
                None | Some("None") => cri::MountPropagation::PropagationPrivate,
                Some("HostToContainer") => cri::MountPropagation::PropagationHostToContainer,
                Some("Bidirectional") => cri::MountPropagation::PropagationBidirectional,
                Some(other) => return Err(Error::manifest(&at, format!("mountPropagation {other:?}"))),
            };
            out.push(cri::Mount {
                container_path: m.mount_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                readonly: v.read_only || m.read_only == Some(true),
                propagation: propagation as i32,
                ..Default::default()
            });
        }
        Ok(out)
    }

    /// Resolves `sub` inside volume `volume` by fd (made as a directory if missing) and binds what it leads
    /// to onto `pin`, which the container then mounts: a subPath that is, or is swapped for, a symlink
    /// leading out of the volume resolves inside it, and the runtime never resolves the subPath's string
    /// again (the CVE-2017-1002101 class).
    fn pin_sub_path(&self, volume: &Path, sub: &Path, pin: &Path, at: &str) -> Result<PathBuf, Error> {
        let fd =
            resolve_sub_path(volume, sub).map_err(Error::io(format!("{at}: subPath {}", sub.display())))?;
        let dir = nix::sys::stat::fstat(fd.as_fd())
            .map(|st| st.st_mode & nix::libc::S_IFMT == nix::libc::S_IFDIR)
            .map_err(|e| Error::io(format!("{at}: subPath {}", sub.display()))(e.into()))?;
        // An earlier attempt's pin: the new one is resolved afresh.
        let _ = nix::mount::umount2(pin, MntFlags::MNT_DETACH);
        let parent = pin.parent().unwrap_or(pin);
        std::fs::create_dir_all(parent).map_err(Error::io(format!("{at}: creating {}", parent.display())))?;
        let _ = std::fs::remove_dir(pin);
        let _ = std::fs::remove_file(pin);
        let made = if dir {
            std::fs::create_dir(pin)
        } else {
            std::fs::write(pin, b"")
        };
        made.map_err(Error::io(format!("{at}: creating {}", pin.display())))?;
        nix::mount::mount(
            Some(&inroot::fd_path(&fd)),
            pin,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(|e| Error::Io {
            context: format!("{at}: binding subPath {} onto {}", sub.display(), pin.display()),
            source: e.into(),
        })?;
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(pin.to_path_buf());
        Ok(pin.to_path_buf())
    }

    /// Unmounts and deletes the pod's own directory (hostPath volumes stay).
    pub fn remove(&mut self) {
        for p in self.pinned.get_mut().unwrap_or_else(|p| p.into_inner()).drain(..) {
            let _ = nix::mount::umount2(&p, MntFlags::MNT_DETACH);
        }
        for t in self.tmpfs.drain(..) {
            let _ = nix::mount::umount2(&t, MntFlags::MNT_DETACH);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether `dir` is a mount point: on another device than its parent.
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let dev = |p: &Path| std::fs::metadata(p).map(|m| m.dev()).ok();
    match (dev(dir), dir.parent().and_then(dev)) {
        (Some(a), Some(b)) => a != b,
        _ => false,
    }
}

/// Opens `sub` inside `volume` as if the volume were `/` (making it a directory if it is missing), by fd.
fn resolve_sub_path(volume: &Path, sub: &Path) -> std::io::Result<OwnedFd> {
    let root = nix::fcntl::open(
        volume,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    match inroot::open(root.as_fd(), sub) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => inroot::mkdir_all(root.as_fd(), sub, 0o777),
        r => r,
    }
}

/// The data of the ConfigMap or Secret (`what`) `name` in the pod's namespace; empty if missing and `optional`.
/// Errors are about `at` (the volume).
fn object(
    def: &PodDef,
    objects: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    what: &str,
    name: &str,
    optional: Option<bool>,
    at: &str,
) -> Result<BTreeMap<String, Vec<u8>>, Error> {
    let key = crate::manifest::key(&Some(def.namespace.clone()), name);
    match objects.get(&key) {
        Some(d) => Ok(d.clone()),
        None if optional == Some(true) => Ok(BTreeMap::new()),
        None => Err(Error::manifest(
            at,
            format!("{what} {key} is not in the manifest (put it in the same file)"),
        )),
    }
}

/// Checks (and for the `…OrCreate` types, makes) a hostPath of `type_`, for volume `at`.
fn host_path(p: &Path, type_: &str, at: &str) -> Result<(), Error> {
    let meta = std::fs::metadata(p);
    let want = |ok: bool, what: &str| {
        if ok {
            Ok(())
        } else {
            Err(Error::manifest(
                at,
                format!("hostPath {} is not {what}", p.display()),
            ))
        }
    };
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" if meta.is_err() => {
            std::fs::create_dir_all(p).map_err(Error::io(format!("{at}: creating {}", p.display())))?;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
                .map_err(Error::io(format!("{at}: chmod {}", p.display())))
        }
        "FileOrCreate" if meta.is_err() => {
            if let Some(parent) = p.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(Error::io(format!("{at}: creating {}", parent.display())))?;
            }
            std::fs::write(p, b"").map_err(Error::io(format!("{at}: creating {}", p.display())))
        }
        t => {
            let m = meta.map_err(Error::io(format!("{at}: hostPath {} ({t})", p.display())))?;
            let ft = m.file_type();
            match t {
                "Directory" | "DirectoryOrCreate" => want(ft.is_dir(), "a directory"),
                "File" | "FileOrCreate" => want(ft.is_file(), "a file"),
                "Socket" => want(ft.is_socket(), "a socket"),
                "CharDevice" => want(ft.is_char_device(), "a character device"),
                "BlockDevice" => want(ft.is_block_device(), "a block device"),
                other => Err(Error::manifest(at, format!("hostPath type {other:?}"))),
            }
        }
    }
}

/// Writes a configMap's or secret's keys as files (all keys, or `items` mapping keys to paths), for volume
/// `at`.
fn write_files(
    dir: &Path,
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    mode: i32,
    at: &str,
) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(Error::io(format!("{at}: creating {}", dir.display())))?;
    let all: Vec<KeyToPath> = data
        .keys()
        .map(|k| KeyToPath {
            key: k.clone(),
            path: k.clone(),
            mode: None,
        })
        .collect();
    for item in items.unwrap_or(&all) {
        let bytes = data
            .get(&item.key)
            .ok_or_else(|| Error::manifest(at, format!("no key {:?}", item.key)))?;
        let rel = Path::new(&item.path);
        if rel.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(Error::manifest(
                at,
                format!("item path {:?} must be relative, without `..`", item.path),
            ));
        }
        let file = dir.join(rel);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)
                .map_err(Error::io(format!("{at}: creating {}", parent.display())))?;
        }
        std::fs::write(&file, bytes).map_err(Error::io(format!("{at}: writing {}", file.display())))?;
        std::fs::set_permissions(
            &file,
            std::fs::Permissions::from_mode(item.mode.unwrap_or(mode) as u32 & 0o7777),
        )
        .map_err(Error::io(format!("{at}: chmod {}", file.display())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
