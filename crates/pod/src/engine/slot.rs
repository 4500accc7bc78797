//! One container of the pod and where it is in its life. The state carries what each stage has: only a
//! running container has probes, only a run that ended has an exit, and a container id is there exactly while
//! the runtime has a container for the slot.
//!
//! ```text
//!                        create, start, postStart hook
//!   NotStarted ───────────────────────────────────────────> Running { id, ready }
//!       ^       \  any of them failed (exit -1)                  │ the runtime says it exited
//!       │        └───────────────────────────────> Exited <──────┘
//!       │                                            │  react: the role and the pod's restartPolicy
//!       │   back-off over: the old container         ├──────────────────────────────> Done
//!       └─────────────────────── removed ── Restarting { at }
//! ```
//!
//! Termination stops what is Running; the report reads every state.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Probe};

use crate::hooks::ProbeState;
use crate::report::Role;

/// A run that ended: its container, if one was made (None when CreateContainer failed), and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Ended {
    pub id: Option<String>,
    pub code: i32,
    pub reason: String,
}

/// Where a slot is in its life (the diagram in the module doc).
#[derive(Debug)]
pub(super) enum State {
    /// No container made yet.
    NotStarted,
    /// Its container `id` runs; `ready` once its startup completed (running, and its startup probe passed).
    Running {
        id: String,
        ready: bool,
        startup: ProbeState,
        liveness: ProbeState,
        readiness: ProbeState,
        /// Its readiness probe's last verdict (None before the first).
        serving: Option<bool>,
    },
    /// Its last run ended; what that means (restart, done, a failed pod) is not decided yet.
    Exited(Ended),
    /// It starts again at `at`; its last run is kept for the report meanwhile.
    Restarting { at: Instant, last: Ended },
    /// Finished for good: an init container that exited 0, or a container that will not restart.
    Done(Ended),
}

impl State {
    /// A container just started.
    pub fn running(id: String) -> State {
        State::Running {
            id,
            ready: false,
            startup: ProbeState::default(),
            liveness: ProbeState::default(),
            readiness: ProbeState::default(),
            serving: None,
        }
    }

    /// The id of the container that runs.
    pub fn running_id(&self) -> Option<&str> {
        match self {
            State::Running { id, .. } => Some(id),
            _ => None,
        }
    }

    /// The id of the slot's container: the running one, or the one of its last run if the runtime has it.
    pub fn container(&self) -> Option<&str> {
        match self {
            State::NotStarted => None,
            State::Running { id, .. } => Some(id),
            State::Exited(e) | State::Restarting { last: e, .. } | State::Done(e) => e.id.as_deref(),
        }
    }

    /// How its last run ended, once one has.
    pub fn ended(&self) -> Option<&Ended> {
        match self {
            State::NotStarted | State::Running { .. } => None,
            State::Exited(e) | State::Restarting { last: e, .. } | State::Done(e) => Some(e),
        }
    }

    /// Whether its startup is complete.
    pub fn ready(&self) -> bool {
        matches!(self, State::Running { ready: true, .. })
    }

    /// Decides an exit: to restart at `at`, or done for good. Other states stay as they are.
    pub fn decide(&mut self, restart_at: Option<Instant>) {
        *self = match std::mem::replace(self, State::NotStarted) {
            State::Exited(last) => match restart_at {
                Some(at) => State::Restarting { at, last },
                None => State::Done(last),
            },
            other => other,
        };
    }
}

/// A container of the pod.
pub(super) struct Slot {
    pub spec: Container,
    pub role: Role,
    /// The image, resolved (an image id), and as the manifest names it.
    pub image_ref: String,
    pub image_name: String,
    /// Restarts so far: the CRI attempt of its current (or next) container.
    pub attempt: u32,
    /// The wait before its next restart; it doubles with each.
    pub backoff: Duration,
    pub state: State,
}

