//! `pid-init`: the holder of a pod's shared PID namespace (`shareProcessNamespace`, PID mode POD). crius has
//! no pause container, so this action of the shim binary does the pause container's one job there: it makes
//! a new PID namespace whose first process (pid 1) reaps every process reparented to it and never exits on
//! its own (as the namespace's init it ignores every signal from inside; criusd ends it with SIGKILL). The
//! action prints that process's pid (as the host sees it) and returns; the process lives on, in a session
//! of its own, outliving criusd as the pod's shim does.
//!
//! Every container of the pod sees it as pid 1, and one holding CAP_SYS_PTRACE may read its `/proc/1/root`,
//! `exe`, `fd`, `environ`, or attach to it and run code as it. So before it forks, the holder gives up all a
//! pause container would not have: it enters a private mount namespace whose root is an empty read-only tmpfs
//! (the host's root pivoted away and detached), drops every capability (bounding and ambient sets included)
//! under no_new_privs, becomes `nobody` where that uid exists, and is non-dumpable. criusd starts it from a
//! sealed copy of the shim binary (so `/proc/1/exe` is no host file), with an empty environment, in the pod's
//! network, IPC and UTS namespaces.

use nix::mount::{MntFlags, MsFlags, mount, umount2};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::{ForkResult, fork};
use std::os::fd::{IntoRawFd, OwnedFd};

use crate::error::{Error, Result};

/// Where the empty root is mounted before the pivot: any directory would do, the mount is the holder's alone.
const STAGE: &str = "/tmp";
/// The uid and gid the holder ends as (`nobody`), where its user namespace maps them.
const NOBODY: u32 = 65534;

/// Makes the namespace and its init; prints the init's pid.
pub(crate) fn start() -> Result<()> {
    let _ = nix::unistd::setsid();
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWPID | nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(Error::sys("unshare(CLONE_NEWPID | CLONE_NEWNS)"))?;
    let null: OwnedFd = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(Error::io("/dev/null"))?
        .into();
    empty_root()?;
    drop_privileges()?;
    // SAFETY: this process is single-threaded (the shim's main, before any thread), so the child may run
    // anything.
    match unsafe { fork() }.map_err(Error::sys("fork"))? {
        ForkResult::Parent { child } => {
            println!("{child}");
            Ok(())
        }
        ForkResult::Child => init(null),
    }
}

/// Makes an empty read-only tmpfs this process's root, in a mount namespace of its own whose other mounts
/// (the host's) are detached: nothing of the host is left to reach through `/proc/<pid>/root` or `cwd`.
fn empty_root() -> Result<()> {
    let none = None::<&str>;
    mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
        .map_err(Error::sys("making / private"))?;
    let flags = MsFlags::MS_RDONLY | MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC;
    mount(
        Some("tmpfs"),
        STAGE,
        Some("tmpfs"),
        flags,
        Some("mode=0555,size=4k"),
    )
    .map_err(Error::sys(format!("mounting an empty tmpfs on {STAGE}")))?;
    nix::unistd::chdir(STAGE).map_err(Error::sys(format!("chdir {STAGE}")))?;
    // pivot_root(".", "."): the old root ends stacked on the new one, where it is detached at once.
    nix::unistd::pivot_root(".", ".").map_err(Error::sys("pivot_root to the empty tmpfs"))?;
    umount2(".", MntFlags::MNT_DETACH).map_err(Error::sys("detaching the host's root"))?;
    nix::unistd::chdir("/").map_err(Error::sys("chdir /"))
}

/// Drops every capability for good (no_new_privs, empty bounding and ambient sets), becomes `nobody` where
/// that uid is mapped (else stays root of its user namespace, with nothing), and turns non-dumpable.
fn drop_privileges() -> Result<()> {
    let os = |what: &str| Error::Io {
        context: what.to_string(),
        source: std::io::Error::last_os_error(),
    };
    // SAFETY: prctl and the id calls below take integers only.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(os("PR_SET_NO_NEW_PRIVS"));
        }
        // Capabilities past the kernel's last one are EINVAL: that ends the loop.
        let mut cap = 0;
        while libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) == 0 {
            cap += 1;
        }
        if cap == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(os(&format!("dropping capability {cap} from the bounding set")));
        }
        if libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 {
            return Err(os("clearing the ambient capabilities"));
        }
        // In a user namespace whose setgroups is denied, or that maps no `nobody`, these fail; what is left
        // is its root without capabilities, unprivileged on the host.
        libc::setgroups(0, std::ptr::null());
        if libc::setresgid(NOBODY, NOBODY, NOBODY) == 0 {
            libc::setresuid(NOBODY, NOBODY, NOBODY);
        }
    }
    caps::clear(None, caps::CapSet::Inheritable)
        .and_then(|()| caps::clear(None, caps::CapSet::Effective))
        .and_then(|()| caps::clear(None, caps::CapSet::Permitted))
        .map_err(|e| Error::Host(format!("clearing the capability sets: {e}")))?;
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(os("PR_SET_DUMPABLE 0"));
    }
    Ok(())
}

/// Pid 1 of the pod's namespace: its standard streams /dev/null (criusd reads the parent's stdout to its
/// end) and nothing else open, then reaping until killed.
fn init(null: OwnedFd) -> ! {
    let null = null.into_raw_fd();
    for fd in 0..3 {
        // SAFETY: dup2 onto the standard descriptors of this single-threaded process.
        unsafe { libc::dup2(null, fd) };
    }
    // Whatever criusd's process left open (and /dev/null's own descriptor, released above) goes.
    // SAFETY: close_range with integer arguments; no Rust object owns a descriptor above 2 any more.
    unsafe { libc::syscall(libc::SYS_close_range, 3, u32::MAX, 0) };
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
