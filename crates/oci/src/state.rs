//! The on-disk record of a container under the runtime root, and how its status is derived.
//!
//! ```text
//!  create ──► created ──start──► running ◄──resume── paused
//!                │                  │  └──pause──────►┘
//!                └──────(exit)──────┴──► stopped ──delete──► (gone)
//! ```
//! The status is never stored as truth: it is derived from the init process (pid *and* start time, so a reused
//! pid is not mistaken for the container), the exec fifo (present until `start`) and `cgroup.freeze`.

use std::path::{Path, PathBuf};

use oci_spec::runtime::{ContainerState, Spec};
use serde::{Deserialize, Serialize};

use crate::{Error, Result, err};

/// File name of the state record inside a container's directory.
pub const STATE_FILE: &str = "state.json";
/// File name of the fifo that holds the init process until `start`.
pub const EXEC_FIFO: &str = "exec.fifo";

/// The status of a container, as the OCI runtime spec names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Set up, waiting for `start`.
    Created,
    /// The user process runs.
    Running,
    /// Frozen through `cgroup.freeze`.
    Paused,
    /// The init process has exited.
    Stopped,
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(match self {
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        })
    }
}

/// What crius-runc keeps about a container (`<root>/<id>/state.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Record {
    /// Container id.
    pub id: String,
    /// Host pid of the init process.
    pub pid: i32,
    /// Start time of the init process (field 22 of /proc/pid/stat), to tell it from a reused pid.
    pub pid_start: u64,
    /// Absolute bundle path.
    pub bundle: PathBuf,
    /// Absolute rootfs path.
    pub rootfs: PathBuf,
    /// Creation time, RFC 3339.
    pub created: String,
    /// The container's cgroup directory (absolute).
    pub cgroup: PathBuf,
    /// The systemd scope that holds that cgroup, when the systemd driver made it (`--systemd-cgroup`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub systemd_unit: Option<String>,
    /// The configuration the container was created with; `update` keeps its resources current.
    pub spec: Spec,
}

impl Record {
    /// The directory of container `id` under `root`.
    pub fn dir(root: &Path, id: &str) -> PathBuf {
        root.join(id)
    }

    /// The record of container `id`, whose init `pid` runs from `bundle` in cgroup `cgroup` (held by the
    /// systemd scope `unit`, if one): made now, saved under `root`, and the pid written to `pid_file` if one
    /// is asked for (as create and restore end). Its init must still be there (its start time is recorded).
    pub fn save_new(
        root: &Path,
        id: &str,
        pid: i32,
        bundle: &crate::config::Bundle,
        (cgroup, unit): (PathBuf, Option<String>),
        pid_file: Option<&Path>,
    ) -> Result<Record> {
        let (pid_start, _) = proc_stat(pid).ok_or_else(|| err!("container init {pid} vanished"))?;
        let record = Record {
            id: id.to_string(),
            pid,
            pid_start,
            bundle: bundle.dir.clone(),
            rootfs: bundle.rootfs.clone(),
            created: now_rfc3339(),
            cgroup,
            systemd_unit: unit,
            spec: bundle.spec.clone(),
        };
        record.save(root)?;
        if let Some(p) = pid_file {
            atomic_write(
                &std::path::absolute(p).unwrap_or(p.to_path_buf()),
                pid.to_string().as_bytes(),
            )?;
        }
        Ok(record)
    }

    /// Makes container `id`'s state directory under `root` (and `root` itself), root's alone as runc keeps
    /// them (0700; the state holds the spec, env included); AlreadyExists when `id` is taken. Its path.
    pub fn create_dir(root: &Path, id: &str) -> Result<PathBuf> {
        crius_common::private::dir_all(root).map_err(Error::io("creating state root", root))?;
        let dir = Record::dir(root, id);
        if let Err(e) = crius_common::private::dir(&dir) {
            return Err(match e.kind() {
                std::io::ErrorKind::AlreadyExists => Error::AlreadyExists(id.into()),
                _ => Error::io("creating", &dir)(e),
            });
        }
        Ok(dir)
    }

