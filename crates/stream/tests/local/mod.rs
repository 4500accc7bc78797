//! A backend of local processes, for the protocol tests: exec runs the command on this host with pipes;
//! connect reaches 127.0.0.1.

use std::process::Stdio;
use std::sync::{Arc, Mutex};

use crius_stream::backend::{Control, Result};
use crius_stream::{AttachRequest, Backend, ErrorKind, ExecRequest, Failure, Process};
use futures::future::BoxFuture;
use std::time::Duration;

use crius_stream::Request;
use crius_stream::client::Stdio as ClientStdio;
use crius_stream::server::{Config, Server};

/// Runs execs as local processes.
#[derive(Default)]
pub struct Local {
    /// Pids of the processes started, to check they are gone.
    pub pids: Mutex<Vec<u32>>,
}

struct Child(Arc<tokio::sync::Mutex<tokio::process::Child>>);

impl Control for Child {
    fn resize(&self, _: u16, _: u16) -> BoxFuture<'static, Result<()>> {
        Box::pin(async { Ok(()) })
    }
    fn wait(&self) -> BoxFuture<'static, Result<i32>> {
        let c = self.0.clone();
        Box::pin(async move {
            let st = c
                .lock()
                .await
                .wait()
                .await
                .map_err(|e| Failure::new(ErrorKind::Internal, e.to_string()))?;
            Ok(st.code().unwrap_or(137))
        })
    }
    fn finish(&self, gone: bool) -> BoxFuture<'static, ()> {
        let c = self.0.clone();
        Box::pin(async move {
            if gone {
                let mut c = c.lock().await;
                let _ = c.kill().await;
            }
        })
    }
}

impl Backend for Local {
    fn exec(&self, req: ExecRequest) -> BoxFuture<'static, Result<Process>> {
        let spawned = (|| {
            if req.container_id != "c1" {
                return Err(Failure::new(
                    ErrorKind::NotFound,
                    format!("no container {:?}", req.container_id),
                ));
            }
            let mut cmd = tokio::process::Command::new(&req.cmd[0]);
            cmd.args(&req.cmd[1..])
                .stdin(if req.stdin { Stdio::piped() } else { Stdio::null() })
                .stdout(if req.stdout { Stdio::piped() } else { Stdio::null() })
                .stderr(if req.stderr { Stdio::piped() } else { Stdio::null() })
                .kill_on_drop(true);
            cmd.spawn()
                .map_err(|e| Failure::new(ErrorKind::Internal, format!("{:?}: {e}", req.cmd)))
        })();
        let child = match spawned {
            Ok(c) => c,
            Err(e) => return Box::pin(async move { Err(e) }),
        };
        self.pids.lock().unwrap().extend(child.id());
        let mut child = child;
        let stdin = child.stdin.take().map(|s| Box::pin(s) as _);
        let stdout = child.stdout.take().map(|s| Box::pin(s) as _);
        let stderr = child.stderr.take().map(|s| Box::pin(s) as _);
        let control = Box::new(Child(Arc::new(tokio::sync::Mutex::new(child))));
        Box::pin(async move {
            Ok(Process {
                stdin,
                stdout,
                stderr,
                control,
            })
        })
    }

    fn attach(&self, req: AttachRequest) -> BoxFuture<'static, Result<Process>> {
        Box::pin(async move {
            Err(Failure::new(
                ErrorKind::FailedPrecondition,
                format!("container {:?} cannot be attached to here", req.container_id),
            ))
        })
    }

    fn connect(&self, _: String, port: u16) -> BoxFuture<'static, Result<tokio::net::TcpStream>> {
        Box::pin(async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .map_err(|e| Failure::new(ErrorKind::Internal, format!("connecting to port {port}: {e}")))
        })
    }
}

pub fn exec(cmd: &[&str], stdin: bool) -> Request {
    Request::Exec(ExecRequest {
        container_id: "c1".into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        tty: false,
        stdin,
        stdout: true,
        stderr: true,
        size: None,
    })
}

pub async fn server() -> (Server, Arc<Local>) {
    let backend = Arc::new(Local::default());
    let s = Server::start(Config::default(), backend.clone()).await.unwrap();
    (s, backend)
}

pub struct Captured {
    pub out: tokio::io::DuplexStream,
    pub err: tokio::io::DuplexStream,
}

pub fn stdio(stdin: Option<&'static [u8]>) -> (ClientStdio, Captured) {
    let (out_w, out) = tokio::io::duplex(8 << 20);
    let (err_w, err) = tokio::io::duplex(8 << 20);
    let io = ClientStdio {
        stdin: stdin.map(|b| Box::pin(b) as _),
        stdout: Some(Box::pin(out_w)),
        stderr: Some(Box::pin(err_w)),
        resize: None,
    };
    (io, Captured { out, err })
}

pub async fn read_all(mut r: tokio::io::DuplexStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut s = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), r.read_to_string(&mut s)).await;
    s
}
