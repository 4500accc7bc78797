//! An in-memory [`ShimClient`] for unit tests: tasks are records that the test moves along (a process
//! "exits" when a signal it does not ignore arrives, or when the test says so), every call is logged, and
//! Wait really waits (up to its deadline), so timing behaviour can be checked without root or processes.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{
    CheckpointTask, CreateTask, ExecOutput, ExecSyncFuture, ExecSyncTask, ExecTask, Exit, Metrics,
    ShimClient, ShimCode, ShimError, ShimResult, TaskStatus,
};

/// The pressure a running fake container reports for cpu and memory.
pub const FAKE_PSI: super::Psi = super::Psi {
    some: super::PsiData {
        avg10: 1.5,
        avg60: 0.5,
        avg300: 0.25,
        total: 1000,
    },
    full: super::PsiData {
        avg10: 0.5,
        avg60: 0.0,
        avg300: 0.0,
        total: 400,
    },
};

/// One fake process (a container's init or an exec).
#[derive(Debug, Clone, Default)]
pub struct Task {
    /// Started.
    pub started: bool,
    /// Its exit, once it ended.
    pub exit: Option<Exit>,
    /// Signals it survives (SIGTERM for a process that traps it).
    pub ignores: Vec<u32>,
    /// An exec's process, as sent.
    pub process: Option<oci_spec::runtime::Process>,
}

/// The fake shim of every pod.
#[derive(Default)]
pub struct FakeShim {
    /// (sandbox, container, exec id) → task.
    tasks: Mutex<HashMap<(String, String, String), Task>>,
    changed: Condvar,
    /// Every call, as `"<call> <id>[/<exec>][ <arg>]"`.
    pub calls: Mutex<Vec<String>>,
    /// Signals the next processes created ignore.
    pub ignore_next: Mutex<Vec<u32>>,
    /// Exit status of execs once started (None: they run until killed).
    pub exec_exit: Mutex<Option<u32>>,
    /// When set, every call fails as if the shim were gone.
    pub gone: Mutex<bool>,
    /// The processes of every exec, as sent.
    pub processes: Mutex<Vec<oci_spec::runtime::Process>>,
    /// When set, starting an exec fails with this message, as the runtime's.
    pub exec_refusal: Mutex<Option<String>>,
    /// When set, the shim is older than ExecSync's call: it answers Unimplemented, as the real one does.
    pub old_shim: Mutex<bool>,
    /// When set, Checkpoint fails with this message, as CRIU's (the container runs on).
    pub checkpoint_refusal: Mutex<Option<String>>,
}

fn key(sandbox: &str, id: &str, exec: &str) -> (String, String, String) {
    (sandbox.to_string(), id.to_string(), exec.to_string())
}

fn not_found(what: &str) -> ShimError {
    ShimError::Refused {
        code: ShimCode::NotFound,
        message: format!("{what}: not found"),
    }
}

impl FakeShim {
    fn log(&self, call: &str, id: &str, exec: &str, arg: &str) -> ShimResult<()> {
        let mut line = format!("{call} {id}");
        if !exec.is_empty() {
            line += &format!("/{exec}");
        }
        if !arg.is_empty() {
            line += &format!(" {arg}");
        }
        self.calls.lock().unwrap().push(line);
        if *self.gone.lock().unwrap() {
            return Err(ShimError::Unreachable("connection refused".into()));
        }
        Ok(())
    }

    /// The calls made so far.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    /// Ends process `id`/`exec` with `status` now, as if it exited by itself; returns its exit.
    pub fn exit(&self, id: &str, exec: &str, status: u32) -> Exit {
        let mut tasks = self.tasks.lock().unwrap();
        let exit = Exit {
            status,
            at_ns: crate::store::now_ns(),
        };
        for ((_, i, e), t) in tasks.iter_mut() {
            if i == id && e == exec && t.exit.is_none() {
                t.exit = Some(exit);
            }
        }
        self.changed.notify_all();
        exit
    }

    /// Task `id`/`exec` as the fake holds it.
    pub fn task(&self, id: &str, exec: &str) -> Option<Task> {
        let tasks = self.tasks.lock().unwrap();
        tasks
            .iter()
            .find(|((_, i, e), _)| i == id && e == exec)
            .map(|(_, t)| t.clone())
    }

    fn with<T>(
        &self,
        k: &(String, String, String),
        f: impl FnOnce(&mut Task) -> ShimResult<T>,
    ) -> ShimResult<T> {
        let mut tasks = self.tasks.lock().unwrap();
        let t = tasks.get_mut(k).ok_or_else(|| not_found(&k.1))?;
        let r = f(t);
        self.changed.notify_all();
        r
    }
}

