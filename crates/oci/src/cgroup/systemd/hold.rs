//! Starting a container's scope before its first process exists. systemd makes a scope around processes
//! that are already there, so a child of crius-runc starts it with itself as that process, and stays in it
//! until the container's init has been forked into the scope's cgroup. The D-Bus conversation (and the threads
//! its client starts) happens in that child, so crius-runc itself stays single-threaded for its own forks.

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::waitpid;
use nix::unistd::{ForkResult, Pid, fork, getpid};

use super::Scope;
use super::dbus::Systemd;
use super::props::{self, Property};
use crate::channel::{Channel, pair};
use crate::{Result, err};

/// The child that holds a new scope; dropping it ends the child.
pub struct Holder {
    pid: Pid,
    _ch: Channel,
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = kill(self.pid, Signal::SIGKILL);
        let _ = waitpid(self.pid, None);
    }
}

/// Starts `scope` for container `id`, its limits as `limits`, and returns once systemd reports it active,
/// the holding child inside. The caller must be single-threaded (it forks).
pub fn start(scope: &Scope, id: &str, limits: Vec<Property>) -> Result<Holder> {
    let (parent, child) = pair()?;
    // SAFETY: crius-runc is single-threaded here; the child only talks to systemd and then _exits.
    match unsafe { fork() }.map_err(|e| err!("fork: {e}"))? {
        ForkResult::Child => {
            drop(parent);
            let started = (|| {
                let sd = Systemd::connect()?;
                let me = getpid().as_raw() as u32;
                let mut all = props::scope(format!("crius container {id}"), &scope.slice, me);
                all.extend(limits);
                sd.start(&scope.unit, &all)
            })();
            let _ = child.send(&match started {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("error {e}"),
            });
            // Hold the scope until the parent is done with it (it kills us).
            let _ = child.recv();
            // SAFETY: leave without running the parent's destructors.
            unsafe { libc::_exit(0) }
        }
        ForkResult::Parent { child: pid } => {
            drop(child);
            let holder = Holder { pid, _ch: parent };
            holder._ch.expect("ok")?;
            Ok(holder)
        }
    }
}
