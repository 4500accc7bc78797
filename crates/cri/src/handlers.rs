//! Runtime handlers (Kubernetes RuntimeClass): the OCI runtimes a pod may run on. RunPodSandbox's
//! `runtime_handler` picks one by name ([`Handlers::find`]); the sandbox record keeps what it resolved to
//! ([`OciBinary`]), so every container of the pod runs on the same binary and root, also after a criusd
//! restart or a config change. The pod's shim is told through containerd's runc options (`BinaryName`,
//! `Root`); the default handler, crius-runc, sends none, so the shim runs crius-runc through criusd's sealed
//! copy.
//!
//! Each handler's features come from its binary's `features` document (the OCI runtime features JSON), read
//! once at start ([`probe`]), and are advertised only where crius's own CRI layer also acts on them
//! ([`CRI_FEATURES`]): a Mount's `recursive_read_only` becomes the `rro` option, so a handler whose runtime
//! lists `rro` (crius-runc, runc ≥ 1.1) advertises recursive read-only mounts; one without it (crun 1.8) does
//! not, and kubelet does not ask it for them. User namespaces (`hostUsers: false`) are advertised for a
//! runtime that lists the user namespace and idmapped mounts (`linux.mountExtensions.idmap`: crius-runc, not
//! runc 1.1), when the kernel makes idmapped mounts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::error::{Error, Result};
use crate::shim::OciBinary;

/// The default handler's name; the empty name is it too.
pub const DEFAULT: &str = "crius-runc";

/// What a handler's pods can ask for, as Status advertises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Features {
    /// Recursive read-only mounts (`rro`).
    pub recursive_read_only_mounts: bool,
    /// User namespaces with idmapped mounts.
    pub user_namespaces: bool,
}

/// What crius's CRI layer turns into the container's spec: a Mount's `recursive_read_only` (the `rro`
/// option); a pod's user namespace (`crate::sandbox::userns`) with idmapped mounts, where the kernel makes
/// them ([`probe`] checks).
pub const CRI_FEATURES: Features = Features {
    recursive_read_only_mounts: true,
    user_namespaces: true,
};

impl Features {
    /// The features of a runtime `features` document: `rro` among its mount options; the user namespace with
    /// idmapped mounts (`linux.mountExtensions.idmap.enabled`).
    pub fn of_document(doc: &serde_json::Value) -> Features {
        let has = |list: &serde_json::Value, what: &str| {
            list.as_array()
                .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(what)))
        };
        Features {
            recursive_read_only_mounts: has(&doc["mountOptions"], "rro"),
            user_namespaces: has(&doc["linux"]["namespaces"], "user")
                && doc["linux"]["mountExtensions"]["idmap"]["enabled"] == serde_json::Value::Bool(true),
        }
    }

    /// Both `self` and `other`.
    pub fn and(self, other: Features) -> Features {
        Features {
            recursive_read_only_mounts: self.recursive_read_only_mounts && other.recursive_read_only_mounts,
            user_namespaces: self.user_namespaces && other.user_namespaces,
        }
    }
}

/// One handler.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    /// Its name (RuntimeClass `handler`).
    pub name: String,
    /// The runtime it runs (None: the shim's default, crius-runc next to it, through criusd's sealed copy).
    pub runtime: Option<OciBinary>,
    /// What its binary's `features` says it supports (all false when it has no such command).
    pub runtime_features: Features,
}

impl Handler {
    /// The features Status advertises: the runtime's, as far as crius acts on them.
    pub fn features(&self) -> Features {
        self.runtime_features.and(CRI_FEATURES)
    }
}

/// The handlers of one criusd: the default first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handlers {
    all: Vec<Handler>,
}

impl Default for Handlers {
    /// crius-runc alone, its features unknown (none advertised).
    fn default() -> Handlers {
        Handlers {
            all: vec![Handler {
                name: DEFAULT.into(),
                runtime: None,
                runtime_features: Features::default(),
            }],
        }
    }
}

impl Handlers {
    /// The default handler (`default_features`: its binary's) and the `configured` ones; a configured
    /// [`DEFAULT`] replaces the built-in one.
    pub fn new(default_features: Features, configured: Vec<Handler>) -> Handlers {
        let mut all = Handlers::default().all;
        all[0].runtime_features = default_features;
        for h in configured {
            match all.iter_mut().find(|o| o.name == h.name) {
                Some(o) => *o = h,
                None => all.push(h),
            }
        }
        all[1..].sort_by(|a, b| a.name.cmp(&b.name));
        Handlers { all }
    }

    /// Every handler, the default first.
    pub fn all(&self) -> &[Handler] {
        &self.all
    }

    /// The handler `name` picks (the empty name: the default), for call `call`; an unknown name is NotFound,
    /// naming the known ones.
    pub fn find(&self, call: &'static str, name: &str) -> Result<&Handler> {
        let wanted = if name.is_empty() { DEFAULT } else { name };
        self.all
            .iter()
            .find(|h| h.name == wanted)
            .ok_or_else(|| Error::UnknownHandler {
                call,
                name: name.to_string(),
                known: self.all.iter().map(|h| h.name.clone()).collect(),
            })
    }
}

