//! The plugin side of NRI, small: connect to the runtime's socket (or take the connection a runtime that started
//! the plugin handed over in `NRI_PLUGIN_SOCKET`), register with a name and index, serve the Plugin service
//! through a [`Handler`] whose methods default to "no change", and ask for container updates. criusd's test
//! plugin and this crate's tests are written with it.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use tokio::net::UnixStream;
use tokio::sync::watch;

use crate::host::plugin::{PLUGIN_SERVICE, RUNTIME_SERVICE};
use crate::mux::{Mux, PLUGIN_CONN, RUNTIME_CONN};
use crate::ttrpc::{self, Client, code, status};
use crate::{Error, api};

/// How long a call to the runtime may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// A plugin's answers to the runtime. An `Err(message)` fails the call: for CreateContainer and UpdateContainer
/// the runtime refuses the container with it.
#[async_trait::async_trait]
pub trait Handler: Send + Sync + 'static {
    /// The events to subscribe to ([`events`] makes the mask); the default, 0, is all of them.
    async fn configure(&self, _req: api::ConfigureRequest) -> Result<api::ConfigureResponse, String> {
        Ok(api::ConfigureResponse::default())
    }
    /// The runtime's pods and containers; a chunk with `more` set must be answered with `more` and no update.
    async fn synchronize(&self, req: api::SynchronizeRequest) -> Result<api::SynchronizeResponse, String> {
        Ok(api::SynchronizeResponse {
            update: Vec::new(),
            more: req.more,
        })
    }
    /// RunPodSandbox, StopPodSandbox, RemovePodSandbox, PostUpdatePodSandbox, PostCreateContainer, StartContainer,
    /// PostStartContainer, PostUpdateContainer, RemoveContainer: `event` says which; `container` is `None` for the pod events.
    async fn notify(
        &self,
        _event: api::Event,
        _pod: api::PodSandbox,
        _container: Option<api::Container>,
    ) -> Result<(), String> {
        Ok(())
    }
    /// UpdatePodSandbox.
    async fn update_pod_sandbox(&self, _req: api::UpdatePodSandboxRequest) -> Result<(), String> {
        Ok(())
    }
    /// CreateContainer: changes to the container, updates and evictions of others.
    async fn create_container(
        &self,
        _req: api::CreateContainerRequest,
    ) -> Result<api::CreateContainerResponse, String> {
        Ok(api::CreateContainerResponse::default())
    }
    /// UpdateContainer.
    async fn update_container(
        &self,
        _req: api::UpdateContainerRequest,
    ) -> Result<api::UpdateContainerResponse, String> {
        Ok(api::UpdateContainerResponse::default())
    }
    /// StopContainer: updates of other containers.
    async fn stop_container(
        &self,
        _req: api::StopContainerRequest,
    ) -> Result<api::StopContainerResponse, String> {
        Ok(api::StopContainerResponse::default())
    }
    /// ValidateContainerAdjustment: containerd and CRI-O ask it of a plugin subscribed to it, which a plugin
    /// subscribed to all events (mask 0) is; the default accepts. (crius's host does not ask it.)
    async fn validate_container_adjustment(
        &self,
        _req: api::ValidateContainerAdjustmentRequest,
    ) -> Result<api::ValidateContainerAdjustmentResponse, String> {
        Ok(api::ValidateContainerAdjustmentResponse::default())
    }
}

/// The ConfigureResponse.events mask of `events`.
pub fn events(events: &[api::Event]) -> i32 {
    events
        .iter()
        .map(|&e| e as i32)
        .filter(|&n| n > 0)
        .fold(0, |m, n| m | 1 << (n - 1))
}

/// A registered plugin's connection; dropping it closes the connection.
pub struct Stub {
    client: Client,
    mux: Mux,
    closed: watch::Receiver<bool>,
}

impl Stub {
    /// Connects to the runtime's socket and registers as `IDX-NAME`.
    pub async fn connect(
        socket: &Path,
        name: &str,
        idx: &str,
        handler: Arc<dyn Handler>,
    ) -> Result<Stub, Error> {
        let stream = UnixStream::connect(socket)
            .await
            .map_err(|e| Error::io(format!("connect to {}", socket.display()), e))?;
        Stub::register(stream, name, idx, handler).await
    }

