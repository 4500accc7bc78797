//! The streaming server's backend ([`crius_stream::Backend`]) over this runtime: execs and attaches through
//! the pods' shims ([`crate::container::stream`]), port-forward into the pod's network namespace.
//!
//! A session lives in criusd: when criusd restarts, its exec and attach sessions end (the containers keep
//! running, an exec's process is ended by its shim's delete at the next cleanup).

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crius_stream::backend::{Control, Result as StreamResult};
use crius_stream::{AttachRequest, Backend, ErrorKind, ExecRequest, Process};
use futures::future::BoxFuture;
use tokio::io::AsyncWriteExt;
use tokio::net::unix::pipe;

use crate::container::Containers;
use crate::error::Error;
use crate::runtime::Runtime;

/// The backend; cheap to clone.
#[derive(Clone)]
pub struct Streaming {
    runtime: Arc<Runtime>,
}

impl Streaming {
    /// A backend over `runtime`.
    pub fn new(runtime: Arc<Runtime>) -> Streaming {
        Streaming { runtime }
    }
}

/// The streaming server's view of an error.
pub fn stream_error(e: Error) -> crius_stream::Error {
    let status = tonic::Status::from(e);
    let kind = match status.code() {
        tonic::Code::NotFound => ErrorKind::NotFound,
        tonic::Code::FailedPrecondition => ErrorKind::FailedPrecondition,
        tonic::Code::InvalidArgument => ErrorKind::InvalidArgument,
        _ => ErrorKind::Internal,
    };
    crius_stream::Error::new(kind, status.message())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> crate::error::Result<T> + Send + 'static,
) -> StreamResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r.map_err(stream_error),
        Err(e) => Err(crius_stream::Error::new(
            ErrorKind::Internal,
            format!("a streaming task failed: {e}"),
        )),
    }
}

fn receiver(f: Option<File>) -> StreamResult<Option<crius_stream::backend::Output>> {
    f.map(|f| {
        pipe::Receiver::from_file(f)
            .map(|r| Box::pin(r) as crius_stream::backend::Output)
            .map_err(|e| crius_stream::Error::new(ErrorKind::Internal, format!("a stream's FIFO: {e}")))
    })
    .transpose()
}

fn sender(f: Option<File>) -> StreamResult<Option<crius_stream::backend::Input>> {
    f.map(|f| {
        pipe::Sender::from_file(f)
            .map(|w| Box::pin(w) as crius_stream::backend::Input)
            .map_err(|e| crius_stream::Error::new(ErrorKind::Internal, format!("a stream's FIFO: {e}")))
    })
    .transpose()
}

