//! [`ShimClient`] over real shims: `containerd-shim-crius-v2` processes (one per pod, found next to criusd or
//! configured), started the way containerd starts them and called over ttrpc with the containerd task API.
//! One connection per pod is kept; a connection that broke (the shim restarted, criusd restarted) is made
//! again and the call repeated once. A call that merely ran out of time is not repeated: its deadline is its
//! answer. Each shim connected to is watched (`watch.rs`), so its death is known at once.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use containerd_shim_protos::api as task;
use containerd_shim_protos::protobuf::Message as _;
use containerd_shim_protos::protobuf::well_known_types::any::Any;
use containerd_shim_protos::ttrpc;
use crius_common::sealed::Handed;
use crius_shim::client::{self, TaskClient};

use super::watch::Watch;
use super::{
    CheckpointTask, CreateTask, ExecOutput, ExecSyncFuture, ExecSyncTask, ExecTask, Exit, Io, Metrics,
    Pressure, Psi, PsiData, ShimClient, ShimCode, ShimError, ShimResult, TaskStatus,
};

/// The containerd namespace criusd's shims run in.
pub const NAMESPACE: &str = "k8s.io";

/// How long after an ExecSync's timeout criusd stops waiting for the shim's answer: the shim kills at the
/// timeout, and reads output on for up to 2 s after the exit.
const EXEC_MARGIN: Duration = Duration::from_secs(10);
/// criusd's deadline for an ExecSync without a timeout (a year).
const LONGEST_EXEC: Duration = Duration::from_secs(365 * 24 * 3600);

/// Where shims are and how they are reached.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The shim binary.
    pub shim: PathBuf,
    /// criusd's socket, the shims' owner address (part of their socket names).
    pub owner: String,
    /// Where shims send their events (criusd's events service).
    pub events: PathBuf,
    /// `<state>/containers`: the bundles, `<bundles>/<id>`.
    pub bundles: PathBuf,
    /// The node's cgroup driver: under systemd's the runtime runs with `--systemd-cgroup`.
    pub cgroup_driver: crate::cgroup_driver::Driver,
    /// Shims start execs in crius-runc's containers without a runtime command (`[runtime] direct_exec`).
    pub direct_exec: bool,
}

/// The shims of one criusd.
pub struct TtrpcShims {
    setup: Setup,
    /// A sealed copy of the runtime the shims run by default, handed to each shim started
    /// (`crius_common::sealed`): their runtime calls need not copy it again.
    runtime: Option<(OwnedFd, Handed)>,
    /// Connections, by sandbox id; a shim's goes when the shim exits (a client holds a thread).
    conns: Arc<Mutex<HashMap<String, TaskClient>>>,
    watch: Watch,
}

/// A client failure, classified: the shim's status; a deadline that passed; or no shim to talk to.
fn classify(e: client::Error, deadline: Duration) -> ShimError {
    match e {
        client::Error::Refused { code, message } => {
            let code = match code {
                ttrpc::Code::NOT_FOUND => ShimCode::NotFound,
                ttrpc::Code::ALREADY_EXISTS => ShimCode::AlreadyExists,
                ttrpc::Code::FAILED_PRECONDITION => ShimCode::FailedPrecondition,
                ttrpc::Code::INVALID_ARGUMENT => ShimCode::InvalidArgument,
                ttrpc::Code::DEADLINE_EXCEEDED => ShimCode::DeadlineExceeded,
                ttrpc::Code::UNIMPLEMENTED => ShimCode::Unimplemented,
                _ => ShimCode::Other,
            };
            ShimError::Refused { code, message }
        }
        // The client's own deadline (the connection is fine, the answer is late).
        client::Error::Timeout { .. } => ShimError::Timeout(deadline),
        other => ShimError::Unreachable(other.to_string()),
    }
}

fn ctx(d: Duration) -> ttrpc::context::Context {
    ttrpc::context::with_timeout(d.as_nanos().min(i64::MAX as u128) as i64)
}

/// The io.stat figures of each device (containerd's IOEntry) summed over the devices.
fn io_of(devices: &[containerd_shim_protos::cgroups_v2::metrics::IOEntry]) -> Io {
    devices.iter().fold(Io::default(), |t, e| Io {
        read_bytes: t.read_bytes + e.rbytes,
        write_bytes: t.write_bytes + e.wbytes,
        reads: t.reads + e.rios,
        writes: t.writes + e.wios,
    })
}

