//! Intents: what a call that makes an object is about to do, written (fsynced) before its first side effect
//! and removed once the object's record is complete. A crash in between leaves the intent behind, and the
//! start-up pass ([`crate::recover`]) reads it to finish or undo the call: a container whose record was never
//! written is taken apart (its shim task, snapshot and bundle), a sandbox that never became READY is detached
//! from its network and unpinned.
//!
//! Calls that take objects apart need none: their records go last, so a crash leaves a record that the
//! next call (kubelet retries) takes apart again.
//!
//! One file per intent, `<dir>/<op>-<id>.json`; ids are unique, so writers never share a file. criusd keeps
//! them under its state directory (`/run` on a node, a tmpfs): an intent is there for a crash of criusd,
//! which keeps it, and after a reboot, which empties it, what its call made that lasts (a snapshot, a record
//! directory without its main file) is owned by no record and swept at the next start. A disk under the
//! root would make every pod pay for two files created and deleted on it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{sync_dir, write_atomic};
use crate::error::{Error, Result};

/// The call an intent is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// RunPodSandbox of sandbox `id`.
    RunPodSandbox,
    /// CreateContainer of container `id` in sandbox `sandbox_id`.
    CreateContainer,
}

/// What a call is about to make.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Intent {
    /// The call.
    pub op: Op,
    /// The object's id.
    pub id: String,
    /// Its sandbox (for a container).
    #[serde(default)]
    pub sandbox_id: String,
}

impl Intent {
    fn file_name(&self) -> String {
        let op = match self.op {
            Op::RunPodSandbox => "sandbox",
            Op::CreateContainer => "container",
        };
        format!("{op}-{}.json", self.id)
    }
}

/// The intents of one criusd, under one directory.
#[derive(Debug)]
pub struct Intents {
    dir: PathBuf,
}

/// An intent on disk; [`Pending::done`] removes it. Dropping it leaves it (the call did not finish).
#[must_use = "an intent is removed by done()"]
pub struct Pending {
    path: PathBuf,
}

impl Intents {
    /// The intents under `dir` (made if missing).
    pub fn open(dir: &Path) -> std::io::Result<Intents> {
        super::private_dir(dir)?;
        Ok(Intents {
            dir: dir.to_path_buf(),
        })
    }

    /// Writes `intent` and returns once it is on disk.
    pub fn begin(&self, intent: &Intent) -> Result<Pending> {
        let path = self.dir.join(intent.file_name());
        let bytes = serde_json::to_vec(intent).map_err(|e| Error::io("serializing an intent", e.into()))?;
        write_atomic(&path, &bytes)
            .map_err(|e| Error::io(format!("writing the intent {}", path.display()), e))?;
        Ok(Pending { path })
    }

    /// The intents left (by calls that did not finish), oldest name first. A file that does not parse is
    /// reported and removed: it was cut short before its rename, so its call had not begun.
    pub fn left(&self) -> Vec<Intent> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        paths.sort();
        let mut out = Vec::new();
        for p in paths {
            let parsed = std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice::<Intent>(&b).ok())
                .filter(|i| p.file_name().is_some_and(|n| n == i.file_name().as_str()));
            match parsed {
                Some(i) => out.push(i),
                None => {
                    tracing::warn!(path = %p.display(), "removing an unreadable intent (a write cut short)");
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        out
    }

    /// Removes `intent` (finished or undone by the start-up pass).
    pub fn forget(&self, intent: &Intent) {
        self.remove(&self.dir.join(intent.file_name()));
    }

    fn remove(&self, path: &Path) {
        match std::fs::remove_file(path) {
            Ok(()) => {
                if let Err(e) = sync_dir(&self.dir) {
                    tracing::warn!(dir = %self.dir.display(), "syncing the intents' directory: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Left behind, it is finished again at the next start: harmless.
            Err(e) => tracing::warn!(path = %path.display(), "removing a finished intent: {e}"),
        }
    }
}

impl Pending {
    /// The call finished (its object is complete, or was undone): the intent goes. Its removal is not
    /// synced, as nothing depends on it reaching the disk: an intent a crash brings back is forgotten if its
    /// object's record is complete, and undone again (which is idempotent) if the call had undone it.
    pub fn done(self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(path = %self.path.display(), "removing a finished intent: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intents_left_are_the_unfinished_ones_and_junk_is_dropped() {
        let d = tempfile::tempdir().unwrap();
        let intents = Intents::open(d.path()).unwrap();
        let a = Intent {
            op: Op::RunPodSandbox,
            id: "a1".into(),
            sandbox_id: String::new(),
        };
        let b = Intent {
            op: Op::CreateContainer,
            id: "b2".into(),
            sandbox_id: "a1".into(),
        };
        let pa = intents.begin(&a).unwrap();
        let _pb = intents.begin(&b).unwrap();
        std::fs::write(d.path().join("sandbox-x.json"), b"{\"op\":").unwrap();
        // A well-formed intent under another's name is not believed.
        std::fs::write(d.path().join("sandbox-y.json"), serde_json::to_vec(&a).unwrap()).unwrap();
        pa.done();
        let again = Intents::open(d.path()).unwrap();
        assert_eq!(again.left(), vec![b.clone()]);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1, "junk removed");
        again.forget(&b);
        again.forget(&b);
        assert!(again.left().is_empty());
    }
}
