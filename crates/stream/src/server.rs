//! The streaming server: HTTP/1.1 on one address (TLS optional), `/exec/<token>`, `/attach/<token>` and
//! `/portforward/<token>`, each upgraded to SPDY/3.1 (`Upgrade: SPDY/3.1`, the protocol picked from
//! `X-Stream-Protocol-Version`) or WebSocket (picked from `Sec-WebSocket-Protocol`). A token is taken by its
//! first connection; an unknown, used or expired one is 404, as kubelet's server answers.
//!
//! Limits (see [`Config`]): `max_connections` HTTP connections at once, each with `header_timeout` for its TLS
//! handshake and for each request's head; `max_sessions` upgraded sessions at once (one
//! more is 503); `max_streams` streams per session (SPDY: refused with RST_STREAM; a WebSocket port-forward
//! asking for more ports is 400). A session's memory is bounded in bytes: frames and messages of at most
//! 64 KiB, and inbound data bounded per session (see `spdy::conn` and `ws`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::backend::{Backend, Request};
use crate::http::Slots;
use crate::idle::IdleIo;
use crate::spdy::conn::Config as SpdyConfig;
use crate::token::Tokens;
use crate::{Error, Result};
use crate::{portforward, spdy_serve, ws, ws_serve};

/// The header SPDY clients offer their protocols in.
pub const PROTOCOL_HEADER: &str = "x-stream-protocol-version";
/// SPDY's upgrade token.
pub const SPDY: &str = "SPDY/3.1";

/// How the server is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it listens (port 0: a free one).
    pub address: SocketAddr,
    /// A certificate chain and key (PEM) to serve https with.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// A stream with no traffic for this long is closed.
    pub idle_timeout: Duration,
    /// How long a token waits for its connection.
    pub token_lifetime: Duration,
    /// How long a SPDY client has to open the streams its request needs.
    pub stream_creation_timeout: Duration,
    /// HTTP connections served at once (before their upgrade); more wait in the listen backlog.
    pub max_connections: usize,
    /// How long a connection has for its TLS handshake, and then for its request's head.
    pub header_timeout: Duration,
    /// Upgraded sessions (exec, attach, port-forward) at once; one more is answered 503.
    pub max_sessions: usize,
    /// Streams one session may have open at once (SPDY streams; WebSocket port-forward: two per port).
    pub max_streams: usize,
    /// Bytes of a client's data one SPDY session holds before its consumers take it (the process's stdin, a
    /// port's connection); past it the session stops reading the client.
    pub session_buffer: usize,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            tls: None,
            idle_timeout: Duration::from_secs(4 * 3600),
            token_lifetime: crate::token::LIFETIME,
            stream_creation_timeout: Duration::from_secs(30),
            max_connections: 256,
            header_timeout: crate::http::HEADER_TIMEOUT,
            max_sessions: 128,
            max_streams: 64,
            session_buffer: 1024 * 1024,
        }
    }
}

/// A running streaming server.
pub struct Server {
    tokens: Arc<Tokens>,
    addr: SocketAddr,
    base: String,
    accept: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("base", &self.base).finish()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

struct State {
    tokens: Arc<Tokens>,
    backend: Arc<dyn Backend>,
    config: Config,
    sessions: Arc<Semaphore>,
}

impl State {
    /// A SPDY session's limits.
    fn spdy(&self) -> SpdyConfig {
        SpdyConfig {
            open_timeout: self.config.stream_creation_timeout,
            max_streams: self.config.max_streams,
            inbound_bytes: self.config.session_buffer,
            ..SpdyConfig::default()
        }
    }
}

impl Server {
    /// Binds `config.address` and serves `backend` there, on the current tokio runtime.
    pub async fn start(config: Config, backend: Arc<dyn Backend>) -> Result<Server> {
        let listener = TcpListener::bind(config.address)
            .await
            .map_err(Error::io(format!(
                "binding the streaming server to {}",
                config.address
            )))?;
        let addr = listener.local_addr().map_err(Error::io(format!(
            "binding the streaming server to {}",
            config.address
        )))?;
        let tls = match &config.tls {
            Some((cert, key)) => Some(crate::tls::acceptor(cert, key)?),
            None => None,
        };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let base = format!("{scheme}://{addr}");
        let tokens = Arc::new(Tokens::with_lifetime(config.token_lifetime));
        let slots = Slots::new(config.max_connections);
        let state = Arc::new(State {
            tokens: tokens.clone(),
            backend,
            sessions: Arc::new(Semaphore::new(
                config.max_sessions.clamp(1, Semaphore::MAX_PERMITS),
            )),
            config,
        });
        let accept = tokio::spawn(async move {
            loop {
                let (tcp, slot) = slots.accept(&listener).await;
                let _ = tcp.set_nodelay(true);
                let state = state.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let deadline = state.config.header_timeout;
                    match tls {
                        Some(tls) => match tokio::time::timeout(deadline, tls.accept(tcp)).await {
                            Ok(Ok(s)) => serve_connection(state, s).await,
                            Ok(Err(e)) => tracing::debug!("streaming TLS handshake: {e}"),
                            Err(_) => {
                                tracing::debug!("streaming TLS handshake: not done within {deadline:?}");
                            }
                        },
                        None => serve_connection(state, tcp).await,
                    }
                    // The slot is the HTTP connection's: an upgraded session holds one of `sessions` instead.
                    drop(slot);
                });
            }
        });
        Ok(Server {
            tokens,
            addr,
            base,
            accept,
        })
    }

    /// Keeps `req` behind a new token and returns its URL.
    pub fn url(&self, req: Request) -> Result<String> {
        let kind = match &req {
            Request::Exec(_) => "exec",
            Request::Attach(_) => "attach",
            Request::PortForward(_) => "portforward",
        };
        let token = self.tokens.insert(req)?;
        Ok(format!("{}/{kind}/{token}", self.base))
    }

    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

