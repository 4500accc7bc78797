//! `pid-init`: the holder of a pod's shared PID namespace (`shareProcessNamespace`, PID mode POD). crius has
//! no pause container, so this action of the shim binary does the pause container's one job there: it makes
//! a new PID namespace whose first process (pid 1) reaps every process reparented to it and never exits on
//! its own (as the namespace's init it ignores every signal from inside; criusd ends it with SIGKILL). The
//! action prints that process's pid (as the host sees it) and returns; the process lives on, in a session
//! of its own, outliving criusd as the pod's shim does.

use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::{ForkResult, fork};

/// Makes the namespace and its init; prints the init's pid.
pub(crate) fn start() -> Result<(), String> {
    let _ = nix::unistd::setsid();
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID)
        .map_err(|e| format!("unshare(CLONE_NEWPID): {e}"))?;
    // SAFETY: this process is single-threaded (the shim's main, before any thread), so the child may run
    // anything.
    match unsafe { fork() }.map_err(|e| format!("fork: {e}"))? {
        ForkResult::Parent { child } => {
            println!("{child}");
            Ok(())
        }
        ForkResult::Child => init(),
    }
}

/// Pid 1 of the pod's namespace: its standard streams let go (criusd reads the parent's stdout to its end),
/// then reaping until killed.
fn init() -> ! {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors of this single-threaded process.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
    // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"crius-pod-init".as_ptr()) };
    // SIGCHLD blocked stays pending (an ignored signal that is blocked is kept), so waiting for it sleeps
    // until a child ends.
    let mut chld = SigSet::empty();
    chld.add(Signal::SIGCHLD);
    let _ = chld.thread_block();
    loop {
        while matches!(
            waitpid(None, Some(WaitPidFlag::WNOHANG)),
            Ok(s) if s.pid().is_some()
        ) {}
        let _ = chld.wait();
    }
}
