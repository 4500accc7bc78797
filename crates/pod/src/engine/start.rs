//! Starting a slot's container as kubelet does: its config (env, mounts, resources) computed for this
//! attempt, CreateContainer, StartContainer, then its postStart hook. Any failure on the way counts as a run
//! that exited -1, with the error as its reason, and is restarted (or not) as any exit is.

use std::time::Duration;

use crius_api::cri;
use k8s_openapi::api::core::v1::Container;

use super::slot::{Ended, State};
use super::{MIN_GRACE_S, Run};
use crate::report::{Event, Role};
use crate::{Error, convert, hooks};

impl<E: FnMut(Event)> Run<'_, E> {
    /// Creates and starts slot `i`'s container (attempt `attempt`), then runs its postStart hook.
    pub(super) async fn start(&mut self, i: usize) {
        let id = match self.create(i).await {
            Ok(id) => id,
            Err(e) => return self.failed(i, None, e),
        };
        let started = self
            .rt
            .start_container(cri::StartContainerRequest {
                container_id: id.clone(),
            })
            .await;
        if let Err(status) = started {
            return self.failed(i, Some(id), Error::cri("StartContainer")(status));
        }
        let s = &mut self.slots[i];
        s.state = State::running(id.clone());
        let (name, role, attempt) = (s.spec.name.clone(), s.role, s.attempt);
        let post_start = s.spec.lifecycle.as_ref().and_then(|l| l.post_start.clone());
        let resources = s.spec.resources.clone();
        let image_ref = s.image_ref.clone();
        let log_path = format!("{}/{name}/{attempt}.log", self.id.log_directory);
        (self.on)(Event::Started {
            name,
            role,
            attempt,
            id: id.clone(),
            log_path,
            resources,
            image_ref,
        });
        if let Some(h) = post_start
            && let Err(e) = hooks::handler(&mut self.rt, &id, "postStart", &h, Duration::from_secs(30)).await
        {
            // kubelet kills a container whose postStart hook failed.
            let _ = self
                .rt
                .stop_container(cri::StopContainerRequest {
                    container_id: id.clone(),
                    timeout: MIN_GRACE_S,
                })
                .await;
            self.failed(i, Some(id), e);
        }
    }

    /// Slot `i`'s start failed with `error`; `id` is the container it made, if it got that far.
    fn failed(&mut self, i: usize, id: Option<String>, error: Error) {
        let s = &mut self.slots[i];
        let error = error.to_string();
        (self.on)(Event::Failed {
            name: s.spec.name.clone(),
            error: error.clone(),
        });
        s.state = State::Exited(Ended {
            id,
            code: -1,
            reason: error,
        });
    }

    /// The CRI resources of container `c` in role `role`.
    pub(super) fn cri_resources(
        &self,
        role: Role,
        c: &Container,
    ) -> Result<cri::LinuxContainerResources, Error> {
        let capacity = crate::node::memory_bytes();
        let mut resources = convert::resources(c, self.qos, capacity)?;
        if role == Role::Sidecar {
            // KEP-753: a sidecar is no likelier to be OOM-killed than the main containers.
            for m in self.slots.iter().filter(|m| m.role == Role::Main) {
                let r = convert::resources(&m.spec, self.qos, capacity)?;
                resources.oom_score_adj = resources.oom_score_adj.min(r.oom_score_adj);
            }
        }
        Ok(resources)
    }

    /// Creates slot `i`'s container for its current attempt; its id.
    async fn create(&mut self, i: usize) -> Result<String, Error> {
        let s = &self.slots[i];
        let c = &s.spec;
        let env = crate::env::build(self.def, self.manifest, c, &self.fields)?;
        let mounts = self.volumes.mounts(c)?;
        let resources = self.cri_resources(s.role, c)?;
        let config = convert::container_config(
            self.def,
            &self.id,
            c,
            convert::ContainerInputs {
                image_ref: &s.image_ref,
                image_name: &s.image_name,
                attempt: s.attempt,
                env: &env,
                mounts,
                resources,
            },
        );
        let made = self
            .rt
            .create_container(cri::CreateContainerRequest {
                pod_sandbox_id: self.sandbox.clone(),
                config: Some(config),
                sandbox_config: Some(self.sandbox_config.clone()),
            })
            .await
            .map_err(Error::cri("CreateContainer"))?;
        Ok(made.into_inner().container_id)
    }
}
