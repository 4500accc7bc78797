//! The seam between criusd and its pods' shims: [`ShimClient`], the calls the container lifecycle makes, in
//! domain types (no protobuf). [`ttrpc::TtrpcShims`] drives real `containerd-shim-crius-v2` processes, one per
//! pod, over the containerd task API; `fake::FakeShim` (tests only) keeps tasks in memory. [`OciBinary`] is
//! the OCI runtime a pod's shim runs (a runtime handler resolves to one; `crate::handlers`).
//!
//! A deadline is a result, never a reason to reconnect: only a call that could not reach the shim at all is
//! repeated, once, on a new connection. So StopContainer keeps its grace period and ExecSync its timeout.
//!
//! Every call blocks its thread until the shim answers, except [`ShimClient::exec_sync`], a future: an
//! ExecSync waiting for its command holds no thread of criusd.

use std::path::PathBuf;
use std::time::Duration;

#[cfg(test)]
pub mod fake;
pub mod ttrpc;
mod watch;

/// What went wrong with a shim call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ShimError {
    /// The shim answered and refused.
    #[error("{message}")]
    Refused {
        /// Its status code.
        code: ShimCode,
        /// Its message.
        message: String,
    },
    /// No answer within the call's deadline (the shim is there; what was asked did not happen in time).
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The shim could not be reached.
    #[error("the pod's shim: {0}")]
    Unreachable(String),
    /// The shim could not be started.
    #[error("starting the pod's shim: {0}")]
    Start(String),
}

/// The status codes a shim answers with, as far as criusd tells them apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShimCode {
    /// No such task or process.
    NotFound,
    /// The id is taken.
    AlreadyExists,
    /// Not in a state that allows the call.
    FailedPrecondition,
    /// A malformed request.
    InvalidArgument,
    /// The shim's own deadline passed.
    DeadlineExceeded,
    /// The shim does not serve the call (an older shim).
    Unimplemented,
    /// Anything else.
    Other,
}

impl ShimError {
    /// Whether the shim said the task or process does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            ShimError::Refused {
                code: ShimCode::NotFound,
                ..
            }
        )
    }
}

/// A shim call's result.
pub type ShimResult<T> = Result<T, ShimError>;

/// A process's end, as the shim saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Exit {
    /// Its exit status (128 + signal for a killed process).
    pub status: u32,
    /// When, in ns since the epoch (0: not known).
    pub at_ns: i64,
}

/// A task's status as its shim reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// Created, not started.
    Created,
    /// Running (or paused).
    Running,
    /// Its process exited.
    Stopped(Exit),
    /// The shim cannot tell.
    Unknown,
}

/// A container to create in its pod's shim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateTask {
    /// The container id.
    pub id: String,
    /// Its bundle (config.json, rootfs).
    pub bundle: PathBuf,
    /// Whether it has a terminal.
    pub terminal: bool,
    /// Where its output goes: a CRI log file (the shim writes kubelet's log format), or none.
    pub log_path: Option<PathBuf>,
    /// The log is criusd's own, for attach (the container has no log file): capped in size.
    pub capped_log: bool,
    /// A FIFO its stdin is read from (ContainerConfig.stdin), held open by the shim until CloseIO; attach
    /// writes to it.
    pub stdin: Option<PathBuf>,
    /// The OCI runtime its pod's handler runs (None: the shim's default, crius-runc).
    pub runtime: Option<OciBinary>,
    /// CRIU's images to restore the container from at its start (None: a container made afresh).
    pub checkpoint: Option<PathBuf>,
}

/// A checkpoint to take of a running container (the runtime's `checkpoint`, CRIU).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointTask {
    /// Where CRIU's images go.
    pub image_path: PathBuf,
    /// CRIU's work directory (its `dump.log`).
    pub work_path: PathBuf,
    /// The container ends after the dump (else it keeps running, as kubelet's forensic checkpoint wants).
    pub exit: bool,
}

/// An OCI runtime binary and its state root, as the shim runs it (`<binary> --root <root> …`).
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct OciBinary {
    /// The binary.
    pub binary: PathBuf,
    /// Its `--root` (None: the shim's, `/run/crius/shim/<binary's file name>/k8s.io`).
    pub root: Option<PathBuf>,
}

/// A process to run in a running container.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecTask {
    /// The exec id, unique within the container.
    pub exec_id: String,
    /// The OCI process (args, env, user, capabilities, ...).
    pub process: oci_spec::runtime::Process,
    /// Where its stdin comes from (a FIFO path; empty: none). Its writer's close is the process's EOF.
    pub stdin: String,
    /// Where its stdout goes (a FIFO path; with a terminal, the terminal's output).
    pub stdout: String,
    /// Where its stderr goes (a FIFO path; empty with a terminal).
    pub stderr: String,
    /// Whether it gets a terminal.
    pub terminal: bool,
}

/// A process to run to its end in a running container, its output captured by the shim
/// ([`ShimClient::exec_sync`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ExecSyncTask {
    /// The exec id, unique within the container.
    pub exec_id: String,
    /// The OCI process (args, env, user, capabilities, ...), without a terminal.
    pub process: oci_spec::runtime::Process,
    /// Killed after this long (None: no limit).
    pub timeout: Option<Duration>,
}

