//! Probes of running containers, as kubelet runs them: a container's startup probe until it passes (for a
//! sidecar, that is what lets the next init container start; without one, running is enough), then its
//! liveness probe; a container whose startup or liveness probe fails `failureThreshold` times is killed (its
//! probe's or the pod's grace period) and restarted as its role and the restart policy say. Once its startup is
//! done, a container's readiness probe runs too: its verdicts (`failureThreshold` failures in a row make it
//! unready, a pass ready again) are the pod's Ready condition and the container's `ready`; it kills nothing.

use crius_api::cri;

use super::Run;
use super::slot::State;
use crate::hooks::{self, Verdict};
use crate::report::{Event, Role};

impl<E: FnMut(Event)> Run<'_, E> {
    /// Runs the probes that are due.
    pub(super) async fn probe(&mut self) {
        for s in &mut self.slots {
            let State::Running {
                id,
                ready,
                startup,
                liveness,
                readiness,
                serving,
            } = &mut s.state
            else {
                continue;
            };
            if s.role == Role::Init {
                continue;
            }
            if *ready && let Some(p) = s.spec.readiness_probe.as_ref() {
                let verdict = hooks::probe(
                    &mut self.rt,
                    id,
                    &s.spec,
                    &self.fields.pod_ip,
                    p,
                    readiness,
                    self.ticks,
                )
                .await;
                let now = match verdict {
                    Verdict::Passed => Some(true),
                    Verdict::Failed => Some(false),
                    Verdict::Pending => None,
                };
                if let Some(now) = now
                    && *serving != Some(now)
                {
                    *serving = Some(now);
                    (self.on)(Event::Readiness {
                        name: s.spec.name.clone(),
                        ready: now,
                    });
                }
            }
            let (probe, kind, st) = if *ready {
                (s.spec.liveness_probe.as_ref(), "liveness", &mut *liveness)
            } else {
                (s.spec.startup_probe.as_ref(), "startup", &mut *startup)
            };
            let verdict = match probe {
                None if *ready => continue,
                None => Verdict::Passed,
                Some(p) => {
                    hooks::probe(&mut self.rt, id, &s.spec, &self.fields.pod_ip, p, st, self.ticks).await
                }
            };
            match verdict {
                Verdict::Passed if !*ready => {
                    *ready = true;
                    if s.role == Role::Sidecar {
                        (self.on)(Event::Ready {
                            name: s.spec.name.clone(),
                        });
                    }
                }
                Verdict::Passed | Verdict::Pending => {}
                Verdict::Failed => {
                    // Probed afresh (after its initial delay) should it outlive the stop.
                    *liveness = Default::default();
                    (self.on)(Event::Note(format!(
                        "{} {}: {kind} probe failed; killing it",
                        s.role, s.spec.name
                    )));
                    let grace = probe
                        .and_then(|p| p.termination_grace_period_seconds)
                        .or(self.def.spec.termination_grace_period_seconds)
                        .unwrap_or(30)
                        .max(super::MIN_GRACE_S);
                    let _ = self
                        .rt
                        .stop_container(cri::StopContainerRequest {
                            container_id: id.clone(),
                            timeout: grace,
                        })
                        .await;
                }
            }
        }
    }
}
