//! The client side, for `crius exec`, `attach` and `port-forward` and for the tests: the URL that Exec,
//! Attach or PortForward returned, over SPDY/3.1 or WebSocket, with local stdio.

use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

use crate::session::{CHUNK, Out};
use crate::status::{Outcome, Status};
use crate::ws;
use crate::{Error, Result};

/// A task that ends with its handle: a client dropped mid-session (a cancelled future) takes its
/// connection's tasks with it, so the server sees it gone.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The transports a client can speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// SPDY/3.1 (crictl's and kubelet's default).
    #[default]
    Spdy,
    /// WebSocket.
    WebSocket,
}

impl std::str::FromStr for Transport {
    type Err = Error;
    fn from_str(s: &str) -> Result<Transport> {
        match s {
            "spdy" => Ok(Transport::Spdy),
            "websocket" => Ok(Transport::WebSocket),
            _ => Err(Error::UnknownTransport(s.into())),
        }
    }
}

/// The local ends of a remote command.
#[derive(Default)]
pub struct Stdio {
    /// Sent to the process's stdin; its EOF closes the process's stdin.
    pub stdin: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// The process's stdout (with a terminal: the terminal's output).
    pub stdout: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// The process's stderr (not with a terminal).
    pub stderr: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// Terminal sizes (columns, rows) to send; Some also says the process has a terminal.
    pub resize: Option<mpsc::Receiver<(u16, u16)>>,
}

/// `host:port` and path of an `http://` URL.
pub(crate) fn split_url(url: &str) -> Result<(String, String)> {
    let rest = url.strip_prefix("http://").ok_or_else(|| Error::Url {
        url: url.into(),
        why: "only http:// URLs are supported by this client".into(),
    })?;
    let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if host.is_empty() {
        return Err(Error::Url {
            url: url.into(),
            why: "no host".into(),
        });
    }
    Ok((
        host.to_string(),
        if path.is_empty() { "/".into() } else { path.into() },
    ))
}

/// Runs the exec or attach behind `url`, copying `stdio`, and returns how it ended.
pub async fn remote_command(url: &str, transport: Transport, stdio: Stdio) -> Result<Outcome> {
    match transport {
        Transport::WebSocket => remote_command_ws(url, stdio).await,
        Transport::Spdy => crate::spdy_client::remote_command(url, stdio).await,
    }
}

/// Opens a WebSocket to `url` offering `protocols`; returns it and the protocol the server chose.
pub async fn connect_ws(
    url: &str,
    protocols: &str,
) -> Result<(tokio_tungstenite::WebSocketStream<TcpStream>, String)> {
    let (host, path) = split_url(url)?;
    let tcp = TcpStream::connect(&host)
        .await
        .map_err(Error::io(format!("connecting to {host}")))?;
    let _ = tcp.set_nodelay(true);
    let mut req = format!("ws://{host}{path}")
        .into_client_request()
        .map_err(|e| Error::Url {
            url: url.into(),
            why: e.to_string(),
        })?;
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        HeaderValue::from_str(protocols).map_err(|e| Error::Protocol(e.to_string()))?,
    );
    let mut cfg = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default();
    // What the server sends: up to 1 MiB (a SPDY tunnel's writes batch several frames).
    cfg.max_message_size = Some(1 << 20);
    let (socket, resp) = tokio_tungstenite::client_async_with_config(req, tcp, Some(cfg))
        .await
        .map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(r) => Error::Refused {
                url: url.into(),
                status: r.status().as_u16(),
                body: r
                    .body()
                    .as_ref()
                    .map(|b| String::from_utf8_lossy(b).trim().to_string())
                    .unwrap_or_default(),
            },
            e => Error::Protocol(format!("WebSocket to {url}: {e}")),
        })?;
    let chosen = resp
        .headers()
        .get("Sec-WebSocket-Protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok((socket, chosen))
}

async fn remote_command_ws(url: &str, stdio: Stdio) -> Result<Outcome> {
    let (socket, chosen) =
        connect_ws(url, &format!("{}, {}", crate::protocol::V5, crate::protocol::V4)).await?;
    let mut mux = ws::Mux::new(chosen == crate::protocol::V5);
    let stdout_in = mux.inbound(ws::STDOUT);
    let stderr_in = mux.inbound(ws::STDERR);
    let mut error_in = mux.inbound(ws::ERROR);
    let stdin_out: Out = Box::new(mux.outbound(ws::STDIN));
    let resize_out: Out = Box::new(mux.outbound(ws::RESIZE));
    let mut drive = AbortOnDrop(tokio::spawn(ws::drive(socket, mux)));
    let outcome = run_local(stdio, stdin_out, resize_out, stdout_in, stderr_in, async move {
        let mut status = Vec::new();
        while let Some(b) = error_in.recv().await {
            status.extend_from_slice(&b);
        }
        status
    })
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(5), &mut drive.0).await;
    Ok(outcome)
}

