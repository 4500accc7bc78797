//! The streaming server against its own client, on both transports, with a backend of local processes.

mod local;

use std::sync::Arc;
use std::time::Duration;

use crius_stream::client::{self, Stdio, Transport};
use crius_stream::server::{Config, Server};
use crius_stream::status::Outcome;
use crius_stream::{ExecRequest, Request};
use tokio::io::AsyncWriteExt;

fn exec(cmd: &[&str], stdin: bool) -> Request {
    Request::Exec(ExecRequest {
        container_id: "c1".into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty: false,
        stdin,
        stdout: true,
        stderr: true,
    })
}

async fn server() -> (Server, Arc<local::Local>) {
    let backend = Arc::new(local::Local::default());
    let s = Server::start(Config::default(), backend.clone()).await.unwrap();
    (s, backend)
}

struct Captured {
    out: tokio::io::DuplexStream,
    err: tokio::io::DuplexStream,
}

fn stdio(stdin: Option<&'static [u8]>) -> (Stdio, Captured) {
    let (out_w, out) = tokio::io::duplex(8 << 20);
    let (err_w, err) = tokio::io::duplex(8 << 20);
    let io = Stdio {
        stdin: stdin.map(|b| Box::pin(b) as _),
        stdout: Some(Box::pin(out_w)),
        stderr: Some(Box::pin(err_w)),
        resize: None,
    };
    (io, Captured { out, err })
}

async fn read_all(mut r: tokio::io::DuplexStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut s = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), r.read_to_string(&mut s)).await;
    s
}

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
        matches!(&e, client::ClientError::Refused { status: 404, body, .. } if body.contains("unknown, used already, or expired")),
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
        tokio::time::timeout(Duration::from_secs(10), c).await.unwrap().unwrap();
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
    let e = tokio::time::timeout(Duration::from_secs(10), fwd).await.unwrap().unwrap().unwrap_err();
    assert!(e.to_string().contains(&format!("error forwarding port {dead}")), "{e}");
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
        matches!(e, client::ClientError::Refused { status: 404, .. }),
        "{e}"
    );
    let _ = tokio::io::sink().shutdown().await;
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

fn fd_count() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.contains(") Z "))
        .unwrap_or(false)
}

/// Bad input, one server for all of it: each case ends with a clear error, leaves no process, and the server
/// keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_clients_leave_nothing_and_the_server_keeps_serving() {
    use tokio::io::AsyncReadExt;
    let (s, backend) = server().await;
    let base = s.local_addr();
    let echo_ok = || async {
        let url = s.url(exec(&["echo", "ok"], false)).unwrap();
        let (io, cap) = stdio(None);
        assert_eq!(client::remote_command(&url, Transport::Spdy, io).await.unwrap(), Outcome::Success);
        assert_eq!(read_all(cap.out).await, "ok\n");
    };
    echo_ok().await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let fds = fd_count();

    // A malformed SPDY frame after the upgrade: the session ends, its process with it.
    for (transport, upgrade) in [
        ("SPDY", "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"),
        (
            "WebSocket",
            "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n",
        ),
    ] {
        let url = s.url(exec(&["sleep", "30"], true)).unwrap();
        let path = url.split_once(&base.to_string()).unwrap().1.to_string();
        let mut tcp = tokio::net::TcpStream::connect(base).await.unwrap();
        let req = format!("GET {path} HTTP/1.1\r\nHost: {base}\r\nConnection: Upgrade\r\n{upgrade}\r\n");
        tcp.write_all(req.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).await.unwrap();
        assert!(head.starts_with(b"HTTP/1.1 101"), "{transport}: {:?}", String::from_utf8_lossy(&head));
        tokio::time::sleep(Duration::from_millis(100)).await;
        // Garbage: a control frame of version 9 for SPDY; reserved bits and an unmasked frame for WebSocket.
        tcp.write_all(&[0x80, 0x09, 0x00, 0x01, 0x00, 0x00, 0x00, 0x04, 1, 2, 3, 4, 0xff, 0xff, 0xff])
            .await
            .unwrap();
        let mut rest = Vec::new();
        let r = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest)).await;
        assert!(r.is_ok(), "{transport}: the server closes the connection");
    }
    // A client that goes away mid-stream: its process is killed.
    let url = s.url(exec(&["sleep", "30"], false)).unwrap();
    let (io, _cap) = stdio(None);
    let session = tokio::spawn(async move { client::remote_command(&url, Transport::WebSocket, io).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    session.abort();
    // A client that never reads: the server's memory stays bounded while the process is held up.
    let before = rss_kib();
    let url = s.url(exec(&["head", "-c", "200000000", "/dev/zero"], false)).unwrap();
    let (io, cap) = stdio(None);
    let stuck = tokio::spawn(async move { client::remote_command(&url, Transport::Spdy, io).await });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 64 * 1024, "RSS grew by {grown} KiB under a client that never reads");
    stuck.abort();
    drop(cap);
    // Every process started is gone, and the fds are back.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left: Vec<u32> = backend.pids.lock().unwrap().iter().copied().filter(|p| alive(*p)).collect();
        if left.is_empty() {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "processes left: {left:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fd_count() <= fds + 2, "fds: {fds} before, {} after", fd_count());
    echo_ok().await;
}

/// 50 sessions at once, on both transports: all of them right, nothing left after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_concurrent_sessions() {
    let (s, _) = server().await;
    let tasks_before = tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let fds = fd_count();
    let mut all = Vec::new();
    for i in 0..50 {
        let t = if i % 2 == 0 { Transport::Spdy } else { Transport::WebSocket };
        let url = s.url(exec(&["sh", "-c", &format!("sleep 0.5; echo {i}")], false)).unwrap();
        all.push(tokio::spawn(async move {
            let (io, cap) = stdio(None);
            let o = client::remote_command(&url, t, io).await.unwrap();
            (o, read_all(cap.out).await, i)
        }));
    }
    for a in all {
        let (o, out, i) = tokio::time::timeout(Duration::from_secs(30), a).await.unwrap().unwrap();
        assert_eq!((o, out), (Outcome::Success, format!("{i}\n")));
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let tasks_after = tokio::runtime::Handle::current().metrics().num_alive_tasks();
    assert!(tasks_after <= tasks_before, "tasks: {tasks_before} before, {tasks_after} after");
    assert!(fd_count() <= fds, "fds: {fds} before, {} after", fd_count());
}
