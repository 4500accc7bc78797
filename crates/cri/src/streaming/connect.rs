//! Port-forward's connection to 127.0.0.1:PORT inside the pod's network namespace, made asynchronously: the
//! socket is created in the namespace on a short-lived thread of its own (a socket stays in the namespace it
//! was made in), and the connect itself is tokio's, so a port that never answers (a listener whose backlog
//! is full, say) holds a descriptor and a timer for [`CONNECT_TIMEOUT`], never a thread of the blocking pool
//! that CRI calls need.
//!
//! Connects in flight are bounded by [`MAX_CONNECTS`] for the whole criusd; one more fails at once, naming
//! the limit.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{AddressFamily, SockFlag, SockType};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::Semaphore;

/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Port-forward connects in flight at once, for the whole criusd.
pub const MAX_CONNECTS: usize = 1024;

/// The connects in flight.
#[derive(Clone)]
pub(super) struct Connects(Arc<Semaphore>);

impl Connects {
    pub(super) fn new() -> Connects {
        Connects(Arc::new(Semaphore::new(MAX_CONNECTS)))
    }

    /// Connects to 127.0.0.1:`port` in the network namespace pinned at `netns` (None: criusd's own).
    pub(super) async fn connect_in(&self, netns: Option<PathBuf>, port: u16) -> Result<TcpStream, String> {
        let Ok(_slot) = self.0.clone().try_acquire_owned() else {
            return Err(format!(
                "{MAX_CONNECTS} port-forward connections are being made already, the limit; try again later"
            ));
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let socket = match &netns {
            None => TcpSocket::new_v4().map_err(|e| format!("a socket for {addr}: {e}"))?,
            Some(pin) => socket_in(pin.clone())
                .await
                .map_err(|e| format!("in the pod's network namespace {}: {e}", pin.display()))?,
        };
        match tokio::time::timeout(CONNECT_TIMEOUT, socket.connect(addr)).await {
            Ok(Ok(tcp)) => Ok(tcp),
            Ok(Err(e)) => Err(format!("connecting to {addr}: {e}")),
            Err(_) => Err(format!(
                "connecting to {addr}: no answer within {CONNECT_TIMEOUT:?}"
            )),
        }
    }
}

/// A non-blocking TCP socket made in the network namespace pinned at `pin`, on a thread that alone enters the
/// namespace and then ends ([`crate::network::netns::within_async`]); waited for without blocking.
async fn socket_in(pin: PathBuf) -> std::io::Result<TcpSocket> {
    let fd = crate::network::netns::within_async(Some(&pin), "crius-portfwd", || {
        Ok(nix::sys::socket::socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
            None,
        )?)
    })
    .await?;
    Ok(TcpSocket::from_std_stream(std::net::TcpStream::from(fd)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn connects_in_criusd_own_namespace_and_names_a_closed_port() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let c = Connects::new();
        c.connect_in(None, port).await.unwrap();
        drop(listener);
        let e = c.connect_in(None, port).await.unwrap_err();
        assert!(e.contains(&format!("127.0.0.1:{port}")), "{e}");
        assert_eq!(c.0.available_permits(), MAX_CONNECTS);
    }

    #[tokio::test]
    async fn a_namespace_that_is_not_one_is_named() {
        let e = socket_in(PathBuf::from("/nonexistent/netns")).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }
}
