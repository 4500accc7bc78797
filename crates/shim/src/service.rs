//! The ttrpc `containerd.task.v2.Task` service: a thin adapter, in runwasi's shape. Each method converts its
//! request for [`Tasks`], calls it, and converts the answer (or the error, through its one mapping) back; the
//! state machine is the domain's, not the generated trait's. Wait is served deferred, holding no thread; crius's
//! own ExecSync (`crate::exec_sync`) is served beside the Task API, detached: started on a worker, answered
//! when the exec is over.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use containerd_shim_protos as protos;
use protos::api::{self, Status};
use protos::protobuf::well_known_types::any::Any;
use protos::protobuf::{Message, MessageField};
use protos::shim::shim_ttrpc::{Task, create_task};
use protos::ttrpc::{self, TtrpcContext};

use crate::error::{Error, Result};
use crate::events::{timestamp, to_any};
use crate::exec_sync::ExecSyncRequest;
use crate::mounts::Mount;
use crate::reaper::Exit;
use crate::server::{Deferred, Reply, Server};
use crate::stdio::REOPEN_ANNOTATION;
use crate::task::{
    CheckpointTask, CreateTask, Deleted, ProcessState, RuntimeChoice, State, StdioPaths, Tasks,
};

/// The runtime options' type, as containerd's runc shims receive it.
const RUNC_OPTIONS: &str = "containerd.runc.v1.Options";
/// Checkpoint's options' type, likewise.
const CHECKPOINT_OPTIONS: &str = "containerd.runc.v1.CheckpointOptions";

/// The Task service over the pod's containers.
pub(crate) struct Service {
    tasks: Tasks,
}

/// The ttrpc server of `tasks`: every Task method, Wait answered when the process exits.
pub(crate) fn server(tasks: Tasks) -> Arc<Server> {
    let waiter = tasks.clone();
    let wait: Deferred =
        Box::new(
            move |req, reply: Reply| match api::WaitRequest::parse_from_bytes(&req.payload) {
                Ok(w) => waiter.wait_then(&w.id, &w.exec_id, move |r| reply.send(wait_response(r))),
                Err(e) => {
                    let e = Error::InvalidArgument(format!("decoding WaitRequest: {e}"));
                    reply.send::<api::WaitResponse>(Err(e.into()));
                }
            },
        );
    let deferred = HashMap::from([("/containerd.task.v2.Task/Wait".to_string(), wait)]);
    let runner = tasks.clone();
    let exec_sync: Deferred =
        Box::new(
            move |req, reply: Reply| match ExecSyncRequest::decode(&req.payload) {
                Ok(r) => runner.exec_sync(r, move |r| reply.send_raw(r.map(|a| a.encode()))),
                Err(e) => {
                    let e = Error::InvalidArgument(format!("decoding ExecSyncRequest: {e}"));
                    reply.send_raw(Err(e));
                }
            },
        );
    let path = format!("/{}/{}", crate::exec_sync::SERVICE, crate::exec_sync::METHOD);
    let detached = HashMap::from([(path, exec_sync)]);
    let service: Arc<dyn Task + Send + Sync> = Arc::new(Service { tasks });
    Server::with_detached(create_task(service), deferred, detached)
}

fn wait_response(r: Result<Exit>) -> ttrpc::Result<api::WaitResponse> {
    let e = r?;
    Ok(api::WaitResponse {
        exit_status: e.status,
        exited_at: Some(timestamp(e.at)).into(),
        ..Default::default()
    })
}

/// The runtime named by the request's `containerd.runc.v1.Options`, if any.
fn runtime_choice(options: &MessageField<Any>) -> Result<RuntimeChoice> {
    let Some(any) = options.as_ref().filter(|a| a.type_url.ends_with(RUNC_OPTIONS)) else {
        return Ok(RuntimeChoice::default());
    };
    let o = protos::shim::oci::Options::parse_from_bytes(&any.value)
        .map_err(|e| Error::InvalidArgument(format!("runtime options: {e}")))?;
    let path = |s: String| (!s.is_empty()).then(|| PathBuf::from(s));
    Ok(RuntimeChoice {
        binary: path(o.binary_name),
        root: path(o.root),
        systemd_cgroup: o.systemd_cgroup,
    })
}

