//! `runtime.v1.RuntimeService`, the tonic adapter over [`Node`]: each call takes its request apart, makes one
//! domain call off the async workers, and answers; errors become statuses only through
//! `From<crate::error::Error> for Status`. Version, RuntimeConfig (the node's cgroup driver) and
//! UpdateRuntimeConfig are answered here; Status is the node's (`node/status.rs`). The calls not
//! served yet answer `Unimplemented`, naming the call.

use std::pin::Pin;
use std::sync::Arc;

use crius_api::cri;
use tonic::{Request, Response, Status};

use crate::error::Error;
use crate::node::Node;
use crate::sandbox;

mod lists;
#[cfg(test)]
mod lists_tests;

/// The CRI version kubelet asks for and insists on.
pub const KUBELET_API_VERSION: &str = "0.1.0";
/// Our name, the scheme of kubelet's `containerID: crius://<id>`.
pub const RUNTIME_NAME: &str = "crius";

/// The service; cheap to clone.
#[derive(Clone)]
pub struct RuntimeService {
    runtime: Arc<Node>,
    /// The streaming server behind Exec, Attach and PortForward (None: those calls are Unimplemented).
    streams: Option<Arc<crius_stream::server::Server>>,
    /// Turns true when criusd shuts down: open GetContainerEvents streams end then, so that shutdown, which
    /// waits for calls in flight, is not held by a client that never hangs up.
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// The places of the calls that wait (StopContainer, RemoveContainer, ExecSync) on threads of their own.
    waiting: super::waiting::Waiting,
}

impl RuntimeService {
    /// A service over `runtime`.
    pub fn new(runtime: Node) -> RuntimeService {
        RuntimeService::shared(Arc::new(runtime))
    }

    /// A service over a runtime that others (the streaming backend) hold too.
    pub fn shared(runtime: Arc<Node>) -> RuntimeService {
        RuntimeService {
            runtime,
            streams: None,
            shutdown: tokio::sync::watch::channel(false).1,
            waiting: Default::default(),
        }
    }

    /// The calls that wait take their places from `waiting` (which the streaming backend shares).
    pub fn with_waiting(mut self, waiting: super::waiting::Waiting) -> RuntimeService {
        self.waiting = waiting;
        self
    }

    /// Exec, Attach and PortForward answer with URLs on `server`.
    pub fn with_streaming(mut self, server: Arc<crius_stream::server::Server>) -> RuntimeService {
        self.streams = Some(server);
        self
    }

    /// A URL for `req` on the streaming server, once `check` passed.
    async fn stream_url(
        &self,
        call: &'static str,
        req: crius_stream::Request,
        check: impl FnOnce(&Node) -> Result<(), Error> + Send + 'static,
    ) -> Result<String, Status> {
        let Some(server) = self.streams.clone() else {
            return Err(not_yet(call));
        };
        self.blocking(check).await?;
        server.url(req).map_err(|e| {
            Status::from(Error::io(
                format!("{call}: a streaming token"),
                std::io::Error::other(e.to_string()),
            ))
        })
    }

    /// Ends streaming calls once `shutdown` turns true.
    pub fn with_shutdown(mut self, shutdown: tokio::sync::watch::Receiver<bool>) -> RuntimeService {
        self.shutdown = shutdown;
        self
    }

    /// Runs `f` off the async workers.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Node) -> Result<T, Error> + Send + 'static,
    ) -> Result<T, Status> {
        let runtime = self.runtime.clone();
        match tokio::task::spawn_blocking(move || f(&runtime)).await {
            Ok(r) => r.map_err(Status::from),
            // A panic in the call: the task's error says where.
            Err(e) => Err(Error::TaskFailed {
                call: "RuntimeService",
                reason: e.to_string(),
            }
            .into()),
        }
    }
}

fn not_yet(call: &'static str) -> Status {
    Error::Unimplemented(call).into()
}

