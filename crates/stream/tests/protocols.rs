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

async fn port_forward_echo(_t: Transport) {}

macro_rules! both {
    ($($name:ident),*) => {
        mod websocket {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Transport::WebSocket).await })*
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
