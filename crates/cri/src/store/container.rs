//! Container records: what criusd keeps of each container (its record and the CRI config as sent), in
//! memory and in the journal `<root>/containers/journal` ([`super::journal`]). The changes of one record
//! are written one at a time, each whole, and seen once written. Records an older criusd kept as a
//! directory each (`<id>/container.json` and `config.pb`) move into the journal at start.

use std::path::Path;

use crius_api::cri;
use serde::{Deserialize, Serialize};

/// The main file of a record an older criusd kept as a directory, written after its `config.pb`.
const RECORD: &str = "container.json";

/// What criusd records of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The container id (64 hex digits).
    pub id: String,
    /// Its pod's sandbox id.
    pub sandbox_id: String,
    /// The image id (config digest) it runs.
    pub image_id: String,
    /// Creation time, ns since the epoch.
    pub created_at: i64,
    /// Start time (0: not started).
    pub started_at: i64,
    /// When it exited (0: not known to have).
    pub finished_at: i64,
    /// Its exit code, once finished.
    pub exit_code: i32,
    /// The log file (absolute; empty: none).
    pub log_path: String,
    /// The kernel OOM-killed a process of it (the shim said so).
    #[serde(default)]
    pub oom_killed: bool,
    /// Its shim is gone and its end is not known.
    #[serde(default)]
    pub unknown: bool,
    /// Its init process's pid, on the host (0: not started).
    #[serde(default)]
    pub pid: u32,
    /// The identity its processes run as, from its spec (None: a record from before crius kept it).
    #[serde(default)]
    pub user: Option<ProcessUser>,
}

/// The uid, gid and supplemental groups a container's process was created with, as ContainerStatus reports
/// them (its `user`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessUser {
    /// The uid.
    pub uid: u32,
    /// The primary gid.
    pub gid: u32,
    /// The supplemental gids (the spec's `additionalGids`).
    pub groups: Vec<u32>,
}

/// A container's state, as the CRI reports it (see the diagram in [`crate::store`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Created, not started.
    Created,
    /// Started, no exit known.
    Running,
    /// Its process exited.
    Exited,
    /// Its shim is gone and no exit is known.
    Unknown,
}

impl Record {
    /// The state this record says.
    pub fn state(&self) -> State {
        if self.finished_at != 0 {
            State::Exited
        } else if self.unknown {
            State::Unknown
        } else if self.started_at != 0 {
            State::Running
        } else {
            State::Created
        }
    }
}

/// A container: its record and the ContainerConfig it was created with.
#[derive(Debug, Clone)]
pub struct Container {
    /// The record.
    pub record: Record,
    /// kubelet's config.
    pub config: cri::ContainerConfig,
}

impl Container {
    /// The name it holds in its pod: `<sandbox>/<name>/<attempt>`.
    pub fn name_key(&self) -> String {
        name_key(&self.record.sandbox_id, &self.config)
    }

    /// Its resources as last set (at create, or by UpdateContainerResources).
    pub fn resources(&self) -> cri::LinuxContainerResources {
        self.config
            .linux
            .as_ref()
            .and_then(|l| l.resources.clone())
            .unwrap_or_default()
    }
}

/// The unique name of a container of `config` in sandbox `sandbox_id`.
pub fn name_key(sandbox_id: &str, config: &cri::ContainerConfig) -> String {
    let m = config.metadata.clone().unwrap_or_default();
    format!("{sandbox_id}/{}/{}", m.name, m.attempt)
}

impl super::table::Entry for Container {
    type Record = Record;
    type Config = cri::ContainerConfig;
    const KIND: &'static str = "container";
    fn id(&self) -> &str {
        &self.record.id
    }
    fn parts(&self) -> (&Record, &cri::ContainerConfig) {
        (&self.record, &self.config)
    }
    fn from_parts(record: Record, config: cri::ContainerConfig) -> Self {
        Container { record, config }
    }
}

/// The container records under one directory: [`Records::insert`] records a new one, [`Records::modify`]
/// changes one and returns it as it was, [`Records::remove`] forgets one and returns it.
pub type Records = super::table::Table<Container>;

