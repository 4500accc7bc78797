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
/// How often states are read when the runtime's events say when something changed: a safety net, since every
/// change wakes the loop anyway.
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
        // When states were last read, and whether the runtime said something changed since.
        let mut read: Option<Instant> = None;
        let mut changed = false;
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
            // States are read on every tick without events; with them, only when they say something changed
            // (or once in EVENTED_POLL): a wake that only runs a probe reads nothing (kubelet's prober does
            // not relist either).
            let evented = self.events.live();
            if !evented || changed || read.is_none_or(|at| at.elapsed() >= EVENTED_POLL) {
                changed = false;
                read = Some(Instant::now());
                self.observe().await;
            }
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
            // evented PLEG); otherwise it wakes when the next restart or probe is due, or for the next read.
            let evented = self.events.live();
            let wait = match (evented, read) {
                (true, Some(at)) => self
                    .next_due(at + EVENTED_POLL)
                    .saturating_duration_since(Instant::now()),
                _ => self.opts.poll,
            };
            let events = self.events.notify.clone();
            tokio::select! {
                // News first: an exit is read before a probe due at the same time runs against it.
                biased;
                () = events.notified(), if evented => changed = true,
                () = tokio::time::sleep(wait) => {}
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

    /// When the loop next has something to do on its own: the earliest restart or probe due, an exit to
    /// decide (now), or `read_at` (the next read of states) if nothing is sooner.
    fn next_due(&self, read_at: Instant) -> Instant {
        let now = Instant::now();
        self.slots
            .iter()
            .filter_map(|s| s.due(now))
            .fold(read_at, Instant::min)
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
