//! A terminal in the foreground, as runc gives one: `run` (or `exec`) of a process with `terminal: true`,
//! without `--detach` and without `--console-socket`. crius-runc listens on a console socket of its own, the
//! container sends the pty master to it as it would to a caller's, and crius-runc relays between its own
//! stdio and the master: its stdin is put in raw mode while it is a terminal (and restored after), the pty
//! takes its size and follows it on SIGWINCH. A bundle made by `runc spec`, which asks for a terminal, runs
//! this way unedited.

use std::io::{IoSliceMut, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};

use crate::{Result, err};

/// The console socket, before the container connects.
pub struct Foreground {
    listener: UnixListener,
    path: PathBuf,
}

/// The relay, once the master came.
pub struct Relay {
    master: std::fs::File,
    saved: Option<Termios>,
    output: std::thread::JoinHandle<()>,
}

impl Foreground {
    /// Listens on a new console socket in the temporary directory.
    pub fn listen() -> Result<Foreground> {
        let path = std::env::temp_dir().join(format!("crius-runc-console-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let listener =
            UnixListener::bind(&path).map_err(|e| err!("console socket {}: {e}", path.display()))?;
        Ok(Foreground { listener, path })
    }

    /// Where the container is to send the master (`CreateOptions::console_socket`).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Takes the master the container sent (it connected during create), and starts relaying.
    pub fn attach(self) -> Result<Relay> {
        self.listener
            .set_nonblocking(false)
            .map_err(|e| err!("console socket: {e}"))?;
        let (conn, _) = self
            .listener
            .accept()
            .map_err(|e| err!("console socket: accepting the container: {e}"))?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| err!("console socket: {e}"))?;
        let master = receive_fd(conn.as_raw_fd())?;
        let master = std::fs::File::from(master);
        let stdin = std::io::stdin();
        // Raw: keys reach the container's line discipline as typed (its echo, its ^C).
        let saved = tcgetattr(stdin.as_fd()).ok();
        if let Some(t) = &saved {
            let mut raw = t.clone();
            cfmakeraw(&mut raw);
            let _ = tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw);
        }
        copy_size(&master);
        let mut to_master = master.try_clone().map_err(|e| err!("pty master: {e}"))?;
        // The threads copy through descriptors of their own, never std's locked handles: a copy blocked in
        // a read must not hold a lock that crius-runc's exit (which flushes stdout) waits for.
        let own = |fd: std::os::fd::BorrowedFd<'_>, name: &str| {
            fd.try_clone_to_owned()
                .map(std::fs::File::from)
                .map_err(|e| err!("duplicating {name}: {e}"))
        };
        let mut input = own(stdin.as_fd(), "stdin")?;
        let mut out = own(std::io::stdout().as_fd(), "stdout")?;
        // The copies take no signal: SIGCHLD must reach the thread that waits for the process (a signalfd
        // there), never be dropped by one of these. They start with every signal blocked.
        let before = nix::sys::signal::SigSet::all()
            .thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
            .map_err(|e| err!("blocking signals: {e}"))?;
        // Not joined: it ends with crius-runc (a read of its stdin may block until then).
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = input.read(&mut buf) {
                if n == 0 || to_master.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        let mut from_master = master.try_clone().map_err(|e| err!("pty master: {e}"))?;
        let output = std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // EIO once the last holder of the pty's other side (the container's processes) is gone.
            while let Ok(n) = from_master.read(&mut buf) {
                if n == 0 || out.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        before
            .thread_set_mask()
            .map_err(|e| err!("restoring the signal mask: {e}"))?;
        Ok(Relay {
            master,
            saved,
            output,
        })
    }
}

impl Drop for Foreground {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Relay {
    /// The pty takes crius-runc's terminal size again (on SIGWINCH).
    pub fn resize(&self) {
        copy_size(&self.master);
    }

    /// The process exited: the output still in the pty is written out (for at most a second), and the
    /// terminal is restored.
    pub fn finish(self) {
        for _ in 0..100 {
            if self.output.is_finished() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(t) = &self.saved {
            let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, t);
        }
    }
}

/// The size of crius-runc's stdin terminal, if it is one, onto `pty`.
fn copy_size(pty: &std::fs::File) {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ and TIOCSWINSZ with a valid winsize.
    unsafe {
        if libc::ioctl(0, libc::TIOCGWINSZ, &mut ws) == 0 {
            libc::ioctl(pty.as_raw_fd(), libc::TIOCSWINSZ, &ws);
        }
    }
}

/// Receives one descriptor sent with SCM_RIGHTS on `sock`.
fn receive_fd(sock: RawFd) -> Result<OwnedFd> {
    let mut name = [0u8; 256];
    let mut iov = [IoSliceMut::new(&mut name)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(|e| err!("console socket: receiving the pty master: {e}"))?;
    for c in msg.cmsgs().map_err(|e| err!("console socket: {e}"))? {
        if let ControlMessageOwned::ScmRights(fds) = c
            && let Some(&fd) = fds.first()
        {
            // SAFETY: the descriptor was just received and is ours alone.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    Err(err!("console socket: the container sent no pty master"))
}
