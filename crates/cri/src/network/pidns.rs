//! A pod's shared PID namespace (PID mode POD, `shareProcessNamespace`). Unlike the other namespaces it
//! needs a process: a PID namespace lives as long as its first process. That is the shim binary's `pid-init`
//! action (see crius-shim), started in a session of its own, so it outlives criusd as the pod's shim does. Its
//! namespace is pinned at `<dir>/pid` and its pid kept in `<dir>/pid.init`; removal SIGKILLs it, which ends
//! every process left in the namespace. In a pod with a user namespace of its own the init is started in it
//! (as its root), so that the PID namespace is owned by it and the containers may mount their /proc.
//!
//! The init is every container's pid 1, which a container with CAP_SYS_PTRACE may inspect or take over: it
//! runs from a sealed copy of the shim binary ([`Holder`], one per criusd, so `/proc/1/exe` is no host file),
//! with an empty environment, in the pod's network, IPC and UTS namespaces (no host socket or hostname to
//! reach), and shuts itself into an empty root without capabilities (crius-shim's `pidinit`).

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

use crius_common::sealed::Handed;
use nix::mount::{MntFlags, MsFlags};

use super::NetError;
use super::netns::Pinned;

const PIN: &str = "pid";
const INIT: &str = "pid.init";

/// The shim binary the inits run from, sealed once (a memfd copy, `crius_common::sealed`) at the first pod
/// that needs one and again only when the file on disk changes: a copy per pod would cost every such pod a
/// copy of the whole binary.
#[derive(Debug, Default)]
pub struct Holder {
    shim: PathBuf,
    sealed: Mutex<Option<(Arc<OwnedFd>, Handed)>>,
}

impl Holder {
    /// The holder for the shim binary at `shim`.
    pub fn new(shim: PathBuf) -> Holder {
        Holder {
            shim,
            sealed: Mutex::default(),
        }
    }

    /// The sealed copy of the shim binary, made now if there is none or the file changed since.
    fn sealed(&self) -> Result<Arc<OwnedFd>, NetError> {
        let mut slot = self.sealed.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((fd, _)) = slot.as_ref().filter(|(_, h)| h.current()) {
            return Ok(fd.clone());
        }
        let real = std::fs::canonicalize(&self.shim)
            .map_err(|e| NetError::io(format!("resolving the shim binary {}", self.shim.display()), e))?;
        let (fd, handed) = crius_common::sealed::seal(&real, c"crius-pod-init").map_err(|e| {
            NetError::io(
                format!(
                    "sealing a copy of {} for the pod's PID namespace init",
                    real.display()
                ),
                std::io::Error::other(e),
            )
        })?;
        let fd = Arc::new(fd);
        *slot = Some((fd.clone(), handed));
        Ok(fd)
    }
}

/// The namespace file pinned at `pin`, opened, with its kind (for a `pre_exec` setns).
fn open_pin(pin: &Path, kind: libc::c_int) -> Result<(std::fs::File, libc::c_int), NetError> {
    let f = std::fs::File::open(pin).map_err(|e| NetError::io(format!("opening {}", pin.display()), e))?;
    Ok((f, kind))
}

/// Starts the namespace's init from `holder`'s sealed copy, in the network, IPC and UTS namespaces `pinned`
/// holds and in its user namespace if any, and pins the namespace under `dir`; its pin.
pub fn create(dir: &Path, holder: &Holder, pinned: &Pinned) -> Result<PathBuf, NetError> {
    std::fs::create_dir_all(dir).map_err(|e| NetError::io(format!("creating {}", dir.display()), e))?;
    let exe = holder.sealed()?;
    // The pod's namespaces, joined before its user namespace (criusd's privilege over them is needed).
    let joins: Vec<(std::fs::File, libc::c_int)> = [
        (pinned.net.as_ref(), libc::CLONE_NEWNET),
        (pinned.ipc.as_ref(), libc::CLONE_NEWIPC),
        (pinned.uts.as_ref(), libc::CLONE_NEWUTS),
        (pinned.user.as_ref(), libc::CLONE_NEWUSER),
    ]
    .into_iter()
    .filter_map(|(pin, kind)| pin.map(|p| open_pin(p, kind)))
    .collect::<Result<_, _>>()?;
    let userns = pinned.user.is_some();
    // Run through /proc/self/fd: the path is resolved before close-on-exec closes the copy's descriptor.
    let mut cmd = Command::new(format!("/proc/self/fd/{}", exe.as_raw_fd()));
    cmd.arg0(OsStr::new(&holder.shim))
        .arg("pid-init")
        .env_clear()
        .current_dir("/")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: the forked child only makes system calls (setns, setresgid, setresuid) before exec.
    unsafe {
        cmd.pre_exec(move || {
            for (ns, kind) in &joins {
                if libc::setns(ns.as_raw_fd(), *kind) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if userns && (libc::setresgid(0, 0, 0) != 0 || libc::setresuid(0, 0, 0) != 0) {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let out = cmd
        .output()
        .map_err(|e| NetError::io(format!("starting {} pid-init", holder.shim.display()), e))?;
    drop(exe);
    let text = String::from_utf8_lossy(&out.stdout);
    let pid: i32 = match text.trim().parse() {
        Ok(p) if out.status.success() => p,
        _ => {
            return Err(NetError::io(
                "making the pod's PID namespace",
                std::io::Error::other(format!(
                    "{} pid-init: {}: {}",
                    holder.shim.display(),
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
            ));
        }
    };
    std::fs::write(dir.join(INIT), pid.to_string())
        .map_err(|e| NetError::io(format!("writing {}", dir.join(INIT).display()), e))?;
    let pin = dir.join(PIN);
    let pinned = std::fs::File::create(&pin).and_then(|_| {
        nix::mount::mount(
            Some(format!("/proc/{pid}/ns/pid").as_str()),
            &pin,
            None::<&str>,
            MsFlags::MS_BIND,
            None::<&str>,
        )
        .map_err(std::io::Error::from)
    });
    if let Err(e) = pinned {
        remove(dir);
        return Err(NetError::io(
            format!("pinning the PID namespace of {pid} at {}", pin.display()),
            e,
        ));
    }
    Ok(pin)
}

/// The init of the namespace pinned at `pin`, if it still runs (the pid in `pid.init` is in that namespace:
/// not a reused pid).
fn init_of(pin: &Path) -> Option<i32> {
    let pid: i32 = std::fs::read_to_string(pin.with_file_name(INIT))
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/pid")).ok()?;
    let pinned = std::fs::metadata(pin).ok()?;
    (ns.ino() == pinned.ino() && ns.dev() == pinned.dev()).then_some(pid)
}

/// Whether the namespace pinned at `pin` can still be joined (its init runs).
pub fn alive(pin: &Path) -> bool {
    init_of(pin).is_some()
}

/// Ends the namespace under `dir` (its init SIGKILLed, with every process in it) and unpins it. Idempotent.
pub fn remove(dir: &Path) {
    let pin = dir.join(PIN);
    if let Some(pid) = init_of(&pin) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
    }
    let _ = nix::mount::umount2(&pin, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_file(&pin);
    let _ = std::fs::remove_file(dir.join(INIT));
}
