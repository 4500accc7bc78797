//! A pod's namespaces without a process to hold them: a short-lived thread unshares the network, IPC and UTS
//! namespaces the pod asks for, sets the pod's hostname and brings `lo` up, and each namespace is pinned by a
//! bind mount of its nsfs file (`<dir>/net`, `<dir>/ipc`, `<dir>/uts`), as CRI-O's pinns does. Containers join
//! them by path, CNI configures the network namespace by path, and no pause container is needed. A pod with its
//! own IPC namespace also gets its own `/dev/shm`: a tmpfs at `<dir>/shm` (64 MiB) that every container binds,
//! so POSIX shared memory is shared within the pod as SysV IPC is.
//!
//! A pod with a user namespace of its own (`hostUsers: false`) gets it here too, pinned at `<dir>/user`: a
//! holder process ([`crius_oci::namespaces::Holder`]) unshares it together with the network, IPC and UTS
//! namespaces, which it then owns (so the pod's root may set their sysctls and mount sysfs and mqueue in
//! them), criusd writes its uid and gid maps, and all four are pinned from the holder's `/proc/<pid>/ns/`.

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use oci_spec::runtime::{LinuxIdMapping, LinuxNamespaceType};

use super::NetError;

/// The namespaces a pod gets of its own (the others are the host's).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Wanted {
    /// A network namespace (not for hostNetwork pods).
    pub net: bool,
    /// An IPC namespace (not for hostIPC pods).
    pub ipc: bool,
    /// A UTS namespace, holding `hostname` (not for hostNetwork pods, as kubelet's UTS follows the network).
    pub uts: bool,
    /// The pod's hostname, set in its UTS namespace.
    pub hostname: String,
    /// A PID namespace shared by the pod's containers (PID mode POD), held by a process of its own
    /// ([`super::pidns`]).
    pub pid: bool,
    /// A user namespace of the pod's own, with these (uid, gid) mappings, owning the others.
    pub userns: Option<(Vec<LinuxIdMapping>, Vec<LinuxIdMapping>)>,
}

/// Pinned namespaces: the paths of the pins made (None: the host's namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pinned {
    /// The network namespace's pin.
    pub net: Option<PathBuf>,
    /// The IPC namespace's pin.
    pub ipc: Option<PathBuf>,
    /// The UTS namespace's pin.
    pub uts: Option<PathBuf>,
    /// The pod's /dev/shm (with its IPC namespace).
    #[serde(default)]
    pub shm: Option<PathBuf>,
    /// The pod's shared PID namespace's pin (PID mode POD).
    #[serde(default)]
    pub pid: Option<PathBuf>,
    /// The pod's user namespace's pin (`hostUsers: false`).
    #[serde(default)]
    pub user: Option<PathBuf>,
}

impl Pinned {
    /// Whether every pin still refers to a namespace (false after a reboot emptied the state directory).
    pub fn alive(&self) -> bool {
        [&self.net, &self.ipc, &self.uts, &self.user]
            .into_iter()
            .flatten()
            .all(|p| is_nsfs(p))
            && self.pid.as_deref().is_none_or(super::pidns::alive)
    }
}

fn is_nsfs(p: &Path) -> bool {
    nix::sys::statfs::statfs(p).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::NSFS_MAGIC)
}

/// Brings the loopback interface of the calling thread's network namespace up.
fn loopback_up() -> std::io::Result<()> {
    // SAFETY: a datagram socket for the interface ioctls; closed below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain data; the name fits; the ioctls read and write only it.
    let r = unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in b"lo".iter().enumerate() {
            req.ifr_name[i] = *b as libc::c_char;
        }
        let mut r = libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut req);
        if r == 0 {
            req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            r = libc::ioctl(fd, libc::SIOCSIFFLAGS, &req);
        }
        r
    };
    let err = std::io::Error::last_os_error();
    // SAFETY: our own descriptor.
    unsafe { libc::close(fd) };
    if r != 0 {
        return Err(err);
    }
    Ok(())
}

