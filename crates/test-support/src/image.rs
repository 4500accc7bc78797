//! Small OCI images made offline, for the image, shim and pod tests: an OCI image layout (`oci-layout`,
//! `index.json`, `blobs/sha256/…`) with gzip layers whose tar entries are deterministic (sorted, mtime 0,
//! uid/gid kept) and whose hard links stay hard links (busybox's applets).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// What goes into one image.
#[derive(Debug, Clone, Default)]
pub struct ImageSpec {
    /// The reference name stored in index.json (`org.opencontainers.image.ref.name`), e.g. `busybox:latest`.
    pub name: String,
    /// Directories, one per layer, lowest first.
    pub layers: Vec<PathBuf>,
    /// Entrypoint.
    pub entrypoint: Vec<String>,
    /// Cmd.
    pub cmd: Vec<String>,
    /// Environment, `K=V`.
    pub env: Vec<String>,
    /// User (`uid[:gid]` or a name).
    pub user: String,
    /// Working directory.
    pub workdir: String,
    /// Compress layers with zstd instead of gzip.
    pub zstd: bool,
}

/// The digests of a written image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// `sha256:…` of the manifest.
    pub manifest: String,
    /// `sha256:…` of the config (the image id CRI reports).
    pub config: String,
    /// `sha256:…` of each compressed layer blob.
    pub layers: Vec<String>,
}

fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// Stores `bytes` as a blob of the layout at `out`; returns its digest.
fn put_blob(out: &Path, bytes: &[u8]) -> std::io::Result<String> {
    let d = digest(bytes);
    let dir = out.join("blobs/sha256");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join(d.trim_start_matches("sha256:")), bytes)?;
    Ok(d)
}

/// A deterministic tar of the tree at `dir`; files sharing an inode after the first become hard links.
pub fn layer_tar(dir: &Path) -> std::io::Result<Vec<u8>> {
    let mut paths = Vec::new();
    walk(dir, Path::new(""), &mut paths)?;
    paths.sort();
    let mut b = tar::Builder::new(Vec::new());
    let mut seen: HashMap<(u64, u64), PathBuf> = HashMap::new();
    for rel in paths {
        let full = dir.join(&rel);
        let meta = std::fs::symlink_metadata(&full)?;
        let mut h = tar::Header::new_gnu();
        h.set_mode(meta.mode() & 0o7777);
        h.set_uid(u64::from(meta.uid()));
        h.set_gid(u64::from(meta.gid()));
        h.set_mtime(0);
        let ft = meta.file_type();
        if ft.is_dir() {
            h.set_entry_type(tar::EntryType::Directory);
            h.set_size(0);
            b.append_data(&mut h, &rel, std::io::empty())?;
        } else if ft.is_symlink() {
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, &rel, std::fs::read_link(&full)?)?;
        } else if ft.is_char_device() || ft.is_block_device() || ft.is_fifo() {
            let kind = if ft.is_char_device() {
                tar::EntryType::Char
            } else if ft.is_block_device() {
                tar::EntryType::Block
            } else {
                tar::EntryType::Fifo
            };
            h.set_entry_type(kind);
            h.set_size(0);
            let rdev = meta.rdev();
            h.set_device_major(libc::major(rdev))?;
            h.set_device_minor(libc::minor(rdev))?;
            b.append_data(&mut h, &rel, std::io::empty())?;
        } else if ft.is_file() {
            let key = (meta.dev(), meta.ino());
            if let Some(first) = seen.get(&key).filter(|_| meta.nlink() > 1) {
                h.set_entry_type(tar::EntryType::Link);
                h.set_size(0);
                b.append_link(&mut h, &rel, first)?;
            } else {
                seen.insert(key, rel.clone());
                h.set_entry_type(tar::EntryType::Regular);
                h.set_size(meta.len());
                b.append_data(&mut h, &rel, std::fs::File::open(&full)?)?;
            }
        }
    }
    b.into_inner()
}

