//! Sandbox records: the pod sandboxes criusd holds: a record per sandbox on disk (`<root>/sandboxes/<id>/sandbox.json`, with the
//! CRI config as sent in `config.pb` and the files its containers will mount: `hostname`, `hosts`,
//! `resolv.conf`), and in memory while criusd runs. Records are written whole (a temporary file renamed over
//! the old one), so a crash never leaves half a record; after a reboot, a sandbox whose namespaces are gone
//! comes back NOTREADY.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crius_api::cri;
use prost::Message;
use serde::{Deserialize, Serialize};

use super::names::{NameIndex, Reservation, Taken};
use super::{Gates, by_id_or_prefix, create_dir_durable, is_leftover, remove_record_dir, write_atomic};
use crate::error::{Error, Result};
use crate::network::Pinned;

/// A sandbox record's main file, written after `config.pb`.
const RECORD: &str = "sandbox.json";

/// What criusd records of a sandbox beyond its CRI config.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Record {
    /// The sandbox id (64 hex digits).
    pub id: String,
    /// READY (true) or NOTREADY.
    pub ready: bool,
    /// Creation time, nanoseconds since the epoch.
    pub created_at: i64,
    /// The RuntimeClass handler asked for.
    pub runtime_handler: String,
    /// The OCI runtime it resolved to, which every container of the pod runs on (None: the default,
    /// crius-runc; also in records made before handlers existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<crate::handlers::OciRuntime>,
    /// Its pinned namespaces.
    pub namespaces: Pinned,
    /// Pod IPs, the first being the primary.
    pub ips: Vec<String>,
    /// The CNI network applied (name, cniVersion, plugins), kept for its DEL.
    pub network: Option<serde_json::Value>,
    /// What CNI ADD returned.
    pub cni_result: Option<serde_json::Value>,
}

/// A sandbox: its record and its CRI config.
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// The record.
    pub record: Record,
    /// The PodSandboxConfig it was run with.
    pub config: cri::PodSandboxConfig,
}

impl Sandbox {
    /// kubelet's name for it: `<name>_<namespace>_<uid>_<attempt>` (unique among sandboxes).
    pub fn name(&self) -> String {
        reserved_name(&self.config)
    }
}

/// The unique name a config reserves.
pub fn reserved_name(c: &cri::PodSandboxConfig) -> String {
    let m = c.metadata.clone().unwrap_or_default();
    format!("{}_{}_{}_{}", m.name, m.namespace, m.uid, m.attempt)
}

/// The sandboxes, on disk under `dir` and in memory.
pub struct Sandboxes {
    dir: PathBuf,
    all: Mutex<HashMap<String, Sandbox>>,
    /// One write at a time per record.
    gates: Gates,
    names: NameIndex<Request>,
}

/// What a sandbox was made from, as a retry of its RunPodSandbox is recognised by: its config and handler.
pub type Request = (cri::PodSandboxConfig, String);

fn request_of(s: &Sandbox) -> Request {
    (s.config.clone(), s.record.runtime_handler.clone())
}

impl Sandboxes {
    /// Opens the records under `dir` (created if missing). A record that cannot be read is skipped with a
    /// warning; it is not deleted. A READY sandbox whose pins are no longer `alive` (after a reboot) comes
    /// back NOTREADY.
    pub fn open(dir: &Path, alive: impl Fn(&Pinned) -> bool) -> std::io::Result<Sandboxes> {
        super::private_dir(dir)?;
        let mut all = HashMap::new();
        let names = NameIndex::default();
        for e in std::fs::read_dir(dir)?.flatten() {
            if is_leftover(&e.path(), RECORD) {
                tracing::info!(path = %e.path().display(), "repaired: removed what a crash left of a sandbox record");
                remove_record_dir(&e.path(), RECORD)?;
                continue;
            }
            match Self::read(&e.path()) {
                Ok(mut s) => {
                    if s.record.ready && !alive(&s.record.namespaces) {
                        s.record.ready = false;
                    }
                    names.hold(&s.name(), &s.record.id, request_of(&s));
                    all.insert(s.record.id.clone(), s);
                }
                Err(err) => tracing::warn!(path = %e.path().display(), "skipping a sandbox record: {err}"),
            }
        }
        Ok(Sandboxes {
            dir: dir.to_path_buf(),
            all: Mutex::new(all),
            gates: Gates::default(),
            names,
        })
    }