    /// Reads the record of `id`; NotFound if there is none.
    pub fn load(root: &Path, id: &str) -> Result<Record> {
        crate::id::validate(id)?;
        let path = Self::dir(root, id).join(STATE_FILE);
        let text = match std::fs::read(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(Error::NotFound(id.into())),
            Err(e) => return Err(Error::io("reading", &path)(e)),
        };
        serde_json::from_slice(&text).map_err(|e| err!("corrupt state {}: {e}", path.display()))
    }

    /// Writes the record atomically (see [`atomic_write`]).
    pub fn save(&self, root: &Path) -> Result<()> {
        let bytes = serde_json::to_vec(self).map_err(|e| err!("encoding state of {}: {e}", self.id))?;
        atomic_write(&Self::dir(root, &self.id).join(STATE_FILE), &bytes)
    }

    /// The current status, derived from the process, the exec fifo and the cgroup.
    pub fn status(&self, root: &Path) -> Status {
        if !process_alive(self.pid, self.pid_start) {
            return Status::Stopped;
        }
        if Self::dir(root, &self.id).join(EXEC_FIFO).exists() {
            return Status::Created;
        }
        match std::fs::read_to_string(self.cgroup.join("cgroup.freeze")) {
            Ok(s) if s.trim() == "1" => Status::Paused,
            _ => Status::Running,
        }
    }

    /// The OCI `state` document, with what runc's `state` adds: the rootfs, the creation time, an empty owner,
    /// and `paused`, a status the runtime spec does not name.
    pub fn oci_state(&self, root: &Path) -> serde_json::Value {
        let status = self.status(root);
        let pid = if status == Status::Stopped { 0 } else { self.pid };
        let mut doc = document(&self.id, status.into(), pid, &self.bundle, &self.spec);
        doc["status"] = status.to_string().into();
        doc["rootfs"] = self.rootfs.display().to_string().into();
        doc["created"] = self.created.clone().into();
        doc["owner"] = "".into();
        doc
    }
}

impl From<Status> for ContainerState {
    /// The runtime spec's name for a status; a paused container's processes still exist, so it is running.
    fn from(s: Status) -> ContainerState {
        match s {
            Status::Created => ContainerState::Created,
            Status::Running | Status::Paused => ContainerState::Running,
            Status::Stopped => ContainerState::Stopped,
        }
    }
}

/// The runtime spec's state document of container `id` (oci-spec's `State`), as JSON: what hooks read on
/// stdin (`hooks::run`), and the core of [`Record::oci_state`].
pub(crate) fn document(
    id: &str,
    status: ContainerState,
    pid: i32,
    bundle: &Path,
    spec: &Spec,
) -> serde_json::Value {
    let mut state = oci_spec::runtime::State::default();
    state
        .set_version(spec.version().clone())
        .set_id(id.to_string())
        .set_status(status)
        .set_pid(Some(pid))
        .set_bundle(bundle.to_path_buf())
        .set_annotations(Some(spec.annotations().clone().unwrap_or_default()));
    // Only a bundle path that is not UTF-8 fails to encode; it then shows as null rather than failing a hook.
    serde_json::to_value(state).unwrap_or_default()
}

/// Writes `bytes` to `path` so that readers see the old or the new content, never a mix (temp file + rename),
/// as a file only its owner reads (0600: the state holds the container's env).
/// No fsync: runtime state describes live processes, which a power loss ends too, and it belongs on a tmpfs.
pub fn atomic_write(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| err!("{} has no parent", path.display()))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp"));
    let write = || -> std::io::Result<()> {
        crius_common::private::write(&tmp, bytes)?;
        std::fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io("writing", path)(e)
    })
}

/// Start time and state letter of `pid` from /proc/pid/stat.
pub fn proc_stat(pid: i32) -> Option<(u64, char)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    // `rest` starts at field 3 (state); start time is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some((start, state))
}

/// True if `pid` runs and is the same process that was started at `start` (zombies count as gone).
pub fn process_alive(pid: i32, start: u64) -> bool {
    match proc_stat(pid) {
        Some((s, state)) => s == start && state != 'Z' && state != 'X',
        None => false,
    }
}

