//! Waiting for a process without holding a thread, and pausing or resuming a container.

use containerd_shim_protos as protos;
use protos::api::{self, Status};
use protos::ttrpc::Code;

use super::{Result, Service, error, proc_mut, status_name};
use crate::events::{Event, timestamp};
use crate::reaper::Exit;

impl Service {
    /// Answers a Wait through `reply`: now if the process has exited (or is unknown), else when it exits.
    /// Nothing blocks meanwhile; `reply` is dropped unanswered if the process is deleted first.
    pub(crate) fn wait_then(
        &self,
        req: &api::WaitRequest,
        reply: impl FnOnce(Result<api::WaitResponse>) + Send + 'static,
    ) {
        let answer = |e: Exit| api::WaitResponse {
            exit_status: e.status,
            exited_at: Some(timestamp(e.at)).into(),
            ..Default::default()
        };
        let mut all = self.lock();
        let found = all
            .get_mut(&req.id)
            .ok_or_else(|| error(Code::NOT_FOUND, format!("container {:?} not found", req.id)))
            .and_then(|c| proc_mut(c, &req.id, &req.exec_id));
        match found {
            Ok(p) if p.exit.is_none() => p.waiters.push(Box::new(move |e| reply(Ok(answer(e))))),
            Ok(p) => {
                let e = p.exit.expect("exited");
                drop(all);
                reply(Ok(answer(e)));
            }
            Err(e) => {
                drop(all);
                reply(Err(e));
            }
        }
    }

    pub(super) fn pause_resume(&self, id: &str, pause: bool) -> Result<api::Empty> {
        let (runtime, bundle, status) =
            self.with(id, |c| Ok((c.runtime.clone(), c.bundle.clone(), c.init.status)))?;
        let (want, verb) = if pause {
            (Status::RUNNING, "pause")
        } else {
            (Status::PAUSED, "resume")
        };
        if status != want {
            return Err(error(
                Code::FAILED_PRECONDITION,
                format!("container {id:?} is {}: cannot {verb}", status_name(status)),
            ));
        }
        runtime
            .run(&[verb, id], None, &bundle)
            .map_err(|e| error(Code::INTERNAL, e))?;
        self.with(id, |c| {
            if c.init.status == want {
                c.init.status = if pause { Status::PAUSED } else { Status::RUNNING };
            }
            Ok(())
        })?;
        let container_id = id.to_string();
        self.inner.publisher.publish(if pause {
            Event::Paused { container_id }
        } else {
            Event::Resumed { container_id }
        });
        Ok(api::Empty::new())
    }
}