fn missing(call: &'static str) -> Status {
    Error::invalid(call, "config", "is missing").into()
}

type Reply<T> = Result<Response<T>, Status>;

/// A Stream* call's answer: what its List call answers, in chunks (the CRI lets a runtime send the list in as
/// many chunks as it likes; `lists.rs` cuts them).
type Chunks<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send + 'static>>;

fn one_chunk<T: Send + 'static>(chunk: T) -> Reply<Chunks<T>> {
    Ok(Response::new(Box::pin(tokio_stream::once(Ok(chunk)))))
}

#[tonic::async_trait]
impl cri::runtime_service_server::RuntimeService for RuntimeService {
    async fn version(&self, _: Request<cri::VersionRequest>) -> Reply<cri::VersionResponse> {
        Ok(Response::new(cri::VersionResponse {
            version: KUBELET_API_VERSION.into(),
            runtime_name: RUNTIME_NAME.into(),
            runtime_version: env!("CARGO_PKG_VERSION").into(),
            runtime_api_version: "v1".into(),
        }))
    }

    async fn status(&self, req: Request<cri::StatusRequest>) -> Reply<cri::StatusResponse> {
        let verbose = req.get_ref().verbose;
        Ok(Response::new(
            self.blocking(move |n| Ok(n.status(verbose))).await?,
        ))
    }

    async fn runtime_config(
        &self,
        _: Request<cri::RuntimeConfigRequest>,
    ) -> Reply<cri::RuntimeConfigResponse> {
        Ok(Response::new(cri::RuntimeConfigResponse {
            linux: Some(cri::LinuxRuntimeConfiguration {
                cgroup_driver: self.runtime.pods.cgroup_driver().cri() as i32,
            }),
        }))
    }

