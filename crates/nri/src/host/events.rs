//! Relaying criusd's pod and container events to the plugins subscribed to them, in index order. Only
//! CreateContainer and UpdateContainer can fail the CRI call: a plugin's error refuses the container, and two
//! plugins changing one field is a conflict. Everywhere, a plugin that times out, dies or breaks the protocol
//! is dropped with a warning and the event goes on to the next one; a plugin's error on a notification is logged.

use prost::Message;

use super::plugin::Plugin;
use super::{Created, Host};
use crate::api::{self, Event};
use crate::merge::{Owners, Updates, merge_adjustment, merge_resources, reflect};
use crate::{Error, api::ContainerUpdate};

/// What became of one plugin's call.
enum Outcome<T> {
    Answer(T),
    /// The plugin answered with an error status.
    Refused(String),
    /// The plugin was dropped.
    Dropped,
}

impl Host {
    /// Calls `method` on `p`, dropping it if it times out, dies or breaks the protocol.
    async fn ask<Req: Message, Resp: Message + Default>(
        &self,
        p: &Plugin,
        method: &str,
        req: &Req,
    ) -> Outcome<Resp> {
        match p.call(method, req, self.config.request_timeout).await {
            Ok(r) => Outcome::Answer(r),
            Err(Error::Status { message, .. }) => Outcome::Refused(message),
            Err(e) => {
                self.drop_plugin(p, &e).await;
                Outcome::Dropped
            }
        }
    }

    /// A notification: every subscribed plugin hears it; errors are logged.
    async fn notify<Req: Message, Resp: Message + Default>(&self, event: Event, method: &str, req: &Req) {
        let _gate = self.gate.read().await;
        for p in self.subscribed(event) {
            if let Outcome::Refused(m) = self.ask::<Req, Resp>(&p, method, req).await {
                tracing::warn!("NRI: plugin {} failed {method}: {m}", p.name());
            }
        }
    }

    /// A pod sandbox was started.
    pub async fn run_pod_sandbox(&self, pod: &api::PodSandbox) {
        let req = api::RunPodSandboxRequest {
            pod: Some(pod.clone()),
        };
        self.notify::<_, api::RunPodSandboxResponse>(Event::RunPodSandbox, "RunPodSandbox", &req)
            .await;
    }

    /// A pod sandbox was stopped.
    pub async fn stop_pod_sandbox(&self, pod: &api::PodSandbox) {
        let req = api::StopPodSandboxRequest {
            pod: Some(pod.clone()),
        };
        self.notify::<_, api::StopPodSandboxResponse>(Event::StopPodSandbox, "StopPodSandbox", &req)
            .await;
    }

    /// A pod sandbox was removed.
    pub async fn remove_pod_sandbox(&self, pod: &api::PodSandbox) {
        let req = api::RemovePodSandboxRequest {
            pod: Some(pod.clone()),
        };
        self.notify::<_, api::RemovePodSandboxResponse>(Event::RemovePodSandbox, "RemovePodSandbox", &req)
            .await;
    }

    /// A pod sandbox's resources are being changed (in-place pod resize): its overhead and the sum of its
    /// containers' resources.
    pub async fn update_pod_sandbox(
        &self,
        pod: &api::PodSandbox,
        overhead: Option<&api::LinuxResources>,
        resources: Option<&api::LinuxResources>,
    ) {
        let req = api::UpdatePodSandboxRequest {
            pod: Some(pod.clone()),
            overhead_linux_resources: overhead.cloned(),
            linux_resources: resources.cloned(),
        };
        self.notify::<_, api::UpdatePodSandboxResponse>(Event::UpdatePodSandbox, "UpdatePodSandbox", &req)
            .await;
    }

    /// A pod sandbox's resources were changed (after [`Host::update_pod_sandbox`] and the change itself).
    pub async fn post_update_pod_sandbox(&self, pod: &api::PodSandbox) {
        let req = api::PostUpdatePodSandboxRequest {
            pod: Some(pod.clone()),
        };
        self.notify::<_, api::PostUpdatePodSandboxResponse>(
            Event::PostUpdatePodSandbox,
            "PostUpdatePodSandbox",
            &req,
        )
        .await;
    }

