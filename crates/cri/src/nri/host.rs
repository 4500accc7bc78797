//! criusd's side of NRI over crius-nri's [`Host`]: [`start`] listens on the socket and starts the
//! pre-launched plugins; `Nri` is the node's `Events`, which turns each event into the host's call
//! with NRI's messages (`messages`); `NodeRuntime` answers the host's questions (every pod and
//! container, for a plugin's Synchronize) and applies the updates plugins ask for.
//!
//! Every update a plugin asks for, at a create, an update, a stop or unsolicited, goes through
//! `Containers::update_resources`, the path of UpdateContainerResources:
//! applied live by the runtime, then recorded.
//!
//! The CRI calls run on blocking threads; each event is spawned on the async runtime and waited for there,
//! at most the request timeout twice over and a second: the host drops a plugin that takes longer than the request timeout, and this limit
//! is the net under that (a host that does not answer is logged, and the call goes on without NRI).

use std::future::Future;
use std::path::PathBuf;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crius_api::cri;
use crius_nri::{Host, api};
use oci_spec::runtime::Spec;

use super::messages;
use super::{ContainerEvent, Events, PodEvent};
use crate::container::adjust::Context;
use crate::error::{Error, Result};
use crate::node::Node;
use crate::store::container::Container;
use crate::store::sandbox::Sandbox;

/// crius-nri's host settings: the socket, the plugin and config dirs, the timeouts.
pub use crius_nri::Config;

/// NRI, started: shut it down on exit.
pub struct Started {
    host: Arc<Host>,
}

impl Started {
    /// Tells the plugins goodbye and stops listening.
    pub async fn shutdown(self) {
        self.host.shutdown().await;
    }
}

/// Starts NRI for `node`: the host listens on `config.socket` and starts the plugins of
/// `config.plugin_dir`; from then on every pod and container event of the node is told to the plugins.
pub async fn start(config: Config, node: &Arc<Node>) -> std::result::Result<Started, crius_nri::Error> {
    let limit = config.request_timeout * 2 + Duration::from_secs(1);
    let runtime = Arc::new(NodeRuntime {
        node: Arc::downgrade(node),
    });
    let host = Host::start(config, runtime).await?;
    let nri = Nri {
        host: host.clone(),
        handle: tokio::runtime::Handle::current(),
        node: Arc::downgrade(node),
        cdi_dirs: node.containers.cdi_dirs.clone(),
        limit,
    };
    node.containers.set_nri(Arc::new(nri));
    Ok(Started { host })
}

/// The node's [`Events`], over the host.
pub(crate) struct Nri {
    host: Arc<Host>,
    /// The async runtime the host's calls run on.
    handle: tokio::runtime::Handle,
    node: Weak<Node>,
    /// Where CDI devices a plugin adds are looked up.
    cdi_dirs: Vec<PathBuf>,
    /// The longest an event is waited for.
    limit: Duration,
}

/// crius-cri's error for what the host answered a create or an update with: a plugin's refusal
/// (FailedPrecondition) or a conflict or adjustment that cannot be applied (Internal), naming the plugins.
fn refused(call: &'static str, e: crius_nri::Error) -> Error {
    match e {
        crius_nri::Error::Refused { plugin, message } => Error::NriRefused {
            call,
            plugin,
            message,
        },
        e => Error::Nri {
            call,
            reason: e.to_string(),
        },
    }
}

/// Whether the host's error is about what plugins asked (the call fails), not about reaching them (the
/// host dropped the plugin; the call goes on).
fn fails_the_call(e: &crius_nri::Error) -> bool {
    matches!(
        e,
        crius_nri::Error::Refused { .. }
            | crius_nri::Error::Conflict { .. }
            | crius_nri::Error::Invalid { .. }
    )
}

impl Nri {
    /// Runs `fut` on the async runtime and waits for it at most [`Nri::limit`] (None: it took longer).
    fn wait<T: Send + 'static>(
        &self,
        what: &str,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Option<T> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.handle.spawn(async move {
            let _ = tx.send(fut.await);
        });
        match rx.recv_timeout(self.limit) {
            Ok(v) => Some(v),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                tracing::warn!(event = what, limit = ?self.limit, "NRI: no answer in time; going on without it");
                None
            }
            // The runtime dropped the task: criusd is shutting down.
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                tracing::info!(event = what, "NRI: shutting down; going on without it");
                None
            }
        }
    }

    /// NRI's messages of `c` and its pod (None: the pod is gone).
    fn messages(&self, c: &Container) -> Option<(api::PodSandbox, api::Container)> {
        let node = self.node.upgrade()?;
        let s = node.pods.sandboxes.get(&c.record.sandbox_id)?;
        Some((messages::pod(&s), container_of(&node, c)))
    }

    /// Applies plugins' `updates` as UpdateContainerResources would (`call` names why); returns those that
    /// failed, each logged.
    fn apply_updates(
        &self,
        call: &'static str,
        updates: Vec<api::ContainerUpdate>,
    ) -> Vec<api::ContainerUpdate> {
        match self.node.upgrade() {
            Some(node) => apply_updates(&node, call, updates),
            None => updates,
        }
    }
}