/// containerd's PSIStats as crius's (a part the shim left out is zero).
fn psi_of(p: &containerd_shim_protos::cgroups_v2::metrics::PSIStats) -> Psi {
    let data = |d: &containerd_shim_protos::cgroups_v2::metrics::PSIData| PsiData {
        avg10: d.avg10,
        avg60: d.avg60,
        avg300: d.avg300,
        total: d.total,
    };
    Psi {
        some: p.some.as_ref().map(data).unwrap_or_default(),
        full: p.full.as_ref().map(data).unwrap_or_default(),
    }
}

fn ns_of(t: &containerd_shim_protos::protobuf::well_known_types::timestamp::Timestamp) -> i64 {
    t.seconds * 1_000_000_000 + i64::from(t.nanos)
}

fn any(type_url: &str, json: Vec<u8>) -> containerd_shim_protos::protobuf::MessageField<Any> {
    Some(Any {
        type_url: type_url.into(),
        value: json,
        ..Default::default()
    })
    .into()
}

/// The runtime `r` as containerd names a shim's runtime: `containerd.runc.v1.Options` with `BinaryName` and
/// `Root` (the shim runs that binary by its path; only its default, crius-runc, through the sealed copy), and
/// `SystemdCgroup` under the systemd driver. None when all of it is the shim's default.
fn runc_options(r: Option<&super::OciBinary>, systemd_cgroup: bool) -> Option<Any> {
    if r.is_none() && !systemd_cgroup {
        return None;
    }
    let o = containerd_shim_protos::shim::oci::Options {
        binary_name: r.map(|r| r.binary.display().to_string()).unwrap_or_default(),
        root: r
            .and_then(|r| r.root.as_ref())
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        systemd_cgroup,
        ..Default::default()
    };
    Some(Any {
        type_url: RUNC_OPTIONS.into(),
        value: o.write_to_bytes().unwrap_or_default(),
        ..Default::default()
    })
}

/// The type of [`runc_options`], as containerd's typeurl names it.
const RUNC_OPTIONS: &str = "containerd.runc.v1.Options";

/// A sealed copy of the runtime a shim at `shim` runs by default (`crius-runc` next to the shim's real file, as
/// the shim finds it); None, with a warning, if it cannot be made: each runtime call then copies itself.
fn sealed_runtime(shim: &Path) -> Option<(OwnedFd, Handed)> {
    let runtime = std::fs::canonicalize(shim)
        .ok()
        .and_then(|s| client::default_runtime(&s))
        .and_then(|r| std::fs::canonicalize(r).ok())?;
    match crius_common::sealed::seal_runtime(&runtime) {
        Ok(sealed) => Some(sealed),
        Err(e) => {
            tracing::warn!(runtime = %runtime.display(), "no sealed copy of the runtime for the shims: {e}");
            None
        }
    }
}

impl TtrpcShims {
    /// Shims as `setup` says; `on_gone(sandbox_id)` is called (from a watcher thread) when a pod's shim dies.
    pub fn new(setup: Setup, on_gone: Arc<dyn Fn(&str) + Send + Sync>) -> std::io::Result<TtrpcShims> {
        let conns: Arc<Mutex<HashMap<String, TaskClient>>> = Arc::default();
        let held = conns.clone();
        let gone = Arc::new(move |sandbox: &str| {
            held.lock().unwrap_or_else(|p| p.into_inner()).remove(sandbox);
            on_gone(sandbox);
        });
        Ok(TtrpcShims {
            runtime: sealed_runtime(&setup.shim),
            setup,
            conns,
            watch: Watch::start(gone)?,
        })
    }