/// Checkpoint's request as containerd's runc shim reads it: the image path is the options' `image_path`, else
/// the request's `path`; without options the container keeps running.
fn checkpoint_of(req: &api::CheckpointTaskRequest) -> Result<CheckpointTask> {
    let o = match req.options.as_ref() {
        Some(any) if any.type_url.ends_with(CHECKPOINT_OPTIONS) => {
            protos::shim::oci::CheckpointOptions::parse_from_bytes(&any.value)
                .map_err(|e| Error::InvalidArgument(format!("checkpoint options: {e}")))?
        }
        Some(any) => {
            return Err(Error::InvalidArgument(format!(
                "checkpoint options of type {:?}: only {CHECKPOINT_OPTIONS} is read",
                any.type_url
            )));
        }
        None => Default::default(),
    };
    let path = |s: &str| (!s.is_empty()).then(|| PathBuf::from(s));
    Ok(CheckpointTask {
        image_path: path(&o.image_path).unwrap_or_else(|| PathBuf::from(&req.path)),
        work_path: path(&o.work_path),
        exit: o.exit,
        open_tcp: o.open_tcp,
        external_unix_sockets: o.external_unix_sockets,
        file_locks: o.file_locks,
        terminal: o.terminal,
        cgroups_mode: o.cgroups_mode,
    })
}

fn mount_of(m: &api::Mount) -> Mount {
    Mount {
        kind: m.type_.clone(),
        source: m.source.clone(),
        target: m.target.clone(),
        options: m.options.clone(),
    }
}

/// The protocol's status of a process.
fn status(p: &ProcessState) -> Status {
    match p.state {
        State::Created | State::Starting => Status::CREATED,
        State::Running => Status::RUNNING,
        State::Paused => Status::PAUSED,
        State::Exited => Status::STOPPED,
        // Being deleted: whatever it was, created or stopped.
        State::Deleting if p.exit.is_some() => Status::STOPPED,
        State::Deleting => Status::CREATED,
    }
}

fn delete_response(d: Deleted) -> api::DeleteResponse {
    api::DeleteResponse {
        pid: d.pid,
        exit_status: d.exit.map(|e| e.status).unwrap_or(0),
        exited_at: d.exit.map(|e| timestamp(e.at)).into(),
        ..Default::default()
    }
}

impl Task for Service {
    fn create(
        &self,
        _: &TtrpcContext,
        req: api::CreateTaskRequest,
    ) -> ttrpc::Result<api::CreateTaskResponse> {
        let pid = self.tasks.create(CreateTask {
            runtime: runtime_choice(&req.options),
            rootfs: req.rootfs.iter().map(mount_of).collect(),
            bundle: PathBuf::from(req.bundle),
            stdio: StdioPaths {
                stdin: req.stdin,
                stdout: req.stdout,
                stderr: req.stderr,
            },
            terminal: req.terminal,
            checkpoint: (!req.checkpoint.is_empty()).then(|| PathBuf::from(&req.checkpoint)),
            id: req.id,
        })?;
        Ok(api::CreateTaskResponse {
            pid,
            ..Default::default()
        })
    }

    fn start(&self, _: &TtrpcContext, req: api::StartRequest) -> ttrpc::Result<api::StartResponse> {
        let pid = self.tasks.start(&req.id, &req.exec_id)?;
        Ok(api::StartResponse {
            pid,
            ..Default::default()
        })
    }

    fn state(&self, _: &TtrpcContext, req: api::StateRequest) -> ttrpc::Result<api::StateResponse> {
        let p = self.tasks.state(&req.id, &req.exec_id)?;
        Ok(api::StateResponse {
            id: if req.exec_id.is_empty() {
                req.id
            } else {
                req.exec_id.clone()
            },
            bundle: p.bundle.display().to_string(),
            pid: p.pid,
            status: status(&p).into(),
            stdin: p.stdio.stdin,
            stdout: p.stdio.stdout,
            stderr: p.stdio.stderr,
            terminal: p.terminal,
            exit_status: p.exit.map(|e| e.status).unwrap_or(0),
            exited_at: p.exit.map(|e| timestamp(e.at)).into(),
            exec_id: req.exec_id,
            ..Default::default()
        })
    }

