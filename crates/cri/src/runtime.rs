//! `runtime.v1.RuntimeService`: Version, Status (RuntimeReady, and NetworkReady from the CNI config),
//! RuntimeConfig (the cgroupfs driver), UpdateRuntimeConfig, the pod sandbox calls ([`crate::pod`]) and the
//! container lifecycle ([`crate::containers`]: create, start, stop, remove, status, list). The calls not served
//! yet answer `Unimplemented`, naming the call.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use k8s_cri::v1 as cri;
use tonic::{Request, Response, Status};

use crate::containers::Containers;
use crate::image::ImageService;
use crate::pod::{self, Pods};

/// The CRI version kubelet asks for and insists on.
pub const KUBELET_API_VERSION: &str = "0.1.0";
/// Our name, the scheme of kubelet's `containerID: crius://<id>`.
pub const RUNTIME_NAME: &str = "crius";

/// The service; cheap to clone.
#[derive(Clone)]
pub struct RuntimeService {
    inner: Arc<Inner>,
    /// Turns true when criusd shuts down: open GetContainerEvents streams end then, so that shutdown, which
    /// waits for calls in flight, is not held by a client that never hangs up.
    shutdown: tokio::sync::watch::Receiver<bool>,
}

/// What the calls work on.
pub struct Inner {
    /// The pod sandboxes.
    pub pods: Pods,
    /// The containers.
    pub containers: Arc<Containers>,
    /// The images (containers' snapshots come from its store).
    pub images: ImageService,
}

impl Inner {
    /// The CRI event of a container change.
    fn event(&self, ch: crate::containers::Change) -> cri::ContainerEventResponse {
        let sandbox = self.pods.sandboxes.get(&ch.sandbox_id);
        cri::ContainerEventResponse {
            container_id: ch.container_id,
            container_event_type: ch.kind as i32,
            created_at: crate::records::now_ns(),
            pod_sandbox_status: sandbox.as_ref().and_then(|s| pod::status_of(s, false).status),
            containers_statuses: self
                .containers
                .of_sandbox(&ch.sandbox_id)
                .iter()
                .map(|c| self.containers.status(c))
                .collect(),
        }
    }

    /// StopPodSandbox: its containers killed, then the sandbox stopped. An unknown id is fine.
    fn stop_pod(&self, id: &str) -> Result<(), Status> {
        // Stopping what does not exist is done (kubelet and critest count on it).
        let Some(s) = self.pods.sandboxes.get(id) else {
            return Ok(());
        };
        for c in self.containers.of_sandbox(&s.record.id) {
            self.containers.stop(&c.record.id, 0, self.images.store())?;
        }
        self.pods.stop(&s.record.id)
    }

    /// RemovePodSandbox: its containers removed, then the sandbox.
    fn remove_pod(&self, id: &str) -> Result<(), Status> {
        let Some(s) = self.pods.sandboxes.get(id) else {
            return Ok(());
        };
        for c in self.containers.of_sandbox(&s.record.id) {
            self.containers.remove(&c.record.id, self.images.store())?;
        }
        self.pods.remove(&s.record.id)
    }
}

impl RuntimeService {
    /// A service over `pods`, `containers` and `images`.
    pub fn new(pods: Pods, containers: Arc<Containers>, images: ImageService) -> RuntimeService {
        RuntimeService {
            inner: Arc::new(Inner {
                pods,
                containers,
                images,
            }),
            shutdown: tokio::sync::watch::channel(false).1,
        }
    }

    /// Ends streaming calls once `shutdown` turns true.
    pub fn with_shutdown(mut self, shutdown: tokio::sync::watch::Receiver<bool>) -> RuntimeService {
        self.shutdown = shutdown;
        self
    }

    /// Runs `f` off the async workers.
    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Inner) -> Result<T, Status> + Send + 'static,
    ) -> Result<T, Status> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || f(&inner))
            .await
            .map_err(|e| Status::internal(format!("runtime task: {e}")))?
    }
}

fn not_yet(call: &str) -> Status {
    Status::unimplemented(format!("crius does not serve RuntimeService/{call} yet"))
}

