//! The container's terminal: a new pty in the container's devpts whose master is sent to the caller's console
//! socket (SCM_RIGHTS), while the slave becomes stdio and the controlling terminal of the process, and, for a
//! container's init, is bound onto `/dev/console` as the OCI spec asks.
//!
//! Nothing here trusts a path the container can swap (runc CVE-2025-52565): the master is opened inside the root
//! with no magic link followed and checked to be a pty master of a devpts (`TIOCGPTN` answers, the file is on
//! devpts), so no other file reaches the caller's socket; the slave is the master's peer (`TIOCGPTPEER`), never
//! opened by its `/dev/pts/N` name; `/dev/console` is made afresh as an empty regular file with no symlink
//! followed, and the bind's source is the slave's own descriptor.

use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use nix::sys::stat::Mode;
use oci_spec::runtime::Box as ConsoleSize;

use crate::{Result, err};

/// devpts's `f_type` (`DEVPTS_SUPER_MAGIC`).
const DEVPTS_SUPER_MAGIC: i64 = 0x1cd1;

/// The root of this process (`/`, the container's root after pivot_root or setns), as an O_PATH fd.
pub(crate) fn root() -> Result<OwnedFd> {
    nix::fcntl::open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| err!("opening /: {e}"))
}

/// A new pty master from `ptmx` under `root` (the container's `dev/ptmx`), checked; and its number.
pub(crate) fn open_master(root: &OwnedFd, ptmx: &str) -> Result<(OwnedFd, u32)> {
    let how = OpenHow::new()
        .flags(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let master = nix::fcntl::openat2(root.as_fd(), ptmx, how).map_err(|e| err!("opening /{ptmx}: {e}"))?;
    let fs = nix::sys::statfs::fstatfs(&master).map_err(|e| err!("/{ptmx}: {e}"))?;
    if fs.filesystem_type().0 as i64 != DEVPTS_SUPER_MAGIC {
        return Err(err!(
            "/{ptmx} does not lead to a devpts (refused as the terminal)"
        ));
    }
    let mut n: libc::c_uint = 0;
    // SAFETY: TIOCGPTN writes the pty's number into a c_uint; it fails on anything but a pty master.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut n) } != 0 {
        return Err(err!(
            "/{ptmx} did not give a pty master (TIOCGPTN: {})",
            std::io::Error::last_os_error()
        ));
    }
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads a c_int (0: unlock the slave).
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } != 0 {
        return Err(err!("unlocking pty {n}: {}", std::io::Error::last_os_error()));
    }
    Ok((master, n))
}

/// The slave of `master`, by the master itself (no path).
pub(crate) fn open_slave(master: &OwnedFd, n: u32) -> Result<OwnedFd> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes open flags and returns a new descriptor, or -1.
    let fd = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if fd < 0 {
        return Err(err!(
            "opening pty {n}'s slave (TIOCGPTPEER): {}",
            std::io::Error::last_os_error()
        ));
    }
    // SAFETY: the ioctl just returned this descriptor, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Gives the pty of `slave` the spec's console size, if any.
pub(crate) fn set_size(slave: &OwnedFd, size: Option<&ConsoleSize>) {
    if let Some(s) = size {
        let ws = libc::winsize {
            ws_row: s.height() as u16,
            ws_col: s.width() as u16,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ with a valid winsize.
        unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCSWINSZ, &ws) };
    }
}

/// Creates the pty, binds the slave onto `/dev/console` when `console` (a container's init), makes the slave
/// stdin/stdout/stderr and the controlling tty, then sends the master to `sock`.
pub fn setup(sock: &UnixStream, size: Option<&ConsoleSize>, console: bool) -> Result<()> {
    let root = root()?;
    let (master, n) = open_master(&root, "dev/ptmx")?;
    let slave = open_slave(&master, n)?;
    set_size(&slave, size);
    if console {
        crate::rootfs::bind_console(&root, &slave)?;
    }
    let raw = slave.into_raw_fd();
    for fd in 0..3 {
        // SAFETY: duplicating a descriptor we own onto stdio.
        if unsafe { libc::dup2(raw, fd) } < 0 {
            return Err(err!("dup2 pty to {fd}: {}", std::io::Error::last_os_error()));
        }
    }
    if raw > 2 {
        // SAFETY: closing the descriptor we took ownership of with into_raw_fd.
        unsafe { libc::close(raw) };
    }
    // The controlling terminal before the master leaves: once the caller holds it, it may close it at any
    // time, and a hung-up pty refuses TIOCSCTTY (EIO).
    // SAFETY: make the pty our controlling terminal (we are a session leader).
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
        return Err(err!("TIOCSCTTY: {}", std::io::Error::last_os_error()));
    }
    send_master(sock, &master, &format!("/dev/pts/{n}"))
}

/// Sends a pty `master` to the console socket `sock` (SCM_RIGHTS), with the slave's `name` as the message.
pub(crate) fn send_master(sock: &UnixStream, master: &OwnedFd, name: &str) -> Result<()> {
    let fds = [master.as_raw_fd()];
    sendmsg::<()>(
        sock.as_raw_fd(),
        &[IoSlice::new(name.as_bytes())],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| err!("sending the pty master to the console socket: {e}"))?;
    Ok(())
}
