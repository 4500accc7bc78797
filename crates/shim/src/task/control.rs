//! What is done to a running container: defining an exec, waiting for a process without holding a thread,
//! pausing and resuming, listing its processes, its stdin, terminal size, logs and resources, and its statistics.

use super::{Process, StdioPaths, Tasks, process_name};
use crate::error::{Error, Result};
use crate::events::Event;
use crate::reaper::Exit;
use crate::stdio::ProcessIo;

impl Tasks {
    /// Exec: defines process `exec_id` in container `id` (which must run), to be started by Start.
    pub(crate) fn exec(
        &self,
        id: &str,
        exec_id: &str,
        stdio: StdioPaths,
        terminal: bool,
        spec: Vec<u8>,
    ) -> Result<()> {
        self.define_exec(id, exec_id, (stdio, terminal), spec, false)
    }

    /// [`Tasks::exec`]; a `quiet` exec (ExecSync's) publishes no event.
    pub(super) fn define_exec(
        &self,
        id: &str,
        exec_id: &str,
        (stdio, terminal): (StdioPaths, bool),
        spec: Vec<u8>,
        quiet: bool,
    ) -> Result<()> {
        if exec_id.is_empty() {
            return Err(Error::InvalidArgument("Exec: exec_id is empty".into()));
        }
        self.with(id, |c| {
            c.init
                .life
                .require_running(&format!("container {id:?}"), "exec")?;
            if c.execs.contains_key(exec_id) {
                return Err(Error::AlreadyExists(format!("exec {exec_id:?}")));
            }
            let io = ProcessIo {
                stdin_path: stdio.stdin,
                stdout_path: stdio.stdout,
                stderr_path: stdio.stderr,
                ..Default::default()
            };
            let mut p = Process::new(process_name(id, exec_id), io, terminal);
            p.spec = spec;
            p.quiet = quiet;
            c.execs.insert(exec_id.to_string(), p);
            Ok(())
        })?;
        if quiet {
            return Ok(());
        }
        self.publish(Event::ExecAdded {
            container_id: id.into(),
            exec_id: exec_id.into(),
        });
        Ok(())
    }

    /// Answers a Wait through `reply`: now if the process has exited (or is unknown), else when it exits.
    /// Nothing blocks meanwhile; `reply` is dropped unanswered if the process is deleted first.
    pub(crate) fn wait_then(
        &self,
        id: &str,
        exec_id: &str,
        reply: impl FnOnce(Result<Exit>) + Send + 'static,
    ) {
        let mut t = self.lock();
        let found = t
            .containers
            .get_mut(id)
            .ok_or_else(|| Error::NotFound(format!("container {id:?}")))
            .and_then(|c| c.process(id, exec_id));
        match found {
            Ok(p) => match p.life.exit() {
                None => p.waiters.push(Box::new(move |e| reply(Ok(e)))),
                Some(e) => {
                    drop(t);
                    reply(Ok(e));
                }
            },
            Err(e) => {
                drop(t);
                reply(Err(e));
            }
        }
    }

    /// Pause (`pause`) or Resume of container `id`: its state moves first, the runtime freezes or thaws it,
    /// and a failure moves it back.
    fn pause_resume(&self, id: &str, pause: bool) -> Result<()> {
        let (runtime, bundle) = self.with(id, |c| {
            if pause {
                c.init.life.pause()?;
            } else {
                c.init.life.resume()?;
            }
            Ok((c.runtime.clone(), c.bundle.clone()))
        })?;
        let verb = if pause { "pause" } else { "resume" };
        if let Err(e) = runtime.run(&[verb, id], None, &bundle) {
            let _ = self.with(id, |c| {
                if pause {
                    c.init.life.pause_failed();
                } else {
                    c.init.life.resume_failed();
                }
                Ok(())
            });
            return Err(e);
        }
        let container_id = id.to_string();
        self.publish(if pause {
            Event::Paused { container_id }
        } else {
            Event::Resumed { container_id }
        });
        Ok(())
    }

    /// Pause: freezes container `id`.
    pub(crate) fn pause(&self, id: &str) -> Result<()> {
        self.pause_resume(id, true)
    }

    /// Resume: thaws container `id`.
    pub(crate) fn resume(&self, id: &str) -> Result<()> {
        self.pause_resume(id, false)
    }

    /// Pids: the processes of container `id`, as its runtime lists them.
    pub(crate) fn pids(&self, id: &str) -> Result<Vec<u32>> {
        let (runtime, bundle) = self.runtime_of(id)?;
        let out = runtime.run(&["ps", "--format", "json", id], None, &bundle)?;
        serde_json::from_str(out.trim())
            .map_err(|e| Error::Runtime(format!("runtime ps output {out:?}: {e}")))
    }

    /// CloseIO: with `stdin`, closes the process's stdin (it reads EOF).
    pub(crate) fn close_io(&self, id: &str, exec_id: &str, stdin: bool) -> Result<()> {
        self.with_process(id, exec_id, |p| {
            if stdin {
                p.io.stdin.lock().unwrap_or_else(|p| p.into_inner()).take();
            }
            Ok(())
        })
    }

    /// ResizePty: sets the size of the process's terminal.
    pub(crate) fn resize_pty(&self, id: &str, exec_id: &str, width: u32, height: u32) -> Result<()> {
        let console = self.with_process(id, exec_id, |p| Ok(p.io.console.clone()))?;
        let Some(master) = console else {
            return Err(Error::NoTerminal(process_name(id, exec_id)));
        };
        crate::console::resize(&master, width, height)
    }

    /// Update of container `id`: `reopen_logs` reopens its CRI log files (kubelet rotated them);
    /// `resources` (OCI `LinuxResources` JSON) go to the runtime's `update`.
    pub(crate) fn update(&self, id: &str, reopen_logs: bool, resources: Option<&[u8]>) -> Result<()> {
        let (runtime, bundle, logs) = self.with(id, |c| {
            let mut logs: Vec<_> = c.init.io.log.iter().cloned().collect();
            logs.extend(c.execs.values().filter_map(|p| p.io.log.clone()));
            Ok((c.runtime.clone(), c.bundle.clone(), logs))
        })?;
        if reopen_logs {
            for l in logs {
                l.reopen()?;
            }
        }
        if let Some(res) = resources {
            let file = bundle.join(".update.json");
            crius_common::private::write(&file, res).map_err(|source| Error::Io {
                context: format!("writing {}", file.display()),
                source,
            })?;
            let f = file.display().to_string();
            let r = runtime.run(&["update", "--resources", &f, id], None, &bundle);
            let _ = std::fs::remove_file(&file);
            r?;
        }
        Ok(())
    }

    /// Stats: the `data` of the runtime's `events --stats` for container `id` (runc's layout).
    pub(crate) fn stats(&self, id: &str) -> Result<serde_json::Value> {
        let (runtime, bundle) = self.runtime_of(id)?;
        let out = runtime.run(&["events", "--stats", id], None, &bundle)?;
        let mut v: serde_json::Value = serde_json::from_str(out.trim())
            .map_err(|e| Error::Runtime(format!("runtime stats output: {e}")))?;
        Ok(v["data"].take())
    }
}
