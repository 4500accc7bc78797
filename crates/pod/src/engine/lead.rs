//! The loop that leads a running pod: it reads what changed, decides what exits mean, restarts what is due,
//! starts the next containers in KEP-753's order, runs probes, and says when the pod has completed or was
//! stopped.

use std::time::{Duration, Instant};

use crius_api::cri;
use tokio::sync::mpsc;

use super::slot::State;
use super::{Control, Run};
use crate::manifest::RestartPolicy;
use crate::report::{Event, Phase, Role};

/// The longest restart back-off (kubelet's).
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How often states are read when the runtime's events say when something changed.
const EVENTED_POLL: Duration = Duration::from_secs(1);

impl<E: FnMut(Event)> Run<'_, E> {
    /// Starts the pod and keeps it as its spec says until it completes, or is stopped, and says which.
    pub(super) async fn lead(&mut self, controls: &mut mpsc::UnboundedReceiver<Control>) -> Phase {
        let first_main = self
            .slots
            .iter()
            .position(|s| s.role == Role::Main)
            .unwrap_or(self.slots.len());
        let mut next_init = 0;
        let mut open = true;
        loop {
            // What arrived meanwhile first: a stop during image pulls or a long call starts nothing more.
            while open {
                match controls.try_recv() {
                    Ok(Control::Stop) => return Phase::Stopped,
                    Ok(Control::StopWithin { grace_s }) => {
                        self.grace_s = Some(grace_s);
                        return Phase::Stopped;
                    }
                    Ok(Control::Resize { container, resources }) => self.resize(&container, resources).await,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => open = false,
                }
            }
            self.observe().await;
            if let Some(phase) = self.react() {
                return phase;
            }
            self.restart_due().await;
            // Start-up, one init container at a time: a sidecar has to be ready, a regular one done.
            while next_init < first_main {
                let s = &self.slots[next_init];
                if matches!(s.state, State::NotStarted) {
                    self.start(next_init).await;
                    continue;
                }
                let passed = match s.role {
                    Role::Sidecar => s.state.ready(),
                    _ => matches!(s.state, State::Done(_)),
                };
                if !passed {
                    break;
                }
                next_init += 1;
            }
            if next_init == first_main {
                for i in first_main..self.slots.len() {
                    if matches!(self.slots[i].state, State::NotStarted) {
                        self.start(i).await;
                    }
                }
                next_init += 1;
            }
            self.probe().await;
            let mains = &self.slots[first_main..];
            if next_init > first_main
                && self.def.restart_policy != RestartPolicy::Always
                && mains.iter().all(|s| matches!(s.state, State::Done(_)))
            {
                let ok = mains.iter().all(|s| s.state.ended().is_some_and(|e| e.code == 0));
                return if ok { Phase::Succeeded } else { Phase::Failed };
            }
            // With the runtime's events, a state change wakes the loop and reads are rarer (kubelet's
            // evented PLEG); restarts and probes still need the short tick.
            let evented = self.events.live();
            let wait = if evented && !self.busy() {
                EVENTED_POLL
            } else {
                self.opts.poll
            };
            let events = self.events.notify.clone();
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = events.notified(), if evented => {}
                c = controls.recv(), if open => match c {
                    None => open = false,
                    Some(Control::Stop) => return Phase::Stopped,
                    Some(Control::StopWithin { grace_s }) => {
                        self.grace_s = Some(grace_s);
                        return Phase::Stopped;
                    }
                    Some(Control::Resize { container, resources }) => self.resize(&container, resources).await,
                },
            }
        }
    }

    /// Whether something needs the short tick: a restart due, a startup still pending, a liveness probe.
    fn busy(&self) -> bool {
        self.slots.iter().any(|s| match &s.state {
            State::Restarting { .. } => true,
            State::Running { ready, .. } => {
                (!ready && s.role != Role::Init && s.spec.startup_probe.is_some())
                    || s.spec.liveness_probe.is_some()
                    || s.spec.readiness_probe.is_some()
            }
            _ => false,
        })
    }

    /// Decides what exits mean: restarts to schedule, init and main containers finished, a failed pod.
    fn react(&mut self) -> Option<Phase> {
        let policy = self.def.restart_policy;
        for s in &mut self.slots {
            let State::Exited(last) = &s.state else {
                continue;
            };
            let code = last.code;
            let restart = match s.role {
                Role::Sidecar => true,
                Role::Init => code != 0 && policy != RestartPolicy::Never,
                Role::Main => match policy {
                    RestartPolicy::Always => true,
                    RestartPolicy::OnFailure => code != 0,
                    RestartPolicy::Never => false,
                },
            };
            if restart {
                let after = s.backoff;
                s.backoff = (s.backoff * 2).min(MAX_BACKOFF);
                s.state.decide(Some(Instant::now() + after));
                (self.on)(Event::Restarting {
                    name: s.spec.name.clone(),
                    after,
                });
            } else {
                s.state.decide(None);
                if s.role == Role::Init && code != 0 {
                    return Some(Phase::Failed);
                }
            }
        }
        None
    }

    /// Starts again what waited out its back-off, once its old container is removed.
    async fn restart_due(&mut self) {
        let now = Instant::now();
        for i in 0..self.slots.len() {
            let State::Restarting { at, last } = &self.slots[i].state else {
                continue;
            };
            if *at > now {
                continue;
            }
            let old = last.id.clone();
            let s = &mut self.slots[i];
            s.state = State::NotStarted;
            s.attempt += 1;
            if let Some(old) = old {
                let _ = self
                    .rt
                    .remove_container(cri::RemoveContainerRequest { container_id: old })
                    .await;
            }
            self.start(i).await;
        }
    }
}
