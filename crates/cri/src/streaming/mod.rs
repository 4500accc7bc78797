//! The streaming server's backend ([`crius_stream::Backend`]) over this runtime: execs and attaches through
//! the pods' shims ([`crate::container::stream`]), port-forward into the pod's network namespace.
//!
//! A session lives in criusd: when criusd restarts, its exec and attach sessions end (the containers keep
//! running, an exec's process is ended by its shim's delete at the next cleanup).

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use crius_stream::backend::{Control, Result as StreamResult};
use crius_stream::{AttachRequest, Backend, ErrorKind, ExecRequest, Process};
use futures::future::BoxFuture;
use tokio::net::unix::pipe;

use crate::container::Containers;
use crate::error::Error;
use crate::grpc::waiting::Waiting;
use crate::node::Node;

mod connect;
mod follow;

use connect::Connects;
use follow::follow;

/// The backend; cheap to clone.
#[derive(Clone)]
pub struct Streaming {
    runtime: Arc<Node>,
    connects: Connects,
    /// The places of exec sessions' waits for their processes (shared with the RuntimeService's waits).
    waiting: Waiting,
}

impl Streaming {
    /// A backend over `runtime`.
    pub fn new(runtime: Arc<Node>) -> Streaming {
        Streaming {
            runtime,
            connects: Connects::new(),
            waiting: Waiting::default(),
        }
    }

    /// Exec sessions wait for their processes in places from `waiting`.
    pub fn with_waiting(self, waiting: Waiting) -> Streaming {
        Streaming { waiting, ..self }
    }
}

/// The streaming server's view of an error.
pub fn stream_error(e: Error) -> crius_stream::Failure {
    let status = tonic::Status::from(e);
    let kind = match status.code() {
        tonic::Code::NotFound => ErrorKind::NotFound,
        tonic::Code::FailedPrecondition => ErrorKind::FailedPrecondition,
        tonic::Code::InvalidArgument => ErrorKind::InvalidArgument,
        _ => ErrorKind::Internal,
    };
    crius_stream::Failure::new(kind, status.message())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> StreamResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(stream_error),
        Err(e) => Err(crius_stream::Failure::new(
            ErrorKind::Internal,
            format!("a streaming task failed: {e}"),
        )),
    }
}

fn receiver(f: Option<File>) -> StreamResult<Option<crius_stream::backend::Output>> {
    f.map(|f| {
        pipe::Receiver::from_file(f)
            .map(|r| Box::pin(r) as crius_stream::backend::Output)
            .map_err(|e| crius_stream::Failure::new(ErrorKind::Internal, format!("a stream's FIFO: {e}")))
    })
    .transpose()
}

fn sender(f: Option<File>) -> StreamResult<Option<crius_stream::backend::Input>> {
    f.map(|f| {
        pipe::Sender::from_file(f)
            .map(|w| Box::pin(w) as crius_stream::backend::Input)
            .map_err(|e| crius_stream::Failure::new(ErrorKind::Internal, format!("a stream's FIFO: {e}")))
    })
    .transpose()
}

struct ExecControl {
    containers: Arc<Containers>,
    waiting: Waiting,
    sandbox: String,
    id: String,
    exec_id: String,
    dir: PathBuf,
}

impl Control for ExecControl {
    fn resize(&self, width: u16, height: u16) -> BoxFuture<'static, StreamResult<()>> {
        let (c, s, id, e) = (
            self.containers.clone(),
            self.sandbox.clone(),
            self.id.clone(),
            self.exec_id.clone(),
        );
        Box::pin(blocking(move || c.resize(&s, &id, &e, width, height)))
    }

    fn wait(&self) -> BoxFuture<'static, StreamResult<i32>> {
        let (c, s, id, e) = (
            self.containers.clone(),
            self.sandbox.clone(),
            self.id.clone(),
            self.exec_id.clone(),
        );
        // As long as the session: on a thread of its own, not in the blocking pool other calls need.
        let waiting = self.waiting.clone();
        Box::pin(async move {
            waiting
                .own_thread("exec-wait", move || c.wait_stream(&s, &id, &e))
                .await
                .map_err(|why| {
                    crius_stream::Failure::new(ErrorKind::Internal, format!("an exec's wait: {why}"))
                })?
                .map_err(stream_error)
        })
    }

    fn finish(&self, client_gone: bool) -> BoxFuture<'static, ()> {
        let (c, s, id, e) = (
            self.containers.clone(),
            self.sandbox.clone(),
            self.id.clone(),
            self.exec_id.clone(),
        );
        let dir = self.dir.clone();
        Box::pin(async move {
            let _ = blocking(move || {
                c.end_exec(&s, &id, &e, &dir, client_gone);
                Ok(())
            })
            .await;
        })
    }
}

struct AttachControl {
    containers: Arc<Containers>,
    sandbox: String,
    id: String,
    close_stdin: bool,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Control for AttachControl {
    fn resize(&self, width: u16, height: u16) -> BoxFuture<'static, StreamResult<()>> {
        let (c, s, id) = (self.containers.clone(), self.sandbox.clone(), self.id.clone());
        Box::pin(blocking(move || c.resize(&s, &id, "", width, height)))
    }

