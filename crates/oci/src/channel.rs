//! A message channel between the runtime and the processes it forks (a `SOCK_SEQPACKET` pair, so each send is
//! one message). Used to hand over pids, ask for uid maps, run hooks at the right moment and carry errors back.

use std::os::fd::{AsFd, OwnedFd};

use nix::sys::socket::{AddressFamily, MsgFlags, SockFlag, SockType, recv, send, socketpair};

use crate::{Result, err};

/// One end of the channel.
#[derive(Debug)]
pub struct Channel(OwnedFd);

/// A pair of connected ends, close-on-exec.
pub fn pair() -> Result<(Channel, Channel)> {
    let (a, b) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| err!("socketpair: {e}"))?;
    Ok((Channel(a), Channel(b)))
}

impl Channel {
    /// Sends one message.
    pub fn send(&self, msg: &str) -> Result<()> {
        send(
            self.0.as_fd().as_raw_fd_compat(),
            msg.as_bytes(),
            MsgFlags::MSG_NOSIGNAL,
        )
        .map(drop)
        .map_err(|e| err!("sending {msg:?} to the other side: {e}"))
    }

    /// Receives one message; an empty message means the peer closed its end (it exited).
    pub fn recv(&self) -> Result<String> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            match recv(self.0.as_fd().as_raw_fd_compat(), &mut buf, MsgFlags::empty()) {
                Ok(n) => return Ok(String::from_utf8_lossy(&buf[..n]).into_owned()),
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(err!("receiving from the other side: {e}")),
            }
        }
    }

    /// Receives a message and checks it is `want`; an `error ...` message becomes the error.
    pub fn expect(&self, want: &str) -> Result<()> {
        let got = self.recv()?;
        match got.strip_prefix("error ") {
            _ if got == want => Ok(()),
            Some(e) => Err(crate::Error::Msg(e.to_string())),
            None if got.is_empty() => Err(err!("the container process exited during setup")),
            None => Err(err!("protocol error: expected {want:?}, got {got:?}")),
        }
    }
}

trait RawFdCompat {
    fn as_raw_fd_compat(&self) -> i32;
}

impl RawFdCompat for std::os::fd::BorrowedFd<'_> {
    fn as_raw_fd_compat(&self) -> i32 {
        std::os::fd::AsRawFd::as_raw_fd(self)
    }
}
