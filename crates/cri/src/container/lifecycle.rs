//! StartContainer, StopContainer, RemoveContainer, UpdateContainerResources and ReopenContainerLog.
//!
//! Stop sends the container's `stop_signal` (else the image's StopSignal, else SIGTERM), waits the grace
//! period, then SIGKILL, and returns once the process is gone. Each wait is one shim call with the time left
//! as its deadline: a deadline that passes is the answer (the process outlived its grace period), never a
//! reason to ask again.

use std::time::Duration;

use crius_api::cri;

use super::Containers;
use crate::error::{Error, Kind, Result};
use crate::nri::ContainerEvent;
use crate::shim::{Exit, ShimError};
use crate::store::container::{Container, State};
use crate::store::now_ns;

const UPDATE: &str = "UpdateContainerResources";

/// How long a process gets to go after SIGKILL.
const AFTER_SIGKILL: Duration = Duration::from_secs(60);

/// The signal that stops a container whose image config is `config`: the image's StopSignal (`SIGQUIT`,
/// `QUIT`, `3`), else SIGTERM.
pub(super) fn stop_signal(config: &serde_json::Value) -> u32 {
    let name = config["config"]["StopSignal"]
        .as_str()
        .unwrap_or_default()
        .to_ascii_uppercase();
    if let Ok(n) = name.parse::<u32>() {
        return n;
    }
    let full = if name.starts_with("SIG") {
        name
    } else {
        format!("SIG{name}")
    };
    full.parse::<nix::sys::signal::Signal>()
        .map(|s| s as u32)
        .unwrap_or(libc::SIGTERM as u32)
}

impl Containers {
    /// Tells NRI (when on) of `event` of `c`.
    fn tell_nri(&self, event: ContainerEvent, c: &Container) {
        if let Some(nri) = self.nri() {
            nri.container(event, c);
        }
    }

    pub(super) fn shim_err<'a>(call: &'static str, c: &'a Container) -> impl FnOnce(ShimError) -> Error + 'a {
        move |source| Error::Shim {
            call,
            id: c.record.id.clone(),
            source,
        }
    }

    /// StartContainer.
    pub fn start(&self, id: &str) -> Result<()> {
        const CALL: &str = "StartContainer";
        let c = self.get_or_not_found(CALL, id)?;
        self.tell_nri(ContainerEvent::Start, &c);
        // Taken before: a process quick to exit may be gone (and its exit recorded) before Start returns.
        let at = now_ns();
        let pid = self
            .shims
            .start(&c.record.sandbox_id, &c.record.id, "")
            .map_err(Self::shim_err(CALL, &c))?;
        self.records.modify(&c.record.id, |c| {
            c.record.started_at = at;
            c.record.pid = pid;
        })?;
        tracing::info!(container = %c.record.id, "container started");
        self.emit(&c, cri::ContainerEventType::ContainerStartedEvent);
        self.tell_nri(ContainerEvent::PostStart, &c);
        Ok(())
    }

    fn kill(&self, call: &'static str, c: &Container, signal: u32) -> Result<()> {
        match self
            .shims
            .kill(&c.record.sandbox_id, &c.record.id, "", signal, signal == 9)
        {
            // Already gone: what Stop wanted.
            Err(e) if e.is_not_found() => Ok(()),
            r => r.map_err(Self::shim_err(call, c)),
        }
    }

    /// Waits at most `d` for the container's exit: its exit, None if the deadline passed first.
    fn wait(&self, call: &'static str, c: &Container, d: Duration) -> Result<Option<Exit>> {
        match self.shims.wait(&c.record.sandbox_id, &c.record.id, "", d) {
            Ok(exit) => Ok(Some(exit)),
            Err(ShimError::Timeout(_)) => Ok(None),
            Err(e) => Err(Self::shim_err(call, c)(e)),
        }
    }

    /// StopContainer: the stop signal (see the module doc), `timeout` seconds, then SIGKILL; returns once the
    /// process is gone. Stopping a container that is not running, or unknown, is fine.
    pub fn stop(&self, id: &str, timeout: i64) -> Result<()> {
        const CALL: &str = "StopContainer";
        crate::validate::id(CALL, "container_id", id)?;
        // Stopping what does not exist is done (kubelet and critest count on it).
        let Some(c) = self.get(id) else { return Ok(()) };
        // Shared: a second Stop (a shorter grace period) goes ahead; a Remove under way is waited for.
        let lock = self.busy.of(&c.record.id);
        let _held = lock.read().unwrap_or_else(|p| p.into_inner());
        self.stop_held(&c.record.id, timeout)
    }

