//! A message channel between the runtime and the processes it forks (a `SOCK_SEQPACKET` pair, so each send is
//! one message). Used to hand over pids, ask for uid maps, run hooks at the right moment, pass the seccomp
//! listener (a descriptor, `SCM_RIGHTS`) and carry errors back.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg, send, sendmsg,
    socketpair,
};

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

    /// Sends one message with descriptor `fd` attached.
    pub fn send_fd(&self, msg: &str, fd: &impl AsRawFd) -> Result<()> {
        let fds = [fd.as_raw_fd()];
        sendmsg::<()>(
            self.0.as_raw_fd(),
            &[IoSlice::new(msg.as_bytes())],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map(drop)
        .map_err(|e| err!("sending {msg:?} with a descriptor to the other side: {e}"))
    }

    /// Receives one message; an empty message means the peer closed its end (it exited).
    pub fn recv(&self) -> Result<String> {
        self.recv_with_fd().map(|(msg, _)| msg)
    }

    /// Receives one message and the descriptor sent with it, if any (close-on-exec here).
    pub fn recv_with_fd(&self) -> Result<(String, Option<OwnedFd>)> {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let mut space = nix::cmsg_space!([RawFd; 1]);
            let msg = match recvmsg::<()>(
                self.0.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            ) {
                Ok(m) => m,
                Err(nix::Error::EINTR) => continue,
                Err(e) => return Err(err!("receiving from the other side: {e}")),
            };
            let mut fd = None;
            for c in msg
                .cmsgs()
                .map_err(|e| err!("receiving from the other side: {e}"))?
            {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    for (i, &raw) in fds.iter().enumerate() {
                        // SAFETY: descriptors just received are this process's alone; extra ones are closed.
                        let owned = unsafe { OwnedFd::from_raw_fd(raw) };
                        if i == 0 && fd.is_none() {
                            fd = Some(owned);
                        }
                    }
                }
            }
            let n = msg.bytes;
            return Ok((String::from_utf8_lossy(&buf[..n]).into_owned(), fd));
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
        AsRawFd::as_raw_fd(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_travels_with_its_message() {
        let (a, b) = pair().unwrap();
        let file = tempfile::tempfile().unwrap();
        a.send_fd("seccomp", &file).unwrap();
        a.send("plain").unwrap();
        let (msg, fd) = b.recv_with_fd().unwrap();
        assert_eq!(msg, "seccomp");
        let got = nix::sys::stat::fstat(fd.unwrap().as_fd()).unwrap();
        let want = nix::sys::stat::fstat(file.as_fd()).unwrap();
        assert_eq!((got.st_dev, got.st_ino), (want.st_dev, want.st_ino));
        assert_eq!(b.recv().unwrap(), "plain");
        drop(a);
        assert_eq!(b.recv().unwrap(), "");
    }
}