    fn conns(&self) -> std::sync::MutexGuard<'_, HashMap<String, TaskClient>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A connection to sandbox `sandbox`'s shim; `start_for` (a container and its bundle) starts the shim if it
    /// is not running.
    fn connect(&self, sandbox: &str, start_for: Option<(&str, &Path)>) -> ShimResult<TaskClient> {
        if let Some(c) = self.conns().get(sandbox) {
            return Ok(c.clone());
        }
        let address = match start_for {
            Some((id, bundle)) => client::start_shim_with(
                &self.setup.shim,
                NAMESPACE,
                &self.setup.owner,
                &self.setup.events.display().to_string(),
                id,
                bundle,
                client::Extras {
                    sealed: self.runtime.as_ref().map(|(_, h)| h),
                    direct_exec: self.setup.direct_exec,
                },
            )
            .map_err(|e| ShimError::Start(e.to_string()))?,
            None => client::socket_address(&self.setup.owner, NAMESPACE, sandbox),
        };
        let c = client::connect(&address).map_err(|e| ShimError::Unreachable(e.to_string()))?;
        self.watch.add(sandbox, &address);
        self.conns().insert(sandbox.to_string(), c.clone());
        Ok(c)
    }

    /// Removes the socket of sandbox `sandbox`'s shim if nobody listens on it (the shim was killed before it
    /// could remove it).
    fn remove_dead_socket(&self, sandbox: &str) {
        let address = client::socket_address(&self.setup.owner, NAMESPACE, sandbox);
        let path = address.trim_start_matches("unix://");
        match std::os::unix::net::UnixStream::connect(path) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                tracing::info!(sandbox, socket = path, "removing the socket its dead shim left");
                let _ = std::fs::remove_file(path);
            }
            _ => {}
        }
    }

    fn forget(&self, sandbox: &str) {
        self.conns().remove(sandbox);
    }

    /// Calls sandbox `sandbox`'s shim with deadline `d`; a call that could not reach the shim is repeated once
    /// on a new connection (or a new shim, with `start_for`). A late answer is [`ShimError::Timeout`].
    fn call<T>(
        &self,
        sandbox: &str,
        d: Duration,
        start_for: Option<(&str, &Path)>,
        f: impl Fn(&TaskClient, ttrpc::context::Context) -> client::Result<T>,
    ) -> ShimResult<T> {
        let once = || {
            self.connect(sandbox, start_for)
                .and_then(|c| f(&c, ctx(d)).map_err(|e| classify(e, d)))
        };
        match once() {
            Err(ShimError::Unreachable(_)) => {
                self.forget(sandbox);
                once()
            }
            r => r,
        }
    }

    fn bundle(&self, id: &str) -> PathBuf {
        self.setup.bundles.join(id)
    }
}

impl ShimClient for TtrpcShims {
    fn create(&self, sandbox: &str, t: &CreateTask) -> ShimResult<()> {
        let req = task::CreateTaskRequest {
            id: t.id.clone(),
            bundle: t.bundle.display().to_string(),
            terminal: t.terminal,
            stdout: t
                .log_path
                .as_ref()
                .map(|p| {
                    let scheme = if t.capped_log {
                        client::CAPPED_LOG_SCHEME
                    } else {
                        client::CRI_LOG_SCHEME
                    };
                    format!("{scheme}{}", p.display())
                })
                .unwrap_or_default(),
            stdin: t
                .stdin
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            options: runc_options(
                t.runtime.as_ref(),
                self.setup.cgroup_driver == crate::cgroup_driver::Driver::Systemd,
            )
            .into(),
            checkpoint: t
                .checkpoint
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            ..Default::default()
        };
        let start_for = Some((t.id.as_str(), t.bundle.as_path()));
        self.call(sandbox, Duration::from_secs(60), start_for, |c, x| {
            c.create(x, &req)
        })
        .map(drop)
    }