    /// StopContainer, its container's lock held.
    fn stop_held(&self, id: &str, timeout: i64) -> Result<()> {
        const CALL: &str = "StopContainer";
        // Removed while this call waited for the lock: done.
        let Some(c) = self.get(id) else { return Ok(()) };
        if c.record.state() != State::Running {
            return Ok(());
        }
        if let Some(grace) = super::exec::limit(timeout) {
            // Checked at create; a record of another version whose value is unknown falls back to the image's.
            let asked = crate::validate::unsupported::stop_signal(CALL, c.config.stop_signal)
                .ok()
                .flatten();
            let image = || crius_image::Digest::parse(&c.record.image_id).ok();
            let signal = asked
                .or_else(|| image().map(|d| stop_signal(&self.images.config(&d))))
                .unwrap_or(15);
            self.kill(CALL, &c, signal)?;
            if let Some(exit) = self.wait(CALL, &c, grace)? {
                return self.finished(&c, exit);
            }
        }
        self.kill(CALL, &c, 9)?;
        match self.wait(CALL, &c, AFTER_SIGKILL)? {
            Some(exit) => self.finished(&c, exit),
            None => Err(Error::DeadlineExceeded {
                call: CALL,
                kind: Kind::Container,
                id: c.record.id.clone(),
                reason: format!("is still running {} s after SIGKILL", AFTER_SIGKILL.as_secs()),
            }),
        }
    }

    /// Records `c`'s exit (if no event did before), telling listeners the first time.
    fn finished(&self, c: &Container, exit: Exit) -> Result<()> {
        tracing::info!(container = %c.record.id, exit_code = exit.status, "container stopped");
        self.note_exit(&c.record.id, exit.status as i32, exit.at_ns)?;
        self.tell_nri(ContainerEvent::Stop, c);
        Ok(())
    }

    /// RemoveContainer: killed if running, its task deleted, its snapshot, bundle and record removed.
    /// Idempotent; an unknown id is fine.
    pub fn remove(&self, id: &str) -> Result<()> {
        const CALL: &str = "RemoveContainer";
        crate::validate::id(CALL, "container_id", id)?;
        let Some(c) = self.get(id) else { return Ok(()) };
        let lock = self.busy.of(&c.record.id);
        let _held = lock.write().unwrap_or_else(|p| p.into_inner());
        // A Remove that waited for another finds the container gone: done.
        let Some(c) = self.get(&c.record.id) else {
            return Ok(());
        };
        if c.record.state() == State::Running {
            self.stop_held(&c.record.id, 0)?;
        }
        let last = self
            .shims
            .delete(&c.record.sandbox_id, &c.record.id, "")
            .map_err(Self::shim_err(CALL, &c))?;
        if let Some(exit) = last.filter(|_| c.record.finished_at == 0 && c.record.started_at != 0) {
            // No exit event came (its shim is gone): the shim's delete knew the last exit.
            tracing::info!(container = %c.record.id, exit_code = exit.status, "container's last exit, from its shim");
            self.note_exit(&c.record.id, exit.status as i32, exit.at_ns)?;
        }
        self.images
            .remove_snapshot(&c.record.id)
            .map_err(|source| Error::Image { call: CALL, source })?;
        super::image_volumes::remove(&*self.images, &c.record.id)?;
        let _ = std::fs::remove_dir_all(self.bundle(&c.record.id));
        self.records.remove(&c.record.id)?;
        self.names.release(&c.name_key(), &c.record.id);
        self.cpu_samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&c.record.id);
        self.processes.forget(&c.record.id);
        self.busy.forget(&c.record.id);
        tracing::info!(container = %c.record.id, "container removed");
        self.emit(&c, cri::ContainerEventType::ContainerDeletedEvent);
        self.tell_nri(ContainerEvent::Remove, &c);
        Ok(())
    }

    /// UpdateContainerResources: `new` merged over the container's resources ([`crate::convert::merge_resources`]),
    /// applied live by the runtime (same process; a memory limit below current usage is refused), and kept
    /// for ContainerStatus.
    /// NRI plugins (when on) see the request first and may change it (the NRI `Events::update`).
    pub fn update(&self, id: &str, new: &cri::LinuxContainerResources) -> Result<()> {
        let c = self.get_or_not_found(UPDATE, id)?;
        crate::validate::resources(UPDATE, "linux", new)?;
        let Some(nri) = self.nri() else {
            return self.update_resources(UPDATE, &c, new);
        };
        let new = nri.update(&c, new)?;
        self.update_resources(UPDATE, &c, &new)?;
        self.tell_nri(ContainerEvent::PostUpdate, &c);
        Ok(())
    }

    /// `new` merged over `c`'s resources, applied live and recorded: UpdateContainerResources's work, and
    /// the path NRI plugins' updates of containers take (`call` names which).
    pub(crate) fn update_resources(
        &self,
        call: &'static str,
        c: &Container,
        new: &cri::LinuxContainerResources,
    ) -> Result<()> {
        let (merged, oci) =
            crate::convert::update_resources(&c.resources(), new, crate::convert::cpu_controller())?;
        self.shims
            .update(&c.record.sandbox_id, &c.record.id, &oci)
            .map_err(Self::shim_err(call, c))?;
        self.records.modify(&c.record.id, |c| {
            c.config.linux.get_or_insert_with(Default::default).resources = Some(merged);
        })?;
        tracing::info!(container = %c.record.id, "container resources updated");
        Ok(())
    }

    /// ReopenContainerLog: the shim reopens the log file at its path (kubelet renamed the old one).
    pub fn reopen_log(&self, id: &str) -> Result<()> {
        const CALL: &str = "ReopenContainerLog";
        let c = self.get_or_not_found(CALL, id)?;
        Self::running(CALL, &c)?;
        self.shims
            .reopen_log(&c.record.sandbox_id, &c.record.id)
            .map_err(Self::shim_err(CALL, &c))
    }
}
