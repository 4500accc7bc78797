//! ContainerStats and ListContainerStats: cpu and memory from the pod's shim (cgroup v2 metrics), the writable
//! layer from the container's snapshot.

use containerd_shim_protos::api as task;
use crius_image::Store;
use crius_shim::client;
use k8s_cri::v1 as cri;

use super::{Container, Containers, selected};
use crate::records::now_ns;

impl Containers {
    /// ContainerStats: cpu and memory from the shim (cgroup v2 figures; none for a container that is not
    /// running), the writable layer from its snapshot. CPU use per second needs two samples: the first
    /// call reports the cumulative figure only.
    pub fn stats(&self, c: &Container, store: &Store) -> cri::ContainerStats {
        let now = now_ns();
        let uint = |v: u64| Some(cri::UInt64Value { value: v });
        let (layer, upper) = store.snapshot_usage(&c.record.id);
        let mut out = cri::ContainerStats {
            attributes: Some(cri::ContainerAttributes {
                id: c.record.id.clone(),
                metadata: c.config.metadata.clone(),
                labels: c.config.labels.clone(),
                annotations: c.config.annotations.clone(),
            }),
            writable_layer: Some(cri::FilesystemUsage {
                timestamp: now,
                fs_id: Some(cri::FilesystemIdentifier {
                    mountpoint: upper.display().to_string(),
                }),
                used_bytes: uint(layer.bytes),
                inodes_used: uint(layer.inodes),
            }),
            ..Default::default()
        };
        let req = task::StatsRequest {
            id: c.record.id.clone(),
            ..Default::default()
        };
        let Ok(resp) = self.call(&c.record.sandbox_id, |s| s.stats(client::ctx(10), &req)) else {
            return out;
        };
        use containerd_shim_protos::protobuf::Message as _;
        let Some(m) = resp.stats.as_ref().and_then(|a| {
            containerd_shim_protos::cgroups_v2::metrics::Metrics::parse_from_bytes(&a.value).ok()
        }) else {
            return out;
        };
        let used_ns = m.cpu.usage_usec * 1000;
        let prev = self
            .cpu_samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(c.record.id.clone(), (now, used_ns));
        let nano_cores = prev
            .filter(|(t, u)| now > *t && used_ns >= *u)
            .map(|(t, u)| ((used_ns - u) as u128 * 1_000_000_000 / (now - t) as u128) as u64);
        out.cpu = Some(cri::CpuUsage {
            timestamp: now,
            usage_core_nano_seconds: uint(used_ns),
            usage_nano_cores: nano_cores.and_then(uint),
        });
        let mem = &m.memory;
        let working_set = mem.usage.saturating_sub(mem.inactive_file);
        // An unlimited cgroup reports a huge limit: no "available" then.
        let limited = mem.usage_limit != 0 && mem.usage_limit < (1 << 62);
        out.memory = Some(cri::MemoryUsage {
            timestamp: now,
            working_set_bytes: uint(working_set),
            available_bytes: if limited {
                uint(mem.usage_limit.saturating_sub(working_set))
            } else {
                None
            },
            usage_bytes: uint(mem.usage),
            rss_bytes: uint(mem.anon),
            page_faults: uint(mem.pgfault),
            major_page_faults: uint(mem.pgmajfault),
        });
        out
    }
}

/// ListContainerStats: the stats of the running containers `filter` selects.
pub fn list_stats(
    all: &Containers,
    filter: Option<&cri::ContainerStatsFilter>,
    store: &Store,
) -> Vec<cri::ContainerStats> {
    all.list()
        .into_iter()
        .filter(|c| filter.is_none_or(|f| selected(c, &f.id, &f.pod_sandbox_id, &f.label_selector)))
        .filter(|c| all.observe(c).state == cri::ContainerState::ContainerRunning)
        .map(|c| all.stats(&c, store))
        .collect()
}
