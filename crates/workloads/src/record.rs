//! The pod service's records under criusd's root: one file per object, written to survive a crash
//! (`crius_common::durable`), read back at start-up.
//!
//! ```text
//! <dir>/pods/<namespace>_<name>.json      a pod: its object (spec and status), its sandbox, its events
//! <dir>/objects/<Kind>_<namespace>_<name>.json   a workload, ConfigMap or Secret, as Kubernetes JSON
//! ```

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Event as KubeEvent, Pod};
use serde::{Deserialize, Serialize};

use crate::Error;

/// A pod as it is kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PodRecord {
    /// The pod: metadata (uid, creation time, owner), spec, and status as Kubernetes shows it.
    pub pod: Pod,
    /// Its events, oldest first (the last [`MAX_EVENTS`]).
    #[serde(default)]
    pub events: Vec<KubeEvent>,
}

/// How many events a pod keeps.
pub const MAX_EVENTS: usize = 100;

/// Where records go.
#[derive(Debug, Clone)]
pub struct Records {
    dir: PathBuf,
}

impl Records {
    /// Records under `dir`, which is made (0700) with its subdirectories.
    pub fn open(dir: &Path) -> Result<Records, Error> {
        for sub in ["pods", "objects"] {
            let d = dir.join(sub);
            std::fs::create_dir_all(&d).map_err(Error::io(format!("creating {}", d.display())))?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
                .map_err(Error::io(format!("chmod {}", dir.display())))?;
        }
        Ok(Records { dir: dir.into() })
    }

    fn pod_path(&self, namespace: &str, name: &str) -> PathBuf {
        self.dir.join("pods").join(format!("{namespace}_{name}.json"))
    }

    fn object_path(&self, kind: &str, namespace: &str, name: &str) -> PathBuf {
        self.dir
            .join("objects")
            .join(format!("{kind}_{namespace}_{name}.json"))
    }

    /// Writes pod `r`.
    pub fn save_pod(&self, r: &PodRecord) -> Result<(), Error> {
        let (ns, name) = names(&r.pod.metadata);
        let p = self.pod_path(&ns, &name);
        let bytes = serde_json::to_vec(r)
            .map_err(|e| Error::io(p.display().to_string())(std::io::Error::other(e)))?;
        crius_common::durable::write(&p, &bytes).map_err(Error::io(format!("writing {}", p.display())))
    }

    /// Removes pod `namespace/name`'s record.
    pub fn remove_pod(&self, namespace: &str, name: &str) -> Result<(), Error> {
        let p = self.pod_path(namespace, name);
        crius_common::durable::remove(&p).map_err(Error::io(format!("removing {}", p.display())))
    }

    /// Writes object `value` (a workload, ConfigMap or Secret).
    pub fn save_object(&self, value: &serde_json::Value) -> Result<(), Error> {
        let (kind, ns, name) = object_names(value);
        let p = self.object_path(&kind, &ns, &name);
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        crius_common::durable::write(&p, &bytes).map_err(Error::io(format!("writing {}", p.display())))
    }

    /// Removes object `kind namespace/name`.
    pub fn remove_object(&self, kind: &str, namespace: &str, name: &str) -> Result<(), Error> {
        let p = self.object_path(kind, namespace, name);
        crius_common::durable::remove(&p).map_err(Error::io(format!("removing {}", p.display())))
    }

    /// Every record: pods, and objects. A record that does not parse is named in the error list and left
    /// where it is (nothing is lost; it is not run).
    pub fn load(&self) -> (Vec<PodRecord>, Vec<serde_json::Value>, Vec<String>) {
        let (mut pods, mut objects, mut bad) = (Vec::new(), Vec::new(), Vec::new());
        for (sub, is_pod) in [("pods", true), ("objects", false)] {
            let Ok(entries) = std::fs::read_dir(self.dir.join(sub)) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_none_or(|x| x != "json") {
                    continue;
                }
                let text = match std::fs::read(&p) {
                    Ok(t) => t,
                    Err(err) => {
                        bad.push(format!("{}: {err}", p.display()));
                        continue;
                    }
                };
                let parsed = if is_pod {
                    serde_json::from_slice::<PodRecord>(&text).map(|r| pods.push(r))
                } else {
                    serde_json::from_slice::<serde_json::Value>(&text).map(|v| objects.push(v))
                };
                if let Err(err) = parsed {
                    bad.push(format!("{}: {err}", p.display()));
                }
            }
        }
        (pods, objects, bad)
    }
}

/// `(namespace, name)` of an object's metadata, the namespace defaulting to `default`.
pub fn names(m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> (String, String) {
    (
        m.namespace.clone().unwrap_or_else(|| "default".into()),
        m.name.clone().unwrap_or_default(),
    )
}

/// `(kind, namespace, name)` of an object as JSON.
pub fn object_names(v: &serde_json::Value) -> (String, String, String) {
    let s = |p: &str| v.pointer(p).and_then(|x| x.as_str()).unwrap_or("").to_string();
    let ns = s("/metadata/namespace");
    (
        s("/kind"),
        if ns.is_empty() { "default".into() } else { ns },
        s("/metadata/name"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_a_broken_one_is_named_not_lost() {
        let dir = tempfile::tempdir().unwrap();
        let r = Records::open(dir.path()).unwrap();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web", "namespace": "a", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i"}]}
        }))
        .unwrap();
        r.save_pod(&PodRecord { pod, events: vec![] }).unwrap();
        r.save_object(&serde_json::json!({"kind": "Job", "metadata": {"name": "j"}}))
            .unwrap();
        std::fs::write(dir.path().join("pods/b_x.json"), "{not json").unwrap();
        let (pods, objects, bad) = r.load();
        assert_eq!(pods[0].pod.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(
            object_names(&objects[0]),
            ("Job".into(), "default".into(), "j".into())
        );
        assert_eq!(bad.len(), 1);
        assert!(bad[0].contains("b_x.json"), "{bad:?}");
        assert!(dir.path().join("pods/b_x.json").exists());
        r.remove_pod("a", "web").unwrap();
        r.remove_object("Job", "default", "j").unwrap();
        let (pods, objects, _) = r.load();
        assert!(pods.is_empty() && objects.is_empty());
    }
}
