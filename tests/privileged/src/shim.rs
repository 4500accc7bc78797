//! containerd-shim-crius-v2 for the shim suites (shim, vm_shim): its task calls over ttrpc with the test's
//! usual arguments, an events service recording what shims publish, and the cleanup of what a test's shims hold.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use containerd_shim_protos as protos;
use crius_shim::client;
use crius_test_support::daemon::built_binary;
use crius_test_support::{Bundle, shims};
use protos::api;
use protos::ttrpc::{self, Code};

/// The shim binary.
pub fn shim() -> PathBuf {
    built_binary("containerd-shim-crius-v2")
}

/// Whatever a failing test leaves: containers deleted through the runtime, then the shims that held them.
pub struct Cleanup {
    /// The containerd namespace the containers are in (`test` for shims the tests start themselves).
    pub namespace: &'static str,
    /// The containers.
    pub ids: Vec<String>,
    /// What the shims' command lines contain (the owner address, unique per test).
    pub needle: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        shims::delete_containers(self.namespace, &self.ids);
        shims::kill_shims(&self.needle);
    }
}

/// Waits (20 s at most) until `f`, failing with `what`.
pub fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` runs (a zombie does not).
pub fn alive(pid: i32) -> bool {
    // A zombie still has /proc/<pid>; check its state.
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| !s.rsplit(')').next().unwrap_or("").trim_start().starts_with('Z'))
        .unwrap_or(false)
}

/// An events service, as containerd and criusd serve it, recording what shims publish.
#[derive(Clone, Default)]
pub struct Events(pub Arc<Mutex<Vec<Published>>>);

/// A published event: its topic and its encoded message.
pub type Published = (String, Vec<u8>);

impl protos::Events for Events {
    fn forward(&self, _: &ttrpc::TtrpcContext, req: api::ForwardRequest) -> ttrpc::Result<api::Empty> {
        let env = req.envelope.unwrap_or_default();
        let value = env.event.as_ref().map(|a| a.value.clone()).unwrap_or_default();
        self.0.lock().unwrap().push((env.topic.clone(), value));
        Ok(api::Empty::new())
    }
}

impl Events {
    /// The exit statuses published so far, by container.
    pub fn exits(&self) -> std::collections::HashMap<String, u32> {
        use protos::protobuf::Message;
        self.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(t, _)| t == "/tasks/exit")
            .map(|(_, v)| {
                let e = protos::events::task::TaskExit::parse_from_bytes(v).unwrap();
                (e.container_id, e.exit_status)
            })
            .collect()
    }

    /// The topics published so far, in order.
    pub fn topics(&self) -> Vec<String> {
        self.0.lock().unwrap().iter().map(|e| e.0.clone()).collect()
    }
}

/// [`Events`] served on a unix socket until dropped.
pub struct EventServer {
    server: Option<ttrpc::Server>,
}

impl EventServer {
    /// Serves `events` on `path`.
    pub fn start(path: &Path, events: &Events) -> EventServer {
        let _ = std::fs::remove_file(path);
        let l = std::os::unix::net::UnixListener::bind(path).unwrap();
        use std::os::fd::IntoRawFd;
        let svc: Arc<dyn protos::Events + Send + Sync> = Arc::new(events.clone());
        let mut server = ttrpc::Server::new()
            .add_listener(l.into_raw_fd())
            .unwrap()
            .register_service(protos::create_events(svc));
        server.start().unwrap();
        EventServer { server: Some(server) }
    }
}

impl Drop for EventServer {
    fn drop(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }
}

/// A bundle of `args` whose config names pod `pod` (the shim serves one pod).
pub fn pod_bundle(args: &[&str], pod: &str) -> Bundle {
    let mut b = Bundle::new(args);
    b.config["annotations"] = serde_json::json!({"io.kubernetes.cri.sandbox-id": pod});
    b.write();
    b
}

/// Create of `id` from bundle `b`, its stdout to `stdout`: the task's pid.
pub fn create(c: &client::TaskClient, id: &str, b: &Bundle, stdout: &str) -> client::Result<u32> {
    let req = api::CreateTaskRequest {
        id: id.into(),
        bundle: b.path().display().to_string(),
        stdout: stdout.into(),
        ..Default::default()
    };
    c.create(client::ctx(20), &req).map(|r| r.pid)
}

/// Start: the task's pid.
pub fn start(c: &client::TaskClient, id: &str) -> client::Result<u32> {
    let req = api::StartRequest {
        id: id.into(),
        ..Default::default()
    };
    c.start(client::ctx(20), &req).map(|r| r.pid)
}

/// State.
pub fn state(c: &client::TaskClient, id: &str) -> client::Result<api::StateResponse> {
    let req = api::StateRequest {
        id: id.into(),
        ..Default::default()
    };
    c.state(client::ctx(10), &req)
}

/// Wait (30 s at most), which must succeed: the exit status.
pub fn wait(c: &client::TaskClient, id: &str) -> u32 {
    let req = api::WaitRequest {
        id: id.into(),
        ..Default::default()
    };
    c.wait(client::ctx(30), &req).unwrap().exit_status
}

/// Kill of `id`'s init with `signal`, which must succeed.
pub fn kill(c: &client::TaskClient, id: &str, signal: u32) {
    let req = api::KillRequest {
        id: id.into(),
        signal,
        ..Default::default()
    };
    c.kill(client::ctx(10), &req).unwrap();
}

/// Delete.
pub fn delete(c: &client::TaskClient, id: &str) -> client::Result<api::DeleteResponse> {
    let req = api::DeleteRequest {
        id: id.into(),
        ..Default::default()
    };
    c.delete(client::ctx(20), &req)
}

/// The status code and message of a call that must have failed with one.
pub fn code(r: client::Result<impl std::fmt::Debug>) -> (Code, String) {
    match r {
        Err(client::Error::Refused { code, message }) => (code, message),
        other => panic!("expected an error status, got {other:?}"),
    }
}
