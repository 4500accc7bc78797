//! crius-common: the few helpers that several crius crates need and that belong to none of them — the shim
//! stays small and does not depend on the OCI runtime, and the CRI server and pod engine do not depend on
//! each other — so each exists once, here: times as RFC 3339 and as ns since the epoch ([`time`]), the kernel's mount table
//! ([`mountinfo`]), random ids ([`id`]) and AppArmor's state ([`apparmor`]).
//! Also paths resolved inside a root by fd ([`inroot`]) and sealed copies of the runtime binary ([`sealed`]),
//! which need nix and libc, the crate's dependencies; records written to survive a crash ([`durable`]); the
//! owner-only files and directories a container's state lives in ([`private`]); and criusd's descriptor limit,
//! raised for itself and put back for its containers ([`nofile`]).
//!
//! Crates: `thiserror` derives the typed errors at the public boundaries (`sealed::Error`).

pub mod apparmor;
pub mod cri_log;
pub mod durable;
pub mod id;
pub mod inroot;
pub mod mountinfo;
pub mod nofile;
pub mod private;
pub mod sealed;
pub mod time;