/// crius-runc as a shim at `shim` runs it by default: beside the shim's real file (None: there is none).
pub fn default_binary(shim: &Path) -> Option<PathBuf> {
    let shim = std::fs::canonicalize(shim).ok()?;
    crius_shim::client::default_runtime(&shim).and_then(|r| std::fs::canonicalize(r).ok())
}

/// The features `binary` reports through `<binary> features` (given 5 s); none, with a warning, when it has no
/// such command or its answer is not a features document. User namespaces only where the kernel also makes
/// idmapped mounts.
pub fn probe(binary: &Path) -> Features {
    let f = match features_document(binary, Duration::from_secs(5)) {
        Ok(doc) => Features::of_document(&doc),
        Err(e) => {
            tracing::warn!(runtime = %binary.display(), "no features document, none advertised: {e}");
            Features::default()
        }
    };
    Features {
        user_namespaces: f.user_namespaces && kernel_idmaps(),
        ..f
    }
}

/// Whether the kernel makes idmapped mounts (of `/`'s filesystem; asked once).
fn kernel_idmaps() -> bool {
    static IDMAPS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *IDMAPS.get_or_init(
        || match crius_oci::rootfs::sources::idmap_supported(Path::new("/")) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("user namespaces not advertised: no idmapped mounts here: {e}");
                false
            }
        },
    )
}

fn features_document(binary: &Path, limit: Duration) -> std::result::Result<serde_json::Value, String> {
    let shown = format!("{} features", binary.display());
    let mut child = Command::new(binary)
        .arg("features")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("{shown}: {e}"))?;
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut s).map(|_| s)
    });
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(s) => break s,
            None if Instant::now() > deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{shown}: no answer in {limit:?}"));
            }
            None => std::thread::sleep(Duration::from_millis(10)),
        }
    };
    if !status.success() {
        return Err(format!("{shown}: {status}"));
    }
    let out = reader
        .join()
        .map_err(|_| format!("{shown}: reading its output failed"))?
        .map_err(|e| format!("{shown}: {e}"))?;
    serde_json::from_slice(&out).map_err(|e| format!("{shown}: {e}"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tonic::Code;

    use super::*;

    fn runc() -> Handler {
        Handler {
            name: "runc".into(),
            runtime: Some(OciBinary {
                binary: "/usr/sbin/runc".into(),
                root: Some("/run/crius/runc".into()),
            }),
            runtime_features: Features {
                recursive_read_only_mounts: true,
                user_namespaces: false,
            },
        }
    }

    #[test]
    fn the_empty_name_is_the_default_and_unknown_names_are_not_found() {
        let h = Handlers::new(Features::default(), vec![runc()]);
        assert_eq!(h.find("RunPodSandbox", "").unwrap().name, DEFAULT);
        assert_eq!(h.find("RunPodSandbox", DEFAULT).unwrap().runtime, None);
        assert_eq!(h.find("RunPodSandbox", "runc").unwrap(), &runc());
        let (code, msg) = crate::error::answer(h.find("RunPodSandbox", "kata").unwrap_err());
        assert_eq!(code, Code::NotFound);
        assert_eq!(
            msg,
            "RunPodSandbox: runtime handler \"kata\" not found (configured: crius-runc, runc)"
        );
    }

    #[test]
    fn a_configured_default_replaces_the_built_in_one() {
        let mut mine = runc();
        mine.name = DEFAULT.into();
        let h = Handlers::new(Features::default(), vec![runc(), mine.clone()]);
        assert_eq!(h.all().len(), 2);
        assert_eq!(h.find("RunPodSandbox", "").unwrap(), &mine);
    }

    #[test]
    fn features_come_from_the_document_and_crius_s_own_support() {
        let doc = json!({
            "mountOptions": ["ro", "rro"],
            "linux": {"namespaces": ["pid", "user"], "mountExtensions": {"idmap": {"enabled": true}}}
        });
        let f = Features::of_document(&doc);
        assert!(f.recursive_read_only_mounts && f.user_namespaces);
        let no_idmap = json!({"linux": {"namespaces": ["user"]}, "mountOptions": ["ro"]});
        assert_eq!(Features::of_document(&no_idmap), Features::default());
        assert_eq!(runc().features(), runc().runtime_features.and(CRI_FEATURES));
    }

    #[test]
    fn probing_reads_the_features_command() {
        let d = tempfile::tempdir().unwrap();
        let script = d.path().join("rt");
        std::fs::write(
            &script,
            "#!/bin/sh\n[ \"$1\" = features ] && echo '{\"mountOptions\":[\"rro\"]}'\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        assert!(probe(&script).recursive_read_only_mounts);
        assert_eq!(probe(Path::new("/bin/false")), Features::default());
        assert_eq!(probe(&d.path().join("none")), Features::default());
    }
}
