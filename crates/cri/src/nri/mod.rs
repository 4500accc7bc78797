//! NRI (Node Resource Interface): what the pod and container paths tell NRI plugins, through ONE optional
//! object, the node's `Events` (none when `[nri] enable` is false). Each call site makes one call per
//! event; everything NRI does (building its messages, talking to the plugins, applying what they ask for)
//! is behind it.
//!
//! ```text
//!  RunPodSandbox ─ pod(Run)            CreateContainer ─ adjust step: create()  (after image volumes, CDI)
//!  StopPodSandbox ─ pod(Stop)                          └ after the record: container(PostCreate)
//!  RemovePodSandbox ─ pod(Remove)      StartContainer ─ container(Start), then container(PostStart)
//!  UpdatePodSandboxResources ─ update_pod(), then pod(PostUpdate)
//!                                      UpdateContainerResources ─ update(), container(PostUpdate)
//!                                      StopContainer ─ container(Stop)   RemoveContainer ─ container(Remove)
//! ```
//!
//! The calls here come from the CRI calls' blocking threads, never from an async worker: the object hands
//! its async work to the runtime and waits for it at most the plugins' request timeout.

mod host;
mod messages;

pub use host::{Config, Started, start};

use std::sync::{Arc, OnceLock};

use crius_api::cri;
use oci_spec::runtime::Spec;

use crate::container::adjust::{Adjust, Context};
use crate::error::Result;
use crate::store::container::Container;
use crate::store::sandbox::Sandbox;

/// A pod's event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PodEvent {
    /// RunPodSandbox made it.
    Run,
    /// StopPodSandbox stopped it.
    Stop,
    /// RemovePodSandbox removed it.
    Remove,
    /// UpdatePodSandboxResources changed its resources (NRI's PostUpdatePodSandbox).
    PostUpdate,
}

/// A container's event, but its creation and updates (which plugins may change: [`Events::create`],
/// [`Events::update`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ContainerEvent {
    /// CreateContainer made it.
    PostCreate,
    /// StartContainer is about to start it.
    Start,
    /// StartContainer started it.
    PostStart,
    /// UpdateContainerResources changed its resources.
    PostUpdate,
    /// StopContainer stopped it.
    Stop,
    /// RemoveContainer removed it.
    Remove,
}

/// What NRI is told of the node's pods and containers. Each call returns within the plugins' request
/// timeout; a plugin that is slow or gone is dropped, never the call's error.
pub(crate) trait Events: Send + Sync {
    /// A pod's event.
    fn pod(&self, event: PodEvent, pod: &Sandbox);

    /// UpdatePodSandboxResources, before it is applied (NRI's plugins hear of it; they cannot refuse it).
    fn update_pod(
        &self,
        pod: &Sandbox,
        overhead: Option<&cri::LinuxContainerResources>,
        resources: Option<&cri::LinuxContainerResources>,
    );

    /// CreateContainer's adjustment: the plugins see the container `cx` describes (its spec as the
    /// adjusters before made it) and `spec` gets what they change; their updates of other containers are
    /// applied. A refusal, or two plugins changing one field, is the call's error.
    fn create(&self, spec: &mut Spec, cx: &Context<'_>) -> Result<()>;

    /// A create that got past [`Events::create`] failed later: the plugins hear the container is gone.
    fn undo_create(&self, pod: &Sandbox, id: &str, config: &cri::ContainerConfig);

    /// UpdateContainerResources of `c` to `new`, before it is applied: what to apply to `c` (`new` as the
    /// plugins changed it); their updates of other containers are applied here. A refusal is the call's
    /// error.
    fn update(
        &self,
        c: &Container,
        new: &cri::LinuxContainerResources,
    ) -> Result<cri::LinuxContainerResources>;

    /// Any other event of container `c`.
    fn container(&self, event: ContainerEvent, c: &Container);
}

/// Where the node's [`Events`] is, once NRI is started (empty: NRI is off, or not started yet). The
/// containers and their NRI adjuster share it.
pub(crate) type Slot = Arc<OnceLock<Arc<dyn Events>>>;

/// The adjuster that lets NRI plugins change the spec: the last of CreateContainer's adjusters, so the
/// plugins see the image volumes' mounts and the CDI devices.
pub(crate) struct Adjuster(pub Slot);

impl Adjust for Adjuster {
    fn name(&self) -> &'static str {
        "NRI plugins"
    }

    fn adjust(&self, spec: &mut Spec, cx: &Context<'_>) -> Result<()> {
        match self.0.get() {
            Some(nri) => nri.create(spec, cx),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests;