/// NRI's message of `c`, with its spec from its bundle if it is still there.
fn container_of(node: &Node, c: &Container) -> api::Container {
    let spec = std::fs::read(node.containers.bundle(&c.record.id).join("config.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<Spec>(&b).ok());
    messages::container(
        &c.record.id,
        &c.record.sandbox_id,
        &c.config,
        Some(c),
        spec.as_ref(),
    )
}

/// See [`Nri::apply_updates`].
fn apply_updates(
    node: &Node,
    call: &'static str,
    updates: Vec<api::ContainerUpdate>,
) -> Vec<api::ContainerUpdate> {
    let mut failed = Vec::new();
    for u in updates {
        let Some(c) = node.containers.get(&u.container_id) else {
            tracing::warn!(container = %u.container_id, "NRI update: no such container");
            failed.push(u);
            continue;
        };
        let resources = u.linux.as_ref().and_then(|l| l.resources.as_ref());
        let Some(r) = resources else { continue };
        let (new, dropped) = messages::to_cri(r);
        if !dropped.is_empty() {
            tracing::warn!(container = %c.record.id, "NRI update: not applied live: {}", dropped.join(", "));
        }
        match node.containers.update_resources(call, &c, &new) {
            Ok(()) => tracing::info!(container = %c.record.id, "NRI update applied"),
            Err(e) => {
                tracing::warn!(container = %c.record.id, "NRI update failed: {e}");
                failed.push(u);
            }
        }
    }
    failed
}

impl Events for Nri {
    fn pod(&self, event: PodEvent, pod: &Sandbox) {
        let (host, msg) = (self.host.clone(), messages::pod(pod));
        let what = match event {
            PodEvent::PostUpdate => "PostUpdatePodSandbox".to_string(),
            _ => format!("{event:?}PodSandbox"),
        };
        self.wait(&what, async move {
            match event {
                PodEvent::Run => host.run_pod_sandbox(&msg).await,
                PodEvent::Stop => host.stop_pod_sandbox(&msg).await,
                PodEvent::Remove => host.remove_pod_sandbox(&msg).await,
                PodEvent::PostUpdate => host.post_update_pod_sandbox(&msg).await,
            }
        });
    }

    fn update_pod(
        &self,
        pod: &Sandbox,
        overhead: Option<&cri::LinuxContainerResources>,
        resources: Option<&cri::LinuxContainerResources>,
    ) {
        let (host, msg) = (self.host.clone(), messages::pod(pod));
        let overhead = overhead.map(messages::from_cri);
        let resources = resources.map(messages::from_cri);
        self.wait("UpdatePodSandbox", async move {
            host.update_pod_sandbox(&msg, overhead.as_ref(), resources.as_ref())
                .await;
        });
    }

    fn create(&self, spec: &mut Spec, cx: &Context<'_>) -> Result<()> {
        const CALL: &str = "CreateContainer";
        let pod = messages::pod(cx.sandbox);
        let ctr = messages::container(cx.id, &cx.sandbox.record.id, cx.config, None, Some(spec));
        let host = self.host.clone();
        let created = match self.wait("CreateContainer", async move {
            host.create_container(&pod, &ctr).await
        }) {
            None => return Ok(()),
            Some(Err(e)) if fails_the_call(&e) => return Err(refused(CALL, e)),
            Some(Err(e)) => {
                tracing::warn!(container = cx.id, "NRI CreateContainer: {e}; going on without it");
                return Ok(());
            }
            Some(Ok(c)) => c,
        };
        if let Some(adjust) = &created.adjust {
            let cdi = crius_nri::apply(adjust, spec).map_err(|e| refused(CALL, e))?;
            if !cdi.is_empty() {
                // Resolved as the request's own CDI devices are, from the same spec dirs.
                let asked = cri::ContainerConfig {
                    cdi_devices: cdi.into_iter().map(|name| cri::CdiDevice { name }).collect(),
                    ..Default::default()
                };
                crate::cdi::Devices {
                    dirs: self.cdi_dirs.clone(),
                }
                .apply(spec, &asked)?;
            }
        }
        for e in &created.evict {
            tracing::warn!(container = %e.container_id, reason = %e.reason, "NRI eviction asked for: crius does not evict");
        }
        let failed = self.apply_updates(CALL, created.update);
        if let Some(u) = failed.iter().find(|u| !u.ignore_failure) {
            return Err(Error::Nri {
                call: CALL,
                reason: format!("a plugin's update of container {} failed", u.container_id),
            });
        }
        Ok(())
    }

    fn undo_create(&self, pod: &Sandbox, id: &str, config: &cri::ContainerConfig) {
        let host = self.host.clone();
        let pod = messages::pod(pod);
        let mut ctr = messages::container(id, &pod.id, config, None, None);
        ctr.state = api::ContainerState::ContainerStopped as i32;
        self.wait("RemoveContainer", async move {
            let _ = host.stop_container(&pod, &ctr).await;
            host.remove_container(&pod, &ctr).await;
        });
    }

    fn update(
        &self,
        c: &Container,
        new: &cri::LinuxContainerResources,
    ) -> Result<cri::LinuxContainerResources> {
        const CALL: &str = "UpdateContainerResources";
        let Some((pod, ctr)) = self.messages(c) else {
            return Ok(new.clone());
        };
        let host = self.host.clone();
        let asked = messages::from_cri(new);
        let updates = match self.wait("UpdateContainer", async move {
            host.update_container(&pod, &ctr, &asked).await
        }) {
            None => return Ok(new.clone()),
            Some(Err(e)) if fails_the_call(&e) => return Err(refused(CALL, e)),
            Some(Err(e)) => {
                tracing::warn!(container = %c.record.id, "NRI UpdateContainer: {e}; going on without it");
                return Ok(new.clone());
            }
            Some(Ok(u)) => u,
        };
        // The plugins' version of this container's update is the one applied; the others' go their way.
        let (own, others): (Vec<_>, Vec<_>) =
            updates.into_iter().partition(|u| u.container_id == c.record.id);
        let mut out = new.clone();
        for u in own {
            if let Some(r) = u.linux.as_ref().and_then(|l| l.resources.as_ref()) {
                out = crate::convert::merge_resources(&out, &messages::to_cri(r).0);
            }
        }
        let failed = self.apply_updates(CALL, others);
        if let Some(u) = failed.iter().find(|u| !u.ignore_failure) {
            return Err(Error::Nri {
                call: CALL,
                reason: format!("a plugin's update of container {} failed", u.container_id),
            });
        }
        Ok(out)
    }

    fn container(&self, event: ContainerEvent, c: &Container) {
        let Some((pod, ctr)) = self.messages(c) else {
            return;
        };
        let host = self.host.clone();
        let what = format!("{event:?}Container");
        let answer = self.wait(&what, async move {
            match event {
                ContainerEvent::PostCreate => host.post_create_container(&pod, &ctr).await,
                ContainerEvent::Start => host.start_container(&pod, &ctr).await,
                ContainerEvent::PostStart => host.post_start_container(&pod, &ctr).await,
                ContainerEvent::PostUpdate => host.post_update_container(&pod, &ctr).await,
                ContainerEvent::Stop => return host.stop_container(&pod, &ctr).await,
                ContainerEvent::Remove => host.remove_container(&pod, &ctr).await,
            }
            Vec::new()
        });
        // A stop frees what the container held: plugins may give it to others.
        let failed = self.apply_updates("StopContainer", answer.unwrap_or_default());
        for u in failed {
            tracing::warn!(container = %u.container_id, "NRI update after a stop failed");
        }
    }
}

/// What the host asks of the node.
pub(crate) struct NodeRuntime {
    node: Weak<Node>,
}

#[async_trait::async_trait]
impl crius_nri::Runtime for NodeRuntime {
    async fn snapshot(&self) -> (Vec<api::PodSandbox>, Vec<api::Container>) {
        let Some(node) = self.node.upgrade() else {
            return Default::default();
        };
        let listed = tokio::task::spawn_blocking(move || {
            let pods = node.pods.sandboxes.list().iter().map(messages::pod).collect();
            let containers = node
                .containers
                .list_all()
                .iter()
                .map(|c| container_of(&node, c))
                .collect();
            (pods, containers)
        });
        listed.await.unwrap_or_default()
    }

    async fn update_containers(
        &self,
        updates: Vec<api::ContainerUpdate>,
        evict: Vec<api::ContainerEviction>,
    ) -> Vec<api::ContainerUpdate> {
        for e in &evict {
            tracing::warn!(container = %e.container_id, reason = %e.reason, "NRI eviction asked for: crius does not evict");
        }
        let Some(node) = self.node.upgrade() else {
            return updates;
        };
        let applied =
            tokio::task::spawn_blocking(move || apply_updates(&node, "NRI UpdateContainers", updates));
        applied.await.unwrap_or_default()
    }
}