    fn exec(&self, _: &TtrpcContext, req: api::ExecProcessRequest) -> ttrpc::Result<api::Empty> {
        let stdio = StdioPaths {
            stdin: req.stdin,
            stdout: req.stdout,
            stderr: req.stderr,
        };
        let spec = req.spec.into_option().map(|a| a.value).unwrap_or_default();
        self.tasks
            .exec(&req.id, &req.exec_id, stdio, req.terminal, spec)?;
        Ok(api::Empty::new())
    }

    fn checkpoint(&self, _: &TtrpcContext, req: api::CheckpointTaskRequest) -> ttrpc::Result<api::Empty> {
        let task = checkpoint_of(&req)?;
        self.tasks.checkpoint(&req.id, &task)?;
        Ok(api::Empty::new())
    }

    fn kill(&self, _: &TtrpcContext, req: api::KillRequest) -> ttrpc::Result<api::Empty> {
        self.tasks.kill(&req.id, &req.exec_id, req.signal, req.all)?;
        Ok(api::Empty::new())
    }

    fn delete(&self, _: &TtrpcContext, req: api::DeleteRequest) -> ttrpc::Result<api::DeleteResponse> {
        Ok(delete_response(self.tasks.delete(&req.id, &req.exec_id)?))
    }

    fn pids(&self, _: &TtrpcContext, req: api::PidsRequest) -> ttrpc::Result<api::PidsResponse> {
        let pids = self.tasks.pids(&req.id)?;
        Ok(api::PidsResponse {
            processes: pids
                .into_iter()
                .map(|pid| api::ProcessInfo {
                    pid,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        })
    }

    fn pause(&self, _: &TtrpcContext, req: api::PauseRequest) -> ttrpc::Result<api::Empty> {
        self.tasks.pause(&req.id)?;
        Ok(api::Empty::new())
    }

    fn resume(&self, _: &TtrpcContext, req: api::ResumeRequest) -> ttrpc::Result<api::Empty> {
        self.tasks.resume(&req.id)?;
        Ok(api::Empty::new())
    }

    fn close_io(&self, _: &TtrpcContext, req: api::CloseIORequest) -> ttrpc::Result<api::Empty> {
        self.tasks.close_io(&req.id, &req.exec_id, req.stdin)?;
        Ok(api::Empty::new())
    }

    fn resize_pty(&self, _: &TtrpcContext, req: api::ResizePtyRequest) -> ttrpc::Result<api::Empty> {
        self.tasks
            .resize_pty(&req.id, &req.exec_id, req.width, req.height)?;
        Ok(api::Empty::new())
    }

    fn update(&self, _: &TtrpcContext, req: api::UpdateTaskRequest) -> ttrpc::Result<api::Empty> {
        let reopen = req.annotations.contains_key(REOPEN_ANNOTATION);
        let resources = req.resources.as_ref().map(|a| a.value.as_slice());
        self.tasks.update(&req.id, reopen, resources)?;
        Ok(api::Empty::new())
    }

    fn wait(&self, _: &TtrpcContext, req: api::WaitRequest) -> ttrpc::Result<api::WaitResponse> {
        // The server answers Wait deferred; this blocking form is the trait's, for other servers.
        let (tx, rx) = std::sync::mpsc::channel();
        self.tasks.wait_then(&req.id, &req.exec_id, move |r| {
            let _ = tx.send(r);
        });
        let what = if req.exec_id.is_empty() {
            "the init process".to_string()
        } else {
            format!("exec {:?}", req.exec_id)
        };
        let r = rx.recv().unwrap_or_else(|_| {
            Err(Error::NotFound(format!(
                "{what} of {:?} (deleted before it exited)",
                req.id
            )))
        });
        wait_response(r)
    }

    fn stats(&self, _: &TtrpcContext, req: api::StatsRequest) -> ttrpc::Result<api::StatsResponse> {
        let data = self.tasks.stats(&req.id)?;
        Ok(api::StatsResponse {
            stats: Some(to_any(&crate::stats::metrics(&data))).into(),
            ..Default::default()
        })
    }

    fn connect(&self, _: &TtrpcContext, req: api::ConnectRequest) -> ttrpc::Result<api::ConnectResponse> {
        Ok(api::ConnectResponse {
            shim_pid: std::process::id(),
            task_pid: self.tasks.init_pid(&req.id),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        })
    }

    fn shutdown(&self, _: &TtrpcContext, _: api::ShutdownRequest) -> ttrpc::Result<api::Empty> {
        // Containers of the pod still here keep the shim alive.
        let _ = self.tasks.finish_if_empty();
        Ok(api::Empty::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protos::ttrpc::Code;

    #[test]
    fn runtime_options_choose_the_binary_and_root() {
        let o = protos::shim::oci::Options {
            binary_name: "/usr/bin/runc".into(),
            ..Default::default()
        };
        let any = Any {
            type_url: "containerd.runc.v1.Options".into(),
            value: o.write_to_bytes().unwrap(),
            ..Default::default()
        };
        let c = runtime_choice(&Some(any).into()).unwrap();
        assert_eq!(c.binary, Some(PathBuf::from("/usr/bin/runc")));
        assert_eq!(c.root, None);
        let other = Any {
            type_url: "something.else".into(),
            value: vec![0xff],
            ..Default::default()
        };
        assert!(runtime_choice(&Some(other).into()).unwrap().binary.is_none());
        let bad = Any {
            type_url: "containerd.runc.v1.Options".into(),
            value: vec![0xff, 0xff],
            ..Default::default()
        };
        let e = ttrpc::Error::from(runtime_choice(&Some(bad).into()).unwrap_err());
        assert!(matches!(e, ttrpc::Error::RpcStatus(s) if s.code() == Code::INVALID_ARGUMENT));
    }

    #[test]
    fn checkpoint_options_are_read_as_containerds_runc_shim_reads_them() {
        let mut req = api::CheckpointTaskRequest {
            id: "c1".into(),
            path: "/ckpt".into(),
            ..Default::default()
        };
        let t = checkpoint_of(&req).unwrap();
        assert_eq!((t.image_path, t.exit), (PathBuf::from("/ckpt"), false));
        let o = protos::shim::oci::CheckpointOptions {
            exit: true,
            file_locks: true,
            work_path: "/work".into(),
            image_path: "/img".into(),
            ..Default::default()
        };
        req.options = Some(Any {
            type_url: "containerd.runc.v1.CheckpointOptions".into(),
            value: o.write_to_bytes().unwrap(),
            ..Default::default()
        })
        .into();
        let t = checkpoint_of(&req).unwrap();
        assert_eq!(t.image_path, PathBuf::from("/img"));
        assert_eq!(t.work_path, Some(PathBuf::from("/work")));
        assert!(t.exit && t.file_locks && !t.open_tcp);
        req.options = Some(Any {
            type_url: "something.else".into(),
            ..Default::default()
        })
        .into();
        assert!(
            checkpoint_of(&req)
                .unwrap_err()
                .to_string()
                .contains("something.else")
        );
    }

    #[test]
    fn a_process_being_deleted_reports_what_it_was() {
        let p = |state, exit| ProcessState {
            bundle: PathBuf::new(),
            pid: 1,
            state,
            exit,
            stdio: StdioPaths::default(),
            terminal: false,
        };
        let exit = Some(Exit {
            status: 0,
            at: std::time::SystemTime::now(),
        });
        assert_eq!(status(&p(State::Starting, None)), Status::CREATED);
        assert_eq!(status(&p(State::Deleting, None)), Status::CREATED);
        assert_eq!(status(&p(State::Deleting, exit)), Status::STOPPED);
        assert_eq!(status(&p(State::Exited, exit)), Status::STOPPED);
    }
}
