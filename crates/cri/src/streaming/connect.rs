//! Port-forward's connection: made inside the pod's network namespace, on a thread of its own.

use std::path::PathBuf;
use std::time::Duration;

/// Connects to 127.0.0.1:`port` in the network namespace pinned at `netns` (None: the host's), on a thread of its
/// own ([`crate::network::netns::within`]).
pub(super) fn connect_in(netns: Option<PathBuf>, port: u16) -> Result<std::net::TcpStream, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let timeout = Duration::from_secs(10);
    let connect = move || {
        let s = std::net::TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| std::io::Error::new(e.kind(), format!("connecting to {addr}: {e}")))?;
        s.set_nonblocking(true)?;
        Ok(s)
    };
    crate::network::netns::within(netns.as_deref(), "crius-portfwd", connect).map_err(|e| match &netns {
        Some(pin) => format!("in the pod's network namespace {}: {e}", pin.display()),
        None => e.to_string(),
    })
}
