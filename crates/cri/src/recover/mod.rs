//! The start-up pass: what criusd finds when it starts again, after a restart or a crash, and how it makes
//! its records true again before it serves a call.
//!
//! Assumptions (written down, as containerd's `restart.go` does):
//! - Records are written whole before a call answers, so each record read is one that a call finished
//!   writing (or, for a call cut short, the one before it); a record that does not parse is skipped, not
//!   deleted (`store`).
//! - A pod's shim outlives criusd and keeps its containers; it queues the events it could not send and sends
//!   them once criusd's events socket is back, so exits that happened meanwhile arrive late but arrive.
//! - A shim that is gone took its containers' processes' supervision with it: their state is UNKNOWN (not
//!   deleted, as CRI-O would): kubelet then stops and removes them, which cleans up through the shim's
//!   `delete` action.
//! - A sandbox whose pinned namespaces are gone (a reboot emptied `/run`) is NOTREADY (`store::sandbox`).
//! - An exec of a streaming session that was open when criusd went down is killed and deleted (its session
//!   ended with criusd; the container goes on).
//! - A call that makes an object wrote an intent first ([`crate::store::intents`], under the state directory:
//!   they cover crashes of criusd, and a reboot, which empties it, leaves nothing of theirs but what the
//!   sweep below removes); one left behind was cut
//!   short. Its object is kept if its record is complete (the call's answer was lost, kubelet's retry finds
//!   it by name), else undone: a container's task, snapshot and bundle; a sandbox's CNI attachment (DEL with
//!   the network its record names: ADD may have run), pins and record.
//! - Calls that take objects apart remove their records last, so what a crash cut short is taken apart again
//!   by kubelet's next call. Records live in journals ([`crate::store::journal`]), whose last entry, if a
//!   crash left it half-written, is cut off when they are opened; an older criusd's record directory
//!   without its main file is a removal cut short (`store::is_leftover`).
//! - Last, what no record owns is removed: bundles, snapshots (their overlay mounts), namespace pins.
//!
//! Every repair is logged (`repaired: ...`), and a summary line says how many there were.

use std::collections::HashSet;

use crate::container::Containers;
use crate::node::Node;
use crate::shim::{ShimError, TaskStatus};
use crate::store::container::State;
use crate::store::intents::{Intents, Op};

impl Node {
    /// The start-up pass over `intents` (each directory of them: an older criusd kept them under its root),
    /// the records, the shims and what lies on disk; returns the number of repairs.
    pub(crate) fn reconcile(&self, intents: &[&Intents]) -> usize {
        let mut repairs = 0;
        for (intents, i) in intents
            .iter()
            .flat_map(|d| d.left().into_iter().map(move |i| (d, i)))
        {
            let exact = |id: &str| id == i.id;
            match i.op {
                Op::CreateContainer if self.containers.get(&i.id).is_some_and(|c| exact(&c.record.id)) => {}
                Op::CreateContainer => {
                    tracing::info!(container = %i.id, sandbox = %i.sandbox_id, "repaired: undid a CreateContainer cut short (task, snapshot, bundle)");
                    self.containers.undo_create(&i.sandbox_id, &i.id, true);
                    repairs += 1;
                }
                Op::RunPodSandbox
                    if self
                        .pods
                        .sandboxes
                        .get(&i.id)
                        .is_some_and(|s| exact(&s.record.id) && s.record.ready) => {}
                Op::RunPodSandbox => {
                    tracing::info!(sandbox = %i.id, "repaired: undid a RunPodSandbox cut short (network, pins, record)");
                    self.pods.undo_run(&i.id);
                    repairs += 1;
                }
            }
            intents.forget(&i);
        }
        self.containers.recover();
        repairs += self.containers.sweep();
        let sandboxes: HashSet<String> = self
            .pods
            .sandboxes
            .list()
            .into_iter()
            .map(|s| s.record.id)
            .collect();
        repairs += self.pods.sweep_pins(&sandboxes);
        tracing::info!(repairs, "start-up pass done");
        repairs
    }
}