struct ExecControl {
    containers: Arc<Containers>,
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
        Box::pin(blocking(move || c.wait_stream(&s, &id, &e)))
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
        Box::pin(async move {
            let sb = runtime
                .pods
                .get("PortForward", &sandbox_id)
                .map_err(stream_error)?;
            let std = match sb.record.namespaces.net.clone() {
                None => tokio::task::spawn_blocking(move || connect_in(None, port)).await,
                Some(pin) => tokio::task::spawn_blocking(move || connect_in(Some(pin), port)).await,
            }
            .map_err(|e| crius_stream::Error::new(ErrorKind::Internal, e.to_string()))?
            .map_err(|e| crius_stream::Error::new(ErrorKind::Internal, e))?;
            tokio::net::TcpStream::from_std(std)
                .map_err(|e| crius_stream::Error::new(ErrorKind::Internal, format!("port {port}: {e}")))
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

/// Connects to 127.0.0.1:`port` in the network namespace pinned at `netns` (None: the host's). The socket is
/// made on a thread of its own that enters the namespace and then ends, so no thread of criusd's pools ever
/// changes namespace.
fn connect_in(netns: Option<PathBuf>, port: u16) -> Result<std::net::TcpStream, String> {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let timeout = Duration::from_secs(10);
    let connect = move || -> Result<std::net::TcpStream, String> {
        if let Some(pin) = &netns {
            let f = File::open(pin)
                .map_err(|e| format!("opening the pod's network namespace {}: {e}", pin.display()))?;
            nix::sched::setns(&f, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("entering the pod's network namespace {}: {e}", pin.display()))?;
        }
        let s = std::net::TcpStream::connect_timeout(&addr, timeout)
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        s.set_nonblocking(true).map_err(|e| format!("port {port}: {e}"))?;
        Ok(s)
    };
    std::thread::Builder::new()
        .name("crius-portfwd".into())
        .spawn(connect)
        .map_err(|e| format!("a thread for the connection: {e}"))?
        .join()
        .map_err(|_| "the connecting thread failed".to_string())?
}

/// Follows the CRI log at `path` from its current end, writing each record's text to `out` or `err` by its
/// stream, until `stop` turns true and the file is read to its end (or the readers went away). A rotated
/// file (a new one at the path, or a shorter one) is followed from its start.
async fn follow(
    path: PathBuf,
    mut out: Option<tokio::io::DuplexStream>,
    mut err: Option<tokio::io::DuplexStream>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    use std::io::{Read, Seek, SeekFrom};
    use std::os::unix::fs::MetadataExt;
    let open = |p: &PathBuf| File::open(p).ok();
    let mut file = open(&path);
    let mut pos = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map(|m| m.len())
        .unwrap_or(0);
    let mut ino = file
        .as_ref()
        .and_then(|f| f.metadata().ok())
        .map(|m| m.ino())
        .unwrap_or(0);
    let mut pending: Vec<u8> = Vec::new();
    loop {
        let stopping = *stop.borrow();
        let mut read_any = false;
        if let Some(f) = file.as_mut() {
            let mut buf = vec![0u8; 64 * 1024];
            if f.seek(SeekFrom::Start(pos)).is_ok() {
                while let Ok(n) = f.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    pos += n as u64;
                    read_any = true;
                    pending.extend_from_slice(&buf[..n]);
                    while let Some(nl) = pending.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=nl).collect();
                        if let Some((stream, text)) = record(&line[..line.len() - 1]) {
                            let sink = if stream == "stderr" { &mut err } else { &mut out };
                            if let Some(w) = sink.as_mut()
                                && w.write_all(&text).await.is_err()
                            {
                                *sink = None;
                            }
                        }
                    }
                    if out.is_none() && err.is_none() {
                        return;
                    }
                }
            }
        }
        if stopping && !read_any {
            return;
        }
        // Rotated: a new file at the path.
        if let Ok(m) = std::fs::metadata(&path)
            && (m.ino() != ino || m.len() < pos)
        {
            file = open(&path);
            ino = m.ino();
            pos = 0;
        }
        if !read_any {
            let _ = tokio::time::timeout(Duration::from_millis(50), stop.changed()).await;
        }
    }
}

/// The stream and text of one CRI log record (`<time> <stream> <P|F> <text>`): a full record's text ends
/// with a newline, a partial one's does not.
fn record(line: &[u8]) -> Option<(&str, Vec<u8>)> {
    let mut parts = line.splitn(4, |b| *b == b' ');
    let _time = parts.next()?;
    let stream = std::str::from_utf8(parts.next()?).ok()?;
    let tag = parts.next()?;
    let mut text = parts.next().unwrap_or_default().to_vec();
    if tag != b"P" {
        text.push(b'\n');
    }
    Some((stream, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_records_give_their_stream_and_text() {
        assert_eq!(
            record(b"2026-01-01T00:00:00Z stdout F hello world"),
            Some(("stdout", b"hello world\n".to_vec()))
        );
        assert_eq!(
            record(b"2026-01-01T00:00:00Z stderr P $ "),
            Some(("stderr", b"$ ".to_vec()))
        );
        assert_eq!(
            record(b"2026-01-01T00:00:00Z stdout F"),
            Some(("stdout", b"\n".to_vec()))
        );
        assert_eq!(record(b"garbage"), None);
    }

    #[tokio::test]
    async fn following_a_log_gives_what_is_written_after_the_start() {
        use tokio::io::AsyncReadExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "t stdout F before\n").unwrap();
        let (out_w, mut out_r) = tokio::io::duplex(1024);
        let (err_w, mut err_r) = tokio::io::duplex(1024);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(follow(path.clone(), Some(out_w), Some(err_w), stopped));
        tokio::time::sleep(Duration::from_millis(100)).await;
        {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
            f.write_all(b"t stdout P one \nt stdout F two\nt stderr F oops\n")
                .unwrap();
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
        let _ = stop.send(true);
        task.await.unwrap();
        let mut s = String::new();
        out_r.read_to_string(&mut s).await.unwrap();
        assert_eq!(s, "one two\n");
        let mut e = String::new();
        err_r.read_to_string(&mut e).await.unwrap();
        assert_eq!(e, "oops\n");
    }
}
