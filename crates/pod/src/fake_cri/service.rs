//! The fake's RuntimeService and ImageService: what each call does to the fake's world. Calls the engine
//! never makes answer UNIMPLEMENTED.

use std::collections::VecDeque;
use std::pin::Pin;

use crius_api::cri;
use crius_api::cri::image_service_server::ImageService;
use crius_api::cri::runtime_service_server::RuntimeService;
use futures::{Stream, StreamExt};
use tonic::{Request, Response, Status};

use super::{Call, Ctr, FakeCri, POD_IP, Run, SANDBOX, TERMINATED, now_ns};

type Answer<T> = Result<Response<T>, Status>;

fn unserved<T>(call: &str) -> Answer<T> {
    Err(Status::unimplemented(format!("the fake does not serve {call}")))
}

fn state_of(run: Run) -> i32 {
    (match run {
        Run::Created => cri::ContainerState::ContainerCreated,
        Run::Running => cri::ContainerState::ContainerRunning,
        Run::Exited(_) => cri::ContainerState::ContainerExited,
    }) as i32
}

type Events = Pin<Box<dyn Stream<Item = Result<cri::ContainerEventResponse, Status>> + Send>>;
/// The Stream* calls' answers (none is served).
type Chunks<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl RuntimeService for FakeCri {
    async fn run_pod_sandbox(
        &self,
        _: Request<cri::RunPodSandboxRequest>,
    ) -> Answer<cri::RunPodSandboxResponse> {
        self.world().calls.push(Call::RunPodSandbox);
        Ok(Response::new(cri::RunPodSandboxResponse {
            pod_sandbox_id: SANDBOX.into(),
        }))
    }

    async fn stop_pod_sandbox(
        &self,
        _: Request<cri::StopPodSandboxRequest>,
    ) -> Answer<cri::StopPodSandboxResponse> {
        let mut w = self.world();
        w.calls.push(Call::StopPodSandbox);
        let ids: Vec<String> = w.containers.keys().cloned().collect();
        for id in ids {
            Self::end(&mut w, &id, TERMINATED);
        }
        Ok(Response::new(cri::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        _: Request<cri::RemovePodSandboxRequest>,
    ) -> Answer<cri::RemovePodSandboxResponse> {
        let mut w = self.world();
        w.calls.push(Call::RemovePodSandbox);
        w.containers.clear();
        Ok(Response::new(cri::RemovePodSandboxResponse {}))
    }

    async fn pod_sandbox_status(
        &self,
        _: Request<cri::PodSandboxStatusRequest>,
    ) -> Answer<cri::PodSandboxStatusResponse> {
        Ok(Response::new(cri::PodSandboxStatusResponse {
            status: Some(cri::PodSandboxStatus {
                id: SANDBOX.into(),
                network: Some(cri::PodSandboxNetworkStatus {
                    ip: POD_IP.into(),
                    additional_ips: Vec::new(),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn create_container(
        &self,
        r: Request<cri::CreateContainerRequest>,
    ) -> Answer<cri::CreateContainerResponse> {
        let config = r.into_inner().config.unwrap_or_default();
        let meta = config.metadata.unwrap_or_default();
        let mut w = self.world();
        w.calls.push(Call::Create(meta.name.clone(), meta.attempt));
        if let Some(n) = w.failing_creates.get_mut(&meta.name).filter(|n| **n > 0) {
            *n -= 1;
            // The fake plays a runtime, so it answers with the status a runtime would.
            #[allow(clippy::disallowed_methods)]
            return Err(Status::internal("the fake was told to fail this create"));
        }
        w.made += 1;
        let id = format!("{}-{}", meta.name, w.made);
        w.containers.insert(
            id.clone(),
            Ctr {
                name: meta.name,
                attempt: meta.attempt,
                run: Run::Created,
                created_at: now_ns(),
                started_at: 0,
                finished_at: 0,
                resources: config.linux.and_then(|l| l.resources),
            },
        );
        drop(w);
        self.event(&id, cri::ContainerEventType::ContainerCreatedEvent);
        Ok(Response::new(cri::CreateContainerResponse { container_id: id }))
    }

    async fn start_container(
        &self,
        r: Request<cri::StartContainerRequest>,
    ) -> Answer<cri::StartContainerResponse> {
        let id = r.into_inner().container_id;
        let mut w = self.world();
        let name = Self::name_of(&w, &id)?;
        w.calls.push(Call::Start(name.clone()));
        let scripted = w.scripts.get_mut(&name).and_then(VecDeque::pop_front);
        if let Some(c) = w.containers.get_mut(&id) {
            c.run = Run::Running;
            c.started_at = now_ns();
        }
        if let Some(code) = scripted {
            Self::end(&mut w, &id, code);
        }
        drop(w);
        self.event(&id, cri::ContainerEventType::ContainerStartedEvent);
        if scripted.is_some() {
            self.event(&id, cri::ContainerEventType::ContainerStoppedEvent);
        }
        Ok(Response::new(cri::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        r: Request<cri::StopContainerRequest>,
    ) -> Answer<cri::StopContainerResponse> {
        let id = r.into_inner().container_id;
        let mut w = self.world();
        let name = Self::name_of(&w, &id)?;
        w.calls.push(Call::Stop(name));
        Self::end(&mut w, &id, TERMINATED);
        drop(w);
        self.event(&id, cri::ContainerEventType::ContainerStoppedEvent);
        Ok(Response::new(cri::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        r: Request<cri::RemoveContainerRequest>,
    ) -> Answer<cri::RemoveContainerResponse> {
        let id = r.into_inner().container_id;
        let mut w = self.world();
        let name = Self::name_of(&w, &id)?;
        w.calls.push(Call::Remove(name));
        if w.containers.get(&id).is_some_and(|c| c.run == Run::Running) {
            return Err(Status::failed_precondition(format!("{id} is running")));
        }
        w.containers.remove(&id);
        drop(w);
        self.event(&id, cri::ContainerEventType::ContainerDeletedEvent);
        Ok(Response::new(cri::RemoveContainerResponse {}))
    }

    async fn list_containers(
        &self,
        r: Request<cri::ListContainersRequest>,
    ) -> Answer<cri::ListContainersResponse> {
        let sandbox = r
            .into_inner()
            .filter
            .map(|f| f.pod_sandbox_id)
            .unwrap_or_default();
        self.world().lists += 1;
        let containers = if sandbox.is_empty() || sandbox == SANDBOX {
            let w = self.world();
            w.containers
                .iter()
                .map(|(id, c)| cri::Container {
                    id: id.clone(),
                    pod_sandbox_id: SANDBOX.into(),
                    metadata: Some(cri::ContainerMetadata {
                        name: c.name.clone(),
                        attempt: c.attempt,
                    }),
                    state: state_of(c.run),
                    created_at: c.created_at,
                    ..Default::default()
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    async fn container_status(
        &self,
        r: Request<cri::ContainerStatusRequest>,
    ) -> Answer<cri::ContainerStatusResponse> {
        let id = r.into_inner().container_id;
        let w = self.world();
        let c = w
            .containers
            .get(&id)
            .ok_or_else(|| Status::not_found(format!("container {id}")))?;
        let (exit_code, reason) = match c.run {
            Run::Exited(0) => (0, "Completed"),
            Run::Exited(code) => (code, "Error"),
            Run::Created | Run::Running => (0, ""),
        };
        Ok(Response::new(cri::ContainerStatusResponse {
            status: Some(cri::ContainerStatus {
                id: id.clone(),
                metadata: Some(cri::ContainerMetadata {
                    name: c.name.clone(),
                    attempt: c.attempt,
                }),
                state: state_of(c.run),
                created_at: c.created_at,
                started_at: c.started_at,
                finished_at: c.finished_at,
                exit_code,
                reason: reason.into(),
                resources: c.resources.clone().map(|linux| cri::ContainerResources {
                    linux: Some(linux),
                    windows: None,
                }),
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn update_container_resources(
        &self,
        r: Request<cri::UpdateContainerResourcesRequest>,
    ) -> Answer<cri::UpdateContainerResourcesResponse> {
        let r = r.into_inner();
        let mut w = self.world();
        let name = Self::name_of(&w, &r.container_id)?;
        w.calls.push(Call::Update(name));
        if let Some(c) = w.containers.get_mut(&r.container_id) {
            c.resources = r.linux;
        }
        Ok(Response::new(cri::UpdateContainerResourcesResponse {}))
    }

    async fn exec_sync(&self, r: Request<cri::ExecSyncRequest>) -> Answer<cri::ExecSyncResponse> {
        let r = r.into_inner();
        let mut w = self.world();
        let name = Self::name_of(&w, &r.container_id)?;
        w.calls.push(Call::Exec(name.clone()));
        w.exec_requests.push(super::ExecAsked {
            name: name.clone(),
            cmd: r.cmd,
            timeout: r.timeout,
            at: std::time::Instant::now(),
        });
        let exit_code = w.execs.get_mut(&name).and_then(VecDeque::pop_front).unwrap_or(0);
        Ok(Response::new(cri::ExecSyncResponse {
            stdout: Vec::new(),
            stderr: if exit_code == 0 {
                Vec::new()
            } else {
                b"the fake says no\n".to_vec()
            },
            exit_code,
        }))
    }

    type GetContainerEventsStream = Events;

    async fn get_container_events(
        &self,
        _: Request<cri::GetEventsRequest>,
    ) -> Answer<Self::GetContainerEventsStream> {
        let Some(tx) = &self.events else {
            return unserved("GetContainerEvents");
        };
        let stream = tokio_stream::wrappers::BroadcastStream::new(tx.subscribe())
            .filter_map(|e| std::future::ready(e.ok().map(Ok)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn version(&self, _: Request<cri::VersionRequest>) -> Answer<cri::VersionResponse> {
        unserved("Version")
    }

    async fn list_pod_sandbox(
        &self,
        _: Request<cri::ListPodSandboxRequest>,
    ) -> Answer<cri::ListPodSandboxResponse> {
        unserved("ListPodSandbox")
    }

    async fn reopen_container_log(
        &self,
        _: Request<cri::ReopenContainerLogRequest>,
    ) -> Answer<cri::ReopenContainerLogResponse> {
        unserved("ReopenContainerLog")
    }

    async fn exec(&self, _: Request<cri::ExecRequest>) -> Answer<cri::ExecResponse> {
        unserved("Exec")
    }

    async fn attach(&self, _: Request<cri::AttachRequest>) -> Answer<cri::AttachResponse> {
        unserved("Attach")
    }

    async fn port_forward(&self, _: Request<cri::PortForwardRequest>) -> Answer<cri::PortForwardResponse> {
        unserved("PortForward")
    }

    async fn container_stats(
        &self,
        _: Request<cri::ContainerStatsRequest>,
    ) -> Answer<cri::ContainerStatsResponse> {
        unserved("ContainerStats")
    }

    async fn list_container_stats(
        &self,
        _: Request<cri::ListContainerStatsRequest>,
    ) -> Answer<cri::ListContainerStatsResponse> {
        unserved("ListContainerStats")
    }

    async fn pod_sandbox_stats(
        &self,
        _: Request<cri::PodSandboxStatsRequest>,
    ) -> Answer<cri::PodSandboxStatsResponse> {
        unserved("PodSandboxStats")
    }

    async fn list_pod_sandbox_stats(
        &self,
        _: Request<cri::ListPodSandboxStatsRequest>,
    ) -> Answer<cri::ListPodSandboxStatsResponse> {
        unserved("ListPodSandboxStats")
    }

    async fn update_runtime_config(
        &self,
        _: Request<cri::UpdateRuntimeConfigRequest>,
    ) -> Answer<cri::UpdateRuntimeConfigResponse> {
        unserved("UpdateRuntimeConfig")
    }

    async fn status(&self, _: Request<cri::StatusRequest>) -> Answer<cri::StatusResponse> {
        unserved("Status")
    }

    async fn checkpoint_container(
        &self,
        _: Request<cri::CheckpointContainerRequest>,
    ) -> Answer<cri::CheckpointContainerResponse> {
        unserved("CheckpointContainer")
    }

    async fn list_metric_descriptors(
        &self,
        _: Request<cri::ListMetricDescriptorsRequest>,
    ) -> Answer<cri::ListMetricDescriptorsResponse> {
        unserved("ListMetricDescriptors")
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _: Request<cri::ListPodSandboxMetricsRequest>,
    ) -> Answer<cri::ListPodSandboxMetricsResponse> {
        unserved("ListPodSandboxMetrics")
    }

    type StreamPodSandboxesStream = Chunks<cri::StreamPodSandboxesResponse>;

    async fn stream_pod_sandboxes(
        &self,
        _: Request<cri::StreamPodSandboxesRequest>,
    ) -> Answer<Self::StreamPodSandboxesStream> {
        unserved("StreamPodSandboxes")
    }

    type StreamContainersStream = Chunks<cri::StreamContainersResponse>;

    async fn stream_containers(
        &self,
        _: Request<cri::StreamContainersRequest>,
    ) -> Answer<Self::StreamContainersStream> {
        unserved("StreamContainers")
    }

    type StreamContainerStatsStream = Chunks<cri::StreamContainerStatsResponse>;

    async fn stream_container_stats(
        &self,
        _: Request<cri::StreamContainerStatsRequest>,
    ) -> Answer<Self::StreamContainerStatsStream> {
        unserved("StreamContainerStats")
    }

    type StreamPodSandboxStatsStream = Chunks<cri::StreamPodSandboxStatsResponse>;

    async fn stream_pod_sandbox_stats(
        &self,
        _: Request<cri::StreamPodSandboxStatsRequest>,
    ) -> Answer<Self::StreamPodSandboxStatsStream> {
        unserved("StreamPodSandboxStats")
    }

    type StreamPodSandboxMetricsStream = Chunks<cri::StreamPodSandboxMetricsResponse>;

    async fn stream_pod_sandbox_metrics(
        &self,
        _: Request<cri::StreamPodSandboxMetricsRequest>,
    ) -> Answer<Self::StreamPodSandboxMetricsStream> {
        unserved("StreamPodSandboxMetrics")
    }

    async fn update_pod_sandbox_resources(
        &self,
        _: Request<cri::UpdatePodSandboxResourcesRequest>,
    ) -> Answer<cri::UpdatePodSandboxResourcesResponse> {
        unserved("UpdatePodSandboxResources")
    }

    async fn runtime_config(
        &self,
        _: Request<cri::RuntimeConfigRequest>,
    ) -> Answer<cri::RuntimeConfigResponse> {
        unserved("RuntimeConfig")
    }
}

#[tonic::async_trait]
impl ImageService for FakeCri {
    async fn image_status(&self, r: Request<cri::ImageStatusRequest>) -> Answer<cri::ImageStatusResponse> {
        let image = r.into_inner().image.map(|i| i.image).unwrap_or_default();
        let present = !self.world().missing_images.contains(&image);
        Ok(Response::new(cri::ImageStatusResponse {
            image: present.then(|| cri::Image {
                id: format!("sha256:{image}"),
                repo_tags: vec![image],
                ..Default::default()
            }),
            ..Default::default()
        }))
    }

    async fn pull_image(&self, r: Request<cri::PullImageRequest>) -> Answer<cri::PullImageResponse> {
        let image = r.into_inner().image.map(|i| i.image).unwrap_or_default();
        let mut w = self.world();
        w.calls.push(Call::Pull(image.clone()));
        w.missing_images.remove(&image);
        Ok(Response::new(cri::PullImageResponse {
            image_ref: format!("sha256:{image}"),
        }))
    }

    async fn list_images(&self, _: Request<cri::ListImagesRequest>) -> Answer<cri::ListImagesResponse> {
        unserved("ListImages")
    }

    async fn remove_image(&self, _: Request<cri::RemoveImageRequest>) -> Answer<cri::RemoveImageResponse> {
        unserved("RemoveImage")
    }

    type StreamImagesStream = Chunks<cri::StreamImagesResponse>;

    async fn stream_images(&self, _: Request<cri::StreamImagesRequest>) -> Answer<Self::StreamImagesStream> {
        unserved("StreamImages")
    }

    async fn image_fs_info(&self, _: Request<cri::ImageFsInfoRequest>) -> Answer<cri::ImageFsInfoResponse> {
        unserved("ImageFsInfo")
    }
}