fn walk(root: &Path, rel: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(root.join(rel))? {
        let entry = entry?;
        let r = rel.join(entry.file_name());
        let is_dir = entry.file_type()?.is_dir();
        out.push(r.clone());
        if is_dir {
            walk(root, &r, out)?;
        }
    }
    Ok(())
}

fn gzip(bytes: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes)?;
    e.finish()
}

/// Writes `images` into the OCI image layout at `out` (created if missing). Images already in its index stay,
/// unless one of `images` has the same name.
pub fn write_layout(out: &Path, images: &[ImageSpec]) -> std::io::Result<Vec<ImageInfo>> {
    std::fs::create_dir_all(out)?;
    std::fs::write(out.join("oci-layout"), r#"{"imageLayoutVersion":"1.0.0"}"#)?;
    let mut manifests = Vec::new();
    let mut infos = Vec::new();
    for img in images {
        let mut layers = Vec::new();
        let mut diff_ids = Vec::new();
        for dir in &img.layers {
            let tar = layer_tar(dir)?;
            diff_ids.push(digest(&tar));
            let (blob, media) = if img.zstd {
                (
                    zstd::encode_all(&tar[..], 3)?,
                    "application/vnd.oci.image.layer.v1.tar+zstd",
                )
            } else {
                (gzip(&tar)?, "application/vnd.oci.image.layer.v1.tar+gzip")
            };
            let d = put_blob(out, &blob)?;
            layers.push(json!({"mediaType": media, "digest": d, "size": blob.len()}));
        }
        let mut config = json!({"Env": img.env});
        for (key, v) in [("Entrypoint", &img.entrypoint), ("Cmd", &img.cmd)] {
            if !v.is_empty() {
                config[key] = json!(v);
            }
        }
        for (key, v) in [("User", &img.user), ("WorkingDir", &img.workdir)] {
            if !v.is_empty() {
                config[key] = json!(v);
            }
        }
        let cfg = json!({
            "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
            "config": config, "rootfs": {"type": "layers", "diff_ids": diff_ids},
            "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "crius-mkimage"}],
        });
        let cfg_bytes = serde_json::to_vec(&cfg)?;
        let cfg_digest = put_blob(out, &cfg_bytes)?;
        let manifest = json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_digest, "size": cfg_bytes.len()},
            "layers": layers,
        });
        let m_bytes = serde_json::to_vec(&manifest)?;
        let m_digest = put_blob(out, &m_bytes)?;
        manifests.push(json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": m_digest, "size": m_bytes.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": img.name},
        }));
        let layer_digests = layers
            .iter()
            .map(|l| l["digest"].as_str().unwrap_or_default().to_string())
            .collect();
        infos.push(ImageInfo {
            manifest: m_digest,
            config: cfg_digest,
            layers: layer_digests,
        });
    }
    let name_of = |m: &Value| {
        m["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .map(str::to_string)
    };
    let new_names: Vec<_> = manifests.iter().filter_map(name_of).collect();
    let mut all: Vec<Value> = match std::fs::read(out.join("index.json")) {
        Ok(b) => serde_json::from_slice::<Value>(&b)?["manifests"]
            .as_array()
            .cloned()
            .unwrap_or_default(),
        Err(_) => Vec::new(),
    };
    all.retain(|m| name_of(m).is_none_or(|n| !new_names.contains(&n)));
    all.extend(manifests);
    let index =
        json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": all});
    std::fs::write(out.join("index.json"), serde_json::to_vec_pretty(&index)?)?;
    Ok(infos)
}

