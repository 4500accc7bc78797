//! ExecSync: a command run in a running container through its shim, its output captured
//! ([`crate::exec::Capture`]).

use containerd_shim_protos::api as task;
use containerd_shim_protos::ttrpc;
use crius_shim::client;
use k8s_cri::v1 as cri;
use tonic::Status;

use super::{Container, Containers, shim_status};

impl Containers {
    /// ExecSync: runs `cmd` in the running container (its process settings, these arguments) and returns its
    /// stdout, stderr and exit code. `timeout` seconds (0: none) over, the process is killed and the call is
    /// DeadlineExceeded.
    pub fn exec_sync(&self, id: &str, cmd: &[String], timeout: i64) -> Result<cri::ExecSyncResponse, Status> {
        let c = self.get_or_not_found(id)?;
        if cmd.is_empty() {
            return Err(Status::invalid_argument("ExecSync: cmd is empty"));
        }
        if self.observe(&c).state != cri::ContainerState::ContainerRunning {
            return Err(Status::failed_precondition(format!(
                "ExecSync in {}: the container is not running",
                c.record.id
            )));
        }
        let bundle = self.bundle(&c.record.id);
        let spec: serde_json::Value = std::fs::read(bundle.join("config.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| Status::internal(format!("ExecSync: reading {}/config.json", bundle.display())))?;
        let mut process = spec["process"].clone();
        process["args"] = serde_json::json!(cmd);
        process["terminal"] = serde_json::json!(false);
        let exec_id = format!("exec-{}", &crate::pod::random_id()?[..16]);
        let dir = bundle.join(&exec_id);
        let out = crate::exec::Capture::new(&dir)?;
        let result = self.run_exec(&c, &exec_id, &process, &out, timeout);
        let del = task::DeleteRequest {
            id: c.record.id.clone(),
            exec_id: exec_id.clone(),
            ..Default::default()
        };
        let _ = self.call(&c.record.sandbox_id, |s| s.delete(client::ctx(10), &del));
        let (stdout, stderr) = out.finish();
        let _ = std::fs::remove_dir_all(&dir);
        let exit_code = result?;
        Ok(cri::ExecSyncResponse {
            stdout,
            stderr,
            exit_code,
        })
    }

    fn run_exec(
        &self,
        c: &Container,
        exec_id: &str,
        process: &serde_json::Value,
        out: &crate::exec::Capture,
        timeout: i64,
    ) -> Result<i32, Status> {
        let (id, sandbox) = (c.record.id.clone(), c.record.sandbox_id.clone());
        let what = |e| shim_status(&format!("ExecSync in {id}"), e);
        let req = task::ExecProcessRequest {
            id: id.clone(),
            exec_id: exec_id.into(),
            stdout: out.stdout_path(),
            stderr: out.stderr_path(),
            spec: Some(containerd_shim_protos::protobuf::well_known_types::any::Any {
                type_url: "types.containerd.io/opencontainers/runtime-spec/1/Process".into(),
                value: process.to_string().into_bytes(),
                ..Default::default()
            })
            .into(),
            ..Default::default()
        };
        self.call(&sandbox, |s| s.exec(client::ctx(30), &req))
            .map_err(what)?;
        let start = task::StartRequest {
            id: id.clone(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        self.call(&sandbox, |s| s.start(client::ctx(60), &start))
            .map_err(what)?;
        out.started();
        let wait = task::WaitRequest {
            id: id.clone(),
            exec_id: exec_id.into(),
            ..Default::default()
        };
        let secs = if timeout > 0 {
            timeout as u64
        } else {
            365 * 24 * 3600
        };
        match self.call(&sandbox, |s| s.wait(client::ctx(secs), &wait)) {
            Ok(w) => Ok(w.exit_status as i32),
            Err(ttrpc::Error::RpcStatus(s)) if s.code() != ttrpc::Code::DEADLINE_EXCEEDED => {
                Err(what(ttrpc::Error::RpcStatus(s)))
            }
            Err(_) => {
                // Over time: the process goes, and the caller hears why.
                let kill = task::KillRequest {
                    id: id.clone(),
                    exec_id: exec_id.into(),
                    signal: 9,
                    ..Default::default()
                };
                let _ = self.call(&sandbox, |s| s.kill(client::ctx(10), &kill));
                let _ = self.call(&sandbox, |s| s.wait(client::ctx(30), &wait));
                Err(Status::deadline_exceeded(format!(
                    "ExecSync in {id}: {:?} still ran after {timeout} s: killed",
                    process["args"]
                )))
            }
        }
    }
}