    async fn update_runtime_config(
        &self,
        req: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> Reply<cri::UpdateRuntimeConfigResponse> {
        // kubelet sends the node's pod CIDR; the CNI config (host-local ranges) decides addresses here.
        let cidr = req
            .into_inner()
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .unwrap_or_default();
        tracing::info!(pod_cidr = %cidr, "UpdateRuntimeConfig");
        Ok(Response::new(cri::UpdateRuntimeConfigResponse {}))
    }

    async fn run_pod_sandbox(
        &self,
        req: Request<cri::RunPodSandboxRequest>,
    ) -> Reply<cri::RunPodSandboxResponse> {
        let req = req.into_inner();
        let config = req.config.ok_or_else(|| missing("RunPodSandbox"))?;
        let handler = req.runtime_handler;
        let id = self.blocking(move |r| r.run_pod(config, handler)).await?;
        Ok(Response::new(cri::RunPodSandboxResponse { pod_sandbox_id: id }))
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<cri::StopPodSandboxRequest>,
    ) -> Reply<cri::StopPodSandboxResponse> {
        let id = req.into_inner().pod_sandbox_id;
        self.blocking(move |r| r.stop_pod(&id)).await?;
        Ok(Response::new(cri::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<cri::RemovePodSandboxRequest>,
    ) -> Reply<cri::RemovePodSandboxResponse> {
        let id = req.into_inner().pod_sandbox_id;
        self.blocking(move |r| r.remove_pod(&id)).await?;
        Ok(Response::new(cri::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<cri::PodSandboxStatusRequest>,
    ) -> Reply<cri::PodSandboxStatusResponse> {
        let req = req.into_inner();
        let s = self.runtime.pods.get("PodSandboxStatus", &req.pod_sandbox_id)?;
        Ok(Response::new(sandbox::status_of(&s, req.verbose)))
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<cri::ListPodSandboxRequest>,
    ) -> Reply<cri::ListPodSandboxResponse> {
        self.list_sandboxes(req.into_inner().filter)
    }

    async fn create_container(
        &self,
        req: Request<cri::CreateContainerRequest>,
    ) -> Reply<cri::CreateContainerResponse> {
        let req = req.into_inner();
        let pod_id = req.pod_sandbox_id;
        let config = req.config.ok_or_else(|| missing("CreateContainer"))?;
        let id = self
            .blocking(move |r| r.create_container(&pod_id, config))
            .await?;
        Ok(Response::new(cri::CreateContainerResponse { container_id: id }))
    }

    async fn start_container(
        &self,
        req: Request<cri::StartContainerRequest>,
    ) -> Reply<cri::StartContainerResponse> {
        let id = req.into_inner().container_id;
        self.blocking(move |r| r.containers.start(&id)).await?;
        Ok(Response::new(cri::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        req: Request<cri::StopContainerRequest>,
    ) -> Reply<cri::StopContainerResponse> {
        let req = req.into_inner();
        let r = self.runtime.clone();
        self.waiting
            .on_own_thread("StopContainer", move || {
                r.containers.stop(&req.container_id, req.timeout)
            })
            .await?;
        Ok(Response::new(cri::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        req: Request<cri::RemoveContainerRequest>,
    ) -> Reply<cri::RemoveContainerResponse> {
        let id = req.into_inner().container_id;
        let r = self.runtime.clone();
        self.waiting
            .on_own_thread("RemoveContainer", move || r.containers.remove(&id))
            .await?;
        Ok(Response::new(cri::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        req: Request<cri::ListContainersRequest>,
    ) -> Reply<cri::ListContainersResponse> {
        self.list_containers_bounded(req.into_inner().filter).await
    }

    async fn container_status(
        &self,
        req: Request<cri::ContainerStatusRequest>,
    ) -> Reply<cri::ContainerStatusResponse> {
        let req = req.into_inner();
        let status = self
            .blocking(move |r| r.container_status(&req.container_id, req.verbose))
            .await?;
        Ok(Response::new(status))
    }

    async fn update_container_resources(
        &self,
        req: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Reply<cri::UpdateContainerResourcesResponse> {
        let req = req.into_inner();
        let new = req.linux.unwrap_or_default();
        self.blocking(move |r| r.containers.update(&req.container_id, &new))
            .await?;
        Ok(Response::new(cri::UpdateContainerResourcesResponse {}))
    }

    async fn reopen_container_log(
        &self,
        req: Request<cri::ReopenContainerLogRequest>,
    ) -> Reply<cri::ReopenContainerLogResponse> {
        let id = req.into_inner().container_id;
        self.blocking(move |r| r.containers.reopen_log(&id)).await?;
        Ok(Response::new(cri::ReopenContainerLogResponse {}))
    }

    async fn exec_sync(&self, req: Request<cri::ExecSyncRequest>) -> Reply<cri::ExecSyncResponse> {
        let req = req.into_inner();
        // A future: no thread waits while the command runs (the shim answers when it is over).
        let out = self
            .runtime
            .containers
            .exec_sync(&req.container_id, &req.cmd, req.timeout)
            .await?;
        Ok(Response::new(out))
    }

    async fn exec(&self, req: Request<cri::ExecRequest>) -> Reply<cri::ExecResponse> {
        let r = req.into_inner();
        if !(r.stdin || r.stdout || r.stderr) {
            return Err(Error::invalid(
                "Exec",
                "stdin, stdout and stderr",
                "are all false: one must be set",
            )
            .into());
        }
        let kept = crius_stream::ExecRequest {
            container_id: r.container_id.clone(),
            cmd: r.cmd.clone(),
            tty: r.tty,
            stdin: r.stdin,
            stdout: r.stdout,
            stderr: r.stderr,
            size: None,
        };
        let url = self
            .stream_url("Exec", crius_stream::Request::Exec(kept), move |rt| {
                rt.containers.check_exec(&r.container_id, &r.cmd, r.tty, r.stderr)
            })
            .await?;
        Ok(Response::new(cri::ExecResponse { url }))
    }

    async fn attach(&self, req: Request<cri::AttachRequest>) -> Reply<cri::AttachResponse> {
        let r = req.into_inner();
        if !(r.stdin || r.stdout || r.stderr) {
            return Err(Error::invalid(
                "Attach",
                "stdin, stdout and stderr",
                "are all false: one must be set",
            )
            .into());
        }
        let kept = crius_stream::AttachRequest {
            container_id: r.container_id.clone(),
            tty: r.tty,
            stdin: r.stdin,
            stdout: r.stdout,
            stderr: r.stderr,
        };
        let url = self
            .stream_url("Attach", crius_stream::Request::Attach(kept), move |rt| {
                rt.containers
                    .check_attach(&r.container_id, r.stdin, r.tty, r.stderr)
            })
            .await?;
        Ok(Response::new(cri::AttachResponse { url }))
    }

    async fn port_forward(&self, req: Request<cri::PortForwardRequest>) -> Reply<cri::PortForwardResponse> {
        let r = req.into_inner();
        if let Some(p) = r.port.iter().find(|p| !(1..=65535).contains(*p)) {
            return Err(
                Error::invalid("PortForward", "port", format!("{p} is not a port (1 to 65535)")).into(),
            );
        }
        let kept = crius_stream::PortForwardRequest {
            sandbox_id: r.pod_sandbox_id.clone(),
            ports: r.port.clone(),
        };
        let url = self
            .stream_url(
                "PortForward",
                crius_stream::Request::PortForward(kept),
                move |rt| {
                    if r.pod_sandbox_id.is_empty() {
                        return Err(Error::invalid("PortForward", "pod_sandbox_id", "is empty"));
                    }
                    rt.pods.get("PortForward", &r.pod_sandbox_id).map(drop)
                },
            )
            .await?;
        Ok(Response::new(cri::PortForwardResponse { url }))
    }

    async fn container_stats(
        &self,
        req: Request<cri::ContainerStatsRequest>,
    ) -> Reply<cri::ContainerStatsResponse> {
        let id = req.into_inner().container_id;
        let stats = self
            .blocking(move |r| {
                let c = r.containers.get_or_not_found("ContainerStats", &id)?;
                Ok(r.containers.stats(&c))
            })
            .await?;
        Ok(Response::new(cri::ContainerStatsResponse { stats: Some(stats) }))
    }

    async fn list_container_stats(
        &self,
        req: Request<cri::ListContainerStatsRequest>,
    ) -> Reply<cri::ListContainerStatsResponse> {
        self.list_container_stats_bounded(req.into_inner().filter).await
    }

    async fn pod_sandbox_stats(
        &self,
        req: Request<cri::PodSandboxStatsRequest>,
    ) -> Reply<cri::PodSandboxStatsResponse> {
        let id = req.into_inner().pod_sandbox_id;
        let stats = self.blocking(move |r| r.pod_stats(&id)).await?;
        Ok(Response::new(cri::PodSandboxStatsResponse { stats: Some(stats) }))
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: Request<cri::ListPodSandboxStatsRequest>,
    ) -> Reply<cri::ListPodSandboxStatsResponse> {
        self.list_sandbox_stats_bounded(req.into_inner().filter).await
    }

    async fn checkpoint_container(
        &self,
        req: Request<cri::CheckpointContainerRequest>,
    ) -> Reply<cri::CheckpointContainerResponse> {
        let r = req.into_inner();
        self.blocking(move |rt| rt.containers.checkpoint(&r.container_id, &r.location, r.timeout))
            .await?;
        Ok(Response::new(cri::CheckpointContainerResponse {}))
    }

    type GetContainerEventsStream = Pin<
        Box<dyn tokio_stream::Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send + 'static>,
    >;

    /// Every container created, started, stopped (its process exited) or deleted from now on, with its
    /// sandbox's status and the statuses of the sandbox's containers (what kubelet's evented PLEG reads). A
    /// client that falls more than 1024 events behind gets DataLoss and should list again.
    async fn get_container_events(
        &self,
        _: Request<cri::GetEventsRequest>,
    ) -> Reply<Self::GetContainerEventsStream> {
        use tokio_stream::StreamExt;
        let runtime = self.runtime.clone();
        let changes = tokio_stream::wrappers::BroadcastStream::new(self.runtime.containers.subscribe());
        let stream = changes.map(move |r| match r {
            Ok(ch) => Ok(runtime.event(ch)),
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                Err(Error::EventsLost(n).into())
            }
        });
        let mut shutdown = self.shutdown.clone();
        let stream = futures::StreamExt::take_until(stream, async move {
            let _ = shutdown.wait_for(|down| *down).await;
        });
        Ok(Response::new(Box::pin(stream)))
    }

    type StreamPodSandboxesStream = Chunks<cri::StreamPodSandboxesResponse>;

    async fn stream_pod_sandboxes(
        &self,
        req: Request<cri::StreamPodSandboxesRequest>,
    ) -> Reply<Self::StreamPodSandboxesStream> {
        self.stream_sandboxes(req.into_inner().filter)
    }

    type StreamContainersStream = Chunks<cri::StreamContainersResponse>;

    async fn stream_containers(
        &self,
        req: Request<cri::StreamContainersRequest>,
    ) -> Reply<Self::StreamContainersStream> {
        self.stream_container_list(req.into_inner().filter).await
    }

    type StreamContainerStatsStream = Chunks<cri::StreamContainerStatsResponse>;

    async fn stream_container_stats(
        &self,
        req: Request<cri::StreamContainerStatsRequest>,
    ) -> Reply<Self::StreamContainerStatsStream> {
        self.stream_container_stats_list(req.into_inner().filter).await
    }

    type StreamPodSandboxStatsStream = Chunks<cri::StreamPodSandboxStatsResponse>;

    async fn stream_pod_sandbox_stats(
        &self,
        req: Request<cri::StreamPodSandboxStatsRequest>,
    ) -> Reply<Self::StreamPodSandboxStatsStream> {
        self.stream_sandbox_stats_list(req.into_inner().filter).await
    }

    type StreamPodSandboxMetricsStream = Chunks<cri::StreamPodSandboxMetricsResponse>;

    async fn stream_pod_sandbox_metrics(
        &self,
        _: Request<cri::StreamPodSandboxMetricsRequest>,
    ) -> Reply<Self::StreamPodSandboxMetricsStream> {
        let listed = self.list_pod_sandbox_metrics(Request::new(cri::ListPodSandboxMetricsRequest {}));
        let pod_sandbox_metrics = listed.await?.into_inner().pod_metrics;
        one_chunk(cri::StreamPodSandboxMetricsResponse { pod_sandbox_metrics })
    }

    async fn update_pod_sandbox_resources(
        &self,
        req: Request<cri::UpdatePodSandboxResourcesRequest>,
    ) -> Reply<cri::UpdatePodSandboxResourcesResponse> {
        let r = req.into_inner();
        self.blocking(move |rt| rt.update_pod(&r.pod_sandbox_id, r.overhead.as_ref(), r.resources.as_ref()))
            .await?;
        Ok(Response::new(cri::UpdatePodSandboxResourcesResponse {}))
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<cri::ListMetricDescriptorsRequest>,
    ) -> Reply<cri::ListMetricDescriptorsResponse> {
        Ok(Response::new(cri::ListMetricDescriptorsResponse {
            descriptors: sandbox::metrics::descriptors(),
        }))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> Reply<cri::ListPodSandboxMetricsResponse> {
        let pod_metrics = self.blocking(|r| Ok(r.list_pod_metrics())).await?;
        Ok(Response::new(cri::ListPodSandboxMetricsResponse { pod_metrics }))
    }
}