    fn start(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<u32> {
        let req = task::StartRequest {
            id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        self.call(sandbox, Duration::from_secs(60), None, |c, x| c.start(x, &req))
            .map(|r| r.pid)
    }

    fn kill(&self, sandbox: &str, id: &str, exec_id: &str, signal: u32, all: bool) -> ShimResult<()> {
        let req = task::KillRequest {
            id: id.into(),
            exec_id: exec_id.into(),
            signal,
            all,
            ..Default::default()
        };
        self.call(sandbox, Duration::from_secs(10), None, |c, x| c.kill(x, &req))
            .map(drop)
    }

    fn wait(&self, sandbox: &str, id: &str, exec_id: &str, timeout: Duration) -> ShimResult<Exit> {
        let req = task::WaitRequest {
            id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        self.call(sandbox, timeout, None, |c, x| c.wait(x, &req))
            .map(|w| Exit {
                status: w.exit_status,
                at_ns: w.exited_at.as_ref().map(ns_of).unwrap_or(0),
            })
    }

    fn state(&self, sandbox: &str, id: &str) -> ShimResult<TaskStatus> {
        let req = task::StateRequest {
            id: id.into(),
            ..Default::default()
        };
        let st = self.call(sandbox, Duration::from_secs(10), None, |c, x| c.state(x, &req))?;
        Ok(match st.status.enum_value_or_default() {
            task::Status::CREATED => TaskStatus::Created,
            task::Status::RUNNING | task::Status::PAUSED | task::Status::PAUSING => TaskStatus::Running,
            task::Status::STOPPED => TaskStatus::Stopped(Exit {
                status: st.exit_status,
                at_ns: st.exited_at.as_ref().map(ns_of).unwrap_or(0),
            }),
            task::Status::UNKNOWN => TaskStatus::Unknown,
        })
    }

    fn exec(&self, sandbox: &str, id: &str, e: &ExecTask) -> ShimResult<()> {
        let process = serde_json::to_vec(&e.process).map_err(|err| ShimError::Refused {
            code: ShimCode::InvalidArgument,
            message: format!("the exec's process: {err}"),
        })?;
        let req = task::ExecProcessRequest {
            id: id.into(),
            exec_id: e.exec_id.clone(),
            stdin: e.stdin.clone(),
            stdout: e.stdout.clone(),
            stderr: e.stderr.clone(),
            terminal: e.terminal,
            spec: any(
                "types.containerd.io/opencontainers/runtime-spec/1/Process",
                process,
            ),
            ..Default::default()
        };
        self.call(sandbox, Duration::from_secs(30), None, |c, x| c.exec(x, &req))
            .map(drop)
    }

    fn exec_sync(&self, sandbox: &str, id: &str, t: ExecSyncTask) -> ExecSyncFuture {
        let process = match serde_json::to_vec(&t.process) {
            Ok(p) => p,
            Err(err) => {
                let e = ShimError::Refused {
                    code: ShimCode::InvalidArgument,
                    message: format!("the exec's process: {err}"),
                };
                return Box::pin(std::future::ready(Err(e)));
            }
        };
        let req = crius_shim::exec_sync::ExecSyncRequest {
            id: id.into(),
            exec_id: t.exec_id,
            process,
            timeout_ms: t
                .timeout
                .map_or(0, |d| d.as_millis().clamp(1, u64::MAX as u128) as u64),
        };
        // The shim keeps the timeout; criusd's own deadline only covers a shim that never answers.
        let deadline = t.timeout.map_or(LONGEST_EXEC, |d| d + EXEC_MARGIN);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let tx = Arc::new(Mutex::new(Some(tx)));
        let sent = self.call(sandbox, deadline, None, |c, x| {
            let tx = tx.clone();
            let call = c.exec_sync_then(&req, x.timeout_nano, move |r| {
                if let Some(tx) = tx.lock().unwrap_or_else(|p| p.into_inner()).take() {
                    let _ = tx.send(r);
                }
            })?;
            Ok((c.clone(), call))
        });
        Box::pin(async move {
            let (client, call) = sent?;
            match tokio::time::timeout(deadline, rx).await {
                Ok(Ok(r)) => r
                    .map(|a| ExecOutput {
                        status: a.exit_status,
                        timed_out: a.timed_out,
                        stdout: a.stdout,
                        stderr: a.stderr,
                    })
                    .map_err(|e| classify(e, deadline)),
                Ok(Err(_)) => Err(ShimError::Unreachable(
                    "the shim's connection ended before it answered ExecSync".into(),
                )),
                Err(_) => {
                    client.forget(call);
                    Err(ShimError::Timeout(deadline))
                }
            }
        })
    }

    fn update(&self, sandbox: &str, id: &str, r: &oci_spec::runtime::LinuxResources) -> ShimResult<()> {
        let json = serde_json::to_vec(r).map_err(|err| ShimError::Refused {
            code: ShimCode::InvalidArgument,
            message: format!("the resources: {err}"),
        })?;
        let req = task::UpdateTaskRequest {
            id: id.into(),
            resources: any(
                "types.containerd.io/opencontainers/runtime-spec/1/LinuxResources",
                json,
            ),
            ..Default::default()
        };
        self.call(sandbox, Duration::from_secs(30), None, |c, x| c.update(x, &req))
            .map(drop)
    }

    fn resize_pty(&self, sandbox: &str, id: &str, exec_id: &str, width: u32, height: u32) -> ShimResult<()> {
        let req = task::ResizePtyRequest {
            id: id.into(),
            exec_id: exec_id.into(),
            width,
            height,
            ..Default::default()
        };
        self.call(sandbox, Duration::from_secs(10), None, |c, x| {
            c.resize_pty(x, &req)
        })
        .map(drop)
    }

    fn close_io(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<()> {
        let req = task::CloseIORequest {
            id: id.into(),
            exec_id: exec_id.into(),
            stdin: true,
            ..Default::default()
        };
        self.call(sandbox, Duration::from_secs(10), None, |c, x| c.close_io(x, &req))
            .map(drop)
    }

    fn reopen_log(&self, sandbox: &str, id: &str) -> ShimResult<()> {
        let req = task::UpdateTaskRequest {
            id: id.into(),
            annotations: [(client::REOPEN_ANNOTATION.to_string(), String::new())].into(),
            ..Default::default()
        };
        self.call(sandbox, Duration::from_secs(30), None, |c, x| c.update(x, &req))
            .map(drop)
    }

    fn checkpoint(&self, sandbox: &str, id: &str, t: &CheckpointTask, timeout: Duration) -> ShimResult<()> {
        let options = containerd_shim_protos::shim::oci::CheckpointOptions {
            exit: t.exit,
            image_path: t.image_path.display().to_string(),
            work_path: t.work_path.display().to_string(),
            ..Default::default()
        };
        let req = task::CheckpointTaskRequest {
            id: id.into(),
            path: t.image_path.display().to_string(),
            options: Some(Any {
                type_url: "containerd.runc.v1.CheckpointOptions".into(),
                value: options.write_to_bytes().unwrap_or_default(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        };
        self.call(sandbox, timeout, None, |c, x| c.checkpoint(x, &req))
            .map(drop)
    }

    fn connected(&self) -> usize {
        self.conns().len()
    }

    fn stats(&self, sandbox: &str, id: &str) -> ShimResult<Option<Metrics>> {
        let req = task::StatsRequest {
            id: id.into(),
            ..Default::default()
        };
        let resp = self.call(sandbox, Duration::from_secs(10), None, |c, x| c.stats(x, &req))?;
        let m = resp.stats.as_ref().and_then(|a| {
            containerd_shim_protos::cgroups_v2::metrics::Metrics::parse_from_bytes(&a.value).ok()
        });
        Ok(m.map(|m| Metrics {
            cpu_usage_ns: m.cpu.usage_usec * 1000,
            memory_usage: m.memory.usage,
            memory_limit: m.memory.usage_limit,
            inactive_file: m.memory.inactive_file,
            anon: m.memory.anon,
            pgfault: m.memory.pgfault,
            pgmajfault: m.memory.pgmajfault,
            pids: m.pids.current,
            io: io_of(&m.io.usage),
            psi: Pressure {
                cpu: m.cpu.psi.as_ref().map(psi_of),
                memory: m.memory.psi.as_ref().map(psi_of),
                io: m.io.psi.as_ref().map(psi_of),
            },
        }))
    }

    fn delete(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<Option<Exit>> {
        let req = task::DeleteRequest {
            id: id.into(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        match self.call(sandbox, Duration::from_secs(60), None, |c, x| c.delete(x, &req)) {
            Ok(r) => Ok(Some(Exit {
                status: r.exit_status,
                at_ns: r.exited_at.as_ref().map(ns_of).unwrap_or(0),
            })),
            Err(e) if e.is_not_found() => Ok(None),
            // No shim: clean up as containerd does after a shim died.
            Err(ShimError::Unreachable(_)) if exec_id.is_empty() => client::delete_shim(
                &self.setup.shim,
                NAMESPACE,
                &self.setup.owner,
                id,
                &self.bundle(id),
            )
            .map(|e| {
                self.remove_dead_socket(sandbox);
                Some(Exit {
                    status: e.exit_status,
                    at_ns: e.exited_at_ns,
                })
            })
            .map_err(|e| ShimError::Unreachable(e.to_string())),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
#[path = "ttrpc_tests.rs"]
mod tests;