/// Opens the container records under `dir` (created if missing). A record that cannot be read is skipped with
/// a warning; it is not deleted. Those an older criusd kept in directories move into the journal.
pub fn open(dir: &Path) -> std::io::Result<Records> {
    Records::open(dir, RECORD, |_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn the_state_follows_the_record_and_an_exit_wins() {
        let mut r = Record::default();
        assert_eq!(r.state(), State::Created);
        r.started_at = 1;
        assert_eq!(r.state(), State::Running);
        r.unknown = true;
        assert_eq!(r.state(), State::Unknown);
        r.finished_at = 2;
        assert_eq!(r.state(), State::Exited);
    }

    #[test]
    fn records_survive_a_reopen() {
        let d = tempfile::tempdir().unwrap();
        let rs = open(d.path()).unwrap();
        let c = Container {
            record: Record {
                id: "c1".into(),
                sandbox_id: "s1".into(),
                ..Default::default()
            },
            config: cri::ContainerConfig {
                labels: [("a".to_string(), "b".to_string())].into(),
                ..Default::default()
            },
        };
        rs.insert(&c).unwrap();
        let before = rs.modify("c1", |c| c.record.started_at = 5).unwrap().unwrap();
        assert_eq!(before.record.started_at, 0);
        assert!(rs.modify("nope", |_| ()).unwrap().is_none());
        std::fs::create_dir(d.path().join("junk")).unwrap();
        std::fs::write(d.path().join("junk").join(RECORD), b"{").unwrap();
        // What a crash in a first write or a removal leaves: a directory without its record file.
        std::fs::create_dir(d.path().join("half")).unwrap();
        std::fs::write(d.path().join("half/config.pb"), b"").unwrap();
        let again = open(d.path()).unwrap();
        assert_eq!(again.list().len(), 1, "the unreadable record is skipped");
        assert!(d.path().join("junk").exists(), "an unreadable record is kept");
        assert!(!d.path().join("half").exists(), "a leftover is removed");
        let c1 = again.get("c").unwrap();
        assert_eq!((c1.record.started_at, c1.config.labels["a"].as_str()), (5, "b"));
        again.remove("c1").unwrap();
        again.remove("c1").unwrap();
        assert!(open(d.path()).unwrap().get("c1").is_none());
    }

    #[test]
    fn an_older_criusds_records_move_into_the_journal() {
        let d = tempfile::tempdir().unwrap();
        let dir = d.path().join("c1");
        std::fs::create_dir(&dir).unwrap();
        let config = cri::ContainerConfig {
            tty: true,
            ..Default::default()
        };
        let record = Record {
            id: "c1".into(),
            pid: 7,
            ..Default::default()
        };
        std::fs::write(dir.join("config.pb"), config.encode_to_vec()).unwrap();
        std::fs::write(dir.join(RECORD), serde_json::to_vec(&record).unwrap()).unwrap();
        assert_eq!(open(d.path()).unwrap().get("c1").unwrap().record.pid, 7);
        assert!(!dir.exists());
        let again = open(d.path()).unwrap();
        let c1 = again.get("c1").unwrap();
        assert_eq!((c1.record, c1.config), (record, config));
    }

    #[test]
    fn concurrent_changes_of_records_all_land() {
        let d = tempfile::tempdir().unwrap();
        let rs = std::sync::Arc::new(open(d.path()).unwrap());
        for id in ["c1", "c2"] {
            let c = Container {
                record: Record {
                    id: id.into(),
                    ..Default::default()
                },
                config: Default::default(),
            };
            rs.insert(&c).unwrap();
        }
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let rs = rs.clone();
                std::thread::spawn(move || {
                    for _ in 0..10 {
                        let id = if i % 2 == 0 { "c1" } else { "c2" };
                        rs.modify(id, |c| c.record.pid += 1).unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let again = open(d.path()).unwrap();
        assert_eq!(again.get("c1").unwrap().record.pid, 40);
        assert_eq!(again.get("c2").unwrap().record.pid, 40);
        rs.modify("c1", |c| c.config.tty = true).unwrap();
        assert!(open(d.path()).unwrap().get("c1").unwrap().config.tty);
    }
}
