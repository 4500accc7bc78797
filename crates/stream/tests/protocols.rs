//! The streaming server against its own client, on both transports, with a backend of local processes.

#[allow(dead_code)]
mod local;

use local::{exec, read_all, server, stdio};

use std::sync::Arc;
use std::time::Duration;

use crius_stream::Request;
use crius_stream::client::{self, Transport};
use crius_stream::server::{Config, Server};
use crius_stream::status::Outcome;
use tokio::io::AsyncWriteExt;

async fn run(t: Transport, req: Request, stdin: Option<&'static [u8]>) -> (Outcome, String, String) {
    let (s, _) = server().await;
    let url = s.url(req).unwrap();
    let (io, cap) = stdio(stdin);
    let outcome = tokio::time::timeout(Duration::from_secs(20), client::remote_command(&url, t, io))
        .await
        .expect("the session ends")
        .unwrap();
    (outcome, read_all(cap.out).await, read_all(cap.err).await)
}

async fn echo(t: Transport) {
    let (o, out, err) = run(t, exec(&["sh", "-c", "echo hello; echo oops >&2"], false), None).await;
    assert_eq!(o, Outcome::Success);
    assert_eq!(out, "hello\n");
    assert_eq!(err, "oops\n");
}

async fn stdin_then_eof(t: Transport) {
    let (o, out, _) = run(t, exec(&["cat"], true), Some(b"one\ntwo\n")).await;
    assert_eq!(o, Outcome::Success, "cat ends at stdin's EOF");
    assert_eq!(out, "one\ntwo\n");
}

async fn exit_code(t: Transport) {
    let (o, _, _) = run(t, exec(&["sh", "-c", "exit 7"], false), None).await;
    assert_eq!(o, Outcome::Exit(7));
}

async fn unknown_container(t: Transport) {
    let mut req = exec(&["true"], false);
    if let Request::Exec(r) = &mut req {
        r.container_id = "nope".into();
    }
    let (o, _, _) = run(t, req, None).await;
    assert!(matches!(&o, Outcome::Failed(m) if m.contains("nope")), "{o:?}");
}

async fn token_used_once(t: Transport) {
    let (s, _) = server().await;
    let url = s.url(exec(&["true"], false)).unwrap();
    let (io, _cap) = stdio(None);
    assert_eq!(
        client::remote_command(&url, t, io).await.unwrap(),
        Outcome::Success
    );
    let (io, _cap) = stdio(None);
    let e = client::remote_command(&url, t, io).await.unwrap_err();
    assert!(
        matches!(&e, crius_stream::Error::Refused { status: 404, body, .. } if body.contains("unknown, used already, or expired")),
        "{e}"
    );
}

async fn big_output(t: Transport) {
    let (o, out, _) = run(
        t,
        exec(&["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x"], false),
        None,
    )
    .await;
    assert_eq!(o, Outcome::Success);
    assert_eq!(out.len(), 3_000_000);
}

async fn port_forward_echo(t: Transport) {
    use tokio::io::AsyncReadExt;
    // An echo server standing for the pod's port.
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = echo.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let (s, _) = server().await;
    let mut clients = Vec::new();
    for i in 0..3 {
        let url = s
            .url(Request::PortForward(crius_stream::PortForwardRequest {
                sandbox_id: "p".into(),
                ports: vec![],
            }))
            .unwrap();
        let local = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = local.local_addr().unwrap();
        let fwd = tokio::spawn(async move {
            let (conn, _) = local.accept().await.unwrap();
            client::port_forward(&url, t, port, conn).await
        });
        clients.push(tokio::spawn(async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            let msg = format!("ping {i}");
            c.write_all(msg.as_bytes()).await.unwrap();
            let mut buf = vec![0u8; msg.len()];
            c.read_exact(&mut buf).await.unwrap();
            assert_eq!(String::from_utf8(buf).unwrap(), msg);
            drop(c);
            let _ = tokio::time::timeout(Duration::from_secs(5), fwd).await;
        }));
    }
    for c in clients {
        tokio::time::timeout(Duration::from_secs(10), c)
            .await
            .unwrap()
            .unwrap();
    }
    // A port nothing listens on: the protocol's error, naming the port.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = closed.local_addr().unwrap().port();
    drop(closed);
    let url = s
        .url(Request::PortForward(crius_stream::PortForwardRequest {
            sandbox_id: "p".into(),
            ports: vec![],
        }))
        .unwrap();
    let local = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = local.local_addr().unwrap();
    let fwd = tokio::spawn(async move {
        let (conn, _) = local.accept().await.unwrap();
        client::port_forward(&url, t, dead, conn).await
    });
    let _c = tokio::net::TcpStream::connect(addr).await.unwrap();
    let e = tokio::time::timeout(Duration::from_secs(10), fwd)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert!(
        e.to_string().contains(&format!("error forwarding port {dead}")),
        "{e}"
    );
}

