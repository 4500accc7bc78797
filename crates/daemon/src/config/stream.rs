//! The `[stream]` table: the streaming server behind Exec, Attach and PortForward, and the limits that keep
//! one client from exhausting criusd through it (connections, sessions, streams, buffered bytes, deadlines).

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::pods::erased;

/// The `[stream]` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamSection {
    /// The address it listens on.
    pub address: String,
    /// Its port (0: a free one, chosen at start).
    pub port: u16,
    /// A PEM certificate chain to serve https with (with `tls_key`); empty: plain http.
    pub tls_cert: PathBuf,
    /// The PEM key of `tls_cert`.
    pub tls_key: PathBuf,
    /// Seconds a stream may go without traffic before it is closed (0: never).
    pub idle_timeout: u64,
    /// Seconds a connection has for its TLS handshake, then for its request's head.
    pub header_timeout: u64,
    /// HTTP connections served at once (before their upgrade); more wait in the listen backlog.
    pub max_connections: usize,
    /// Sessions (exec, attach, port-forward) open at once; one more is refused with 503.
    pub max_sessions: usize,
    /// Streams one session may have open at once; one more is refused (SPDY: RST_STREAM REFUSED_STREAM).
    pub max_streams: usize,
    /// Bytes of a client's data one session holds before the process or the port takes them.
    pub session_buffer: usize,
}

impl Default for StreamSection {
    fn default() -> StreamSection {
        let d = crius_stream::server::Config::default();
        StreamSection {
            address: "127.0.0.1".into(),
            port: 0,
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            idle_timeout: 4 * 3600,
            header_timeout: d.header_timeout.as_secs(),
            max_connections: d.max_connections,
            max_sessions: d.max_sessions,
            max_streams: d.max_streams,
            session_buffer: d.session_buffer,
        }
    }
}

impl StreamSection {
    /// The streaming server's settings.
    pub fn server_config(&self) -> Result<crius_stream::server::Config, String> {
        let ip: std::net::IpAddr = self
            .address
            .parse()
            .map_err(|_| format!("stream address {:?}: not an IP address", self.address))?;
        let tls = match (
            self.tls_cert.as_os_str().is_empty(),
            self.tls_key.as_os_str().is_empty(),
        ) {
            (true, true) => None,
            (false, false) => Some((self.tls_cert.clone(), self.tls_key.clone())),
            _ => return Err("stream tls_cert and tls_key go together: give both or neither".into()),
        };
        let at_least = |name: &str, v: usize, min: usize| {
            if v < min {
                Err(format!("[stream] {name} = {v}: at least {min}"))
            } else {
                Ok(v)
            }
        };
        if self.header_timeout == 0 {
            return Err("[stream] header_timeout = 0: at least 1 second".into());
        }
        Ok(crius_stream::server::Config {
            address: std::net::SocketAddr::new(ip, self.port),
            tls,
            idle_timeout: if self.idle_timeout == 0 {
                Duration::from_secs(100 * 365 * 24 * 3600)
            } else {
                Duration::from_secs(self.idle_timeout)
            },
            header_timeout: Duration::from_secs(self.header_timeout),
            max_connections: at_least("max_connections", self.max_connections, 1)?,
            max_sessions: at_least("max_sessions", self.max_sessions, 1)?,
            // A port-forward connection takes two streams, a remote command up to five.
            max_streams: at_least("max_streams", self.max_streams, 5)?,
            session_buffer: at_least(
                "session_buffer",
                self.session_buffer,
                crius_stream::spdy::frame::MAX_DATA_FRAME,
            )?,
            ..crius_stream::server::Config::default()
        })
    }

    /// The table as `--print-config` shows it.
    pub fn render(&self, value: impl Fn(&dyn erased::Value) -> String) -> String {
        let d = StreamSection::default();
        let mut out = String::from("[stream]\n");
        let mut key = |doc: &str, name: &str, v: String, default: String| {
            out += &format!("# {doc}\n# default: {default}\n{name} = {v}\n\n");
        };
        key(
            "Address of the streaming server behind Exec, Attach and PortForward (--stream-address). kubelet \
             proxies to it, so 127.0.0.1 serves a node.",
            "address",
            value(&self.address),
            value(&d.address),
        );
        key(
            "Its port; 0 picks a free one at start (--stream-port).",
            "port",
            value(&self.port),
            value(&d.port),
        );
        key(
            "PEM certificate chain to serve https with, with tls_key; empty: plain http.",
            "tls_cert",
            value(&self.tls_cert),
            value(&d.tls_cert),
        );
        key(
            "PEM key of tls_cert.",
            "tls_key",
            value(&self.tls_key),
            value(&d.tls_key),
        );
        key(
            "Seconds a stream may go without traffic before it is closed; 0: never (--stream-idle-timeout).",
            "idle_timeout",
            value(&self.idle_timeout),
            value(&d.idle_timeout),
        );
        key(
            "Seconds a connection has for its TLS handshake, then for its request's head; then it is closed.",
            "header_timeout",
            value(&self.header_timeout),
            value(&d.header_timeout),
        );
        key(
            "HTTP connections served at once, before their upgrade; more wait in the listen backlog.",
            "max_connections",
            value(&self.max_connections),
            value(&d.max_connections),
        );
        key(
            "Sessions (exec, attach, port-forward) open at once; one more is refused with 503.",
            "max_sessions",
            value(&self.max_sessions),
            value(&d.max_sessions),
        );
        key(
            "Streams one session may have open at once (a port-forward connection takes 2); one more is \
             refused (SPDY: RST_STREAM REFUSED_STREAM; WebSocket: 400 for too many ports). At least 5.",
            "max_streams",
            value(&self.max_streams),
            value(&d.max_streams),
        );
        key(
            "Bytes of a client's data one session holds before the process or the port takes them; past it \
             criusd stops reading the client. At least 65536.",
            "session_buffer",
            value(&self.session_buffer),
            value(&d.session_buffer),
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limits_reach_the_server_and_are_checked() {
        let s = StreamSection::default();
        let c = s.server_config().unwrap();
        let d = crius_stream::server::Config::default();
        assert_eq!(
            (
                c.max_connections,
                c.max_sessions,
                c.max_streams,
                c.session_buffer,
                c.header_timeout
            ),
            (
                d.max_connections,
                d.max_sessions,
                d.max_streams,
                d.session_buffer,
                d.header_timeout
            )
        );
        let text = s.render(|v| v.toml());
        for key in [
            "header_timeout = 10",
            "max_connections = 256",
            "max_sessions = 128",
            "max_streams = 64",
        ] {
            assert!(text.contains(key), "{key}: {text}");
        }
        let bad = |f: fn(&mut StreamSection)| {
            let mut s = StreamSection::default();
            f(&mut s);
            s.server_config().unwrap_err()
        };
        assert!(bad(|s| s.max_streams = 4).contains("max_streams = 4: at least 5"));
        assert!(bad(|s| s.max_sessions = 0).contains("max_sessions"));
        assert!(bad(|s| s.max_connections = 0).contains("max_connections"));
        assert!(bad(|s| s.session_buffer = 1000).contains("session_buffer = 1000: at least 65536"));
        assert!(bad(|s| s.header_timeout = 0).contains("header_timeout"));
    }
}