/// Adds an image index named `name` to the layout at `out`, listing existing manifests with the platforms given
/// as (`ImageInfo`, architecture) — a multi-arch image.
pub fn write_index(out: &Path, name: &str, entries: &[(&ImageInfo, &str)]) -> std::io::Result<String> {
    let manifests: Vec<Value> = entries
        .iter()
        .map(|(info, arch)| {
            let size = blob(out, &info.manifest).map(|b| b.len()).unwrap_or(0);
            json!({"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": info.manifest, "size": size,
                   "platform": {"architecture": arch, "os": "linux"}})
        })
        .collect();
    let idx = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests});
    let bytes = serde_json::to_vec(&idx)?;
    let d = put_blob(out, &bytes)?;
    let path = out.join("index.json");
    let mut index: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let list = index["manifests"]
        .as_array_mut()
        .ok_or_else(|| std::io::Error::other("index.json has no manifests"))?;
    list.retain(|m| m["annotations"]["org.opencontainers.image.ref.name"] != name);
    list.push(
        json!({"mediaType": "application/vnd.oci.image.index.v1+json", "digest": d, "size": bytes.len(),
                     "annotations": {"org.opencontainers.image.ref.name": name}}),
    );
    std::fs::write(&path, serde_json::to_vec_pretty(&index)?)?;
    Ok(d)
}

/// Packs the layout at `layout` into an OCI archive (a tar of the layout) at `archive`.
pub fn write_archive(layout: &Path, archive: &Path) -> std::io::Result<()> {
    std::fs::write(archive, layer_tar(layout)?)
}

