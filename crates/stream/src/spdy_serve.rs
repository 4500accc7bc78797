//! Remote command and port-forward over SPDY/3.1 (to be wired to `spdy::conn`).

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use crate::backend::{Backend, Request};

/// Remote command v5.
pub const V5: &str = "v5.channel.k8s.io";
/// Remote command v4.
pub const V4: &str = "v4.channel.k8s.io";
/// Port-forward.
pub const PORT_FORWARD: &str = "portforward.k8s.io";

/// Serves `req` over an upgraded SPDY connection.
pub async fn serve<S>(_io: S, _req: Request, _backend: Arc<dyn Backend>, _timeout: Duration)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
}
