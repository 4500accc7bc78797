//! Linux namespaces: which clone flags a config asks for, joining existing ones by path, creating new ones.

use std::os::fd::AsFd;

use nix::sched::{CloneFlags, setns, unshare};
use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType};

use crate::{Result, err};

/// The clone flag of a namespace type.
pub fn flag(t: LinuxNamespaceType) -> CloneFlags {
    match t {
        LinuxNamespaceType::Mount => CloneFlags::CLONE_NEWNS,
        LinuxNamespaceType::Cgroup => CloneFlags::CLONE_NEWCGROUP,
        LinuxNamespaceType::Uts => CloneFlags::CLONE_NEWUTS,
        LinuxNamespaceType::Ipc => CloneFlags::CLONE_NEWIPC,
        LinuxNamespaceType::User => CloneFlags::CLONE_NEWUSER,
        LinuxNamespaceType::Pid => CloneFlags::CLONE_NEWPID,
        LinuxNamespaceType::Network => CloneFlags::CLONE_NEWNET,
        LinuxNamespaceType::Time => CloneFlags::from_bits_retain(libc::CLONE_NEWTIME),
    }
}

/// The name of a namespace in `/proc/<pid>/ns/`.
pub fn proc_name(t: LinuxNamespaceType) -> &'static str {
    match t {
        LinuxNamespaceType::Mount => "mnt",
        LinuxNamespaceType::Cgroup => "cgroup",
        LinuxNamespaceType::Uts => "uts",
        LinuxNamespaceType::Ipc => "ipc",
        LinuxNamespaceType::User => "user",
        LinuxNamespaceType::Pid => "pid",
        LinuxNamespaceType::Network => "net",
        LinuxNamespaceType::Time => "time",
    }
}

/// Joins the namespace at `path` (a `/proc/<pid>/ns/<x>` file or a bind mount of one).
pub fn join(t: LinuxNamespaceType, path: &std::path::Path) -> Result<()> {
    let f = std::fs::File::open(path)
        .map_err(|e| err!("opening {} namespace {}: {e}", proc_name(t), path.display()))?;
    setns(f.as_fd(), flag(t)).map_err(|e| err!("joining {} namespace {}: {e}", proc_name(t), path.display()))
}

/// Creates new namespaces of the given types at once.
pub fn create(flags: CloneFlags) -> Result<()> {
    if flags.is_empty() {
        return Ok(());
    }
    unshare(flags).map_err(|e| err!("creating namespaces ({flags:?}): {e}"))
}

/// Splits the config's namespaces into (to join by path, to create), with the user namespace first in each.
pub fn split(
    list: &[LinuxNamespace],
) -> (
    Vec<(LinuxNamespaceType, std::path::PathBuf)>,
    Vec<LinuxNamespaceType>,
) {
    let mut join = Vec::new();
    let mut new = Vec::new();
    for ns in list {
        match ns.path() {
            Some(p) if !p.as_os_str().is_empty() => join.push((ns.typ(), p.clone())),
            _ => new.push(ns.typ()),
        }
    }
    let user_first = |t: &LinuxNamespaceType| *t != LinuxNamespaceType::User;
    join.sort_by_key(|(t, _)| user_first(t));
    new.sort_by_key(user_first);
    (join, new)
}
