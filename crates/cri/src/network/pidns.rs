//! A pod's shared PID namespace (PID mode POD, `shareProcessNamespace`). Unlike the other namespaces it
//! needs a process: a PID namespace lives as long as its first process. That is the shim binary's `pid-init`
//! action (see crius-shim), started in a session of its own, so it outlives criusd as the pod's shim does. Its
//! namespace is pinned at `<dir>/pid` and its pid kept in `<dir>/pid.init`; removal SIGKILLs it, which ends
//! every process left in the namespace. In a pod with a user namespace of its own the init is started in it
//! (as its root), so that the PID namespace is owned by it and the containers may mount their /proc.

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nix::mount::{MntFlags, MsFlags};

use super::NetError;

const PIN: &str = "pid";
const INIT: &str = "pid.init";

/// Starts the namespace's init with `holder` (the shim binary), in the user namespace pinned at `userns` if
/// any, and pins the namespace under `dir`; its pin.
pub fn create(dir: &Path, holder: &Path, userns: Option<&Path>) -> Result<PathBuf, NetError> {
    std::fs::create_dir_all(dir).map_err(|e| NetError::io(format!("creating {}", dir.display()), e))?;
    let mut cmd = Command::new(holder);
    if let Some(p) = userns {
        let ns = std::fs::File::open(p).map_err(|e| NetError::io(format!("opening {}", p.display()), e))?;
        // SAFETY: the forked child only makes system calls (setns, setresgid, setresuid) before exec.
        unsafe {
            cmd.pre_exec(move || {
                use std::os::fd::AsRawFd;
                if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWUSER) != 0
                    || libc::setresgid(0, 0, 0) != 0
                    || libc::setresuid(0, 0, 0) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            })
        };
    }
    let out = cmd
        .arg("pid-init")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| NetError::io(format!("starting {} pid-init", holder.display()), e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let pid: i32 = match text.trim().parse() {
        Ok(p) if out.status.success() => p,
        _ => {
            return Err(NetError::io(
                "making the pod's PID namespace",
                std::io::Error::other(format!(
                    "{} pid-init: {}: {}",
                    holder.display(),
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