    /// A container is being created: the plugins' merged changes to it, and their updates and evictions of
    /// others. Fails if a plugin refuses it ([`Error::Refused`]) or two change one field ([`Error::Conflict`]).
    pub async fn create_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
    ) -> Result<Created, Error> {
        let _gate = self.gate.read().await;
        let mut req = api::CreateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
        };
        let (mut owners, mut adjust, mut updates) = (Owners::default(), None, Updates::default());
        let mut evict = Vec::new();
        for p in self.subscribed(Event::CreateContainer) {
            let name = p.name();
            let resp: api::CreateContainerResponse = match self.ask(&p, "CreateContainer", &req).await {
                Outcome::Answer(r) => r,
                Outcome::Refused(message) => {
                    return Err(Error::Refused {
                        plugin: name,
                        message,
                    });
                }
                Outcome::Dropped => continue,
            };
            if let Some(a) = resp.adjust {
                if let Some(c) = req.container.as_mut() {
                    reflect(c, &a);
                }
                merge_adjustment(
                    &mut owners,
                    &ctr.id,
                    &name,
                    adjust.get_or_insert_with(Default::default),
                    a,
                )?;
            }
            updates.add(&mut owners, &name, resp.update)?;
            evict.extend(resp.evict);
        }
        Ok(Created {
            adjust: adjust.filter(|a| *a != api::ContainerAdjustment::default()),
            update: updates.list,
            evict,
        })
    }

    /// A container was created.
    pub async fn post_create_container(&self, pod: &api::PodSandbox, ctr: &api::Container) {
        let req = api::PostCreateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
        };
        self.notify::<_, api::PostCreateContainerResponse>(
            Event::PostCreateContainer,
            "PostCreateContainer",
            &req,
        )
        .await;
    }

    /// A container is being started.
    pub async fn start_container(&self, pod: &api::PodSandbox, ctr: &api::Container) {
        let req = api::StartContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
        };
        self.notify::<_, api::StartContainerResponse>(Event::StartContainer, "StartContainer", &req)
            .await;
    }

    /// A container was started.
    pub async fn post_start_container(&self, pod: &api::PodSandbox, ctr: &api::Container) {
        let req = api::PostStartContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
        };
        self.notify::<_, api::PostStartContainerResponse>(
            Event::PostStartContainer,
            "PostStartContainer",
            &req,
        )
        .await;
    }

    /// A container's resources are being updated to `resources`. Returns the updates to make: the first is
    /// always this container's, with plugins' changes over the requested resources; then other containers'.
    /// Evictions plugins ask for are handed to [`super::Runtime::update_containers`] in the background.
    pub async fn update_container(
        &self,
        pod: &api::PodSandbox,
        ctr: &api::Container,
        resources: &api::LinuxResources,
    ) -> Result<Vec<ContainerUpdate>, Error> {
        let _gate = self.gate.read().await;
        let req = api::UpdateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
            linux_resources: Some(resources.clone()),
        };
        // The request is the base nobody owns, so plugins may change any of it.
        let mut base = api::LinuxResources::default();
        merge_resources(&mut Owners::default(), &ctr.id, "", &mut base, resources.clone())?;
        let mut updates = Updates {
            list: vec![ContainerUpdate {
                container_id: ctr.id.clone(),
                linux: Some(api::LinuxContainerUpdate {
                    resources: Some(base),
                }),
                ignore_failure: false,
            }],
        };
        let (mut owners, mut evict) = (Owners::default(), Vec::new());
        for p in self.subscribed(Event::UpdateContainer) {
            let name = p.name();
            let resp: api::UpdateContainerResponse = match self.ask(&p, "UpdateContainer", &req).await {
                Outcome::Answer(r) => r,
                Outcome::Refused(message) => {
                    return Err(Error::Refused {
                        plugin: name,
                        message,
                    });
                }
                Outcome::Dropped => continue,
            };
            updates.add(&mut owners, &name, resp.update)?;
            evict.extend(resp.evict);
        }
        if !evict.is_empty() {
            // Not awaited here: stopping a container relays StopContainer, which waits for this event to end.
            let runtime = self.runtime.clone();
            tokio::spawn(async move { runtime.update_containers(Vec::new(), evict).await });
        }
        Ok(updates.list)
    }

    /// A container's resources were updated.
    pub async fn post_update_container(&self, pod: &api::PodSandbox, ctr: &api::Container) {
        let req = api::PostUpdateContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
        };
        self.notify::<_, api::PostUpdateContainerResponse>(
            Event::PostUpdateContainer,
            "PostUpdateContainer",
            &req,
        )
        .await;
    }

    /// A container was stopped: the plugins' updates of other containers (e.g. to give them its CPUs).
    pub async fn stop_container(&self, pod: &api::PodSandbox, ctr: &api::Container) -> Vec<ContainerUpdate> {
        let _gate = self.gate.read().await;
        let req = api::StopContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
        };
        let (mut owners, mut updates) = (Owners::default(), Updates::default());
        for p in self.subscribed(Event::StopContainer) {
            let name = p.name();
            match self
                .ask::<_, api::StopContainerResponse>(&p, "StopContainer", &req)
                .await
            {
                Outcome::Answer(r) => {
                    if let Err(e) = updates.add(&mut owners, &name, r.update) {
                        tracing::warn!(
                            "NRI: plugin {name}'s updates at StopContainer of {} dropped: {e}",
                            ctr.id
                        );
                    }
                }
                Outcome::Refused(m) => tracing::warn!("NRI: plugin {name} failed StopContainer: {m}"),
                Outcome::Dropped => {}
            }
        }
        updates.list
    }

    /// A container was removed.
    pub async fn remove_container(&self, pod: &api::PodSandbox, ctr: &api::Container) {
        let req = api::RemoveContainerRequest {
            pod: Some(pod.clone()),
            container: Some(ctr.clone()),
        };
        self.notify::<_, api::RemoveContainerResponse>(Event::RemoveContainer, "RemoveContainer", &req)
            .await;
    }
}
