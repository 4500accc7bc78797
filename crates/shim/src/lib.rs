//! crius-shim: `containerd-shim-crius-v2`, a containerd shim v2, and the client that drives one.
//!
//! One shim serves all containers of a pod (grouped by the `io.kubernetes.cri.sandbox-id` annotation, as
//! containerd's runc shim does) over ttrpc, speaking the `containerd.task.v2.Task` API. It runs containers by
//! exec'ing an OCI runtime binary (crius-runc by default; `containerd.runc.v1.Options.binary_name` or
//! `CRIUS_SHIM_RUNTIME` choose another, such as runc or crun), is the subreaper of their processes, records
//! their exits (in memory and, for each container's init, in `<bundle>/crius-exit.json`, which only the shim's
//! own `delete` action reads), holds their stdio (FIFOs, or the kubelet's CRI log format: stdout
//! [`client::CRI_LOG_SCHEME`]), reports OOM kills, and publishes task events ([`client::Event`]) to
//! `TTRPC_ADDRESS` (containerd's or criusd's events service), queueing them while that endpoint is gone.
//!
//! The shim's stack is sync and small: one event loop holds the ttrpc connections, every stream's copying,
//! reaping and the OOM watch; requests that run the OCI runtime go to worker threads that exist only while
//! there is work, and Wait holds none. No async runtime.
//!
//! Why not the `containerd-shim` crate (containerd/rust-extensions), which the design card checked at 0.12: its
//! sync line speaks the task v3 API, not the `containerd.task.v2.Task` that containerd 1.6 and criusd call,
//! and it pulls 137 crates (149 with build dependencies: `cargo tree` of a crate depending on it alone). This
//! shim takes only the generated protocol types (`containerd-shim-protos`) and
//! stays small, which matters in a process that every pod keeps: measured by `hack/bench-shim.sh` under
//! containerd 1.6 (the static `shim` profile build, steady state), the shim of a one-container pod has a VmRSS
//! of 1,568 kB and a Pss of 1,564 kB on one thread, containerd-shim-runc-v2's 13,348 kB and 12,148 kB on 12
//! threads; for five containers 1,776 and 1,076 kB against 14,596 and 8,622 kB.
//!
//! Public: [`client`] (what criusd and the tests use to start, call and hear from shims), [`exec_sync`] (its
//! messages), [`beneath`] (CRI log
//! files opened beneath their log directory without following symlinks, by criusd and the shim), the protocol
//! types ([`protos`]) and [`run`], the binary's entry point. Everything else is the shim's own.
//!
//! Modules, each owning one thing:
//! - `start`: the shim v2 process protocol (`start`, `delete`, serving);
//! - `address`: shim socket addresses and their directory;
//! - `args`: containerd's Go-style flags;
//! - `service`: the ttrpc `Task` service, a thin adapter converting requests for `task` and answers back;
//! - `task`: the containers of the pod and their processes, with their state machine (`task/state.rs`), and
//!   checkpoint and restore through the runtime's CRIU verbs (`task/checkpoint.rs`);
//! - `error`: the one error type and its one mapping to ttrpc codes;
//! - `runtime`: running the OCI runtime binary; `direct`: execs without it, for crius-runc;
//! - `spawn`: starting the shim from criusd without a fork (posix_spawn, one descriptor kept);
//! - `reactor`, `server`, `pump`: the event loop, the ttrpc server on it, and stdio copying on it;
//! - `reaper`, `oom`, `stdio`, `console`, `mounts`, `stats`: exits, OOM kills, stdio and CRI logs, terminals,
//!   the rootfs mounts, and metrics;
//! - `events`, `publisher`: task events and their wire form, and sending them to the owner.
//! - [`exec_sync`]: crius's own ExecSync call beside the Task API (one call per CRI ExecSync), and
//!   `capture`: the exec's output kept in memory for it;
//! - `task_client`: the client side of the Task API (criusd's and the tests'), one reader thread per
//!   connection that sleeps until an answer comes;
//! - `client_error`: the client API's one typed error ([`client::Error`]; a late answer is its `Timeout`).
//!
//! Crates: `thiserror` derives the client's error (as in the other crates of the workspace).

mod address;
mod args;
pub mod beneath;
mod capture;
pub mod client;
mod client_error;
mod console;
mod direct;
mod error;
mod events;
pub mod exec_sync;
mod mounts;
mod oom;
mod pidinit;
mod publisher;
mod pump;
mod reactor;
mod reaper;
mod runtime;
mod server;
mod service;
mod spawn;
mod start;
mod stats;
mod stdio;
mod task;
mod task_client;

/// The protocol types: containerd's shim v2 Task API, its events and ttrpc, as the shim speaks them.
pub use containerd_shim_protos as protos;

/// Runs `containerd-shim-crius-v2` with its arguments (without the program name) and returns its exit code.
///
/// containerd's calling convention: `-namespace NS -address OWNER -publish-binary BIN -id ID start` finds
/// or launches the pod's shim and prints its ttrpc address; `-id ID -bundle DIR delete` cleans up after a
/// shim that died and prints the container's last exit as a `DeleteResponse`; no action serves (the
/// long-lived shim that `start` launches); `-v` prints the version.
pub fn run(args: impl IntoIterator<Item = String>) -> i32 {
    start::run(args)
}