/// The current time as RFC 3339 with nanoseconds, in UTC (as runc writes `created`).
pub fn now_rfc3339() -> String {
    crius_common::time::now(crius_common::time::Fraction::Nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive_and_start_time_matters() {
        let me = std::process::id() as i32;
        let (start, _) = proc_stat(me).unwrap();
        assert!(process_alive(me, start));
        assert!(!process_alive(me, start + 1));
        assert!(!process_alive(i32::MAX, start));
    }

    #[test]
    fn atomic_write_replaces_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.json");
        atomic_write(&p, b"first version, long").unwrap();
        atomic_write(&p, b"second").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    /// A record of a container whose init is this test process (so it is alive), in `dir`.
    fn record(dir: &Path, annotations: &[(&str, &str)]) -> Record {
        let me = std::process::id() as i32;
        let mut spec = Spec::default();
        let a = annotations.iter().map(|(k, v)| (k.to_string(), v.to_string()));
        spec.set_annotations(Some(a.collect()));
        Record {
            id: "c1".into(),
            pid: me,
            pid_start: proc_stat(me).unwrap().0,
            bundle: "/b/c1".into(),
            rootfs: "/b/c1/rootfs".into(),
            created: "2026-12-05T06:00:00Z".into(),
            cgroup: dir.join("cgroup"),
            systemd_unit: None,
            spec,
        }
    }

    #[test]
    fn the_state_document_has_runc_s_fields_and_paused() {
        let dir = tempfile::tempdir().unwrap();
        let rec = record(dir.path(), &[("b", "2"), ("a", "1")]);
        let version = rec.spec.version().clone();
        let want = |status: &str, pid: i32| {
            serde_json::json!({
                "ociVersion": version, "id": "c1", "pid": pid, "status": status, "bundle": "/b/c1",
                "rootfs": "/b/c1/rootfs", "created": "2026-12-05T06:00:00Z", "owner": "",
                "annotations": {"a": "1", "b": "2"},
            })
        };
        assert_eq!(rec.oci_state(dir.path()), want("running", rec.pid));
        std::fs::create_dir_all(&rec.cgroup).unwrap();
        std::fs::write(rec.cgroup.join("cgroup.freeze"), "1\n").unwrap();
        assert_eq!(rec.oci_state(dir.path()), want("paused", rec.pid));
        let gone = Record {
            pid_start: rec.pid_start + 1,
            ..rec.clone()
        };
        let doc = gone.oci_state(dir.path());
        assert_eq!(doc, want("stopped", 0));
        // The text crius-runc prints: keys sorted, as a JSON object's always were here.
        let text = serde_json::to_string(&doc).unwrap();
        assert!(
            text.starts_with(r#"{"annotations":{"a":"1","b":"2"},"bundle":"/b/c1","created""#),
            "{text}"
        );
    }

    #[test]
    fn hooks_get_the_spec_s_state_document() {
        let dir = tempfile::tempdir().unwrap();
        let rec = record(dir.path(), &[]);
        let doc = document("c1", ContainerState::Creating, 42, &rec.bundle, &rec.spec);
        let want = serde_json::json!({
            "ociVersion": rec.spec.version(), "id": "c1", "status": "creating", "pid": 42,
            "bundle": "/b/c1", "annotations": {},
        });
        assert_eq!(doc, want);
    }

    #[test]
    fn callers_tell_missing_wrong_state_and_errno_apart() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(matches!(Record::load(root, "c1"), Err(Error::NotFound(id)) if id == "c1"));
        crate::ops::delete(root, "c1", true).expect("a forced delete of nothing is done");
        // Its init is this process: alive, started, not frozen. (Never delete it with force: that kills it.)
        let rec = record(root, &[]);
        let e = rec.save(root).unwrap_err();
        assert_eq!(e.errno(), Some(nix::errno::Errno::ENOENT), "{e}");
        let state = Record::dir(root, "c1").join(STATE_FILE);
        assert!(matches!(&e, Error::Io { op, path: Some(p), .. } if op == "writing" && *p == state));
        std::fs::create_dir_all(Record::dir(root, "c1")).unwrap();
        rec.save(root).unwrap();
        for e in [
            crate::ops::start(root, "c1").unwrap_err(),
            crate::ops::delete(root, "c1", false).unwrap_err(),
        ] {
            assert!(
                matches!(
                    &e,
                    Error::WrongState {
                        status: Status::Running,
                        ..
                    }
                ),
                "{e}"
            );
        }
    }
}
