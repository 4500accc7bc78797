//! Waiting for a foreground process (`run`, `exec`) while forwarding the signals the caller receives to it.

use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::{Result, err};

const FORWARDED: &[Signal] = &[
    Signal::SIGHUP,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
];

/// Makes this process the subreaper of its descendants, so orphaned container processes come back to it.
pub fn become_subreaper() -> Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(err!(
            "PR_SET_CHILD_SUBREAPER: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// The shell-style exit code of a wait status (128 + signal for a killed process).
pub fn exit_code(s: WaitStatus) -> Option<i32> {
    match s {
        WaitStatus::Exited(_, c) => Some(c),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

/// Reaps children until `pid` exits, forwarding signals to it; returns its exit code.
pub fn forward_until_exit(pid: i32) -> Result<i32> {
    forward_until_exit_resizing(pid, None)
}

/// [`forward_until_exit`], with SIGWINCH going to `on_winch` instead of the process (a relayed terminal,
/// whose resize the kernel signals to the process itself).
pub fn forward_until_exit_resizing(pid: i32, on_winch: Option<&dyn Fn()>) -> Result<i32> {
    let target = Pid::from_raw(pid);
    let mut mask = SigSet::empty();
    mask.add(Signal::SIGCHLD);
    for s in FORWARDED {
        mask.add(*s);
    }
    mask.thread_block().map_err(|e| err!("blocking signals: {e}"))?;
    let sfd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC).map_err(|e| err!("signalfd: {e}"))?;
    loop {
        // Reap first: the child may have exited before the mask was in place.
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) | Err(_) => break,
                Ok(s) if s.pid() == Some(target) => {
                    if let Some(code) = exit_code(s) {
                        return Ok(code);
                    }
                }
                Ok(_) => {}
            }
        }
        match sfd.read_signal() {
            Ok(Some(info)) => {
                let signo = info.ssi_signo as i32;
                if signo == libc::SIGWINCH
                    && let Some(resize) = on_winch
                {
                    resize();
                } else if signo != libc::SIGCHLD
                    && let Ok(sig) = Signal::try_from(signo)
                {
                    let _ = nix::sys::signal::kill(target, sig);
                }
            }
            Ok(None) => {}
            Err(nix::Error::EINTR) => {}
            Err(e) => return Err(err!("reading signals: {e}")),
        }
    }
}