    fn read(dir: &Path) -> std::result::Result<Sandbox, String> {
        let rec = std::fs::read(dir.join(RECORD)).map_err(|e| e.to_string())?;
        let record: Record = serde_json::from_slice(&rec).map_err(|e| e.to_string())?;
        let pb = std::fs::read(dir.join("config.pb")).map_err(|e| e.to_string())?;
        let config = cri::PodSandboxConfig::decode(&pb[..]).map_err(|e| e.to_string())?;
        Ok(Sandbox { record, config })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sandbox>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Where sandbox `id` keeps its files.
    pub fn dir_of(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Reserves `s`'s name for it (else says who holds it: see [`Taken`]; a retry of a RunPodSandbox in
    /// flight waits for it); the reservation is committed once the sandbox is made, or dropped, which gives
    /// the name back.
    pub fn reserve(&self, s: &Sandbox) -> std::result::Result<Reservation<'_, Request>, Taken> {
        self.names.reserve(&s.name(), &s.record.id, request_of(s))
    }

    /// Adds `s` (whose name the caller reserved) with its directory and config on disk. Its record file is
    /// written by its first [`Sandboxes::update`] (RunPodSandbox makes one before anything it must undo
    /// after a crash): until then a crash leaves a directory without its main file, which the next start
    /// removes, and the call's intent says what else to undo.
    pub fn insert(&self, s: Sandbox) -> Result<()> {
        let _writing = self.gates.of(&s.record.id);
        let dir = self.dir_of(&s.record.id);
        create_dir_durable(&dir)
            .and_then(|()| write_atomic(&dir.join("config.pb"), &s.config.encode_to_vec()))
            .map_err(|e| Error::io(format!("writing sandbox {}", s.record.id), e))?;
        self.lock().insert(s.record.id.clone(), s);
        Ok(())
    }

    /// Writes `s`'s record (its config, which never changes, was written by [`Sandboxes::insert`]).
    fn write(&self, s: &Sandbox) -> std::io::Result<()> {
        let rec = serde_json::to_vec_pretty(&s.record).map_err(std::io::Error::other)?;
        write_atomic(&self.dir_of(&s.record.id).join(RECORD), &rec)
    }

    /// Changes sandbox `id`'s record with `f` and writes it; the change is seen once it is on disk.
    /// A sandbox that is gone (removed meanwhile) is left alone.
    pub fn update(&self, id: &str, f: impl FnOnce(&mut Record)) -> Result<()> {
        let _writing = self.gates.of(id);
        let Some(mut s) = self.lock().get(id).cloned() else {
            return Ok(());
        };
        f(&mut s.record);
        self.write(&s)
            .map_err(|e| Error::io(format!("writing sandbox {id}"), e))?;
        if let Some(old) = self.lock().get_mut(id) {
            *old = s;
        }
        Ok(())
    }

    /// The sandbox whose id is `id` or starts with it (when only one does).
    pub fn get(&self, id: &str) -> Option<Sandbox> {
        by_id_or_prefix(&self.lock(), id).cloned()
    }

    /// Every sandbox.
    pub fn list(&self) -> Vec<Sandbox> {
        self.lock().values().cloned().collect()
    }

    /// Forgets sandbox `id`, gives its name back and deletes its files.
    pub fn remove(&self, id: &str) -> Result<()> {
        let _writing = self.gates.of(id);
        if let Some(s) = self.lock().remove(id) {
            self.names.release(&s.name(), id);
        }
        remove_record_dir(&self.dir_of(id), RECORD)
            .map_err(|e| Error::io(format!("removing {}", self.dir_of(id).display()), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str, name: &str) -> Sandbox {
        Sandbox {
            record: Record {
                id: id.into(),
                ready: true,
                ..Default::default()
            },
            config: cri::PodSandboxConfig {
                metadata: Some(cri::PodSandboxMetadata {
                    name: name.into(),
                    namespace: "default".into(),
                    uid: "u1".into(),
                    attempt: 0,
                }),
                labels: HashMap::from([("app".to_string(), "web".to_string())]),
                ..Default::default()
            },
        }
    }

    #[test]
    fn records_survive_a_reopen_and_names_are_unique() {
        let d = tempfile::tempdir().unwrap();
        let alive = |p: &Pinned| p.alive();
        let s = Sandboxes::open(d.path(), alive).unwrap();
        let add = |s: &Sandboxes, sb: Sandbox| {
            let r = s.reserve(&sb)?;
            s.insert(sb).unwrap();
            r.commit();
            Ok::<(), Taken>(())
        };
        add(&s, sandbox("abc123", "web")).unwrap();
        let mut other = sandbox("def456", "web");
        other.config.hostname = "another".into();
        assert_eq!(add(&s, other).unwrap_err(), Taken::By("abc123".into()));
        assert_eq!(
            add(&s, sandbox("def456", "web")).unwrap_err(),
            Taken::Same("abc123".into()),
            "the same request again"
        );
        add(&s, sandbox("abd789", "db")).unwrap();
        assert_eq!(s.get("abc").unwrap().record.id, "abc123");
        assert!(s.get("ab").is_none(), "an ambiguous prefix finds nothing");
        s.update("abd789", |r| r.ips = vec!["10.0.0.2".into()]).unwrap();
        // A pin that is a plain file, as after a reboot emptied /run: that sandbox comes back NOTREADY; one
        // with only the host's namespaces stays READY.
        s.update("abc123", |r| {
            r.namespaces.net = Some(d.path().join("abc123/config.pb"));
        })
        .unwrap();
        let again = Sandboxes::open(d.path(), alive).unwrap();
        let db = again.get("abd789").unwrap();
        assert_eq!(db.record.ips, vec!["10.0.0.2"]);
        assert_eq!(db.config.labels["app"], "web");
        assert!(db.record.ready);
        assert!(!again.get("abc123").unwrap().record.ready);
        assert_eq!(
            again.reserve(&sandbox("x", "web")).unwrap_err(),
            Taken::Same("abc123".into()),
            "names come back too, with their requests"
        );
        again.remove("abc123").unwrap();
        again.remove("abc123").unwrap();
        drop(again.reserve(&sandbox("x", "web")).unwrap());
        assert_eq!(Sandboxes::open(d.path(), alive).unwrap().list().len(), 1);
    }

    #[test]
    fn an_update_writes_the_record_alone_and_is_seen_once_written() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let s = Sandboxes::open(d.path(), |_: &Pinned| true).unwrap();
        s.insert(sandbox("abc123", "web")).unwrap();
        assert!(
            !d.path().join("abc123").join(RECORD).exists(),
            "the record is written by the first update"
        );
        s.update("abc123", |_| ()).unwrap();
        let inode = |f: &str| std::fs::metadata(d.path().join("abc123").join(f)).unwrap().ino();
        let (config, record) = (inode("config.pb"), inode(RECORD));
        s.update("abc123", |r| r.ips = vec!["10.0.0.9".into()]).unwrap();
        assert_eq!(
            inode("config.pb"),
            config,
            "the config, which never changes, is not written again"
        );
        assert_ne!(inode(RECORD), record);
        assert_eq!(s.get("abc123").unwrap().record.ips, vec!["10.0.0.9"]);
        // A write that fails changes nothing in memory.
        std::fs::remove_dir_all(d.path().join("abc123")).unwrap();
        assert!(s.update("abc123", |r| r.ready = false).is_err());
        assert!(s.get("abc123").unwrap().record.ready);
    }
}
