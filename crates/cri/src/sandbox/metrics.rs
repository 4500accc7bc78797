//! ListMetricDescriptors and ListPodSandboxMetrics: what kubelet's CRI metrics collector turns into
//! `/metrics/cadvisor` when stats come from the runtime (PodAndContainerStatsFromCRI). The names are
//! cAdvisor's, which dashboards and kubelet's consumers know; the values come from the same samples as
//! ContainerStats and PodSandboxStats (the shim's cgroup figures, the pod's netns counters).
//!
//! Labels: every metric has `id`, `name` and `image` (the container's id, its CRI name and its image; for the
//! pod's own network figures the sandbox's id and name and no image), then its own (`cpu`, `interface`).
//! kubelet adds `namespace`, `pod` and `container` itself, so they are not in the descriptors. The wire value
//! is an integer, so `container_cpu_usage_seconds_total` is whole seconds (as CRI-O sends it).
//!
//! The `container_fs_{reads,writes}{_bytes,}_total` counters come from the container cgroup's io.stat
//! (rbytes, wbytes, rios, wios), summed over its devices: one series per container, so without cAdvisor's
//! per-filesystem `device` label.

use crius_api::cri;

use crate::node::Node;
use crate::store::container::{Container, State};
use crate::store::now_ns;

const BASE: &[&str] = &["id", "name", "image"];

/// The metrics crius gives: (name, help, its labels beyond [`BASE`], counter or gauge).
const METRICS: &[(&str, &str, &[&str], cri::MetricType)] = &[
    (
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed in seconds (whole seconds).",
        &["cpu"],
        cri::MetricType::Counter,
    ),
    (
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed.",
        &[],
        cri::MetricType::Gauge,
    ),
    (
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        &[],
        cri::MetricType::Gauge,
    ),
    (
        "container_memory_rss",
        "Size of RSS (anonymous memory) in bytes.",
        &[],
        cri::MetricType::Gauge,
    ),
    (
        "container_processes",
        "Number of processes running inside the container.",
        &[],
        cri::MetricType::Gauge,
    ),
    (
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds.",
        &[],
        cri::MetricType::Gauge,
    ),
    (
        "container_fs_reads_bytes_total",
        "Cumulative count of bytes read.",
        &[],
        cri::MetricType::Counter,
    ),
    (
        "container_fs_writes_bytes_total",
        "Cumulative count of bytes written.",
        &[],
        cri::MetricType::Counter,
    ),
    (
        "container_fs_reads_total",
        "Cumulative count of reads completed.",
        &[],
        cri::MetricType::Counter,
    ),
    (
        "container_fs_writes_total",
        "Cumulative count of writes completed.",
        &[],
        cri::MetricType::Counter,
    ),
    (
        "container_network_receive_bytes_total",
        "Cumulative count of bytes received.",
        &["interface"],
        cri::MetricType::Counter,
    ),
    (
        "container_network_receive_errors_total",
        "Cumulative count of errors encountered while receiving.",
        &["interface"],
        cri::MetricType::Counter,
    ),
    (
        "container_network_transmit_bytes_total",
        "Cumulative count of bytes transmitted.",
        &["interface"],
        cri::MetricType::Counter,
    ),
    (
        "container_network_transmit_errors_total",
        "Cumulative count of errors encountered while transmitting.",
        &["interface"],
        cri::MetricType::Counter,
    ),
];

/// ListMetricDescriptors: every metric ListPodSandboxMetrics may send.
pub fn descriptors() -> Vec<cri::MetricDescriptor> {
    METRICS
        .iter()
        .map(|(name, help, extra, _)| cri::MetricDescriptor {
            name: name.to_string(),
            help: help.to_string(),
            label_keys: BASE.iter().chain(extra.iter()).map(|k| k.to_string()).collect(),
        })
        .collect()
}

/// Metrics sampled at one instant for one object (a container, or the pod itself).
struct Sampler {
    now: i64,
    base: [String; 3],
    out: Vec<cri::Metric>,
}

