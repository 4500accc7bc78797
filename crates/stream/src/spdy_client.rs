//! The client side of remote command and port-forward over SPDY/3.1: an HTTP/1.1 upgrade, then one stream
//! per channel (remote command) or an error and a data stream (port-forward), as client-go opens them.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client::{Stdio, run_local, split_url};
use crate::protocol::{PORT_FORWARD, V4, V5};
use crate::session::Out;
use crate::spdy::conn::{Connection, Role, Stream};
use crate::spdy::frame::Headers;
use crate::spdy_serve::{Discard, PORT, REQUEST_ID, STREAM_TYPE, SpdyOut, queue};
use crate::status::Outcome;
use crate::{Error, Result};

/// Largest response head read before the upgrade.
const MAX_HEAD: usize = 16 * 1024;

/// Connects to `url` and upgrades to SPDY/3.1 offering `protocols`; the connection and the chosen protocol.
pub async fn upgrade(url: &str, protocols: &[&str]) -> Result<(TcpStream, String)> {
    let (host, path) = split_url(url)?;
    let mut tcp = TcpStream::connect(&host)
        .await
        .map_err(Error::io(format!("connecting to {host}")))?;
    let _ = tcp.set_nodelay(true);
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nContent-Length: 0\r\n"
    );
    for p in protocols {
        req += &format!("X-Stream-Protocol-Version: {p}\r\n");
    }
    req += "\r\n";
    let io_err = |source| Error::Io {
        context: format!("upgrading {url}"),
        source,
    };
    tcp.write_all(req.as_bytes()).await.map_err(io_err)?;
    // The head, byte by byte: nothing after it may be read here (it is the SPDY session's).
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > MAX_HEAD {
            return Err(Error::Protocol(format!(
                "{url}: the response head is over {MAX_HEAD} bytes"
            )));
        }
        let b = tcp.read_u8().await.map_err(io_err)?;
        head.push(b);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| Error::Protocol(format!("{url}: not an HTTP response: {head:?}")))?;
    let header = |name: &str| {
        head.split("\r\n")
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    if status != 101 {
        let len: usize = header("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0)
            .min(MAX_HEAD);
        let mut body = vec![0u8; len];
        let _ = tcp.read_exact(&mut body).await;
        return Err(Error::Refused {
            url: url.into(),
            status,
            body: String::from_utf8_lossy(&body).trim().to_string(),
        });
    }
    Ok((tcp, header("x-stream-protocol-version").unwrap_or_default()))
}

fn headers(pairs: &[(&str, &str)]) -> Headers {
    let mut h = Headers::new();
    for (k, v) in pairs {
        h.insert(*k, *v);
    }
    h
}

async fn open(conn: &Connection, pairs: &[(&str, &str)]) -> Result<Stream> {
    conn.open(headers(pairs))
        .await
        .map_err(|e| Error::Protocol(format!("opening a {:?} stream: {e}", pairs[0].1)))
}

/// Runs the remote command behind `url` over SPDY.
pub async fn remote_command(url: &str, stdio: Stdio) -> Result<Outcome> {
    let (tcp, _) = upgrade(url, &[V5, V4]).await?;
    let (conn, _incoming) = Connection::new(tcp, Role::Client);
    let tty = stdio.resize.is_some();
    let (_, mut error) = open(&conn, &[(STREAM_TYPE, "error")]).await?.split();
    let stdin: Out = match stdio.stdin.is_some() {
        true => Box::new(SpdyOut(Some(
            open(&conn, &[(STREAM_TYPE, "stdin")]).await?.split().0,
        ))),
        false => Box::new(Discard),
    };
    let (_, stdout) = open(&conn, &[(STREAM_TYPE, "stdout")]).await?.split();
    let stderr = match tty {
        false => Some(open(&conn, &[(STREAM_TYPE, "stderr")]).await?.split().1),
        true => None,
    };
    let resize: Out = match tty {
        true => Box::new(SpdyOut(Some(
            open(&conn, &[(STREAM_TYPE, "resize")]).await?.split().0,
        ))),
        false => Box::new(Discard),
    };
    let stderr_q = match stderr {
        Some(r) => queue(r),
        None => tokio::sync::mpsc::channel(1).1,
    };
    let outcome = run_local(stdio, stdin, resize, queue(stdout), stderr_q, async move {
        let mut status = Vec::new();
        while let Some(b) = error.recv().await {
            status.extend_from_slice(&b);
        }
        status
    })
    .await;
    conn.close();
    Ok(outcome)
}

/// Forwards `local` to `port` of the pod behind `url` over SPDY, until either side closes.
pub async fn port_forward(url: &str, port: u16, local: TcpStream) -> Result<()> {
    let (tcp, chosen) = upgrade(url, &[PORT_FORWARD]).await?;
    if chosen != PORT_FORWARD {
        return Err(Error::Protocol(format!(
            "{url}: the server chose protocol {chosen:?}"
        )));
    }
    let (conn, _incoming) = Connection::new(tcp, Role::Client);
    let p = port.to_string();
    let pair = |kind| [(STREAM_TYPE, kind), (PORT, p.as_str()), (REQUEST_ID, "0")];
    let (err_send, mut err_recv) = open(&conn, &pair("error")).await?.split();
    // The client says nothing on the error stream.
    err_send.finish();
    let (data_out, data_in) = open(&conn, &pair("data")).await?.split();
    let errors = async move {
        let mut why = Vec::new();
        while let Some(b) = err_recv.recv().await {
            why.extend_from_slice(&b);
        }
        if why.is_empty() {
            std::future::pending::<String>().await
        } else {
            String::from_utf8_lossy(&why).into_owned()
        }
    };
    let (r, w) = local.into_split();
    let result = tokio::select! {
        biased;
        why = errors => Err(Error::Protocol(why)),
        () = crate::portforward::pipe_local(r, w, queue(data_in), Box::new(SpdyOut(Some(data_out)))) => Ok(()),
    };
    conn.close();
    result
}