/// Makes the namespaces `want` asks for and pins them under `dir` (created). On failure nothing is left.
pub fn create(dir: &Path, want: &Wanted) -> Result<Pinned, NetError> {
    let mut flags = CloneFlags::empty();
    let mut names = Vec::new();
    for (on, flag, name) in [
        (want.net, CloneFlags::CLONE_NEWNET, "net"),
        (want.ipc, CloneFlags::CLONE_NEWIPC, "ipc"),
        (want.uts, CloneFlags::CLONE_NEWUTS, "uts"),
    ] {
        if on {
            flags |= flag;
            names.push(name);
        }
    }
    if names.is_empty() && want.userns.is_none() {
        return Ok(Pinned::default());
    }
    std::fs::create_dir_all(dir).map_err(|e| NetError::io(format!("creating {}", dir.display()), e))?;
    for n in names.iter().chain(want.userns.as_ref().map(|_| &"user")) {
        std::fs::File::create(dir.join(n))
            .map_err(|e| NetError::io(format!("creating {}", dir.join(n).display()), e))?;
    }
    // With a user namespace the namespaces are a holder's, pinned here; the thread below then enters them.
    let held = match &want.userns {
        Some(maps) => match pin_held(dir, flags, &names, maps) {
            Ok(()) => true,
            Err(e) => {
                remove(dir);
                return Err(e);
            }
        },
        None => false,
    };
    let (d, want2) = (dir.to_path_buf(), want.clone());
    let made = std::thread::Builder::new()
        .name("pod-namespaces".into())
        .spawn(move || -> Result<(), NetError> {
            // This thread alone moves into the new namespaces; it ends once they are pinned.
            if held {
                for (on, flag, n) in [
                    (want2.uts, CloneFlags::CLONE_NEWUTS, "uts"),
                    (want2.net, CloneFlags::CLONE_NEWNET, "net"),
                ] {
                    if on {
                        let f = std::fs::File::open(d.join(n))
                            .map_err(|e| NetError::io(format!("opening {}", d.join(n).display()), e))?;
                        nix::sched::setns(&f, flag).map_err(|e| {
                            NetError::io(format!("entering {}", d.join(n).display()), e.into())
                        })?;
                    }
                }
            } else {
                nix::sched::unshare(flags)
                    .map_err(|e| NetError::io(format!("unshare {flags:?}"), e.into()))?;
            }
            if want2.uts && !want2.hostname.is_empty() {
                nix::unistd::sethostname(&want2.hostname)
                    .map_err(|e| NetError::io(format!("hostname {:?}", want2.hostname), e.into()))?;
            }
            if want2.net {
                loopback_up().map_err(|e| NetError::io("bringing lo up", e))?;
            }
            if held {
                return Ok(());
            }
            for n in names {
                pin(&format!("/proc/thread-self/ns/{n}"), &d.join(n))?;
            }
            Ok(())
        })
        .map_err(|e| NetError::io("starting the namespace thread", e))?
        .join()
        .unwrap_or_else(|_| {
            Err(NetError::io(
                "making the pod's namespaces",
                std::io::Error::other("the namespace thread panicked"),
            ))
        });
    let mut pinned = Pinned {
        net: want.net.then(|| dir.join("net")),
        ipc: want.ipc.then(|| dir.join("ipc")),
        uts: want.uts.then(|| dir.join("uts")),
        shm: None,
        pid: None,
        user: want.userns.as_ref().map(|_| dir.join("user")),
    };
    let shm = || -> Result<PathBuf, NetError> {
        let p = dir.join("shm");
        std::fs::create_dir_all(&p).map_err(|e| NetError::io(format!("creating {}", p.display()), e))?;
        let flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
        nix::mount::mount(
            Some("shm"),
            &p,
            Some("tmpfs"),
            flags,
            Some("mode=1777,size=65536k"),
        )
        .map_err(|e| {
            NetError::io(
                format!("mounting the pod's /dev/shm at {}", p.display()),
                e.into(),
            )
        })?;
        Ok(p)
    };
    let made = made.and_then(|()| {
        if want.ipc {
            pinned.shm = Some(shm()?);
        }
        Ok(())
    });
    if let Err(e) = made {
        remove(dir);
        return Err(e);
    }
    Ok(pinned)
}