impl ShimClient for FakeShim {
    fn create(&self, sandbox: &str, t: &CreateTask) -> ShimResult<()> {
        let from = t.checkpoint.as_ref().map(|p| p.display().to_string());
        self.log("create", &t.id, "", from.as_deref().unwrap_or(""))?;
        let mut tasks = self.tasks.lock().unwrap();
        let k = key(sandbox, &t.id, "");
        if tasks.contains_key(&k) {
            return Err(ShimError::Refused {
                code: ShimCode::AlreadyExists,
                message: format!("{} exists", t.id),
            });
        }
        let ignores = self.ignore_next.lock().unwrap().clone();
        tasks.insert(
            k,
            Task {
                ignores,
                ..Default::default()
            },
        );
        Ok(())
    }

    fn start(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<u32> {
        self.log("start", id, exec_id, "")?;
        if let Some(message) = self
            .exec_refusal
            .lock()
            .unwrap()
            .clone()
            .filter(|_| !exec_id.is_empty())
        {
            return Err(ShimError::Refused {
                code: ShimCode::Other,
                message,
            });
        }
        let exec_exit = *self.exec_exit.lock().unwrap();
        self.with(&key(sandbox, id, exec_id), |t| {
            t.started = true;
            if !exec_id.is_empty()
                && let Some(status) = exec_exit
            {
                t.exit = Some(Exit {
                    status,
                    at_ns: crate::store::now_ns(),
                });
            }
            Ok(4242)
        })
    }

    fn kill(&self, sandbox: &str, id: &str, exec_id: &str, signal: u32, _all: bool) -> ShimResult<()> {
        self.log("kill", id, exec_id, &signal.to_string())?;
        self.with(&key(sandbox, id, exec_id), |t| {
            if t.exit.is_none() && !t.ignores.contains(&signal) {
                t.exit = Some(Exit {
                    status: 128 + signal,
                    at_ns: crate::store::now_ns(),
                });
            }
            Ok(())
        })
    }

    fn wait(&self, sandbox: &str, id: &str, exec_id: &str, timeout: Duration) -> ShimResult<Exit> {
        self.log("wait", id, exec_id, "")?;
        let k = key(sandbox, id, exec_id);
        let until = Instant::now() + timeout;
        let mut tasks = self.tasks.lock().unwrap();
        loop {
            match tasks.get(&k) {
                None => return Err(not_found(id)),
                Some(Task { exit: Some(e), .. }) => return Ok(*e),
                Some(_) => {}
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ShimError::Timeout(timeout));
            }
            tasks = self.changed.wait_timeout(tasks, left).unwrap().0;
        }
    }

    fn state(&self, sandbox: &str, id: &str) -> ShimResult<TaskStatus> {
        self.log("state", id, "", "")?;
        self.with(&key(sandbox, id, ""), |t| {
            Ok(match (t.started, t.exit) {
                (_, Some(e)) => TaskStatus::Stopped(e),
                (true, None) => TaskStatus::Running,
                (false, None) => TaskStatus::Created,
            })
        })
    }

    fn exec(&self, sandbox: &str, id: &str, e: &ExecTask) -> ShimResult<()> {
        self.log("exec", id, &e.exec_id, "")?;
        self.processes.lock().unwrap().push(e.process.clone());
        // As a shim does, open the output FIFOs (the process's end) — and close them: this fake's processes
        // write nothing.
        for fifo in [&e.stdout, &e.stderr] {
            use std::os::unix::fs::OpenOptionsExt;
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(fifo);
        }
        let mut tasks = self.tasks.lock().unwrap();
        if !tasks.contains_key(&key(sandbox, id, "")) {
            return Err(not_found(id));
        }
        tasks.insert(
            key(sandbox, id, &e.exec_id),
            Task {
                process: Some(e.process.clone()),
                ..Default::default()
            },
        );
        Ok(())
    }