/// The busybox image: one layer with the busybox rootfs, `Cmd ["sh"]`.
pub fn busybox(out: &Path, name: &str) -> std::io::Result<ImageInfo> {
    let tmp = tempfile::tempdir()?;
    crate::build_busybox_rootfs(tmp.path())?;
    let spec = ImageSpec {
        name: name.into(),
        layers: vec![tmp.path().into()],
        cmd: vec!["sh".into()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
        ..Default::default()
    };
    Ok(write_layout(out, &[spec])?.remove(0))
}

/// An image of `layers` layers: busybox, then `layers - 1` layers each holding one file `layer<i>` of `bytes`
/// pseudo-random (incompressible) bytes, so each takes a moment to send, hash and unpack.
pub fn layered(out: &Path, name: &str, layers: usize, bytes: usize) -> std::io::Result<ImageInfo> {
    let dirs: Vec<tempfile::TempDir> = (0..layers.max(1))
        .map(|_| tempfile::tempdir())
        .collect::<std::io::Result<_>>()?;
    crate::build_busybox_rootfs(dirs[0].path())?;
    for (i, d) in dirs.iter().enumerate().skip(1) {
        let mut x = 0x9e37_79b9_7f4a_7c15u64 ^ i as u64;
        let data: Vec<u8> = (0..bytes)
            .map(|_| {
                // xorshift64: cheap, and gzip finds nothing to squeeze.
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        std::fs::write(d.path().join(format!("layer{i}")), data)?;
    }
    let spec = ImageSpec {
        name: name.into(),
        layers: dirs.iter().map(|d| d.path().into()).collect(),
        cmd: vec!["sh".into()],
        env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
        ..Default::default()
    };
    Ok(write_layout(out, &[spec])?.remove(0))
}

/// The seeds' images: (name, program path, program).
const SEEDS: [(&str, &str, &str); 5] = [
    (
        "docker.io/fluent/fluent-bit:3.2",
        "/fluent-bit/bin/fluent-bit",
        include_str!("../seeds/fluent-bit.sh"),
    ),
    (
        "docker.io/library/flyway:latest",
        "/usr/local/bin/flyway",
        include_str!("../seeds/flyway.sh"),
    ),
    (
        "docker.io/library/data-worker:latest",
        "/usr/local/bin/data-worker",
        include_str!("../seeds/data-worker.sh"),
    ),
    (
        "docker.io/library/myapp:latest",
        "/usr/local/bin/myapp",
        include_str!("../seeds/myapp.sh"),
    ),
    (
        "docker.io/istio/proxyv2:1.23",
        "/usr/local/bin/pilot-agent",
        include_str!("../seeds/proxyv2.sh"),
    ),
];

/// The images the seed manifests name, as stand-ins: busybox plus one script each that behaves like the real
/// program in the seeds' stories (`crates/test-support/seeds/*.sh`): a log agent that ships `/var/log/app` and
/// flushes on SIGTERM, a migration that exits 0, a batch worker, a long-running app, a mesh proxy.
pub fn seed_images(out: &Path) -> std::io::Result<Vec<(String, ImageInfo)>> {
    let base = tempfile::tempdir()?;
    crate::build_busybox_rootfs(base.path())?;
    let mut dirs = Vec::new();
    let mut specs = Vec::new();
    for (name, path, script) in SEEDS {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join(path.trim_start_matches('/'));
        std::fs::create_dir_all(file.parent().expect("a path in a directory"))?;
        std::fs::write(&file, script)?;
        std::fs::set_permissions(
            &file,
            <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
        )?;
        specs.push(ImageSpec {
            name: name.into(),
            layers: vec![base.path().into(), dir.path().into()],
            entrypoint: vec![path.into()],
            env: vec!["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into()],
            ..Default::default()
        });
        dirs.push(dir);
    }
    let infos = write_layout(out, &specs)?;
    Ok(specs.into_iter().map(|s| s.name).zip(infos).collect())
}

/// A stand-in for a pause image, named `name`, for runtimes that need one (containerd's CRI): busybox whose
/// entrypoint sleeps until SIGTERM or SIGINT.
pub fn pause(out: &Path, name: &str) -> std::io::Result<ImageInfo> {
    let base = tempfile::tempdir()?;
    crate::build_busybox_rootfs(base.path())?;
    std::fs::write(
        base.path().join("pause"),
        "#!/bin/sh\ntrap 'exit 0' TERM INT\nwhile :; do sleep 3600 & wait $!; done\n",
    )?;
    std::fs::set_permissions(
        base.path().join("pause"),
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755),
    )?;
    let spec = ImageSpec {
        name: name.into(),
        layers: vec![base.path().into()],
        entrypoint: vec!["/pause".into()],
        ..Default::default()
    };
    Ok(write_layout(out, &[spec])?.remove(0))
}

/// What an image made here depends on besides its arguments: the code that makes it (this file, and the crate
/// root with the rootfs builder), the seeds' programs, and the busybox binary (its size and modification time).
fn made_from() -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(include_bytes!("image.rs"));
    v.extend_from_slice(include_bytes!("lib.rs"));
    for (name, path, script) in SEEDS {
        v.extend_from_slice(format!("{name} {path} {script}").as_bytes());
    }
    if let Ok(m) = std::fs::metadata(crate::busybox_path()) {
        let mtime = m
            .modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
        v.extend_from_slice(format!("{} {mtime:?}", m.len()).as_bytes());
    }
    v
}

/// The layout of [`busybox`] (`busybox:latest`), made once per build directory (see [`crate::fixture`]) for
/// the tests to import; tests only read it.
pub fn busybox_layout() -> &'static Path {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT.get_or_init(|| {
        crate::fixture("busybox-image", &[&made_from()], |dir| {
            busybox(dir, "busybox:latest").map(drop)
        })
    })
}

/// The layout of [`seed_images`], made once per build directory (see [`crate::fixture`]) for the tests to
/// import; tests only read it.
pub fn seed_layout() -> &'static Path {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT.get_or_init(|| crate::fixture("seed-images", &[&made_from()], |dir| seed_images(dir).map(drop)))
}

/// The test-program image: `/crius-testprog` (a static binary) as the entrypoint, running as uid 1000.
pub fn testprog(out: &Path, name: &str, testprog: &Path) -> std::io::Result<ImageInfo> {
    let tmp = tempfile::tempdir()?;
    std::fs::copy(testprog, tmp.path().join("crius-testprog"))?;
    for d in ["etc", "tmp", "proc", "sys", "dev"] {
        std::fs::create_dir_all(tmp.path().join(d))?;
    }
    std::fs::write(
        tmp.path().join("etc/passwd"),
        "root:x:0:0::/:/crius-testprog\napp:x:1000:1000::/:/crius-testprog\n",
    )?;
    std::fs::write(tmp.path().join("etc/group"), "root:x:0:\napp:x:1000:\n")?;
    let spec = ImageSpec {
        name: name.into(),
        layers: vec![tmp.path().into()],
        entrypoint: vec!["/crius-testprog".into()],
        env: vec!["PATH=/".into()],
        user: "1000".into(),
        ..Default::default()
    };
    Ok(write_layout(out, &[spec])?.remove(0))
}