    fn wait(&self) -> BoxFuture<'static, StreamResult<i32>> {
        let (c, id) = (self.containers.clone(), self.id.clone());
        let stop = self.stop.clone();
        Box::pin(async move {
            let r = c.wait_exit(&id).await.map_err(stream_error);
            // The container ended: the log is followed to its end, then the output ends.
            let _ = stop.send(true);
            r
        })
    }

    fn finish(&self, _client_gone: bool) -> BoxFuture<'static, ()> {
        let (c, s, id, close) = (
            self.containers.clone(),
            self.sandbox.clone(),
            self.id.clone(),
            self.close_stdin,
        );
        let _ = self.stop.send(true);
        Box::pin(async move {
            let _ = blocking(move || {
                c.end_attach(&s, &id, close);
                Ok(())
            })
            .await;
        })
    }
}

impl Backend for Streaming {
    fn exec(&self, req: ExecRequest) -> BoxFuture<'static, StreamResult<Process>> {
        let containers = self.runtime.containers.clone();
        let waiting = self.waiting.clone();
        Box::pin(async move {
            let c = containers.clone();
            let started = blocking(move || {
                c.exec_stream(
                    &req.container_id,
                    &req.cmd,
                    req.tty,
                    req.size,
                    [req.stdin, req.stdout, req.stderr],
                )
            })
            .await?;
            let control = Box::new(ExecControl {
                containers,
                waiting,
                sandbox: started.sandbox,
                id: started.id,
                exec_id: started.exec_id,
                dir: started.dir,
            });
            let ends = (|| {
                Ok((
                    sender(started.stdin)?,
                    receiver(started.stdout)?,
                    receiver(started.stderr)?,
                ))
            })();
            match ends {
                Ok((stdin, stdout, stderr)) => Ok(Process {
                    stdin,
                    stdout,
                    stderr,
                    control,
                }),
                Err(e) => {
                    // The exec runs: it goes, not left without its session.
                    control.finish(true).await;
                    Err(e)
                }
            }
        })
    }

    fn attach(&self, req: AttachRequest) -> BoxFuture<'static, StreamResult<Process>> {
        let containers = self.runtime.containers.clone();
        Box::pin(async move {
            let c = containers.clone();
            let (stdout, stderr) = (req.stdout, req.stderr);
            let a = blocking(move || c.attach_stream(&req.container_id, req.stdin, stdout, stderr)).await?;
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let (out, err) = match &a.log {
                Some(log) => {
                    let (out_w, out_r) = tokio::io::duplex(64 * 1024);
                    let (err_w, err_r) = tokio::io::duplex(64 * 1024);
                    let err_w = (!a.tty && stderr).then_some(err_w);
                    tokio::spawn(follow(log.clone(), stdout.then_some(out_w), err_w, stopped));
                    (
                        stdout.then(|| Box::pin(out_r) as crius_stream::backend::Output),
                        (!a.tty && stderr).then(|| Box::pin(err_r) as crius_stream::backend::Output),
                    )
                }
                None => (None, None),
            };
            let close_stdin = a.stdin_once && a.stdin.is_some();
            let mut stdin = sender(a.stdin)?;
            if close_stdin && let Some(inner) = stdin.take() {
                // stdin_once: the client's EOF is the container's (containerd closes it then too).
                let (c, s, id) = (containers.clone(), a.sandbox.clone(), a.id.clone());
                stdin = Some(Box::pin(CloseOnShutdown {
                    inner,
                    close: Some(Box::new(move || c.end_attach(&s, &id, true))),
                }));
            }
            Ok(Process {
                stdin,
                stdout: out,
                stderr: err,
                control: Box::new(AttachControl {
                    containers,
                    sandbox: a.sandbox,
                    id: a.id,
                    close_stdin,
                    stop,
                }),
            })
        })
    }

    fn connect(
        &self,
        sandbox_id: String,
        port: u16,
    ) -> BoxFuture<'static, StreamResult<tokio::net::TcpStream>> {
        let runtime = self.runtime.clone();
        let connects = self.connects.clone();
        Box::pin(async move {
            let sb = runtime
                .pods
                .get("PortForward", &sandbox_id)
                .map_err(stream_error)?;
            connects
                .connect_in(sb.record.namespaces.net.clone(), port)
                .await
                .map_err(|e| crius_stream::Failure::new(ErrorKind::Internal, e))
        })
    }
}

/// An attach's stdin whose shutdown (the client's EOF) also closes the container's stdin in the shim.
struct CloseOnShutdown {
    inner: crius_stream::backend::Input,
    close: Option<Box<dyn FnOnce() + Send>>,
}

impl tokio::io::AsyncWrite for CloseOnShutdown {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        self.inner.as_mut().poll_write(cx, buf)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.inner.as_mut().poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if let Some(close) = self.close.take() {
            drop(tokio::task::spawn_blocking(close));
        }
        self.inner.as_mut().poll_shutdown(cx)
    }
}
