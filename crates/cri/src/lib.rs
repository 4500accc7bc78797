//! crius-cri: the CRI services criusd serves — `runtime.v1.RuntimeService` and `runtime.v1.ImageService`, and
//! the project's own `crius.images.v1.Images` — as a domain core behind thin tonic adapters.
//!
//! ```text
//!  grpc/        tonic adapters only: take the request apart, one domain call, answer (errors via error.rs)
//!  node.rs      the node's pods and containers, wired to real shims, CNI and the image store
//!  images.rs    the image calls' domain: list, status, pull, remove, fs use; credentials; pinned images
//!  metrics.rs   for criusd's Prometheus endpoint: image pull figures; pods, containers, shims by state
//!  sandbox/     RunPodSandbox, Stop, Remove (mod.rs); PodSandboxStatus, ListPodSandbox (status.rs);
//!               PodSandboxStats, ListPodSandboxStats: the containers' figures summed, the netns' counters
//!               (stats.rs); ListMetricDescriptors, ListPodSandboxMetrics: cAdvisor's names, from the same
//!               samples (metrics.rs); UpdatePodSandboxResources, checked and written to the pod cgroup
//!               (resources.rs)
//!  container/   CreateContainer, named steps under a rollback guard (create.rs), the one seam where the
//!               spec changes for what the request points at outside itself (adjust.rs); start/stop/remove/
//!               update/reopen (lifecycle.rs); status, list, events, recovery (status.rs); ExecSync (exec.rs,
//!               capture.rs); stats (stats.rs); the execs and attaches of streaming sessions (stream.rs)
//!  streaming/   the streaming server's Backend: exec and attach through the shims, attach's log follower
//!               (follow.rs), port-forward connections inside the pod's netns (connect.rs)
//!  store/       records in memory and on disk, one journal per kind (journal.rs); names reserved before
//!               anything is made (names.rs); intents (intents.rs); one store shape for both kinds
//!               (table.rs); one lock per id (locks.rs)
//!  shim/        the ShimClient seam: ttrpc to real shims (ttrpc.rs, watch.rs), an in-memory fake for tests
//!  network/     the Network (CNI) and Namespaces (pinned netns) seams, real and fake; netns counters
//!  image_store.rs the image store seam (the real store, or a fake for tests)
//!  convert/     CRI → OCI config.json: a pure function of the request, the image config and Host facts
//!  cdi/         CDI devices: spec files read from the spec dirs (spec.rs), applied to the spec as an
//!               adjuster of CreateContainer (mod.rs, apply.rs)
//!  nri/         NRI: the one object the pod and container paths tell their events (mod.rs), criusd's side
//!               of the protocol over crius-nri's host
//!  recover/     the start-up pass: calls a crash cut short finished or undone (store/intents.rs), records
//!               made true again from the shims, what no record owns removed
//!  events.rs    the events service the shims report exits and OOM kills to
//!  rollback.rs  the guard that undoes a call's steps, last first, unless it commits
//!  error.rs     the one error type, and the one place gRPC codes are chosen
//!  cgroup_driver.rs the node's cgroup driver (cgroupfs or systemd), passed in the setup; where pod cgroups lie
//!  handlers.rs  runtime handlers (RuntimeClass): the OCI runtimes pods run on, and their features
//!  validate/    checks of CRI requests before anything is made (mod.rs); unsupported.rs: refusals of the
//!               fields crius does not carry out, and the stop signal; its fields.rs (tests): every field's fate
//! ```
//!
//! A container's state is kept from the shims' events, not asked of them ([`store`]); the lifecycle is
//! unit-tested against the fakes, without root.
//!
//! Crates: serde_yaml_ng reads CDI spec files written in YAML (the YAML crate the workspace already uses).
//! crius-nri is the NRI protocol and plugin host (the workspace's own); async-trait implements its object-safe
//! `Runtime` seam (already locked through other crates). tar and flate2 write and read checkpoint archives
//! (the versions crius-image already uses for layers).

pub mod cdi;
pub mod cgroup_driver;
pub mod container;
pub mod convert;
pub mod error;
pub mod events;
pub mod grpc;
pub mod handlers;
pub mod image_store;
pub mod images;
pub mod metrics;
pub mod network;
pub mod node;
pub mod nri;
pub mod recover;
pub mod rollback;
pub mod sandbox;
pub mod shim;
pub mod store;
pub mod streaming;
pub mod validate;

use std::collections::HashMap;

/// How images are pulled and kept; from criusd's config file and flags.
#[derive(Debug, Clone)]
pub struct ImageConfig {
    /// Registry host → mirror host (`docker.io` → `mirror.local:5000`).
    pub mirrors: HashMap<String, String>,
    /// Hosts reached over plain http (loopback registries always are).
    pub insecure: Vec<String>,
    /// Images reported `pinned` (exempt from kubelet's image GC), e.g. the sandbox image.
    pub pinned: Vec<String>,
    /// A download receiving nothing for this long is cancelled (DeadlineExceeded); None: never.
    pub pull_progress_timeout: Option<std::time::Duration>,
    /// How many blobs of one pull download at once.
    pub max_concurrent_downloads: usize,
    /// The signature policy every pull must satisfy (None: any image).
    pub signature_policy: Option<std::sync::Arc<crius_image::policy::Policy>>,
}

impl Default for ImageConfig {
    fn default() -> ImageConfig {
        ImageConfig {
            mirrors: HashMap::new(),
            insecure: Vec::new(),
            pinned: Vec::new(),
            pull_progress_timeout: Some(crius_image::pull::DEFAULT_PROGRESS_TIMEOUT),
            max_concurrent_downloads: crius_image::pull::DEFAULT_CONCURRENT_DOWNLOADS,
            signature_policy: None,
        }
    }
}
