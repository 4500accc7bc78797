//! A pod taken back: when the engine's caller restarts (criusd's pod service after a crash), the runtime still
//! has the pod's sandbox and containers. Each slot takes the newest container of its name: one that runs keeps
//! running (its startup counted as done), one that exited meanwhile is an exit to decide as any other (a
//! sidecar that crashed is restarted), one created but never started is removed and started again; older
//! attempts are removed, as a restart removes them.

use crius_api::cri;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use super::Run;
use super::slot::{Ended, State};
use crate::report::Event;

/// The ready sandbox of pod `uid`, if the runtime has one.
pub(super) async fn find(rt: &mut RuntimeServiceClient<Channel>, uid: &str) -> Option<String> {
    let list = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                state: Some(cri::PodSandboxStateValue {
                    state: cri::PodSandboxState::SandboxReady as i32,
                }),
                ..Default::default()
            }),
        })
        .await
        .ok()?
        .into_inner();
    list.items
        .into_iter()
        .find(|s| s.metadata.as_ref().is_some_and(|m| m.uid == uid))
        .map(|s| s.id)
}

impl<E: FnMut(Event)> Run<'_, E> {
    /// Takes the sandbox's containers into the slots (nothing to take in a sandbox just made).
    pub(super) async fn adopt(&mut self) {
        let Some(mut found) = self.containers().await else {
            return;
        };
        // Newest attempt first: each slot takes the first of its name, the rest are removed.
        found.sort_by_key(|c| std::cmp::Reverse(c.metadata.as_ref().map_or(0, |m| m.attempt)));
        let mut stale = Vec::new();
        for c in found {
            let (name, attempt) = c
                .metadata
                .as_ref()
                .map(|m| (m.name.clone(), m.attempt))
                .unwrap_or_default();
            let Some(i) = self.slots.iter().position(|s| s.spec.name == name) else {
                stale.push(c.id);
                continue;
            };
            if !matches!(self.slots[i].state, State::NotStarted) {
                stale.push(c.id);
                continue;
            }
            self.slots[i].attempt = attempt;
            let log_path = format!("{}/{name}/{attempt}.log", self.id.log_directory);
            match cri::ContainerState::try_from(c.state) {
                Ok(cri::ContainerState::ContainerRunning) => {
                    let mut state = State::running(c.id.clone());
                    if let State::Running { ready, .. } = &mut state {
                        *ready = true;
                    }
                    self.slots[i].state = state;
                    (self.on)(Event::Adopted {
                        name,
                        attempt,
                        id: c.id,
                        log_path,
                    });
                }
                Ok(cri::ContainerState::ContainerExited) => {
                    let (code, reason) = self.exit_of(&c.id).await;
                    let s = &mut self.slots[i];
                    s.state = State::Exited(Ended {
                        id: Some(c.id),
                        code,
                        reason: reason.clone(),
                    });
                    (self.on)(Event::Exited {
                        name,
                        role: s.role,
                        code,
                        reason,
                    });
                }
                // Made but never started (or unknown): started again from scratch.
                _ => stale.push(c.id),
            }
        }
        for container_id in stale {
            let _ = self
                .rt
                .remove_container(cri::RemoveContainerRequest { container_id })
                .await;
        }
    }
}