async fn serve_connection<S>(state: Arc<State>, io: S)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let deadline = state.config.header_timeout;
    let service = hyper::service::service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(handle(state, req)) }
    });
    // A kept-alive connection waiting for its next request is closed at the same deadline.
    let _ = crate::http::builder(deadline)
        .serve_connection(TokioIo::new(io), service)
        .with_upgrades()
        .await;
}

type Reply = Response<Full<Bytes>>;

fn reply(code: StatusCode, message: impl Into<String>) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(message.into() + "\n")));
    *r.status_mut() = code;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// 101 Switching Protocols to `upgrade`, naming the `chosen` protocol in `protocol_header`.
fn switching(upgrade: &'static str, protocol_header: HeaderName, chosen: &str) -> Reply {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static(upgrade));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(v) = HeaderValue::from_str(chosen) {
        h.insert(protocol_header, v);
    }
    r
}

/// The values of a header that may be repeated or comma-separated.
fn offered(headers: &HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect()
}

fn upgrade_to(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(header::UPGRADE)?.to_str().ok()?;
    Some(v.trim().to_ascii_lowercase())
}

fn handle(state: Arc<State>, mut req: hyper::Request<Incoming>) -> Reply {
    let path = req.uri().path().to_string();
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    let (kind, token) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if !matches!(kind, "exec" | "attach" | "portforward") || token.is_empty() || token.contains('/') {
        return reply(StatusCode::NOT_FOUND, format!("no such streaming path {path:?}"));
    }
    // Checked before the token is taken, so that a refused client may try again with it.
    let Ok(session) = state.sessions.clone().try_acquire_owned() else {
        return reply(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "the streaming server has {} sessions open, its limit ([stream] max_sessions); try again later",
                state.config.max_sessions
            ),
        );
    };
    let Some(kept) = state.tokens.take(token) else {
        return reply(
            StatusCode::NOT_FOUND,
            format!("streaming token {token:?} is unknown, used already, or expired"),
        );
    };
    let matches = matches!(
        (&kept, kind),
        (Request::Exec(_), "exec")
            | (Request::Attach(_), "attach")
            | (Request::PortForward(_), "portforward")
    );
    if !matches {
        return reply(
            StatusCode::BAD_REQUEST,
            format!("token {token:?} is not for {kind}"),
        );
    }
    let port_forward = kind == "portforward";
    match upgrade_to(req.headers()).as_deref() {
        Some("websocket") => {
            let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY).cloned() else {
                return reply(
                    StatusCode::BAD_REQUEST,
                    "a WebSocket upgrade without Sec-WebSocket-Key",
                );
            };
            let supported: &[&str] = if port_forward {
                &[crate::tunnel::PORT_FORWARD_TUNNEL, crate::protocol::PORT_FORWARD]
            } else {
                &[crate::protocol::V5, crate::protocol::V4]
            };
            let offers = offered(req.headers(), header::SEC_WEBSOCKET_PROTOCOL.as_str());
            let Some(chosen) = offers.iter().find(|o| supported.contains(&o.as_str())).cloned() else {
                return reply(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "none of the WebSocket protocols {offers:?} is supported; this server speaks {supported:?}"
                    ),
                );
            };
            let tunnel = chosen == crate::tunnel::PORT_FORWARD_TUNNEL;
            // The native WebSocket port-forward: ports from the query, else the PortForward request's.
            let ports = match (&kept, query_ports(req.uri().query().unwrap_or(""))) {
                (_, Ok(p)) => Ok(p),
                (Request::PortForward(pf), Err(e)) => {
                    let kept: Vec<u16> = pf.ports.iter().filter_map(|p| u16::try_from(*p).ok()).collect();
                    if kept.is_empty() { Err(e) } else { Ok(kept) }
                }
                (_, Err(e)) => Err(e),
            };
            if port_forward
                && !tunnel
                && let Err(e) = &ports
            {
                return reply(StatusCode::BAD_REQUEST, e.clone());
            }
            if let Ok(p) = &ports
                && port_forward
                && !tunnel
                && p.len().saturating_mul(2) > state.config.max_streams
            {
                return reply(
                    StatusCode::BAD_REQUEST,
                    format!(
                        "{} ports take {} streams, over the limit of {} per session ([stream] max_streams)",
                        p.len(),
                        p.len().saturating_mul(2),
                        state.config.max_streams
                    ),
                );
            }
            let upgrade = hyper::upgrade::on(&mut req);
            let st = state.clone();
            tokio::spawn(async move {
                let _session = session;
                let Ok(up) = upgrade.await else { return };
                let io = IdleIo::new(TokioIo::new(up), st.config.idle_timeout);
                let socket =
                    WebSocketStream::from_raw_socket(io, Role::Server, Some(ws::server_config())).await;
                if tunnel {
                    let io = crate::tunnel::Tunnel::new(socket);
                    spdy_serve::serve(io, kept, st.backend.clone(), st.spdy()).await;
                } else if port_forward {
                    portforward::over_ws(socket, kept, ports.unwrap_or_default(), st.backend.clone()).await;
                } else {
                    ws_serve::over_ws(socket, kept, st.backend.clone()).await;
                }
            });
            let mut r = switching("websocket", header::SEC_WEBSOCKET_PROTOCOL, &chosen);
            if let Ok(v) = HeaderValue::from_str(&derive_accept_key(key.as_bytes())) {
                r.headers_mut().insert(header::SEC_WEBSOCKET_ACCEPT, v);
            }
            r
        }
        Some(u) if u == SPDY.to_ascii_lowercase() => {
            let supported: &[&str] = if port_forward {
                &[crate::protocol::PORT_FORWARD]
            } else {
                &[crate::protocol::V5, crate::protocol::V4]
            };
            let offers = offered(req.headers(), PROTOCOL_HEADER);
            let Some(chosen) = offers.iter().find(|o| supported.contains(&o.as_str())).cloned() else {
                return reply(
                    StatusCode::FORBIDDEN,
                    format!(
                        "none of the stream protocols {offers:?} is supported; this server speaks {supported:?}"
                    ),
                );
            };
            let upgrade = hyper::upgrade::on(&mut req);
            let st = state.clone();
            tokio::spawn(async move {
                let _session = session;
                let Ok(up) = upgrade.await else { return };
                let io = IdleIo::new(TokioIo::new(up), st.config.idle_timeout);
                spdy_serve::serve(io, kept, st.backend.clone(), st.spdy()).await;
            });
            switching(SPDY, HeaderName::from_static(PROTOCOL_HEADER), &chosen)
        }
        _ => reply(
            StatusCode::BAD_REQUEST,
            format!("{path} needs an upgrade to SPDY/3.1 or websocket"),
        ),
    }
}

/// The `ports` query parameter of a WebSocket port-forward (`ports=80,8080`, possibly repeated).
fn query_ports(query: &str) -> Result<Vec<u16>, String> {
    let mut ports = Vec::new();
    for pair in query.split('&') {
        let Some(v) = pair.strip_prefix("ports=").or_else(|| pair.strip_prefix("port=")) else {
            continue;
        };
        for p in v.split("%2C").flat_map(|s| s.split(',')) {
            ports.push(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("port {p:?} is not a port number (1 to 65535)"))?,
            );
        }
    }
    if ports.is_empty() {
        return Err("a WebSocket port-forward needs port=PORT (or ports=PORT,...) in the query".into());
    }
    Ok(ports)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_the_query() {
        assert_eq!(query_ports("ports=80,8080").unwrap(), vec![80, 8080]);
        assert_eq!(
            query_ports("x=1&ports=80%2C81&ports=82").unwrap(),
            vec![80, 81, 82]
        );
        assert_eq!(query_ports("port=80&port=81").unwrap(), vec![80, 81]);
        assert!(query_ports("ports=0").is_err());
        assert!(query_ports("ports=http").is_err());
        assert!(query_ports("").is_err());
    }
}