/// Copies between the local stdio and a session's channels until the server ended it; returns its status.
pub(crate) async fn run_local(
    stdio: Stdio,
    mut stdin_out: Out,
    mut resize_out: Out,
    stdout_in: mpsc::Receiver<Bytes>,
    stderr_in: mpsc::Receiver<Bytes>,
    status: impl Future<Output = Vec<u8>>,
) -> Outcome {
    let Stdio {
        stdin,
        stdout,
        stderr,
        resize,
    } = stdio;
    let input = AbortOnDrop(tokio::spawn(async move {
        if let Some(mut r) = stdin {
            loop {
                let mut buf = BytesMut::with_capacity(CHUNK);
                match r.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if stdin_out.send(buf.freeze()).await.is_err() {
                            return;
                        }
                    }
                }
            }
            stdin_out.close().await;
            // Keep the channel's sender until the session ends (dropping it could end the connection).
            std::future::pending::<()>().await;
        } else {
            std::future::pending::<()>().await;
        }
    }));
    let sizes = AbortOnDrop(tokio::spawn(async move {
        if let Some(mut rx) = resize {
            while let Some((w, h)) = rx.recv().await {
                let msg = format!(r#"{{"Width":{w},"Height":{h}}}"#);
                if resize_out.send(Bytes::from(msg)).await.is_err() {
                    return;
                }
            }
        }
        std::future::pending::<()>().await;
    }));
    let (_, _, status) = tokio::join!(copy_in(stdout_in, stdout), copy_in(stderr_in, stderr), status);
    drop((input, sizes));
    if status.is_empty() {
        return Outcome::Failed(
            "the streaming connection ended before the session did (did criusd restart?)".into(),
        );
    }
    Status::parse(&status)
}

async fn copy_in(mut from: mpsc::Receiver<Bytes>, to: Option<Pin<Box<dyn AsyncWrite + Send>>>) {
    let mut to = to;
    while let Some(b) = from.recv().await {
        if let Some(w) = to.as_mut()
            && (w.write_all(&b).await.is_err() || w.flush().await.is_err())
        {
            to = None;
        }
    }
}

/// Forwards `local` to `port` of the pod behind the PortForward `url`, until either side closes.
pub async fn port_forward(url: &str, transport: Transport, port: u16, local: TcpStream) -> Result<()> {
    match transport {
        Transport::WebSocket => port_forward_ws(url, port, local).await,
        Transport::Spdy => crate::spdy_client::port_forward(url, port, local).await,
    }
}

async fn port_forward_ws(url: &str, port: u16, local: TcpStream) -> Result<()> {
    let sep = if url.contains('?') { '&' } else { '?' };
    let (socket, _) = connect_ws(&format!("{url}{sep}ports={port}"), crate::protocol::PORT_FORWARD).await?;
    let mut mux = ws::Mux::new(false);
    let mut data_in = mux.inbound(0);
    let mut error_in = mux.inbound(1);
    let data_out: Out = Box::new(mux.outbound(0));
    let drive = AbortOnDrop(tokio::spawn(ws::drive(socket, mux)));
    // Each channel starts with its port, two bytes little endian.
    let first = data_in.recv().await;
    if first.as_deref() != Some(&port.to_le_bytes()[..]) {
        let mut why = String::new();
        while let Some(b) = error_in.recv().await {
            why.push_str(&String::from_utf8_lossy(&b));
        }
        drop(drive);
        return Err(Error::Protocol(if why.is_empty() {
            format!("port {port}: the server did not start the data channel")
        } else {
            why
        }));
    }
    // The error channel's first message is its port too; anything after it is why the pair failed, and
    // ends the forward.
    let errors = async move {
        let mut first = true;
        while let Some(b) = error_in.recv().await {
            if std::mem::take(&mut first) && b.len() == 2 {
                continue;
            }
            return String::from_utf8_lossy(&b).into_owned();
        }
        std::future::pending().await
    };
    let (r, w) = local.into_split();
    // Errors first: the server sends why before it closes the data channel.
    let result = tokio::select! {
        biased;
        why = errors => Err(Error::Protocol(why)),
        () = crate::portforward::pipe_local(r, w, data_in, data_out) => Ok(()),
    };
    drop(drive);
    result
}
