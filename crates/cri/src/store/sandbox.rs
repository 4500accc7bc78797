//! Sandbox records: the pod sandboxes criusd holds, each its record and the CRI config as sent, in memory
//! and in the journal `<root>/sandboxes/journal` ([`super::journal`]), so a crash never leaves half a
//! record. After a reboot, a sandbox whose namespaces are gone comes back NOTREADY. Records an older criusd
//! kept as a directory each (`<id>/sandbox.json` and `config.pb`) move into the journal at start; the
//! directory stays while it holds that sandbox's `hostname`, `hosts` and `resolv.conf`.

use std::path::{Path, PathBuf};

use crius_api::cri;
use serde::{Deserialize, Serialize};

use super::names::{NameIndex, Reservation, Taken};
use super::table::Table;
use crate::error::{Error, Result};
use crate::network::Pinned;

/// The main file of a record an older criusd kept as a directory, written after its `config.pb`.
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
    pub runtime: Option<crate::shim::OciBinary>,
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

    /// The pod cgroup's parent kubelet named (empty: none).
    pub fn cgroup_parent(&self) -> &str {
        self.config
            .linux
            .as_ref()
            .map(|l| l.cgroup_parent.as_str())
            .unwrap_or_default()
    }
}

/// The unique name a config reserves.
pub fn reserved_name(c: &cri::PodSandboxConfig) -> String {
    let m = c.metadata.clone().unwrap_or_default();
    format!("{}_{}_{}_{}", m.name, m.namespace, m.uid, m.attempt)
}

impl super::table::Entry for Sandbox {
    type Record = Record;
    type Config = cri::PodSandboxConfig;
    const KIND: &'static str = "sandbox";
    fn id(&self) -> &str {
        &self.record.id
    }
    fn parts(&self) -> (&Record, &cri::PodSandboxConfig) {
        (&self.record, &self.config)
    }
    fn from_parts(record: Record, config: cri::PodSandboxConfig) -> Self {
        Sandbox { record, config }
    }
}