/// Bind-mounts the nsfs file `src` onto `at`.
fn pin(src: &str, at: &Path) -> Result<(), NetError> {
    nix::mount::mount(Some(src), at, None::<&str>, MsFlags::MS_BIND, None::<&str>)
        .map_err(|e| NetError::io(format!("pinning {src} at {}", at.display()), e.into()))
}

/// A user namespace with `maps` and the namespaces of `flags` (`names`) owned by it, made by a holder
/// process and pinned under `dir` (`user` and each name).
fn pin_held(
    dir: &Path,
    flags: CloneFlags,
    names: &[&str],
    maps: &(Vec<LinuxIdMapping>, Vec<LinuxIdMapping>),
) -> Result<(), NetError> {
    let io = |what: &str, e: crius_oci::Error| {
        NetError::io(what.to_string(), std::io::Error::other(e.to_string()))
    };
    let holder = crius_oci::namespaces::Holder::new(CloneFlags::CLONE_NEWUSER | flags)
        .map_err(|e| io("making the pod's user namespace", e))?;
    holder
        .write_maps(&maps.0, &maps.1)
        .map_err(|e| io("mapping the pod's user namespace", e))?;
    let user = holder.ns_path(LinuxNamespaceType::User);
    pin(&user.display().to_string(), &dir.join("user"))?;
    for n in names {
        pin(&format!("/proc/{}/ns/{n}", holder.pid), &dir.join(n))?;
    }
    Ok(())
}

/// Unpins every namespace under `dir` and removes it; the namespaces go once nothing else holds them.
/// Idempotent.
pub fn remove(dir: &Path) {
    for n in ["net", "ipc", "uts", "user"] {
        let p = dir.join(n);
        if is_nsfs(&p) {
            let _ = nix::mount::umount2(&p, MntFlags::MNT_DETACH);
        }
        let _ = std::fs::remove_file(&p);
    }
    let shm = dir.join("shm");
    if shm.exists() {
        let _ = nix::mount::umount2(&shm, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(&shm);
    }
    let _ = std::fs::remove_dir(dir);
}

/// Starts `f` in the network namespace pinned at `netns` (None: criusd's own), on a short-lived thread named
/// `name` that alone enters the namespace and then ends, so no thread of criusd's pools ever changes namespace;
/// `done` gets what it returned.
fn spawn_within<T: Send + 'static>(
    netns: Option<&Path>,
    name: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
    done: impl FnOnce(std::io::Result<T>) + Send + 'static,
) -> std::io::Result<()> {
    let ns = netns.map(std::fs::File::open).transpose()?;
    std::thread::Builder::new().name(name.into()).spawn(move || {
        let r = match &ns {
            Some(ns) => nix::sched::setns(ns, CloneFlags::CLONE_NEWNET)
                .map_err(std::io::Error::from)
                .and_then(|()| f()),
            None => f(),
        };
        done(r);
    })?;
    Ok(())
}

fn panicked(name: &str) -> std::io::Error {
    std::io::Error::other(format!("the {name} thread panicked"))
}

/// Runs `f` in the network namespace pinned at `netns` (None: criusd's own), on a thread of its own
/// (`spawn_within`), and waits for it.
pub fn within<T: Send + 'static>(
    netns: Option<&Path>,
    name: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    spawn_within(netns, name, f, move |r| {
        let _ = tx.send(r);
    })?;
    rx.recv().unwrap_or_else(|_| Err(panicked(name)))
}

/// [`within`] for async callers: the thread is waited for without blocking one of the runtime's.
pub async fn within_async<T: Send + 'static>(
    netns: Option<&Path>,
    name: &str,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawn_within(netns, name, f, move |r| {
        let _ = tx.send(r);
    })?;
    rx.await.unwrap_or_else(|_| Err(panicked(name)))
}
