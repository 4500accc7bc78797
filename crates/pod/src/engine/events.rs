//! The runtime's container events (GetContainerEvents) as wake-ups for one sandbox's engine loop: a state
//! change wakes it at once, so states are read less often (kubelet's evented PLEG). None come from a runtime
//! that does not serve them (containerd 1.6), or once the stream broke: then the engine polls.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crius_api::cri;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;
use tokio::sync::Notify;
use tonic::transport::Channel;

/// The wake-ups of one sandbox.
pub(super) struct Events {
    pub notify: Arc<Notify>,
    alive: Arc<AtomicBool>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Events {
    /// Subscribes to the runtime's events of `sandbox`, if it serves them.
    pub async fn subscribe(rt: &mut RuntimeServiceClient<Channel>, sandbox: &str) -> Events {
        let notify = Arc::new(Notify::new());
        let alive = Arc::new(AtomicBool::new(false));
        let task = match rt.get_container_events(cri::GetEventsRequest {}).await {
            Ok(stream) => {
                alive.store(true, Ordering::Relaxed);
                let (notify, alive, sandbox) = (notify.clone(), alive.clone(), sandbox.to_string());
                let mut stream = stream.into_inner();
                Some(tokio::spawn(async move {
                    while let Ok(Some(e)) = stream.message().await {
                        if e.pod_sandbox_status.is_some_and(|s| s.id == sandbox) {
                            notify.notify_one();
                        }
                    }
                    alive.store(false, Ordering::Relaxed);
                    notify.notify_one();
                }))
            }
            Err(_) => None,
        };
        Events { notify, alive, task }
    }

    /// Whether events still come.
    pub fn live(&self) -> bool {
        self.alive.load(Ordering::Relaxed)
    }

    /// Ends the subscription.
    pub fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.alive.store(false, Ordering::Relaxed);
    }
}
