//! Termination: preStop hooks, then the main (and a running regular init) containers stopped together, then
//! the sidecars one at a time in reverse order of their start, all within the pod's one grace period; then the
//! sandbox is stopped and removed. Each stop is tried again while the runtime is unreachable (criusd
//! restarting), so a restart of the runtime does not leave the pod behind.

use std::time::{Duration, Instant};

use crius_api::cri;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use super::{MIN_GRACE_S, Run};
use crate::hooks;
use crate::report::{Event, Role};

/// How long termination keeps trying a runtime that does not answer (criusd restarting).
const UNREACHABLE_FOR: Duration = Duration::from_secs(60);

/// Runs `call` again every half second while the runtime is unreachable (`Unavailable`: criusd restarting),
/// until `until`; its last answer.
async fn while_unreachable<T, F, Fut>(until: Instant, mut call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    loop {
        match call().await {
            Err(s) if s.code() == tonic::Code::Unavailable && Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            r => return r,
        }
    }
}

impl<E: FnMut(Event)> Run<'_, E> {
    /// Stops what runs: main (and regular init) containers together, each after its preStop hook, while the
    /// sidecars' preStop hooks run; then the sidecars in reverse order of their start.
    pub(super) async fn terminate(&mut self) {
        let grace = self
            .grace_s
            .or(self.def.spec.termination_grace_period_seconds)
            .unwrap_or(30)
            .max(0);
        // A restart still waiting never comes: nothing starts once termination has begun.
        let deadline = Instant::now() + Duration::from_secs(grace as u64);
        let mut first = Vec::new();
        let mut hooks_only = Vec::new();
        for s in &self.slots {
            let Some(id) = s.state.running_id().map(str::to_string) else {
                continue;
            };
            let pre_stop = s.spec.lifecycle.as_ref().and_then(|l| l.pre_stop.clone());
            if s.role == Role::Sidecar {
                if let Some(h) = pre_stop {
                    hooks_only.push((s.spec.name.clone(), id, h));
                }
            } else {
                first.push((s.spec.name.clone(), s.role, id, pre_stop));
            }
        }
        let stops = first.into_iter().map(|(name, role, id, pre_stop)| {
            let mut rt = self.rt.clone();
            async move {
                let mut out = Vec::new();
                if let Some(h) = pre_stop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if let Err(e) = hooks::handler(&mut rt, &id, "preStop", &h, left).await {
                        out.push(Event::Note(format!("{role} {name}: {e}")));
                    }
                }
                let grace_s = remaining(deadline);
                out.push(Event::Stopping {
                    name: name.clone(),
                    role,
                    grace_s,
                });
                if let Err(e) = stop_container(&rt, &id, grace_s, deadline).await {
                    out.push(Event::Note(format!(
                        "{role} {name}: StopContainer: {}",
                        e.message()
                    )));
                }
                out
            }
        });
        let hooks = hooks_only.into_iter().map(|(name, id, h)| {
            let mut rt = self.rt.clone();
            async move {
                let mut out = Vec::new();
                let left = deadline.saturating_duration_since(Instant::now());
                if let Err(e) = hooks::handler(&mut rt, &id, "preStop", &h, left).await {
                    out.push(Event::Note(format!("sidecar {name}: {e}")));
                }
                out
            }
        });
        let (a, b) =
            futures::future::join(futures::future::join_all(stops), futures::future::join_all(hooks)).await;
        for e in a.into_iter().chain(b).flatten() {
            (self.on)(e);
        }
        self.observe().await;
        for i in (0..self.slots.len()).rev() {
            let s = &self.slots[i];
            let Some(id) = s.state.running_id().filter(|_| s.role == Role::Sidecar) else {
                continue;
            };
            let (name, id) = (s.spec.name.clone(), id.to_string());
            let grace_s = remaining(deadline);
            (self.on)(Event::Stopping {
                name,
                role: Role::Sidecar,
                grace_s,
            });
            if let Err(e) = stop_container(&self.rt, &id, grace_s, deadline).await {
                (self.on)(Event::Note(format!(
                    "sidecar {}: StopContainer: {}",
                    self.slots[i].spec.name,
                    e.message()
                )));
            }
            self.observe().await;
        }
        self.observe().await;
    }

    /// Stops and removes the sandbox (and with it what is left of its containers), then the pod's volumes and
    /// cgroup.
    pub(super) async fn remove(&mut self) {
        let id = self.sandbox.clone();
        let until = Instant::now() + UNREACHABLE_FOR;
        for stop in [true, false] {
            let rt = self.rt.clone();
            let done = while_unreachable(until, || {
                let (mut rt, pod_sandbox_id) = (rt.clone(), id.clone());
                async move {
                    if stop {
                        rt.stop_pod_sandbox(cri::StopPodSandboxRequest { pod_sandbox_id })
                            .await
                            .map(drop)
                    } else {
                        rt.remove_pod_sandbox(cri::RemovePodSandboxRequest { pod_sandbox_id })
                            .await
                            .map(drop)
                    }
                }
            })
            .await;
            if let Err(e) = done {
                let call = if stop {
                    "StopPodSandbox"
                } else {
                    "RemovePodSandbox"
                };
                (self.on)(Event::Note(format!(
                    "{call} {id}: {:?}: {}",
                    e.code(),
                    e.message()
                )));
            }
        }
        self.volumes.remove();
        if let Some(Err(e)) = self.pod_cgroup.as_ref().map(|c| c.remove()) {
            (self.on)(Event::Note(e.to_string()));
        }
    }
}

/// StopContainer of `id` with `grace_s`, tried again while the runtime is unreachable (criusd restarting), up
/// to [`UNREACHABLE_FOR`] past the pod's `deadline`.
async fn stop_container(
    rt: &RuntimeServiceClient<Channel>,
    id: &str,
    grace_s: i64,
    deadline: Instant,
) -> Result<(), tonic::Status> {
    while_unreachable(deadline + UNREACHABLE_FOR, || {
        let (mut rt, container_id) = (rt.clone(), id.to_string());
        async move {
            rt.stop_container(cri::StopContainerRequest {
                container_id,
                timeout: grace_s,
            })
            .await
            .map(drop)
        }
    })
    .await
}

/// Whole seconds left until `deadline`, at least kubelet's minimum grace of 2 s.
fn remaining(deadline: Instant) -> i64 {
    let left = deadline.saturating_duration_since(Instant::now());
    (left.as_secs_f64().ceil() as i64).max(MIN_GRACE_S)
}