/// A layout of the two test images, [`busybox`] as `busybox:latest` and [`testprog`] (of the test program
/// `testprog`) as `crius-testprog:latest`, made once per build directory (see [`crate::fixture`]); tests only
/// read it. [`info`] gives their digests.
pub fn test_images_layout(testprog: &Path) -> PathBuf {
    let program = std::fs::read(testprog).unwrap_or_else(|e| panic!("{}: {e}", testprog.display()));
    crate::fixture("test-images", &[&made_from(), &program], |dir| {
        busybox(dir, "busybox:latest")?;
        self::testprog(dir, "crius-testprog:latest", testprog).map(drop)
    })
}

/// The digests of image `name` in the layout at `layout`.
pub fn info(layout: &Path, name: &str) -> std::io::Result<ImageInfo> {
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json"))?)?;
    let manifest = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == name)
        .and_then(|m| m["digest"].as_str())
        .ok_or_else(|| std::io::Error::other(format!("no {name} in {}", layout.display())))?
        .to_string();
    let m = json_blob(layout, &manifest)?;
    let digest = |d: &Value| d["digest"].as_str().unwrap_or_default().to_string();
    Ok(ImageInfo {
        config: digest(&m["config"]),
        layers: m["layers"].as_array().into_iter().flatten().map(digest).collect(),
        manifest,
    })
}

/// Reads a blob of the layout at `out` by digest.
pub fn blob(out: &Path, digest: &str) -> std::io::Result<Vec<u8>> {
    std::fs::read(
        out.join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:")),
    )
}

/// The parsed JSON blob `digest` of the layout at `out`.
pub fn json_blob(out: &Path, digest: &str) -> std::io::Result<Value> {
    Ok(serde_json::from_slice(&blob(out, digest)?)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn busybox_layout_is_consistent_and_keeps_hard_links() {
        let out = tempfile::tempdir().unwrap();
        let info = busybox(out.path(), "busybox:latest").unwrap();
        let index: Value =
            serde_json::from_slice(&std::fs::read(out.path().join("index.json")).unwrap()).unwrap();
        assert_eq!(index["manifests"][0]["digest"], info.manifest.as_str());
        assert_eq!(
            index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
            "busybox:latest"
        );
        // Every blob's name is its digest.
        for d in [&info.manifest, &info.config, &info.layers[0]] {
            assert_eq!(&digest(&blob(out.path(), d).unwrap()), d);
        }
        let cfg = json_blob(out.path(), &info.config).unwrap();
        let mut tar = Vec::new();
        flate2::read::GzDecoder::new(&blob(out.path(), &info.layers[0]).unwrap()[..])
            .read_to_end(&mut tar)
            .unwrap();
        assert_eq!(cfg["rootfs"]["diff_ids"][0], digest(&tar).as_str());
        let mut archive = tar::Archive::new(&tar[..]);
        let links = archive
            .entries()
            .unwrap()
            .filter(|e| e.as_ref().unwrap().header().entry_type() == tar::EntryType::Link)
            .count();
        assert!(links > 100, "applets must be hard links, got {links}");
        assert!(tar.len() < 8 << 20, "layer too big: {} bytes", tar.len());
    }

    #[test]
    fn same_input_same_digests() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("f"), "x").unwrap();
        let spec = ImageSpec {
            name: "t:1".into(),
            layers: vec![src.path().into()],
            ..Default::default()
        };
        assert_eq!(
            write_layout(a.path(), std::slice::from_ref(&spec)).unwrap(),
            write_layout(b.path(), &[spec]).unwrap()
        );
    }
}