impl Sampler {
    fn new(now: i64, id: &str, name: &str, image: &str) -> Sampler {
        Sampler {
            now,
            base: [id.into(), name.into(), image.into()],
            out: Vec::new(),
        }
    }

    /// Metric `name` (one of [`METRICS`]) with `value` and the values of its own labels.
    fn push(&mut self, name: &str, extra: &[&str], value: u64) {
        let Some((_, _, keys, kind)) = METRICS.iter().find(|m| m.0 == name) else {
            return;
        };
        debug_assert_eq!(keys.len(), extra.len(), "{name}'s labels");
        self.out.push(cri::Metric {
            name: name.into(),
            timestamp: self.now,
            metric_type: *kind as i32,
            label_values: self
                .base
                .iter()
                .cloned()
                .chain(extra.iter().map(|v| v.to_string()))
                .collect(),
            value: Some(cri::UInt64Value { value }),
        });
    }
}

/// The io.stat counters of a container's figures.
fn push_io(m: &mut Sampler, io: &crate::shim::Io) {
    m.push("container_fs_reads_bytes_total", &[], io.read_bytes);
    m.push("container_fs_writes_bytes_total", &[], io.write_bytes);
    m.push("container_fs_reads_total", &[], io.reads);
    m.push("container_fs_writes_total", &[], io.writes);
}

impl Node {
    /// ListPodSandboxMetrics: for each READY sandbox, its network counters and its running containers' cpu,
    /// memory and processes.
    pub fn list_pod_metrics(&self) -> Vec<cri::PodSandboxMetrics> {
        self.pods
            .sandboxes
            .list()
            .into_iter()
            .filter(|s| s.record.ready)
            .map(|s| {
                let now = now_ns();
                let name = s
                    .config
                    .metadata
                    .as_ref()
                    .map(|m| m.name.as_str())
                    .unwrap_or_default();
                let mut pod = Sampler::new(now, &s.record.id, name, "");
                for i in super::stats::network(now, &s)
                    .map(|n| n.interfaces)
                    .unwrap_or_default()
                {
                    let v = |o: Option<cri::UInt64Value>| o.map(|u| u.value).unwrap_or(0);
                    let iface = [i.name.as_str()];
                    pod.push("container_network_receive_bytes_total", &iface, v(i.rx_bytes));
                    pod.push("container_network_receive_errors_total", &iface, v(i.rx_errors));
                    pod.push("container_network_transmit_bytes_total", &iface, v(i.tx_bytes));
                    pod.push("container_network_transmit_errors_total", &iface, v(i.tx_errors));
                }
                let container_metrics = self
                    .containers
                    .of_sandbox(&s.record.id)
                    .into_iter()
                    .filter(|c| c.record.state() == State::Running)
                    .map(|c| self.container_metrics(&c))
                    .collect();
                cri::PodSandboxMetrics {
                    pod_sandbox_id: s.record.id.clone(),
                    metrics: pod.out,
                    container_metrics,
                }
            })
            .collect()
    }