impl Containers {
    /// Every container not known to have exited is asked of its shim once — the one shim call
    /// per container that status-from-events leaves. An exit that happened while criusd was down is recorded
    /// (its shim also sends the event, which then changes nothing); a shim that is gone makes it UNKNOWN.
    pub fn recover(&self) {
        for c in self.list_all() {
            if c.record.state() == State::Exited {
                continue;
            }
            match self.shims.state(&c.record.sandbox_id, &c.record.id) {
                Ok(TaskStatus::Stopped(exit)) => self.mark_exit(&c.record.id, exit.status as i32, exit.at_ns),
                Ok(TaskStatus::Running) if c.record.started_at == 0 => {
                    // Started, but criusd went down before it wrote so.
                    let _ = self.records.modify(&c.record.id, |c| {
                        c.record.started_at = c.record.created_at;
                        c.record.unknown = false;
                    });
                }
                Ok(TaskStatus::Running | TaskStatus::Created) => {
                    let _ = self.records.modify(&c.record.id, |c| c.record.unknown = false);
                }
                Ok(TaskStatus::Unknown) | Err(ShimError::Unreachable(_)) => {
                    let _ = self.records.modify(&c.record.id, |c| c.record.unknown = true);
                }
                Err(e) if e.is_not_found() => {
                    let _ = self.records.modify(&c.record.id, |c| c.record.unknown = true);
                }
                Err(e) => tracing::warn!(container = %c.record.id, "reading its state from the shim: {e}"),
            }
            self.end_orphan_execs(&c.record.sandbox_id, &c.record.id);
        }
    }

    /// Removes the bundles and snapshots no container record owns (what a crash left before an intent
    /// existed, or of an intent's container): a bundle's task is deleted in its pod's shim first. Returns how
    /// many containers' leftovers were removed.
    pub(crate) fn sweep(&self) -> usize {
        let owned: HashSet<String> = self.list_all().into_iter().map(|c| c.record.id).collect();
        let mut orphans: HashSet<String> = crate::store::list_dir(&self.bundles)
            .into_iter()
            .chain(
                self.images
                    .snapshots()
                    .iter()
                    .map(|s| crate::container::image_volumes::owner(s).to_string()),
            )
            .filter(|id| !owned.contains(id))
            .collect();
        // Without a valid id there is no snapshot or task of it to take apart: only the directory goes.
        orphans.retain(|id| {
            let valid = id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit());
            if !valid {
                tracing::info!(path = %self.bundle(id).display(), "repaired: removed a stray entry among the bundles");
                let _ = std::fs::remove_dir_all(self.bundle(id));
            }
            valid
        });
        for id in &orphans {
            let sandbox = std::fs::read(self.bundle(id).join("config.json"))
                .ok()
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|v| {
                    v["annotations"][crate::convert::SANDBOX_ID]
                        .as_str()
                        .map(str::to_string)
                });
            tracing::info!(container = %id, ?sandbox, "repaired: removed a container no record owns (task, snapshot, bundle)");
            match sandbox {
                Some(s) => self.undo_create(&s, id, true),
                None => self.undo_create("", id, false),
            }
        }
        orphans.len()
    }

    /// The execs of streaming sessions that ended with the last criusd (their FIFOs' directories are still in
    /// the bundle): killed and deleted in the shim, their directories removed.
    fn end_orphan_execs(&self, sandbox: &str, id: &str) {
        let Ok(entries) = std::fs::read_dir(self.bundle(id)) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(crate::container::stream::EXEC_PREFIX) && e.path().is_dir() {
                tracing::info!(container = %id, exec = %name, "ending an exec whose session ended with the last criusd");
                self.end_exec(sandbox, id, &name, &e.path(), true);
            }
        }
    }
}

#[cfg(test)]
mod tests;
