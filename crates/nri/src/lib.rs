//! crius-nri: crius's side of NRI, the Node Resource Interface of containerd and CRI-O. Plugins (resource
//! policies, device and DRA stacks, policy agents) connect to a unix socket, or are started by the runtime from
//! a plugin directory; the runtime tells them of pod and container events and they answer with changes to the
//! container being created and updates to others.
//!
//! ```text
//!  criusd (crius-cri) ──► Host ──► one Plugin per connection, in index order ──► plugin process
//!        ▲                  │  ttrpc (src/ttrpc.rs) over NRI's multiplexer (src/mux.rs) on one socket:
//!        └── Runtime ◄──────┘  conn 1 = Plugin service (runtime calls), conn 2 = Runtime service (plugin calls)
//!  ContainerAdjustment ──► apply(adjust, &mut oci::Spec) before the shim sees the spec
//! ```
//!
//! The API criusd codes against:
//! - [`api`]: the NRI messages (prost, from `proto/nri/v1alpha1/api.proto`).
//! - [`Config`] (socket, plugin dir, plugin config dir, timeouts; [`Config::default`] has NRI's defaults) and
//!   [`Runtime`], what the host asks of criusd: a snapshot of every pod and container (for Synchronize), and the
//!   unsolicited updates and evictions plugins ask for (applied live, returning the updates that failed).
//! - [`Host::start`] (listens, starts the plugins in the plugin dir) and, per event, `run_pod_sandbox`,
//!   `stop_pod_sandbox`, `remove_pod_sandbox`, `update_pod_sandbox`, `post_update_pod_sandbox`, `create_container` (→ [`Created`]: the
//!   merged adjustment, updates and evictions), `post_create_container`, `start_container`,
//!   `post_start_container`, `update_container` (→ updates, the container's own first, its resources being
//!   the request's with plugins' changes over them), `post_update_container`, `stop_container` (→ updates of
//!   other containers), `remove_container`, `plugins` (the registered ones, `IDX-NAME`), and `shutdown`.
//!   `update_pod_sandbox(pod, overhead, resources)` takes the pod's overhead and its containers' sum. Only
//!   create and update can fail the CRI call (a plugin refusing, [`Error::Refused`], or two plugins changing one
//!   field, [`Error::Conflict`]); a plugin that times out or whose connection dies is dropped with a warning
//!   and the call goes on without it.
//! - [`apply`]: puts a [`api::ContainerAdjustment`] into an OCI spec and returns the CDI device names it asks for
//!   (the caller resolves them).
//! - [`plugin`]: the plugin side (connect, register, serve handlers, ask for updates): tests and small plugins.
//!
//! Limits, and what a peer that passes them sees: a ttrpc message over 4 MiB is refused by the sender
//! ([`Error::Oversized`]); one received is skipped as it arrives, a request answered ResourceExhausted on its
//! stream and an answer failing its call with [`Error::Oversized`], the connection going on (as Go's ttrpc
//! does). A multiplexer frame over 4 MiB + 10 bytes, or a logical connection holding more than 16 MiB
//! received and not yet read (a peer that sends faster than it is read), closes the stream: the socket is shut
//! down both ways (the peer reads its end, its writes fail with EPIPE), the reader gets [`Error::Oversized`]
//! or [`Error::Overrun`], and the host drops the plugin. A served connection runs at most 64 calls at once and
//! is not read meanwhile, so a flood of calls ends at that budget too. NRI's Go multiplexer closes likewise
//! when a connection's queue of 256 frames overflows, and reads a frame of any length.
//!
//! Crates: `prost`/`prost-build` for the messages (tonic is not used: NRI speaks ttrpc, implemented here on
//! tokio); `async-trait` for the object-safe [`Runtime`] and [`plugin::Handler`]; `thiserror` for [`Error`];
//! `oci-spec` for the spec [`apply`] changes, edited as OCI JSON with `serde_json`; `libc` for the fd handed to
//! started plugins. Not served: WASM and builtin plugins, ValidateContainerAdjustment and StateChange (no
//! plugin is sent them).

/// The NRI protocol's messages, package `nri.pkg.api.v1alpha1` (services are dispatched by name in this crate).
pub mod api {
    #![allow(missing_docs, clippy::all, unused_qualifications, rustdoc::all)]
    include!(concat!(env!("OUT_DIR"), "/nri.pkg.api.v1alpha1.rs"));
}

/// ttrpc's envelope messages (`Request`, `Response`, `Status`).
mod wire {
    #![allow(missing_docs, clippy::all, unused_qualifications, rustdoc::all, dead_code)]
    include!(concat!(env!("OUT_DIR"), "/ttrpc.rs"));
}

mod apply;
mod apply_resources;
mod error;
mod host;
mod merge;
mod mux;
pub mod plugin;
mod ttrpc;

pub use apply::apply;
pub use error::Error;
pub use host::{Config, Created, Host, Runtime};
