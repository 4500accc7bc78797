//! Probes of running containers, as kubelet runs them: a container's startup probe until it passes (for a
//! sidecar, that is what lets the next init container start; without one, running is enough), then its
//! liveness probe; a container whose startup or liveness probe fails `failureThreshold` times is killed (its
//! probe's or the pod's grace period) and restarted as its role and the restart policy say. Readiness probes
//! are not run: without Services there is nothing that reads readiness.

use k8s_cri::v1 as cri;

use super::Run;
use crate::hooks::{self, Verdict};
use crate::report::{Event, Role};

impl<E: FnMut(Event)> Run<'_, E> {
    /// Runs the probes that are due.
    pub(super) async fn probe(&mut self) {
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            if s.role == Role::Init || !s.running {
                continue;
            }
            let Some(id) = s.id.clone().filter(|id| !id.is_empty()) else {
                continue;
            };
            let (spec, host) = (s.spec.clone(), self.fields.pod_ip.clone());
            let (probe, kind) = if s.ready {
                (spec.liveness_probe.clone(), "liveness")
            } else {
                (spec.startup_probe.clone(), "startup")
            };
            let verdict = match &probe {
                None if s.ready => continue,
                None => Verdict::Passed,
                Some(p) => {
                    let slot = &mut self.slots[i];
                    let st = if slot.ready {
                        &mut slot.liveness
                    } else {
                        &mut slot.probe
                    };
                    hooks::probe(&mut self.rt, &id, &spec, &host, p, st).await
                }
            };
            let s = &mut self.slots[i];
            match verdict {
                Verdict::Passed if !s.ready => {
                    s.ready = true;
                    if s.role == Role::Sidecar {
                        (self.on)(Event::Ready {
                            name: s.spec.name.clone(),
                        });
                    }
                }
                Verdict::Passed | Verdict::Pending => {}
                Verdict::Failed => {
                    let (name, role) = (s.spec.name.clone(), s.role);
                    s.liveness = Default::default();
                    (self.on)(Event::Note(format!(
                        "{role} {name}: {kind} probe failed; killing it"
                    )));
                    let grace = probe
                        .and_then(|p| p.termination_grace_period_seconds)
                        .or(self.def.spec.termination_grace_period_seconds)
                        .unwrap_or(30)
                        .max(super::MIN_GRACE_S);
                    let _ = self
                        .rt
                        .stop_container(cri::StopContainerRequest {
                            container_id: id,
                            timeout: grace,
                        })
                        .await;
                }
            }
        }
    }
}