    /// For a plugin the runtime started: registers on the connection it handed over (`NRI_PLUGIN_SOCKET`) with
    /// the name and index it gave (`NRI_PLUGIN_NAME`, `NRI_PLUGIN_IDX`). Call once per process.
    pub async fn from_env(handler: Arc<dyn Handler>) -> Result<Stub, Error> {
        let var = |k: &str| std::env::var(k).map_err(|_| Error::Protocol(format!("{k} is not set")));
        let (fd, name, idx) = (
            var("NRI_PLUGIN_SOCKET")?,
            var("NRI_PLUGIN_NAME")?,
            var("NRI_PLUGIN_IDX")?,
        );
        let fd: i32 = fd
            .parse()
            .map_err(|_| Error::Protocol(format!("NRI_PLUGIN_SOCKET={fd} is not an fd")))?;
        // SAFETY: the runtime handed this fd over for the plugin's connection and nothing else in the process
        // uses it; it is taken once (the doc says once per process).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let std = std::os::unix::net::UnixStream::from(fd);
        std.set_nonblocking(true)
            .map_err(|e| Error::io("NRI_PLUGIN_SOCKET", e))?;
        let stream = UnixStream::from_std(std).map_err(|e| Error::io("NRI_PLUGIN_SOCKET", e))?;
        Stub::register(stream, &name, &idx, handler).await
    }

    async fn register(
        stream: UnixStream,
        name: &str,
        idx: &str,
        handler: Arc<dyn Handler>,
    ) -> Result<Stub, Error> {
        let (mux, mut conns) = Mux::new(stream, &[PLUGIN_CONN, RUNTIME_CONN]);
        let (runtime_conn, plugin_conn) = (conns.pop().expect("two conns"), conns.pop().expect("two conns"));
        ttrpc::serve(plugin_conn, dispatch(handler));
        let (tx, closed) = watch::channel(false);
        let client = Client::new(runtime_conn, move || {
            let _ = tx.send(true);
        });
        let req = api::RegisterPluginRequest {
            plugin_name: name.into(),
            plugin_idx: idx.into(),
            nri_version: "v0.9.0".into(),
        };
        client
            .call::<_, api::Empty>(RUNTIME_SERVICE, "RegisterPlugin", &req, CALL_TIMEOUT)
            .await?;
        Ok(Stub { client, mux, closed })
    }

    /// Asks the runtime to update (and evict) containers; returns the updates that failed.
    pub async fn update_containers(
        &self,
        update: Vec<api::ContainerUpdate>,
        evict: Vec<api::ContainerEviction>,
    ) -> Result<Vec<api::ContainerUpdate>, Error> {
        let req = api::UpdateContainersRequest { update, evict };
        let resp: api::UpdateContainersResponse = self
            .client
            .call(RUNTIME_SERVICE, "UpdateContainers", &req, CALL_TIMEOUT)
            .await?;
        Ok(resp.failed)
    }

    /// Waits until the runtime closes the connection (or drops this plugin).
    pub async fn closed(&self) {
        let mut c = self.closed.clone();
        let _ = c.wait_for(|&closed| closed).await;
    }

    /// Closes the connection.
    pub async fn close(&self) {
        self.mux.close().await;
    }
}