type Reply<T> = Result<Response<T>, Status>;

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
        let inner = self.inner.clone();
        let network = tokio::task::spawn_blocking(move || crate::cni::ready(&inner.pods.cni))
            .await
            .map_err(|e| Status::internal(format!("status task: {e}")))?;
        let condition = |kind: &str, r: &Result<(), String>, reason: &str| cri::RuntimeCondition {
            r#type: kind.into(),
            status: r.is_ok(),
            reason: if r.is_ok() { String::new() } else { reason.into() },
            message: r.as_ref().err().cloned().unwrap_or_default(),
        };
        let mut info = HashMap::new();
        if req.get_ref().verbose {
            let conf = network.as_ref().ok().map(|n| n.file.display().to_string());
            let v = serde_json::json!({
                "cniConfDir": self.inner.pods.cni.conf_dir,
                "cniPluginDirs": self.inner.pods.cni.plugin_dirs,
                "cniConfig": conf,
            });
            info.insert("config".to_string(), v.to_string());
        }
        let network = network.map(drop);
        Ok(Response::new(cri::StatusResponse {
            status: Some(cri::RuntimeStatus {
                conditions: vec![
                    condition("RuntimeReady", &Ok(()), ""),
                    condition("NetworkReady", &network, "NetworkPluginNotReady"),
                ],
            }),
            info,
            runtime_handlers: vec![cri::RuntimeHandler {
                name: String::new(),
                features: Some(cri::RuntimeHandlerFeatures {
                    recursive_read_only_mounts: false,
                    user_namespaces: false,
                }),
            }],
            features: Some(cri::RuntimeFeatures {
                supplemental_groups_policy: false,
            }),
        }))
    }

    async fn runtime_config(
        &self,
        _: Request<cri::RuntimeConfigRequest>,
    ) -> Reply<cri::RuntimeConfigResponse> {
        Ok(Response::new(cri::RuntimeConfigResponse {
            linux: Some(cri::LinuxRuntimeConfiguration {
                cgroup_driver: cri::CgroupDriver::Cgroupfs as i32,
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
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("RunPodSandbox: config is missing"))?;
        let handler = req.runtime_handler;
        let id = self.blocking(move |i| i.pods.run(config, handler)).await?;
        Ok(Response::new(cri::RunPodSandboxResponse { pod_sandbox_id: id }))
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<cri::StopPodSandboxRequest>,
    ) -> Reply<cri::StopPodSandboxResponse> {
        let id = req.into_inner().pod_sandbox_id;
        self.blocking(move |i| i.stop_pod(&id)).await?;
        Ok(Response::new(cri::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<cri::RemovePodSandboxRequest>,
    ) -> Reply<cri::RemovePodSandboxResponse> {
        let id = req.into_inner().pod_sandbox_id;
        self.blocking(move |i| i.remove_pod(&id)).await?;
        Ok(Response::new(cri::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<cri::PodSandboxStatusRequest>,
    ) -> Reply<cri::PodSandboxStatusResponse> {
        let req = req.into_inner();
        let s = self
            .inner
            .pods
            .sandboxes
            .get(&req.pod_sandbox_id)
            .ok_or_else(|| Status::not_found(format!("sandbox {:?} not found", req.pod_sandbox_id)))?;
        Ok(Response::new(pod::status_of(&s, req.verbose)))
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<cri::ListPodSandboxRequest>,
    ) -> Reply<cri::ListPodSandboxResponse> {
        let filter = req.into_inner().filter;
        Ok(Response::new(cri::ListPodSandboxResponse {
            items: pod::list(self.inner.pods.sandboxes.list(), filter.as_ref()),
        }))
    }

    async fn create_container(
        &self,
        req: Request<cri::CreateContainerRequest>,
    ) -> Reply<cri::CreateContainerResponse> {
        let req = req.into_inner();
        let pod_id = req.pod_sandbox_id;
        let config = req
            .config
            .ok_or_else(|| Status::invalid_argument("CreateContainer: config is missing"))?;
        let id = self
            .blocking(move |i| {
                let s = i.pods.sandboxes.get(&pod_id).ok_or_else(|| {
                    Status::not_found(format!("CreateContainer: sandbox {pod_id:?} not found"))
                })?;
                let files = i.pods.sandboxes.dir_of(&s.record.id);
                i.containers.create(&s, &files, config, i.images.store())
            })
            .await?;
        Ok(Response::new(cri::CreateContainerResponse { container_id: id }))
    }

    async fn start_container(
        &self,
        req: Request<cri::StartContainerRequest>,
    ) -> Reply<cri::StartContainerResponse> {
        let id = req.into_inner().container_id;
        self.blocking(move |i| i.containers.start(&id)).await?;
        Ok(Response::new(cri::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        req: Request<cri::StopContainerRequest>,
    ) -> Reply<cri::StopContainerResponse> {
        let req = req.into_inner();
        self.blocking(move |i| {
            i.containers
                .stop(&req.container_id, req.timeout, i.images.store())
        })
        .await?;
        Ok(Response::new(cri::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        req: Request<cri::RemoveContainerRequest>,
    ) -> Reply<cri::RemoveContainerResponse> {
        let id = req.into_inner().container_id;
        self.blocking(move |i| i.containers.remove(&id, i.images.store()))
            .await?;
        Ok(Response::new(cri::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        req: Request<cri::ListContainersRequest>,
    ) -> Reply<cri::ListContainersResponse> {
        let filter = req.into_inner().filter;
        let containers = self
            .blocking(move |i| Ok(crate::containers::list(&i.containers, filter.as_ref())))
            .await?;
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        req: Request<cri::ContainerStatusRequest>,
    ) -> Reply<cri::ContainerStatusResponse> {
        let req = req.into_inner();
        let status = self
            .blocking(move |i| {
                let c = i.containers.get(&req.container_id).ok_or_else(|| {
                    Status::not_found(format!("container {:?} not found", req.container_id))
                })?;
                Ok(i.containers.status(&c))
            })
            .await?;
        Ok(Response::new(cri::ContainerStatusResponse {
            status: Some(status),
            ..Default::default()
        }))
    }

    async fn update_container_resources(
        &self,
        req: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Reply<cri::UpdateContainerResourcesResponse> {
        let req = req.into_inner();
        let new = req.linux.unwrap_or_default();
        self.blocking(move |i| i.containers.update(&req.container_id, &new))
            .await?;
        Ok(Response::new(cri::UpdateContainerResourcesResponse {}))
    }

    async fn reopen_container_log(
        &self,
        req: Request<cri::ReopenContainerLogRequest>,
    ) -> Reply<cri::ReopenContainerLogResponse> {
        let id = req.into_inner().container_id;
        self.blocking(move |i| i.containers.reopen_log(&id)).await?;
        Ok(Response::new(cri::ReopenContainerLogResponse {}))
    }

    async fn exec_sync(&self, req: Request<cri::ExecSyncRequest>) -> Reply<cri::ExecSyncResponse> {
        let req = req.into_inner();
        let out = self
            .blocking(move |i| i.containers.exec_sync(&req.container_id, &req.cmd, req.timeout))
            .await?;
        Ok(Response::new(out))
    }

    async fn exec(&self, _: Request<cri::ExecRequest>) -> Reply<cri::ExecResponse> {
        Err(not_yet("Exec"))
    }

    async fn attach(&self, _: Request<cri::AttachRequest>) -> Reply<cri::AttachResponse> {
        Err(not_yet("Attach"))
    }

    async fn port_forward(&self, _: Request<cri::PortForwardRequest>) -> Reply<cri::PortForwardResponse> {
        Err(not_yet("PortForward"))
    }

    async fn container_stats(
        &self,
        req: Request<cri::ContainerStatsRequest>,
    ) -> Reply<cri::ContainerStatsResponse> {
        let id = req.into_inner().container_id;
        let stats = self
            .blocking(move |i| {
                let c = i
                    .containers
                    .get(&id)
                    .ok_or_else(|| Status::not_found(format!("container {id:?} not found")))?;
                Ok(i.containers.stats(&c, i.images.store()))
            })
            .await?;
        Ok(Response::new(cri::ContainerStatsResponse { stats: Some(stats) }))
    }

    async fn list_container_stats(
        &self,
        req: Request<cri::ListContainerStatsRequest>,
    ) -> Reply<cri::ListContainerStatsResponse> {
        let filter = req.into_inner().filter;
        let stats = self
            .blocking(move |i| {
                Ok(crate::containers::list_stats(
                    &i.containers,
                    filter.as_ref(),
                    i.images.store(),
                ))
            })
            .await?;
        Ok(Response::new(cri::ListContainerStatsResponse { stats }))
    }

    async fn pod_sandbox_stats(
        &self,
        _: Request<cri::PodSandboxStatsRequest>,
    ) -> Reply<cri::PodSandboxStatsResponse> {
        Err(not_yet("PodSandboxStats"))
    }

    async fn list_pod_sandbox_stats(
        &self,
        _: Request<cri::ListPodSandboxStatsRequest>,
    ) -> Reply<cri::ListPodSandboxStatsResponse> {
        Err(not_yet("ListPodSandboxStats"))
    }

    async fn checkpoint_container(
        &self,
        _: Request<cri::CheckpointContainerRequest>,
    ) -> Reply<cri::CheckpointContainerResponse> {
        Err(not_yet("CheckpointContainer"))
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
        let inner = self.inner.clone();
        let changes = tokio_stream::wrappers::BroadcastStream::new(self.inner.containers.subscribe());
        let stream = changes.map(move |r| match r {
            Ok(ch) => Ok(inner.event(ch)),
            Err(tokio_stream::wrappers::errors::BroadcastStreamRecvError::Lagged(n)) => {
                Err(Status::data_loss(format!(
                    "{n} container events were dropped while this client fell behind: list again"
                )))
            }
        });
        let mut shutdown = self.shutdown.clone();
        let stream = futures::StreamExt::take_until(stream, async move {
            let _ = shutdown.wait_for(|down| *down).await;
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<cri::ListMetricDescriptorsRequest>,
    ) -> Reply<cri::ListMetricDescriptorsResponse> {
        Err(not_yet("ListMetricDescriptors"))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> Reply<cri::ListPodSandboxMetricsResponse> {
        Err(not_yet("ListPodSandboxMetrics"))
    }
}
