//! The client side of remote command and port-forward over SPDY/3.1 (to be wired to `spdy::conn`).

use crate::client::{ClientError, Stdio};
use crate::status::Outcome;

/// Runs the remote command behind `url` over SPDY.
pub async fn remote_command(url: &str, _stdio: Stdio) -> Result<Outcome, ClientError> {
    Err(ClientError::Url(url.into(), "SPDY is not wired yet".into()))
}

/// Forwards `local` to `port` of the pod behind `url` over SPDY.
pub async fn port_forward(url: &str, _port: u16, _local: tokio::net::TcpStream) -> Result<(), ClientError> {
    Err(ClientError::Url(url.into(), "SPDY is not wired yet".into()))
}
