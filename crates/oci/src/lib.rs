//! crius-oci: the OCI runtime library behind `crius-runc`.
//!
//! It turns an OCI bundle into a running Linux container and manages it afterwards, following the OCI runtime
//! spec and runc's behaviour where the spec is silent:
//!
//! ```text
//! create ──► [created] ──start──► [running] ──(exit)──► [stopped] ──delete──► gone
//!                                  │  ▲
//!                            pause │  │ resume      exec: another process in the same namespaces and cgroup
//!                                  ▼  │             update: live cgroup v2 limits
//!                                 [paused]
//! ```
//! State lives in `<root>/<id>/` (`state.json`, written atomically, and `exec.fifo` until start). cgroups are
//! v2 only ([`cgroup`]). The library forks; callers must be single-threaded when they call [`create`],
//! [`exec::exec`] or [`enter::spawn`]. Entering a running container is [`enter`]'s alone, for `exec` and for
//! the shim's direct exec ([`direct`], a hidden action of crius-runc).

pub mod apparmor;
pub mod caps;
pub mod cgroup;
mod channel;
pub mod checkpoint;
pub mod config;
pub mod console;
mod create;
pub mod direct;
pub mod enter;
pub mod error;
pub mod exec;
pub mod foreground;
pub mod hooks;
pub mod id;
mod init;
pub mod log;
mod merge;
pub mod namespaces;
pub mod notify;
pub mod ops;
pub mod process;
pub mod procfs;
pub mod rootfs;
pub mod seccomp;
mod spawn;
pub mod state;
pub mod wait;

pub use create::{CreateOptions, create};
pub use error::{Context, Error, Result};
pub use state::{Record, Status};
