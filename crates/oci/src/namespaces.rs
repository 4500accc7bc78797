//! Linux namespaces: which clone flags a config asks for, joining existing ones by path, creating new ones,
//! and a [`Holder`] process for a user namespace with maps (and namespaces owned by it).

use std::os::fd::AsFd;

use nix::sched::{CloneFlags, setns, unshare};
use oci_spec::runtime::{LinuxIdMapping, LinuxNamespace, LinuxNamespaceType};

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

/// A process of its own in new namespaces (`flags`, a user namespace among them, created first and owning the
/// others) that only waits, so that the caller can write its maps and open or pin its namespace files at
/// `/proc/<pid>/ns/`. Dropping it ends the process; the namespaces live on while something holds them.
///
/// The child makes no allocation and calls nothing but `unshare`, `write`, `read` and `_exit`, so forking it
/// is sound from a process with many threads (criusd) as well as from crius-runc.
#[derive(Debug)]
pub struct Holder {
    /// The waiting process.
    pub pid: nix::unistd::Pid,
    /// Its end of the pipe it waits on: closing it lets the process exit.
    release: Option<std::os::fd::OwnedFd>,
}

impl Holder {
    /// Forks the holder and waits until it is in its new namespaces.
    pub fn new(flags: CloneFlags) -> Result<Holder> {
        let (ready_r, ready_w) = nix::unistd::pipe().map_err(|e| err!("pipe: {e}"))?;
        let (go_r, go_w) = nix::unistd::pipe().map_err(|e| err!("pipe: {e}"))?;
        // SAFETY: the child runs only async-signal-safe system calls on fds it owns, then _exits.
        match unsafe { nix::unistd::fork() }.map_err(|e| err!("fork: {e}"))? {
            nix::unistd::ForkResult::Child => {
                use std::os::fd::AsRawFd;
                // SAFETY: plain system calls with valid fds and a one-byte buffer.
                unsafe {
                    let ok: u8 = if libc::unshare(flags.bits()) == 0 {
                        b'1'
                    } else {
                        b'0'
                    };
                    libc::write(ready_w.as_raw_fd(), (&ok as *const u8).cast(), 1);
                    libc::close(go_w.as_raw_fd());
                    let mut b = 0u8;
                    libc::read(go_r.as_raw_fd(), (&mut b as *mut u8).cast(), 1);
                    libc::_exit(0)
                }
            }
            nix::unistd::ForkResult::Parent { child } => {
                drop((ready_w, go_r));
                let holder = Holder {
                    pid: child,
                    release: Some(go_w),
                };
                let mut b = [0u8];
                let n = nix::unistd::read(&ready_r, &mut b)
                    .map_err(|e| err!("reading the holder's pipe: {e}"))?;
                if n != 1 || b[0] != b'1' {
                    return Err(err!(
                        "creating namespaces ({flags:?}) in a holder process: unshare failed"
                    ));
                }
                Ok(holder)
            }
        }
    }

    /// Writes the holder's uid and gid maps (as its parent user namespace names the host ids).
    pub fn write_maps(&self, uids: &[LinuxIdMapping], gids: &[LinuxIdMapping]) -> Result<()> {
        write_maps(self.pid, "uid_map", uids)?;
        write_maps(self.pid, "gid_map", gids)
    }

    /// The holder's namespace file of type `t`.
    pub fn ns_path(&self, t: LinuxNamespaceType) -> std::path::PathBuf {
        format!("/proc/{}/ns/{}", self.pid, proc_name(t)).into()
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.release.take());
        let _ = nix::sys::wait::waitpid(self.pid, None);
    }
}

/// Writes the uid or gid map (`file`: `uid_map`, `gid_map`) of process `pid` from `maps`.
pub fn write_maps(pid: nix::unistd::Pid, file: &str, maps: &[LinuxIdMapping]) -> Result<()> {
    let text: String = maps
        .iter()
        .map(|m| format!("{} {} {}\n", m.container_id(), m.host_id(), m.size()))
        .collect();
    let path = format!("/proc/{pid}/{file}");
    std::fs::write(&path, text.as_bytes())
        .map_err(|e| err!("writing {path} ({}): {e}", text.trim().replace('\n', ", ")))
}

/// A user namespace with the given maps, open: what an idmapped mount is given (`MOUNT_ATTR_IDMAP`).
pub fn userns_with(uids: &[LinuxIdMapping], gids: &[LinuxIdMapping]) -> Result<std::os::fd::OwnedFd> {
    let h = Holder::new(CloneFlags::CLONE_NEWUSER)?;
    h.write_maps(uids, gids)?;
    let p = h.ns_path(LinuxNamespaceType::User);
    let f = std::fs::File::open(&p).map_err(crate::Error::io("opening", &p))?;
    Ok(f.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_s_namespace_is_new_and_it_ends_when_dropped() {
        let h = Holder::new(CloneFlags::CLONE_NEWUSER).unwrap();
        let pid = h.pid;
        let mine = std::fs::read_link("/proc/self/ns/user").unwrap();
        assert_ne!(
            std::fs::read_link(h.ns_path(LinuxNamespaceType::User)).unwrap(),
            mine
        );
        drop(h);
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}
