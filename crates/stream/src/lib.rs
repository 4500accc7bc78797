//! crius-stream: the CRI streaming server and its client.
//!
//! Exec, Attach and PortForward answer with a URL on this server; kubelet's proxy, crictl and `crius exec`
//! connect to it and upgrade the HTTP connection to SPDY/3.1 or WebSocket, then speak Kubernetes'
//! remote-command (`v4`/`v5.channel.k8s.io`) or port-forward (`portforward.k8s.io`) protocol.
//!
//! ```text
//!  spdy/        SPDY/3.1: frames (frame.rs, codec.rs), header blocks (headers.rs, zlib.rs, dict.rs: the
//!               SPDY/3 zlib dictionary) and sessions (conn.rs; session.rs: the state and the reader task;
//!               writer.rs: the writer task; stream.rs: a stream and its halves)
//! ```
//!
//! The runtime behind the server is a `Backend` (to come): this crate knows nothing of shims or CRI records.

pub mod spdy;
