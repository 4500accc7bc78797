//! crius-shim: `containerd-shim-crius-v2`, a containerd shim v2, and the client that drives one.
//!
//! One shim serves all containers of a pod (grouped by the `io.kubernetes.cri.sandbox-id` annotation, as
//! containerd's runc shim does) over ttrpc, speaking the `containerd.task.v2.Task` API. It runs containers by
//! exec'ing an OCI runtime binary (crius-runc by default; `containerd.runc.v1.Options.binary_name` or
//! `CRIUS_SHIM_RUNTIME` choose another, such as runc or crun), is the subreaper of their processes, records
//! their exits (in memory and, for each container's init, in `<bundle>/crius-exit.json`), holds their stdio
//! (FIFOs, or the kubelet's CRI log format: see [`stdio`]), reports OOM kills ([`oom`]), and publishes task events to `TTRPC_ADDRESS`
//! (containerd's or criusd's events service), queueing them while that endpoint is gone.
//!
//! The shim's stack is sync and small: one event loop ([`reactor`]) holds the ttrpc connections ([`server`]),
//! every stream's copying ([`pump`]), reaping and the OOM watch; requests that run the OCI runtime go to worker
//! threads that exist only while there is work, and Wait holds none. No async runtime.

pub mod args;
pub mod client;
pub mod console;
pub mod events;
pub mod mounts;
pub mod oom;
pub mod pump;
pub mod reactor;
pub mod reaper;
pub mod runtime;
pub mod server;
pub mod service;
pub mod start;
pub mod stats;
pub mod stdio;
