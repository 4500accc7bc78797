//! crius-pod: the pod engine. It reads Kubernetes manifests (`Pod`, and the pod template of a `Job`,
//! `Deployment` and the other workloads) and runs their pods on a CRI runtime over its socket, playing the part
//! kubelet plays on a node: the CRI configs kubelet would send, volumes, image pulls, start order with native
//! sidecars, restarts, probes and hooks, graceful termination in reverse order, Job completion. It talks plain
//! CRI, so it drives criusd or any other CRI runtime the same way.
//!
//! Its one job is one pod led over CRI (kubelet's pod worker), with what that needs: manifest parsing and
//! validation, volumes, the downward API, logs, hooks, and the node's facts ([`node`]). The API objects kept
//! by criusd, their controllers and the pod service's gRPC API are crius-workloads', which runs each pod here.
//!
//! Our own, not a crate's: resource quantities ([`quantity`]), since k8s-openapi's `Quantity` is the string
//! as written and the engine needs kubelet's integer milli-CPUs and bytes, rounded as the API server does.

pub mod cgroups;
pub mod convert;
pub mod downward;
pub mod engine;
pub mod env;
mod error;
#[cfg(test)]
mod fake_cri;
mod hooks;
pub mod logs;
pub mod manifest;
pub mod node;
mod proc_paths;
pub mod quantity;
pub mod report;
pub mod validate;
pub mod volumes;

pub use engine::{Control, Given, Options, PullPolicy, run, run_as};
pub use error::{Error, Result};
pub use manifest::{Manifest, PodDef, RestartPolicy, parse};
pub use report::{Event, Phase, Report, Role};
