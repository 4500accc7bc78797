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
//!
//! - An exec of a streaming session that was open when criusd went down is killed and deleted (its session
//!   ended with criusd; the container goes on).
//!
//! What is left of half-made objects (a snapshot, a bundle or a CNI allocation made before a crash and never
//! recorded) is the reliability issue's work, not this pass's yet.

use crate::container::Containers;
use crate::shim::{ShimError, TaskStatus};
use crate::store::container::State;

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
