//! `crius checkpoint`: a running container of a kept pod checkpointed through the CRI's CheckpointContainer
//! (criusd's own, with CRIU), its archive written on this node where the caller says. The container is the
//! one the pod's status names (`containerID: crius://<id>`), which must be running.

use std::time::Duration;

use crius_api::cri;
use crius_api::cri::runtime_service_client::RuntimeServiceClient;

use super::Pods;
use crate::{Error, status};

impl Pods {
    /// Checkpoints container `container` (empty: the only or first main one) of pod `namespace/pod` to the
    /// archive `location`, within `timeout_s` seconds (0: the runtime's default); returns its CRI id.
    pub(crate) async fn checkpoint(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        location: &str,
        timeout_s: i64,
    ) -> Result<String, Error> {
        if !location.starts_with('/') {
            return Err(Error::invalid(format!(
                "the checkpoint's location {location:?} must be an absolute path on the node"
            )));
        }
        let id = self.running_container(namespace, pod, container)?;
        let mut c = RuntimeServiceClient::new(self.inner.channel.clone());
        let req = cri::CheckpointContainerRequest {
            container_id: id.clone(),
            location: location.into(),
            timeout: timeout_s,
        };
        let mut call = tonic::Request::new(req);
        if timeout_s > 0 {
            // The runtime's own deadline answers first; this one only bounds a runtime that does not.
            call.set_timeout(Duration::from_secs(timeout_s as u64 + 30));
        }
        c.checkpoint_container(call).await.map_err(|status| {
            Error::Pod(crius_pod::Error::Cri {
                call: format!("CheckpointContainer of pod {pod:?}"),
                status: Box::new(status),
            })
        })?;
        Ok(id)
    }

    /// The CRI id of the running container `container` of pod `namespace/pod`.
    fn running_container(&self, namespace: &str, pod: &str, container: &str) -> Result<String, Error> {
        self.with_container(namespace, pod, container, |p, name| {
            let st = p.status.as_ref().and_then(|s| status::status_of(s, &name));
            let running = st.is_some_and(|s| s.state.as_ref().is_some_and(|s| s.running.is_some()));
            let id = st
                .and_then(|s| s.container_id.as_deref())
                .and_then(|id| id.strip_prefix("crius://"))
                .filter(|_| running);
            id.map(str::to_string).ok_or_else(|| {
                Error::invalid(format!(
                    "container {name:?} of pod {pod:?} is not running: nothing to checkpoint"
                ))
            })
        })
    }
}