macro_rules! both {
    ($($name:ident),*) => {
        mod websocket {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Transport::WebSocket).await })*
        }
        mod spdy {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Transport::Spdy).await })*
        }
    };
}

both!(
    echo,
    stdin_then_eof,
    exit_code,
    unknown_container,
    token_used_once,
    big_output,
    port_forward_echo
);

#[tokio::test]
async fn expired_tokens_are_refused() {
    let backend = Arc::new(local::Local::default());
    let cfg = Config {
        token_lifetime: Duration::from_millis(50),
        ..Config::default()
    };
    let s = Server::start(cfg, backend).await.unwrap();
    let url = s.url(exec(&["true"], false)).unwrap();
    tokio::time::sleep(Duration::from_millis(80)).await;
    let (io, _cap) = stdio(None);
    let e = client::remote_command(&url, Transport::WebSocket, io)
        .await
        .unwrap_err();
    assert!(
        matches!(e, crius_stream::Error::Refused { status: 404, .. }),
        "{e}"
    );
    let _ = tokio::io::sink().shutdown().await;
}

/// Several ports on one SPDY port-forward connection, as client-go opens them: a pair whose port refuses
/// gets the protocol's error on its error stream, and the other pairs, then and after, are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spdy_port_forward_serves_other_pairs_after_a_refused_one() {
    use crius_stream::spdy::conn::{Connection, Role};
    use crius_stream::spdy::frame::Headers;
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let live = echo.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = c.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = closed.local_addr().unwrap().port();
    drop(closed);
    let (s, _) = server().await;
    let url = s
        .url(Request::PortForward(crius_stream::PortForwardRequest {
            sandbox_id: "p".into(),
            ports: vec![],
        }))
        .unwrap();
    let (tcp, chosen) = crius_stream::spdy_client::upgrade(&url, &["portforward.k8s.io"])
        .await
        .unwrap();
    assert_eq!(chosen, "portforward.k8s.io");
    let (conn, _incoming) = Connection::new(tcp, Role::Client);
    let pair = |kind: &str, port: u16, id: u32| {
        let mut h = Headers::new();
        h.insert("streamtype", kind);
        h.insert("port", port.to_string());
        h.insert("requestid", id.to_string());
        h
    };
    let open_pair = |port: u16, id: u32| {
        let conn = conn.clone();
        async move {
            let error = conn.open(pair("error", port, id)).await.unwrap();
            let data = conn.open(pair("data", port, id)).await.unwrap();
            (error.split(), data.split())
        }
    };
    let ((_, mut err_in), _) = open_pair(dead, 0).await;
    let mut why = Vec::new();
    while let Some(b) = tokio::time::timeout(Duration::from_secs(5), err_in.recv())
        .await
        .unwrap()
    {
        why.extend_from_slice(&b);
    }
    let why = String::from_utf8(why).unwrap();
    assert!(
        why.starts_with(&format!("error forwarding port {dead} to pod p, uid : ")),
        "{why}"
    );
    for id in [1, 2] {
        let (_, (mut out, mut back)) = open_pair(live, id).await;
        out.send(bytes::Bytes::from(format!("ping {id}"))).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), back.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(got, format!("ping {id}").as_bytes());
    }
    conn.close();
}
