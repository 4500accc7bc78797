//! The pod service's records under criusd's root: one file per object, written to survive a crash
//! (`crius_common::durable`), read back at start-up.
//!
//! ```text
//! <dir>/pods/<namespace>_<name>.json      a pod: its object (spec and status), its sandbox, its events
//! <dir>/objects/<Kind>_<namespace>_<name>.json   a workload, ConfigMap or Secret, as Kubernetes JSON
//! ```
//!
//! An object's record is JSON as applied with its typed metadata and status over it (`Kept::to_json`); it
//! is read back typed (`Kept::from_json`), so what an older criusd wrote loads as it was.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Event as KubeEvent, Pod};
use serde::{Deserialize, Serialize};

use crate::object::{Kept, kind_named};
use crate::{Error, Kind};

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

    /// Writes object `w` (a workload, ConfigMap or Secret).
    pub(crate) fn save_object(&self, w: &Kept) -> Result<(), Error> {
        let (ns, name) = w.names();
        let p = self.object_path(w.kind().name(), &ns, &name);
        let bytes = serde_json::to_vec(&w.to_json()).unwrap_or_default();
        crius_common::durable::write(&p, &bytes).map_err(Error::io(format!("writing {}", p.display())))
    }

    /// Removes object `kind namespace/name`.
    pub fn remove_object(&self, kind: &str, namespace: &str, name: &str) -> Result<(), Error> {
        let p = self.object_path(kind, namespace, name);
        crius_common::durable::remove(&p).map_err(Error::io(format!("removing {}", p.display())))
    }

    /// Every record: pods, and objects. A record that does not parse (or an object's that does not read as
    /// its kind) is named in the error list and left where it is (nothing is lost; it is not run).
    pub(crate) fn load(&self) -> (Vec<PodRecord>, Vec<Kept>, Vec<String>) {
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
                    serde_json::from_slice::<serde_json::Value>(&text).map(|v| {
                        let kind = kind_named(&v);
                        match Kind::of_object(&kind).filter(|k| *k != Kind::Pod) {
                            Some(kind) => match Kept::from_json(kind, v) {
                                Ok(w) => objects.push(w),
                                Err(err) => bad.push(format!("{}: {err}", p.display())),
                            },
                            None => bad.push(format!("{}: kind {kind:?} is not kept", p.display())),
                        }
                    })
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
        let job = serde_json::json!({"kind": "Job", "metadata": {"name": "j"}});
        r.save_object(&Kept::from_json(Kind::Job, job.clone()).unwrap())
            .unwrap();
        std::fs::write(dir.path().join("pods/b_x.json"), "{not json").unwrap();
        std::fs::write(
            dir.path().join("objects/Job_default_y.json"),
            r#"{"kind": "Job", "spec": 1}"#,
        )
        .unwrap();
        let (pods, objects, bad) = r.load();
        assert_eq!(pods[0].pod.metadata.uid.as_deref(), Some("u1"));
        assert_eq!(objects.len(), 1);
        assert_eq!(objects[0].key(), "Job/default/j");
        assert_eq!(objects[0].to_json(), job);
        assert_eq!(bad.len(), 2);
        assert!(bad.iter().any(|b| b.contains("b_x.json")), "{bad:?}");
        assert!(bad.iter().any(|b| b.contains("Job_default_y.json")), "{bad:?}");
        assert!(dir.path().join("pods/b_x.json").exists());
        r.remove_pod("a", "web").unwrap();
        r.remove_object("Job", "default", "j").unwrap();
        std::fs::remove_file(dir.path().join("objects/Job_default_y.json")).unwrap();
        let (pods, objects, _) = r.load();
        assert!(pods.is_empty() && objects.is_empty());
    }
}
