//! What the engine reads from the runtime: its containers' exits as they happen, and their statuses for the
//! final report.

use std::collections::HashMap;

use crius_api::cri;

use super::Run;
use super::slot::{Ended, State};
use crate::report::{ContainerReport, Event, Phase, Report};

impl<E: FnMut(Event)> Run<'_, E> {
    /// Reads the state of every container of the pod; notes exits.
    pub(super) async fn observe(&mut self) {
        let Some(list) = self.containers().await else {
            return;
        };
        let states: HashMap<String, i32> = list.into_iter().map(|c| (c.id, c.state)).collect();
        for i in 0..self.slots.len() {
            let Some(id) = self.slots[i].state.running_id().map(str::to_string) else {
                continue;
            };
            // A container the runtime no longer lists has ended too.
            let exited = states
                .get(&id)
                .is_none_or(|s| *s == cri::ContainerState::ContainerExited as i32);
            if exited {
                let (code, reason) = self.exit_of(&id).await;
                let s = &mut self.slots[i];
                s.state = State::Exited(Ended {
                    id: Some(id),
                    code,
                    reason: reason.clone(),
                });
                (self.on)(Event::Exited {
                    name: s.spec.name.clone(),
                    role: s.role,
                    code,
                    reason,
                });
            }
        }
    }

    pub(super) async fn exit_of(&mut self, id: &str) -> (i32, String) {
        match self
            .rt
            .container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await
        {
            Ok(r) => r
                .into_inner()
                .status
                .map(|s| (s.exit_code, s.reason))
                .unwrap_or((-1, "Unknown".into())),
            Err(e) => (-1, format!("status unknown: {}", e.message())),
        }
    }

    /// The final report, from the runtime's statuses.
    pub(super) async fn report(&mut self, phase: Phase) -> Report {
        let mut containers = Vec::new();
        for i in 0..self.slots.len() {
            let s = &self.slots[i];
            let ended = s.state.ended();
            let mut r = ContainerReport {
                name: s.spec.name.clone(),
                role: s.role,
                restarts: s.attempt,
                exit_code: ended.map(|e| e.code),
                reason: match (&s.state, ended) {
                    (_, Some(e)) => e.reason.clone(),
                    (State::NotStarted, None) => "NotStarted".into(),
                    // Still running when the pod ended: its stop did not take, or its end went unseen.
                    (_, None) => "Unknown: the runtime did not say".into(),
                },
                started_at: 0,
                finished_at: 0,
            };
            if let Some(id) = s.state.container().map(str::to_string)
                && let Ok(st) = self
                    .rt
                    .container_status(cri::ContainerStatusRequest {
                        container_id: id,
                        verbose: false,
                    })
                    .await
                && let Some(st) = st.into_inner().status
            {
                r.started_at = st.started_at;
                r.finished_at = st.finished_at;
                if st.finished_at > 0 {
                    r.exit_code = Some(st.exit_code);
                    r.reason = st.reason;
                }
            }
            containers.push(r);
        }
        Report {
            pod: format!("{}/{}", self.def.namespace, self.id.name),
            uid: self.id.uid.clone(),
            sandbox: self.sandbox.clone(),
            ip: self.fields.pod_ip.clone(),
            phase,
            containers,
        }
    }
}
