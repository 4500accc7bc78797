//! Port-forward's connection: made inside the pod's network namespace, on a thread of its own.

use std::fs::File;
use std::path::PathBuf;
use std::time::Duration;

/// Connects to 127.0.0.1:`port` in the network namespace pinned at `netns` (None: the host's). The socket is
/// made on a thread of its own that enters the namespace and then ends, so no thread of criusd's pools ever
/// changes namespace.
pub(super) fn connect_in(netns: Option<PathBuf>, port: u16) -> Result<std::net::TcpStream, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let timeout = Duration::from_secs(10);
    let connect = move || -> Result<std::net::TcpStream, String> {
        if let Some(pin) = &netns {
            let f = File::open(pin)
                .map_err(|e| format!("opening the pod's network namespace {}: {e}", pin.display()))?;
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("entering the pod's network namespace {}: {e}", pin.display()))?;
        }
        let s = std::net::TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        s.set_nonblocking(true).map_err(|e| format!("port {port}: {e}"))?;
        Ok(s)
    };
    std::thread::Builder::new()
        .name("crius-portfwd".into())
        .spawn(connect)
        .map_err(|e| format!("a thread for the connection: {e}"))?
        .join()
        .map_err(|_| "the connecting thread failed".to_string())?
}