    /// Logged `exec-sync <id>/<exec>`. An exec refused (`exec_refusal`) is the call's error; one with an
    /// `exec_exit` status ends at once with it, writing its args to stdout; else it runs until its timeout
    /// (really waited, on the caller's runtime) and is killed.
    fn exec_sync(&self, sandbox: &str, id: &str, t: ExecSyncTask) -> ExecSyncFuture {
        let now = (|| {
            self.log("exec-sync", id, &t.exec_id, "")?;
            self.processes.lock().unwrap().push(t.process.clone());
            if *self.old_shim.lock().unwrap() {
                return Err(ShimError::Refused {
                    code: ShimCode::Unimplemented,
                    message: "/crius.shim.v1.Exec/ExecSync is not served here".into(),
                });
            }
            if !self.tasks.lock().unwrap().contains_key(&key(sandbox, id, "")) {
                return Err(not_found(id));
            }
            if let Some(message) = self.exec_refusal.lock().unwrap().clone() {
                return Err(ShimError::Refused {
                    code: ShimCode::Other,
                    message,
                });
            }
            Ok(*self.exec_exit.lock().unwrap())
        })();
        let args = t.process.args().clone().unwrap_or_default().join(" ");
        Box::pin(async move {
            match now? {
                Some(status) => Ok(ExecOutput {
                    status,
                    stdout: format!("{args}\n").into_bytes(),
                    ..Default::default()
                }),
                None => {
                    tokio::time::sleep(t.timeout.unwrap_or(Duration::from_secs(3600))).await;
                    Ok(ExecOutput {
                        status: 137,
                        timed_out: true,
                        ..Default::default()
                    })
                }
            }
        })
    }

    fn update(&self, sandbox: &str, id: &str, r: &oci_spec::runtime::LinuxResources) -> ShimResult<()> {
        let arg = serde_json::to_string(r).unwrap_or_default();
        self.log("update", id, "", &arg)?;
        self.with(&key(sandbox, id, ""), |_| Ok(()))
    }

    fn resize_pty(&self, sandbox: &str, id: &str, exec_id: &str, _: u32, _: u32) -> ShimResult<()> {
        self.log("resize-pty", id, exec_id, "")?;
        self.with(&key(sandbox, id, exec_id), |_| Ok(()))
    }

    fn close_io(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<()> {
        self.log("close-io", id, exec_id, "")?;
        self.with(&key(sandbox, id, exec_id), |_| Ok(()))
    }

    fn reopen_log(&self, sandbox: &str, id: &str) -> ShimResult<()> {
        self.log("reopen-log", id, "", "")?;
        self.with(&key(sandbox, id, ""), |_| Ok(()))
    }

    fn stats(&self, sandbox: &str, id: &str) -> ShimResult<Option<Metrics>> {
        self.log("stats", id, "", "")?;
        self.with(&key(sandbox, id, ""), |t| {
            Ok((t.started && t.exit.is_none()).then(|| Metrics {
                cpu_usage_ns: 5_000_000,
                memory_usage: 1 << 20,
                pids: 2,
                io: super::Io {
                    read_bytes: 4096,
                    write_bytes: 8192,
                    reads: 1,
                    writes: 2,
                },
                // cpu and memory pressure as a PSI kernel gives it; none for io, as without the file.
                psi: super::Pressure {
                    cpu: Some(FAKE_PSI),
                    memory: Some(FAKE_PSI),
                    io: None,
                },
                ..Default::default()
            }))
        })
    }

    fn checkpoint(&self, sandbox: &str, id: &str, c: &CheckpointTask, _: Duration) -> ShimResult<()> {
        self.log("checkpoint", id, "", &c.image_path.display().to_string())?;
        if let Some(message) = self.checkpoint_refusal.lock().unwrap().clone() {
            return Err(ShimError::Refused {
                code: ShimCode::Other,
                message,
            });
        }
        self.with(&key(sandbox, id, ""), |t| {
            if !t.started || t.exit.is_some() {
                return Err(ShimError::Refused {
                    code: ShimCode::FailedPrecondition,
                    message: format!("container {id:?} is not running"),
                });
            }
            // What CRIU leaves: its images and its statistics.
            std::fs::create_dir_all(&c.image_path)
                .and_then(|_| {
                    std::fs::write(c.image_path.join("inventory.img"), id)?;
                    std::fs::write(c.image_path.join("stats-dump"), b"dump stats")
                })
                .map_err(|e| ShimError::Unreachable(e.to_string()))?;
            if c.exit {
                t.exit = Some(Exit {
                    status: 137,
                    at_ns: crate::store::now_ns(),
                });
            }
            Ok(())
        })
    }

    fn delete(&self, sandbox: &str, id: &str, exec_id: &str) -> ShimResult<Option<Exit>> {
        self.log("delete", id, exec_id, "")?;
        let mut tasks = self.tasks.lock().unwrap();
        let gone = tasks.remove(&key(sandbox, id, exec_id));
        if exec_id.is_empty() {
            tasks.retain(|(_, i, _), _| i != id);
        }
        Ok(gone.map(|t| t.exit.unwrap_or_default()))
    }
}
