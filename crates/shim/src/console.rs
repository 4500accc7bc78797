//! Terminals: the runtime creates the pty inside the container and sends its master over a console socket
//! (SCM_RIGHTS); the shim keeps the master, copies it to and from the process's FIFOs (or CRI log), and
//! resizes it on ResizePty.

use std::fs::File;
use std::io::IoSliceMut;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};

use crate::error::{Error, Result};

/// A listening console socket, removed when dropped.
pub(crate) struct ConsoleSocket {
    path: PathBuf,
    listener: UnixListener,
}

impl ConsoleSocket {
    /// Listens on a fresh socket in the shim socket directory.
    pub(crate) fn new() -> Result<ConsoleSocket> {
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = PathBuf::from(crate::address::SOCKET_DIR);
        crate::address::private_dir(&dir)?;
        let path = dir.join(format!(
            "console-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let listener =
            UnixListener::bind(&path).map_err(Error::io(format!("console socket {}", path.display())))?;
        Ok(ConsoleSocket { path, listener })
    }

    /// The path to pass as `--console-socket`.
    pub(crate) fn path(&self) -> String {
        self.path.display().to_string()
    }

    /// The pty master the runtime sent (call after the runtime command finished: it is queued by then).
    pub(crate) fn receive(&self) -> Result<File> {
        let shown = self.path.display();
        self.listener
            .set_nonblocking(true)
            .map_err(Error::io(format!("console socket {shown}")))?;
        let (conn, _) = self
            .listener
            .accept()
            .map_err(Error::io(format!("the runtime sent no terminal on {shown}")))?;
        conn.set_nonblocking(false)
            .map_err(Error::io(format!("console socket {shown}")))?;
        let mut buf = [0u8; 4096];
        let mut iov = [IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        // Close-on-exec from the start: the master must not reach the runtime processes the shim runs later.
        let msg = recvmsg::<()>(
            conn.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(Error::sys("receiving the terminal"))?;
        for c in msg.cmsgs().map_err(Error::sys("receiving the terminal"))? {
            if let ControlMessageOwned::ScmRights(fds) = c
                && let Some(&fd) = fds.first()
            {
                // SAFETY: the fd was just received and is ours alone.
                return Ok(unsafe { File::from_raw_fd(fd) });
            }
        }
        Err(Error::Runtime("the runtime's message carried no terminal".into()))
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Sets the size of the terminal whose master is `master`.
pub(crate) fn resize(master: &File, width: u32, height: u32) -> Result<()> {
    let ws = libc::winsize {
        ws_row: height as u16,
        ws_col: width as u16,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a winsize we own.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } != 0 {
        return Err(Error::Io {
            context: "resizing the terminal".into(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}