/// Serves the Plugin service with `h`.
fn dispatch(h: Arc<dyn Handler>) -> ttrpc::Handler {
    Arc::new(move |service, method, payload| {
        let h = h.clone();
        Box::pin(async move {
            if service != PLUGIN_SERVICE {
                return Err(status(code::UNIMPLEMENTED, format!("{service}/{method}")));
            }
            let p = payload.as_slice();
            let bad = |e: prost::DecodeError| status(code::INVALID_ARGUMENT, format!("{method}: {e}"));
            let failed = |m: String| status(code::UNKNOWN, m);
            if let Some(n) = notification(&method, p) {
                let (event, pod, ctr) = n.map_err(bad)?;
                h.notify(event, pod.unwrap_or_default(), ctr)
                    .await
                    .map_err(failed)?;
                return Ok(Vec::new());
            }
            match method.as_str() {
                "Configure" => {
                    let r = h
                        .configure(api::ConfigureRequest::decode(p).map_err(bad)?)
                        .await
                        .map_err(failed)?;
                    Ok(r.encode_to_vec())
                }
                "Synchronize" => {
                    let r = h
                        .synchronize(api::SynchronizeRequest::decode(p).map_err(bad)?)
                        .await
                        .map_err(failed)?;
                    Ok(r.encode_to_vec())
                }
                "Shutdown" => Ok(api::Empty {}.encode_to_vec()),
                "UpdatePodSandbox" => {
                    let r = api::UpdatePodSandboxRequest::decode(p).map_err(bad)?;
                    h.update_pod_sandbox(r).await.map(|()| Vec::new()).map_err(failed)
                }
                "CreateContainer" => {
                    let r = h.create_container(api::CreateContainerRequest::decode(p).map_err(bad)?);
                    Ok(r.await.map_err(failed)?.encode_to_vec())
                }
                "UpdateContainer" => {
                    let r = h.update_container(api::UpdateContainerRequest::decode(p).map_err(bad)?);
                    Ok(r.await.map_err(failed)?.encode_to_vec())
                }
                "StopContainer" => {
                    let r = h.stop_container(api::StopContainerRequest::decode(p).map_err(bad)?);
                    Ok(r.await.map_err(failed)?.encode_to_vec())
                }
                "ValidateContainerAdjustment" => {
                    let r = api::ValidateContainerAdjustmentRequest::decode(p).map_err(bad)?;
                    let r = h.validate_container_adjustment(r);
                    Ok(r.await.map_err(failed)?.encode_to_vec())
                }
                _ => Err(status(code::UNIMPLEMENTED, format!("{service}/{method}"))),
            }
        })
    })
}

type Notification = (api::Event, Option<api::PodSandbox>, Option<api::Container>);

/// The event, pod and container of a method that only notifies; `None` for the others.
fn notification(method: &str, p: &[u8]) -> Option<Result<Notification, prost::DecodeError>> {
    use api::Event as E;
    macro_rules! pod {
        ($e:expr, $t:ty) => {
            <$t>::decode(p).map(|r| ($e, r.pod, None))
        };
    }
    macro_rules! ctr {
        ($e:expr, $t:ty) => {
            <$t>::decode(p).map(|r| ($e, r.pod, Some(r.container.unwrap_or_default())))
        };
    }
    Some(match method {
        "RunPodSandbox" => pod!(E::RunPodSandbox, api::RunPodSandboxRequest),
        "StopPodSandbox" => pod!(E::StopPodSandbox, api::StopPodSandboxRequest),
        "RemovePodSandbox" => pod!(E::RemovePodSandbox, api::RemovePodSandboxRequest),
        "PostUpdatePodSandbox" => pod!(E::PostUpdatePodSandbox, api::PostUpdatePodSandboxRequest),
        "PostCreateContainer" => ctr!(E::PostCreateContainer, api::PostCreateContainerRequest),
        "StartContainer" => ctr!(E::StartContainer, api::StartContainerRequest),
        "PostStartContainer" => ctr!(E::PostStartContainer, api::PostStartContainerRequest),
        "PostUpdateContainer" => ctr!(E::PostUpdateContainer, api::PostUpdateContainerRequest),
        "RemoveContainer" => ctr!(E::RemoveContainer, api::RemoveContainerRequest),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Defaults;
    impl Handler for Defaults {}

    /// containerd counts a plugin subscribed to all events (mask 0, the default) as a validator and asks it
    /// ValidateContainerAdjustment on every create: the default answer accepts, and PostUpdatePodSandbox is a
    /// notification like the others (both were "unimplemented", which failed containerd's creates).
    #[tokio::test]
    async fn the_default_handler_accepts_validation_and_hears_every_event() {
        let serve = dispatch(Arc::new(Defaults));
        let call = |method: &str, payload: Vec<u8>| serve(PLUGIN_SERVICE.into(), method.into(), payload);
        let req = api::ValidateContainerAdjustmentRequest {
            adjust: Some(api::ContainerAdjustment::default()),
            ..Default::default()
        };
        let answer = call("ValidateContainerAdjustment", req.encode_to_vec())
            .await
            .unwrap();
        let resp = api::ValidateContainerAdjustmentResponse::decode(answer.as_slice()).unwrap();
        assert!(!resp.reject, "{resp:?}");
        let post = api::PostUpdatePodSandboxRequest::default().encode_to_vec();
        assert!(call("PostUpdatePodSandbox", post).await.is_ok());
        let unknown = call("NoSuchMethod", Vec::new()).await.unwrap_err();
        assert_eq!(unknown.code, code::UNIMPLEMENTED);
    }
}