/// The sandboxes, on disk under `dir` and in memory, and the names they hold.
pub struct Sandboxes {
    dir: PathBuf,
    table: Table<Sandbox>,
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
        let table = Table::open(dir, RECORD, |s: &mut Sandbox| {
            if s.record.ready && !alive(&s.record.namespaces) {
                s.record.ready = false;
            }
        })?;
        let names = NameIndex::default();
        for s in table.list() {
            names.hold(&s.name(), &s.record.id, request_of(&s));
        }
        Ok(Sandboxes {
            dir: dir.to_path_buf(),
            table,
            names,
        })
    }

    /// Where an older criusd kept sandbox `id`'s record and the files its containers mount.
    pub fn dir_of(&self, id: &str) -> PathBuf {
        self.dir.join(id)
    }

    /// Reserves `s`'s name for it (else says who holds it: see [`Taken`]; a retry of a RunPodSandbox in
    /// flight waits for it); the reservation is committed once the sandbox is made, or dropped, which gives
    /// the name back.
    pub fn reserve(&self, s: &Sandbox) -> std::result::Result<Reservation<'_, Request>, Taken> {
        self.names.reserve(&s.name(), &s.record.id, request_of(s))
    }

    /// Adds `s` (whose name the caller reserved), in memory: its record is written by its first
    /// [`Sandboxes::update`] (RunPodSandbox makes one before anything it must undo after a reboot). Until
    /// then a crash leaves nothing of it here, and the call's intent says what else to undo.
    pub fn insert(&self, s: Sandbox) -> Result<()> {
        self.table.add(s);
        Ok(())
    }

    /// Changes sandbox `id`'s record with `f` and writes it; the change is seen once it is on disk.
    /// A sandbox that is gone (removed meanwhile) is left alone.
    pub fn update(&self, id: &str, f: impl FnOnce(&mut Record)) -> Result<()> {
        self.table.modify(id, |s| f(&mut s.record)).map(drop)
    }

    /// The sandbox whose id is `id` or starts with it (when only one does).
    pub fn get(&self, id: &str) -> Option<Sandbox> {
        self.table.get(id)
    }

    /// Every sandbox.
    pub fn list(&self) -> Vec<Sandbox> {
        self.table.list()
    }

    /// Forgets sandbox `id`, gives its name back and deletes its record (and the directory an older criusd
    /// kept it in, if that is left).
    pub fn remove(&self, id: &str) -> Result<()> {
        let held = self.table.get(id).filter(|s| s.record.id == id);
        let gone = self.table.remove(id);
        if let Some(s) = held {
            self.names.release(&s.name(), id);
        }
        gone?;
        match std::fs::remove_dir_all(self.dir_of(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::io(format!("removing {}", self.dir_of(id).display()), e))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;
    use std::collections::HashMap;

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
        let plain = tempfile::NamedTempFile::new().unwrap();
        s.update("abc123", |r| {
            r.namespaces.net = Some(plain.path().to_path_buf());
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
    fn a_record_is_on_disk_from_its_first_update_and_seen_once_written() {
        let d = tempfile::tempdir().unwrap();
        let s = Sandboxes::open(d.path(), |_: &Pinned| true).unwrap();
        s.insert(sandbox("abc123", "web")).unwrap();
        assert!(s.get("abc123").is_some());
        let reopen = || Sandboxes::open(d.path(), |_: &Pinned| true).unwrap();
        assert!(
            reopen().get("abc123").is_none(),
            "not written before its first update"
        );
        s.update("abc123", |r| r.ips = vec!["10.0.0.9".into()]).unwrap();
        let again = reopen();
        assert_eq!(again.get("abc123").unwrap().record.ips, vec!["10.0.0.9"]);
        assert_eq!(again.get("abc123").unwrap().config.labels["app"], "web");
        assert_eq!(
            crate::store::list_dir(d.path()),
            vec![crate::store::JOURNAL.to_string()],
            "one file for all records"
        );
        // A write that fails (an id no journal takes) changes nothing in memory.
        let long = "a".repeat(300);
        s.insert(sandbox(&long, "db")).unwrap();
        assert!(s.update(&long, |r| r.ready = false).is_err());
        assert!(s.get(&long).unwrap().record.ready);
    }

    #[test]
    fn an_older_criusds_records_move_into_the_journal_and_its_files_stay_while_needed() {
        let d = tempfile::tempdir().unwrap();
        let old = |id: &str, name: &str, files: bool| {
            let dir = d.path().join(id);
            std::fs::create_dir(&dir).unwrap();
            let sb = sandbox(id, name);
            std::fs::write(dir.join("config.pb"), sb.config.encode_to_vec()).unwrap();
            std::fs::write(dir.join(RECORD), serde_json::to_vec(&sb.record).unwrap()).unwrap();
            if files {
                std::fs::write(dir.join("hostname"), "web\n").unwrap();
            }
        };
        old("abc123", "web", true);
        old("def456", "db", false);
        // What a crash left of an older criusd's record: a directory without its record file.
        std::fs::create_dir(d.path().join("half")).unwrap();
        std::fs::write(d.path().join("half/config.pb"), b"").unwrap();
        let s = Sandboxes::open(d.path(), |_: &Pinned| true).unwrap();
        assert_eq!(s.list().len(), 2);
        assert!(!d.path().join("def456").exists(), "moved, its directory gone");
        assert!(!d.path().join("half").exists(), "a leftover is removed");
        let web = d.path().join("abc123");
        assert_eq!(
            crate::store::list_dir(&web),
            vec!["hostname".to_string()],
            "its files stay"
        );
        drop(s);
        let s = Sandboxes::open(d.path(), |_: &Pinned| true).unwrap();
        assert_eq!(s.get("abc123").unwrap().config.labels["app"], "web");
        assert!(
            web.join("hostname").exists(),
            "a moved record's files are not a leftover"
        );
        s.remove("abc123").unwrap();
        assert!(!web.exists(), "gone with the sandbox");
        assert!(
            Sandboxes::open(d.path(), |_: &Pinned| true)
                .unwrap()
                .get("abc123")
                .is_none()
        );
    }
}
