//! crius-stream: the CRI streaming server and its client.
//!
//! Exec, Attach and PortForward answer with a URL on this server; kubelet's proxy, crictl and `crius exec`
//! connect to it and upgrade the HTTP connection to SPDY/3.1 or WebSocket, then speak Kubernetes'
//! remote-command (`v4`/`v5.channel.k8s.io`) or port-forward (`portforward.k8s.io`) protocol.
//!
//! ```text
//!  backend.rs      the Backend trait: what the server asks of the runtime (criusd implements it)
//!  error.rs        the crate's one error (a backend's own is backend.rs's Failure)
//!  token.rs        single-use tokens behind the URLs, 1 minute each
//!  http.rs         the connection cap and head deadline every HTTP server of criusd's has
//!  server.rs       the HTTP server: routes, the upgrade to SPDY or WebSocket, TLS (tls.rs), idle timeouts
//!                  (idle.rs)
//!  session.rs      exec and attach over abstract channels (stdin, stdout, stderr, error, resize); resize.rs:
//!                  the resize channel's parser, bounded
//!  ws_serve.rs     those channels on a WebSocket; spdy_serve.rs: on SPDY streams, and port-forward's pairs
//!  portforward.rs  port-forward over WebSocket channels, and the copy between a port and a channel pair
//!  status.rs       the error channel's Status objects
//!  spdy/           SPDY/3.1 framing (frame.rs, codec.rs, with the zlib header dictionary) and sessions
//!                  (conn.rs, session.rs, stream.rs)
//!  ws.rs           the channel framing over WebSocket; tunnel.rs: a WebSocket as a byte pipe
//!                  (`SPDY/3.1+portforward.k8s.io`)
//!  client.rs       the client, both transports (spdy_client.rs for SPDY), for `crius exec` and the tests
//! ```
//!
//! The runtime behind the server is a [`Backend`]: this crate knows nothing of shims or CRI records.
//!
//! SPDY/3.1 is our own (`spdy/`): no maintained Rust crate speaks it, and kubelet, kubectl and crictl still
//! default to it; WebSocket framing is tungstenite's.

pub mod backend;
pub mod client;
pub mod error;
pub mod http;
pub mod idle;
pub mod portforward;
pub mod resize;
pub mod server;
pub mod session;
pub mod spdy;
pub mod spdy_client;
pub mod spdy_serve;
pub mod status;
pub mod tls;
pub mod token;
pub mod tunnel;
pub mod ws;
pub mod ws_serve;

/// The protocol names both transports negotiate (`X-Stream-Protocol-Version` for SPDY,
/// `Sec-WebSocket-Protocol` for WebSocket).
pub mod protocol {
    /// Remote command v5 (on WebSocket: with the close signal; on SPDY: as v4).
    pub const V5: &str = "v5.channel.k8s.io";
    /// Remote command v4.
    pub const V4: &str = "v4.channel.k8s.io";
    /// Port-forward.
    pub const PORT_FORWARD: &str = "portforward.k8s.io";
}

pub use backend::{
    AttachRequest, Backend, Control, ErrorKind, ExecRequest, Failure, PortForwardRequest, Process, Request,
};
pub use error::{Error, Result};
