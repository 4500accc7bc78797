//! ExecSync in the shim (`crate::exec_sync`): an exec defined, started, its output captured in memory, its
//! exit awaited with the caller's timeout, and deleted, in one call. Nothing waits on a thread: once started,
//! the exec's end, its streams' ends and the timeout are events on the loop, and the answer goes when the
//! process exited and its output ended (or [`DRAIN`] after the exit, for a background child that keeps the
//! streams open). Its exec publishes no event (ExecAdded, ExecStarted, Exit): the answer says it all.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{StdioPaths, Tasks};
use crate::capture::Captured;
use crate::error::{Error, Result};
use crate::exec_sync::{ExecSyncRequest, ExecSyncResponse};
use crate::reactor::Timer;
use crate::reaper::Exit;

/// How long output is still read after the process exited.
pub(crate) const DRAIN: Duration = Duration::from_secs(2);

/// The answer's destination.
type Answer = Box<dyn FnOnce(Result<ExecSyncResponse>) + Send>;

/// One ExecSync under way, shared by its events.
struct Run {
    tasks: Tasks,
    id: String,
    exec_id: String,
    captured: Arc<Captured>,
    state: Mutex<RunState>,
}

#[derive(Default)]
struct RunState {
    exit: Option<Exit>,
    ended: bool,
    timed_out: bool,
    /// The timeout's, then the drain's timer.
    timer: Option<Timer>,
    /// Taken by whichever event finishes the call.
    answer: Option<Answer>,
}

impl Run {
    fn state(&self) -> std::sync::MutexGuard<'_, RunState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Over time: the process is killed (its exit then finishes the call).
    fn time_out(&self) {
        {
            let mut s = self.state();
            if s.answer.is_none() || s.exit.is_some() {
                return;
            }
            s.timed_out = true;
        }
        let _ = self
            .tasks
            .kill(&self.id, &self.exec_id, libc::SIGKILL as u32, false);
    }

    fn exited(self: &Arc<Self>, r: Result<Exit>) {
        let exit = match r {
            Ok(e) => e,
            Err(e) => return self.finish(Err(e)),
        };
        let drain = {
            let mut s = self.state();
            s.exit = Some(exit);
            if let Some(t) = s.timer.take() {
                t.fire_now();
            }
            !s.ended
        };
        if !drain {
            return self.finish(Ok(exit));
        }
        let me = self.clone();
        match self
            .tasks
            .inner
            .reactor
            .timer(DRAIN, move |_| me.finish(Ok(exit)))
        {
            Ok(t) => self.state().timer = Some(t),
            Err(_) => self.finish(Ok(exit)),
        }
    }

    fn streams_ended(&self) {
        let exit = {
            let mut s = self.state();
            s.ended = true;
            s.exit
        };
        if let Some(e) = exit {
            self.finish(Ok(e));
        }
    }

    /// Answers, once: the exec is deleted and its output taken.
    fn finish(&self, r: Result<Exit>) {
        self.answer(r, true);
    }

    /// Answers, once, with the output taken; `delete`: the exec is deleted first (not when it is being
    /// deleted already, under the table's lock).
    fn answer(&self, r: Result<Exit>, delete: bool) {
        let (answer, timed_out) = {
            let mut s = self.state();
            let Some(a) = s.answer.take() else { return };
            if let Some(t) = s.timer.take() {
                t.fire_now();
            }
            (a, s.timed_out)
        };
        let (stdout, stderr) = self.captured.take();
        if delete {
            let _ = self.tasks.delete(&self.id, &self.exec_id);
        }
        answer(r.map(|exit| ExecSyncResponse {
            exit_status: exit.status,
            timed_out,
            stdout,
            stderr,
        }));
    }
}

impl Tasks {
    /// ExecSync: runs `req`'s process in its running container and calls `answer` with its exit and output
    /// once it is over, on whichever thread sees that. Blocks only while the exec starts.
    pub(crate) fn exec_sync(
        &self,
        req: ExecSyncRequest,
        answer: impl FnOnce(Result<ExecSyncResponse>) + Send + 'static,
    ) {
        let (id, exec_id) = (req.id.as_str(), req.exec_id.as_str());
        let stdio = StdioPaths {
            stdout: crate::stdio::CAPTURE.into(),
            ..Default::default()
        };
        // No events: criusd hears the end in the answer.
        if let Err(e) = self.define_exec(id, exec_id, (stdio, false), req.process.clone(), true) {
            return answer(Err(e));
        }
        let started = self.start(id, exec_id).and_then(|_| {
            self.with_process(id, exec_id, |p| {
                p.io.captured
                    .clone()
                    .ok_or_else(|| Error::Host(format!("exec {exec_id:?}: its output is not captured")))
            })
        });
        let captured = match started {
            Ok(c) => c,
            Err(e) => {
                let _ = self.delete(id, exec_id);
                return answer(Err(e));
            }
        };
        let run = Arc::new(Run {
            tasks: self.clone(),
            id: id.to_string(),
            exec_id: exec_id.to_string(),
            captured,
            state: Mutex::new(RunState {
                answer: Some(Box::new(answer)),
                ..Default::default()
            }),
        });
        if req.timeout_ms > 0 {
            let me = run.clone();
            let at = Duration::from_millis(req.timeout_ms);
            if let Ok(t) = self.inner.reactor.timer(at, move |_| me.time_out()) {
                run.state().timer = Some(t);
            }
        }
        let me = run.clone();
        run.captured.when_ended(move || me.streams_ended());
        let mut on_exit = OnExit(Some(run));
        self.wait_then(id, exec_id, move |r| {
            if let Some(run) = on_exit.0.take() {
                run.exited(r);
            }
        });
    }
}

/// The exec's wait, held by its process: dropped unused, the process was deleted (its container too, or a
/// Delete from another caller) before it exited, and the call is answered so.
struct OnExit(Option<Arc<Run>>);

impl Drop for OnExit {
    fn drop(&mut self) {
        if let Some(run) = self.0.take() {
            let what = format!(
                "exec {:?} of container {:?} (deleted before it exited)",
                run.exec_id, run.id
            );
            // Dropped under the table's lock: no delete from here.
            run.answer(Err(Error::NotFound(what)), false);
        }
    }
}
