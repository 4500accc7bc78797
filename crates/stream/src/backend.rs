//! What the streaming server asks of the runtime: start an exec, attach to a container, connect to a pod's
//! port. criusd implements [`Backend`] over its shims; tests implement it with local processes.

use std::pin::Pin;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};

/// A request kept behind a token until its connection comes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// A command to run in a container.
    Exec(ExecRequest),
    /// A container's stdio.
    Attach(AttachRequest),
    /// Ports of a pod.
    PortForward(PortForwardRequest),
}

/// CRI ExecRequest, as the server keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExecRequest {
    /// The container.
    pub container_id: String,
    /// The command and its arguments.
    pub cmd: Vec<String>,
    /// Whether the process gets a terminal (then stderr is merged into stdout).
    pub tty: bool,
    /// Whether the client sends stdin.
    pub stdin: bool,
    /// Whether the client wants stdout.
    pub stdout: bool,
    /// Whether the client wants stderr (never with a terminal).
    pub stderr: bool,
    /// The terminal's size at start (columns, rows), as the client first sent it.
    pub size: Option<(u16, u16)>,
}

/// CRI AttachRequest, as the server keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttachRequest {
    /// The container.
    pub container_id: String,
    /// Whether the container has a terminal.
    pub tty: bool,
    /// Whether the client sends stdin.
    pub stdin: bool,
    /// Whether the client wants stdout.
    pub stdout: bool,
    /// Whether the client wants stderr (never with a terminal).
    pub stderr: bool,
}

/// CRI PortForwardRequest, as the server keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortForwardRequest {
    /// The pod.
    pub sandbox_id: String,
    /// The ports the client may ask for (empty: any).
    pub ports: Vec<i32>,
}

/// Why a backend call failed, in terms a client is shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// Its class.
    pub kind: ErrorKind,
    /// What happened, naming the thing.
    pub message: String,
}

/// The class of a [`Failure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No such container or pod.
    NotFound,
    /// The container is not running.
    FailedPrecondition,
    /// A malformed request.
    InvalidArgument,
    /// The runtime failed.
    Internal,
}

impl Failure {
    /// A failure of `kind`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
        }
    }
}

/// A result of a backend call.
pub type Result<T> = std::result::Result<T, Failure>;

/// Bytes that go into a process.
pub type Input = Pin<Box<dyn AsyncWrite + Send>>;
/// Bytes that come out of a process.
pub type Output = Pin<Box<dyn AsyncRead + Send>>;

/// A started exec, or an attach to a container, as the session drives it.
pub struct Process {
    /// Its stdin (None: not asked for). Dropping it closes the process's stdin.
    pub stdin: Option<Input>,
    /// Its stdout (with a terminal: the terminal's output).
    pub stdout: Option<Output>,
    /// Its stderr (None with a terminal).
    pub stderr: Option<Output>,
    /// The rest of it.
    pub control: Box<dyn Control>,
}

impl std::fmt::Debug for Process {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Process")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .finish()
    }
}

/// Control of a [`Process`] besides its stdio.
pub trait Control: Send + Sync {
    /// Sets the terminal's size (columns, rows).
    fn resize(&self, width: u16, height: u16) -> BoxFuture<'static, Result<()>>;
    /// Resolves at the end: the exit code of an exec, or of an attached container.
    fn wait(&self) -> BoxFuture<'static, Result<i32>>;
    /// Called once the output is drained, or when the client went away: an exec's process is killed and
    /// removed; an attach lets go of the container (which keeps running).
    fn finish(&self, client_gone: bool) -> BoxFuture<'static, ()>;
}

/// The runtime behind the streaming server.
pub trait Backend: Send + Sync + 'static {
    /// Starts `req.cmd` in the container, with the stdio it asks for.
    fn exec(&self, req: ExecRequest) -> BoxFuture<'static, Result<Process>>;
    /// Attaches to the container's stdio.
    fn attach(&self, req: AttachRequest) -> BoxFuture<'static, Result<Process>>;
    /// Connects to `port` on 127.0.0.1 in the pod's network namespace (the host's for a host-network pod).
    fn connect(&self, sandbox_id: String, port: u16) -> BoxFuture<'static, Result<tokio::net::TcpStream>>;
}
