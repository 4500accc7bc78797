//! The list calls and their sizes. A unary list (ListPodSandbox, ListContainers, ListContainerStats,
//! ListPodSandboxStats) whose answer passes [`UNARY_LIMIT`], the gRPC message size kubelet takes, answers
//! ResourceExhausted naming its size and the Stream* call to use, rather than an answer the client's transport
//! refuses. The KEP-5825 Stream* calls send the same lists in chunks of at most [`CHUNK_LIMIT`] each.

use crius_api::cri;
use prost::Message;
use tonic::{Response, Status};

use super::{Chunks, Reply, RuntimeService};
use crate::error::Error;
use crate::sandbox;

/// The largest unary list answer: kubelet's gRPC message limit (16 MiB).
pub const UNARY_LIMIT: usize = 16 << 20;
/// The largest chunk of a Stream* call: gRPC's default message limit (4 MiB), which any client takes.
pub const CHUNK_LIMIT: usize = 4 << 20;

/// `item`'s encoded size as one element of the answer's repeated field (numbered 1: a one-byte tag).
fn element_len<T: Message>(item: &T) -> usize {
    let n = item.encoded_len();
    1 + prost::encoding::encoded_len_varint(n as u64) + n
}

/// What a unary list call answers with, named for its error.
struct Unary {
    call: &'static str,
    what: &'static str,
    instead: &'static str,
}

impl Unary {
    /// `items`, if their answer fits in [`UNARY_LIMIT`].
    fn bounded<T: Message>(&self, items: Vec<T>) -> Result<Vec<T>, Status> {
        let bytes: usize = items.iter().map(element_len).sum();
        if bytes > UNARY_LIMIT {
            return Err(Error::ListTooLarge {
                call: self.call,
                what: self.what,
                items: items.len(),
                bytes,
                limit: UNARY_LIMIT,
                instead: self.instead,
            }
            .into());
        }
        Ok(items)
    }
}

/// `items` cut in order into runs whose answers take at most `limit` bytes each (an item larger than `limit`
/// alone in its run); an empty list is one empty run.
pub fn chunks<T: Message>(items: Vec<T>, limit: usize) -> Vec<Vec<T>> {
    let mut runs = Vec::new();
    let (mut run, mut size) = (Vec::new(), 0);
    for item in items {
        let n = element_len(&item);
        if !run.is_empty() && size + n > limit {
            runs.push(std::mem::take(&mut run));
            size = 0;
        }
        size += n;
        run.push(item);
    }
    if !run.is_empty() || runs.is_empty() {
        runs.push(run);
    }
    runs
}

/// A Stream* call's answer: `items` in chunks of at most [`CHUNK_LIMIT`], each wrapped by `wrap`.
fn streamed<T: Message + Send + 'static, M: Send + 'static>(
    items: Vec<T>,
    wrap: fn(Vec<T>) -> M,
) -> Reply<Chunks<M>> {
    let chunks = chunks(items, CHUNK_LIMIT);
    Ok(Response::new(Box::pin(tokio_stream::iter(
        chunks.into_iter().map(move |c| Ok(wrap(c))),
    ))))
}

const SANDBOXES: Unary = Unary {
    call: "ListPodSandbox",
    what: "sandboxes",
    instead: "StreamPodSandboxes",
};
const CONTAINERS: Unary = Unary {
    call: "ListContainers",
    what: "containers",
    instead: "StreamContainers",
};
const CONTAINER_STATS: Unary = Unary {
    call: "ListContainerStats",
    what: "containers' stats",
    instead: "StreamContainerStats",
};
const SANDBOX_STATS: Unary = Unary {
    call: "ListPodSandboxStats",
    what: "sandboxes' stats",
    instead: "StreamPodSandboxStats",
};

impl RuntimeService {
    fn sandboxes(&self, filter: Option<cri::PodSandboxFilter>) -> Vec<cri::PodSandbox> {
        sandbox::list(self.runtime.pods.sandboxes.list(), filter.as_ref())
    }

    /// In memory, on the calling worker: the records' lock is never held across a write, and a hand-off to a
    /// blocking thread cost more than the list itself (an engine lists each pod's containers every second).
    fn containers(&self, filter: Option<cri::ContainerFilter>) -> Vec<cri::Container> {
        crate::container::list(&self.runtime.containers, filter.as_ref())
    }

    async fn container_stats(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> Result<Vec<cri::ContainerStats>, Status> {
        self.blocking(move |r| Ok(crate::container::list_stats(&r.containers, filter.as_ref())))
            .await
    }

    async fn sandbox_stats(
        &self,
        filter: Option<cri::PodSandboxStatsFilter>,
    ) -> Result<Vec<cri::PodSandboxStats>, Status> {
        self.blocking(move |r| Ok(r.list_pod_stats(filter.as_ref())))
            .await
    }

    /// ListPodSandbox.
    pub(super) fn list_sandboxes(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Reply<cri::ListPodSandboxResponse> {
        let items = SANDBOXES.bounded(self.sandboxes(filter))?;
        Ok(Response::new(cri::ListPodSandboxResponse { items }))
    }

    /// ListContainers.
    pub(super) async fn list_containers_bounded(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Reply<cri::ListContainersResponse> {
        let containers = CONTAINERS.bounded(self.containers(filter))?;
        Ok(Response::new(cri::ListContainersResponse { containers }))
    }

    /// ListContainerStats.
    pub(super) async fn list_container_stats_bounded(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> Reply<cri::ListContainerStatsResponse> {
        let stats = CONTAINER_STATS.bounded(self.container_stats(filter).await?)?;
        Ok(Response::new(cri::ListContainerStatsResponse { stats }))
    }

    /// ListPodSandboxStats.
    pub(super) async fn list_sandbox_stats_bounded(
        &self,
        filter: Option<cri::PodSandboxStatsFilter>,
    ) -> Reply<cri::ListPodSandboxStatsResponse> {
        let stats = SANDBOX_STATS.bounded(self.sandbox_stats(filter).await?)?;
        Ok(Response::new(cri::ListPodSandboxStatsResponse { stats }))
    }

    /// StreamPodSandboxes.
    pub(super) fn stream_sandboxes(
        &self,
        filter: Option<cri::PodSandboxFilter>,
    ) -> Reply<Chunks<cri::StreamPodSandboxesResponse>> {
        streamed(self.sandboxes(filter), |pod_sandboxes| {
            cri::StreamPodSandboxesResponse { pod_sandboxes }
        })
    }

    /// StreamContainers.
    pub(super) async fn stream_container_list(
        &self,
        filter: Option<cri::ContainerFilter>,
    ) -> Reply<Chunks<cri::StreamContainersResponse>> {
        streamed(self.containers(filter), |containers| {
            cri::StreamContainersResponse { containers }
        })
    }

    /// StreamContainerStats.
    pub(super) async fn stream_container_stats_list(
        &self,
        filter: Option<cri::ContainerStatsFilter>,
    ) -> Reply<Chunks<cri::StreamContainerStatsResponse>> {
        streamed(self.container_stats(filter).await?, |container_stats| {
            cri::StreamContainerStatsResponse { container_stats }
        })
    }

    /// StreamPodSandboxStats.
    pub(super) async fn stream_sandbox_stats_list(
        &self,
        filter: Option<cri::PodSandboxStatsFilter>,
    ) -> Reply<Chunks<cri::StreamPodSandboxStatsResponse>> {
        streamed(self.sandbox_stats(filter).await?, |pod_sandbox_stats| {
            cri::StreamPodSandboxStatsResponse { pod_sandbox_stats }
        })
    }
}