/// How an ExecSync's process ended, and what it wrote (each stream capped by the shim at
/// `crius_shim::exec_sync::MAX_OUTPUT`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// Its exit status (128 + signal for a killed process).
    pub status: u32,
    /// It outlived its timeout and was killed.
    pub timed_out: bool,
    /// Its stdout.
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
}

/// [`ShimClient::exec_sync`]'s answer, to be awaited.
pub type ExecSyncFuture = futures::future::BoxFuture<'static, ShimResult<ExecOutput>>;

/// A container's resource figures from its cgroup, as ContainerStats reports them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Metrics {
    /// CPU time used, ns.
    pub cpu_usage_ns: u64,
    /// Memory in use (memory.current), bytes.
    pub memory_usage: u64,
    /// memory.max (0 or a huge figure: none).
    pub memory_limit: u64,
    /// Inactive file cache, bytes (usage − this = working set).
    pub inactive_file: u64,
    /// Anonymous memory, bytes.
    pub anon: u64,
    /// Page faults.
    pub pgfault: u64,
    /// Major page faults.
    pub pgmajfault: u64,
    /// Processes (pids.current).
    pub pids: u64,
    /// Block I/O from io.stat, summed over devices.
    pub io: Io,
    /// Pressure stall information; each part None where the kernel has no PSI.
    pub psi: Pressure,
}

/// A cgroup's block I/O (io.stat's rbytes, wbytes, rios and wios over all its devices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Io {
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Read operations.
    pub reads: u64,
    /// Write operations.
    pub writes: u64,
}

/// A cgroup's cpu.pressure, memory.pressure and io.pressure.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Pressure {
    /// cpu.pressure.
    pub cpu: Option<Psi>,
    /// memory.pressure.
    pub memory: Option<Psi>,
    /// io.pressure.
    pub io: Option<Psi>,
}

pub use crius_oci::cgroup::psi::{Psi, PsiData};

/// The calls criusd makes of its pods' shims. `sandbox` picks the pod's shim; `id` is the container.
/// Implementations are shared between threads; every call blocks until the shim answers or its deadline.
pub trait ShimClient: Send + Sync {
    /// Creates container `task.id` in the pod's shim, starting the shim if the pod has none yet.
    fn create(&self, sandbox: &str, task: &CreateTask) -> ShimResult<()>;
    /// Starts the container's init (`exec_id` empty) or one of its execs; returns its pid.
    fn start(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<u32>;
    /// Sends `signal` to the init (to all its processes with `all`) or an exec.
    fn kill(&self, sandbox: &str, id: &str, exec_id: &str, signal: u32, all: bool) -> ShimResult<()>;
    /// Waits at most `timeout` for the init's or an exec's exit ([`ShimError::Timeout`] after it).
    fn wait(&self, sandbox: &str, id: &str, exec_id: &str, timeout: Duration) -> ShimResult<Exit>;
    /// The container's status now.
    fn state(&self, sandbox: &str, id: &str) -> ShimResult<TaskStatus>;
    /// Adds an exec process to a running container (started with [`ShimClient::start`]).
    fn exec(&self, sandbox: &str, id: &str, exec: &ExecTask) -> ShimResult<()>;
    /// Runs `task` in the running container to its end in one call of the shim: started, its output
    /// captured, killed past its timeout ([`ExecOutput::timed_out`]), deleted. The future holds no thread
    /// while it waits; only the shim's connection is made, if none is, before it returns. A shim that does
    /// not serve the call answers [`ShimCode::Unimplemented`].
    fn exec_sync(&self, sandbox: &str, id: &str, task: ExecSyncTask) -> ExecSyncFuture;
    /// Applies `resources` to the running container, live.
    fn update(
        &self,
        sandbox: &str,
        id: &str,
        resources: &oci_spec::runtime::LinuxResources,
    ) -> ShimResult<()>;
    /// Sets the terminal size of the init (`exec_id` empty) or an exec.
    fn resize_pty(&self, sandbox: &str, id: &str, exec_id: &str, width: u32, height: u32) -> ShimResult<()>;
    /// Closes the stdin of the init (`exec_id` empty) or an exec: the process reads EOF.
    fn close_io(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<()>;
    /// Has the shim reopen the container's log file (kubelet rotated it).
    fn reopen_log(&self, sandbox: &str, id: &str) -> ShimResult<()>;
    /// The container's cgroup figures (None: the shim has none, e.g. not running).
    fn stats(&self, sandbox: &str, id: &str) -> ShimResult<Option<Metrics>>;
    /// Checkpoints the running container with CRIU, waiting at most `timeout` ([`ShimError::Timeout`] after it).
    fn checkpoint(&self, sandbox: &str, id: &str, task: &CheckpointTask, timeout: Duration)
    -> ShimResult<()>;
    /// Deletes the init (the container's task) or an exec. A task the shim does not know is fine (None);
    /// with the shim gone, the container is cleaned up as containerd does after a shim died, and its last
    /// known exit is returned.
    fn delete(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<Option<Exit>>;
    /// How many shims criusd holds a connection to now (for its metrics; a double may say 0).
    fn connected(&self) -> usize {
        0
    }
}