    fn container_metrics(&self, c: &Container) -> cri::ContainerMetrics {
        let (stats, figures) = self.containers.sample(c);
        let name = c
            .config
            .metadata
            .as_ref()
            .map(|m| m.name.as_str())
            .unwrap_or_default();
        let image = c
            .config
            .image
            .as_ref()
            .map(|i| i.image.as_str())
            .unwrap_or_default();
        let mut m = Sampler::new(now_ns(), &c.record.id, name, image);
        m.push(
            "container_start_time_seconds",
            &[],
            (c.record.started_at / 1_000_000_000).max(0) as u64,
        );
        let v = |o: &Option<cri::UInt64Value>| o.as_ref().map(|u| u.value);
        if let Some(ns) = stats.cpu.as_ref().and_then(|c| v(&c.usage_core_nano_seconds)) {
            m.push(
                "container_cpu_usage_seconds_total",
                &["total"],
                ns / 1_000_000_000,
            );
        }
        if let Some(mem) = &stats.memory {
            if let Some(b) = v(&mem.usage_bytes) {
                m.push("container_memory_usage_bytes", &[], b);
            }
            if let Some(b) = v(&mem.working_set_bytes) {
                m.push("container_memory_working_set_bytes", &[], b);
            }
            if let Some(b) = v(&mem.rss_bytes) {
                m.push("container_memory_rss", &[], b);
            }
        }
        if let Some(f) = figures {
            m.push("container_processes", &[], f.pids);
            push_io(&mut m, &f.io);
        }
        cri::ContainerMetrics {
            container_id: c.record.id.clone(),
            metrics: m.out,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_descriptors_are_cadvisors_names_with_their_labels() {
        let d = descriptors();
        let find = |n: &str| d.iter().find(|d| d.name == n).unwrap_or_else(|| panic!("{n}"));
        for n in [
            "container_cpu_usage_seconds_total",
            "container_memory_working_set_bytes",
            "container_memory_usage_bytes",
            "container_network_receive_bytes_total",
            "container_network_transmit_bytes_total",
            "container_processes",
            "container_fs_reads_bytes_total",
            "container_fs_writes_bytes_total",
            "container_fs_reads_total",
            "container_fs_writes_total",
        ] {
            assert!(!find(n).help.is_empty(), "{n}");
        }
        assert_eq!(
            find("container_memory_usage_bytes").label_keys,
            ["id", "name", "image"]
        );
        assert_eq!(
            find("container_fs_writes_bytes_total").label_keys,
            ["id", "name", "image"]
        );
        assert_eq!(
            find("container_cpu_usage_seconds_total").label_keys,
            ["id", "name", "image", "cpu"]
        );
        assert_eq!(
            find("container_network_receive_bytes_total").label_keys,
            ["id", "name", "image", "interface"]
        );
        // kubelet appends namespace, pod and container: a descriptor naming one would clash.
        assert!(d.iter().all(|d| {
            d.label_keys
                .iter()
                .all(|k| !["namespace", "pod", "container"].contains(&k.as_str()))
        }));
        let mut names: Vec<_> = d.iter().map(|d| &d.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), d.len(), "a name twice");
        for d in &d {
            let counter = d.name.ends_with("_total");
            let kind = METRICS.iter().find(|m| m.0 == d.name).unwrap().3;
            assert_eq!(counter, kind == cri::MetricType::Counter, "{}", d.name);
        }
    }

    #[test]
    fn a_sample_carries_the_base_labels_then_its_own() {
        let mut s = Sampler::new(5, "c1", "web", "busybox");
        s.push("container_cpu_usage_seconds_total", &["total"], 3);
        s.push("container_memory_rss", &[], 10);
        s.push("not_a_metric", &[], 1);
        assert_eq!(s.out.len(), 2);
        assert_eq!(s.out[0].label_values, ["c1", "web", "busybox", "total"]);
        assert_eq!(s.out[0].metric_type, cri::MetricType::Counter as i32);
        assert_eq!(s.out[0].timestamp, 5);
        assert_eq!(s.out[1].label_values, ["c1", "web", "busybox"]);
        assert_eq!(s.out[1].metric_type, cri::MetricType::Gauge as i32);
        assert_eq!(s.out[1].value.as_ref().unwrap().value, 10);
    }

    #[test]
    fn io_figures_become_the_fs_counters() {
        // What two devices' io.stat lines sum to (see the shim client's io_of).
        let io = crate::shim::Io {
            read_bytes: 1460000,
            write_bytes: 314773704,
            reads: 200,
            writes: 355,
        };
        let mut s = Sampler::new(5, "c1", "web", "busybox");
        push_io(&mut s, &io);
        let got: Vec<(&str, u64, i32)> = s
            .out
            .iter()
            .map(|m| (m.name.as_str(), m.value.as_ref().unwrap().value, m.metric_type))
            .collect();
        let counter = cri::MetricType::Counter as i32;
        assert_eq!(
            got,
            [
                ("container_fs_reads_bytes_total", 1460000, counter),
                ("container_fs_writes_bytes_total", 314773704, counter),
                ("container_fs_reads_total", 200, counter),
                ("container_fs_writes_total", 355, counter),
            ]
        );
        assert_eq!(s.out[0].label_values, ["c1", "web", "busybox"]);
    }
}
