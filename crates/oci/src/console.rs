//! The container's terminal: a new pty in the container's devpts whose master is sent to the caller's console
//! socket (SCM_RIGHTS), while the slave becomes stdio and the controlling terminal of the process.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, IntoRawFd};
use std::os::unix::net::UnixStream;

use nix::fcntl::OFlag;
use nix::pty::{grantpt, posix_openpt, ptsname_r, unlockpt};
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use oci_spec::runtime::Box as ConsoleSize;

use crate::{Result, err};

/// Creates the pty, sends the master to `sock`, and makes the slave stdin/stdout/stderr and controlling tty.
pub fn setup(sock: &UnixStream, size: Option<&ConsoleSize>) -> Result<()> {
    let master = posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .map_err(|e| err!("opening a pty: {e}"))?;
    grantpt(&master).map_err(|e| err!("grantpt: {e}"))?;
    unlockpt(&master).map_err(|e| err!("unlockpt: {e}"))?;
    let name = ptsname_r(&master).map_err(|e| err!("ptsname: {e}"))?;
    let slave = nix::fcntl::open(
        name.as_str(),
        OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| err!("opening {name}: {e}"))?;
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
    let fds = [master.as_raw_fd()];
    sendmsg::<()>(
        sock.as_raw_fd(),
        &[IoSlice::new(name.as_bytes())],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(|e| err!("sending the pty master to the console socket: {e}"))?;
    drop(master);
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
    // SAFETY: make the pty our controlling terminal (we are a session leader).
    if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } != 0 {
        return Err(err!("TIOCSCTTY: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}