impl Slot {
    /// When the engine next has something to do for this slot on its own, news from the runtime aside: a
    /// restart whose back-off ends, a probe that comes due (the probes [`Run::probe`](super::Run) runs, as it
    /// picks them), an exit to decide (now). None: nothing until the runtime says something changed (an
    /// init container's exit, a start waiting its turn).
    pub fn due(&self, now: Instant) -> Option<Instant> {
        // A probe the spec has runs at its next time, or now before its first run.
        let probe = |p: Option<&Probe>, st: &ProbeState| p.map(|_| st.next().unwrap_or(now));
        match &self.state {
            State::Exited(_) => Some(now),
            State::Restarting { at, .. } => Some(*at),
            State::Running { .. } if self.role == Role::Init => None,
            State::Running {
                ready: true,
                liveness,
                readiness,
                ..
            } => [
                probe(self.spec.readiness_probe.as_ref(), readiness),
                probe(self.spec.liveness_probe.as_ref(), liveness),
            ]
            .into_iter()
            .flatten()
            .min(),
            // Not ready yet: its startup probe's turn, or (without one) ready at the next look.
            State::Running { startup, .. } => {
                Some(probe(self.spec.startup_probe.as_ref(), startup).unwrap_or(now))
            }
            State::NotStarted | State::Done(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(id: Option<&str>, code: i32) -> Ended {
        Ended {
            id: id.map(str::to_string),
            code,
            reason: "Error".into(),
        }
    }

    #[test]
    fn each_state_says_what_it_has() {
        let not = State::NotStarted;
        assert_eq!((not.container(), not.ended(), not.ready()), (None, None, false));
        let mut run = State::running("c1".into());
        assert_eq!(
            (run.running_id(), run.container(), run.ready()),
            (Some("c1"), Some("c1"), false)
        );
        if let State::Running { ready, .. } = &mut run {
            *ready = true;
        }
        assert!(run.ready());
        // A create that failed left no container to remove.
        let failed = State::Exited(ended(None, -1));
        assert_eq!((failed.running_id(), failed.container()), (None, None));
        let restarting = State::Restarting {
            at: Instant::now(),
            last: ended(Some("c1"), 1),
        };
        assert_eq!(restarting.container(), Some("c1"));
        assert_eq!(restarting.ended().map(|e| e.code), Some(1));
    }

    fn slot(role: Role, probes: &str, state: State) -> Slot {
        let spec: Container = serde_json::from_str(&format!(r#"{{"name": "c"{probes}}}"#)).unwrap();
        Slot {
            spec,
            role,
            image_ref: String::new(),
            image_name: String::new(),
            attempt: 0,
            backoff: Duration::ZERO,
            state,
        }
    }

    #[test]
    fn a_slot_is_due_for_its_probes_restarts_and_exits_alone() {
        let now = Instant::now();
        let later = now + Duration::from_secs(3);
        let probe = r#"{"exec": {"command": ["true"]}}"#;
        // Nothing of its own to do: waiting its turn, finished, or an init container's run.
        assert_eq!(slot(Role::Main, "", State::NotStarted).due(now), None);
        assert_eq!(slot(Role::Main, "", State::Done(ended(None, 0))).due(now), None);
        let init = format!(r#", "startupProbe": {probe}"#);
        assert_eq!(
            slot(Role::Init, &init, State::running("c1".into())).due(now),
            None
        );
        // An exit to decide now, a restart when its back-off ends.
        assert_eq!(
            slot(Role::Main, "", State::Exited(ended(None, 1))).due(now),
            Some(now)
        );
        let restarting = State::Restarting {
            at: later,
            last: ended(None, 1),
        };
        assert_eq!(slot(Role::Main, "", restarting).due(now), Some(later));
        // Running: without probes, ready at the next look, then nothing; a probe not run yet is due now.
        assert_eq!(
            slot(Role::Main, "", State::running("c1".into())).due(now),
            Some(now)
        );
        let mut ready = State::running("c1".into());
        if let State::Running { ready, .. } = &mut ready {
            *ready = true;
        }
        assert_eq!(slot(Role::Main, "", ready).due(now), None);
        let both = format!(r#", "readinessProbe": {probe}, "livenessProbe": {probe}"#);
        let mut s = slot(Role::Sidecar, &both, State::running("c1".into()));
        // Not ready: only a startup probe would count, and it has none.
        assert_eq!(s.due(now), Some(now));
        if let State::Running { ready, .. } = &mut s.state {
            *ready = true;
        }
        assert_eq!(s.due(now), Some(now));
    }

    #[test]
    fn an_exit_is_decided_once() {
        let at = Instant::now();
        let mut s = State::Exited(ended(Some("c1"), 1));
        s.decide(Some(at));
        assert!(matches!(&s, State::Restarting { at: t, last } if *t == at && last.code == 1));
        // Only an undecided exit is decided.
        s.decide(None);
        assert!(matches!(s, State::Restarting { .. }));
        let mut s = State::Exited(ended(Some("c1"), 0));
        s.decide(None);
        assert!(matches!(&s, State::Done(e) if e.id.as_deref() == Some("c1")));
        let mut s = State::running("c2".into());
        s.decide(None);
        assert_eq!(s.running_id(), Some("c2"));
    }
}
