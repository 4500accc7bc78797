//! The events service criusd serves its shims (their `TTRPC_ADDRESS`, `<state>/events.sock`):
//! `containerd.services.events.ttrpc.v1.Events/Forward`, on the shim crate's one-thread ttrpc server. OOM kills
//! mark the container (ContainerStatus then says `OOMKilled`); exits are recorded with the container, so they
//! are known even once its shim is gone. Shims queue events while criusd is down and send them when it is
//! back, so nothing that happened meanwhile is lost.

use std::collections::HashMap;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;

use containerd_shim_protos::{self as protos, api, events::task as ev, protobuf::Message, topics, ttrpc};
use crius_shim::reactor::Reactor;
use crius_shim::server::Server;

use crate::container::Containers;

struct Receiver {
    containers: Arc<Containers>,
}

impl protos::Events for Receiver {
    fn forward(&self, _: &ttrpc::TtrpcContext, req: api::ForwardRequest) -> ttrpc::Result<api::Empty> {
        let env = req.envelope.unwrap_or_default();
        let value = env.event.as_ref().map(|a| a.value.clone()).unwrap_or_default();
        match env.topic.as_str() {
            topics::TASK_OOM_EVENT_TOPIC => {
                if let Ok(e) = ev::TaskOOM::parse_from_bytes(&value) {
                    tracing::info!(container = %e.container_id, "OOM kill");
                    self.containers.mark_oom(&e.container_id);
                }
            }
            topics::TASK_EXIT_EVENT_TOPIC => {
                if let Ok(e) = ev::TaskExit::parse_from_bytes(&value)
                    && e.id == e.container_id
                {
                    let at = e.exited_at.as_ref().map(crate::store::ns_of).unwrap_or(0);
                    self.containers
                        .mark_exit(&e.container_id, e.exit_status as i32, at);
                }
            }
            _ => {}
        }
        Ok(api::Empty::new())
    }
}

/// Serves the events service on `path` (a stale socket replaced) from a thread of its own.
pub fn serve(path: &Path, containers: Arc<Containers>) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    let reactor = Reactor::new()?;
    let svc: Arc<dyn protos::Events + Send + Sync> = Arc::new(Receiver { containers });
    let server = Server::new(protos::create_events(svc), HashMap::new());
    server.listen(&reactor, listener)?;
    std::thread::Builder::new()
        .name("shim-events".into())
        .spawn(move || reactor.run())?;
    Ok(())
}
