//! PodSandboxStats and ListPodSandboxStats (what kubelet's CRI stats provider and `crictl statsp` read): a pod's
//! containers' stats, their cpu, memory and processes summed for the pod (crius makes no pod-level cgroup
//! yet: the sum of its containers' is what the pod uses), and the counters of the pod's network namespace.
//!
//! Pressure (PSI, KEP-4205) cannot be summed: the pod's is read from the pod cgroup kubelet made (its
//! `cgroup_parent`), and is unset without one or on a kernel without PSI.

use std::path::Path;

use crius_api::cri;

use crate::container::stats::{io_usage, psi_stats};
use crate::error::Result;
use crate::network::netdev;
use crate::node::Node;
use crate::shim::Pressure;
use crate::store::container::State;
use crate::store::now_ns;
use crate::store::sandbox::Sandbox;

fn uint(v: u64) -> Option<cri::UInt64Value> {
    Some(cri::UInt64Value { value: v })
}

/// The sum of `f` over `v`'s values that are there (none if none is).
fn sum<T>(v: &[T], f: impl Fn(&T) -> Option<u64>) -> Option<u64> {
    v.iter().filter_map(f).reduce(|a, b| a + b)
}

/// The pod-wide cpu and memory of its containers' stats.
fn totals(now: i64, containers: &[cri::ContainerStats]) -> (Option<cri::CpuUsage>, Option<cri::MemoryUsage>) {
    let cpus: Vec<&cri::CpuUsage> = containers.iter().filter_map(|c| c.cpu.as_ref()).collect();
    let mems: Vec<&cri::MemoryUsage> = containers.iter().filter_map(|c| c.memory.as_ref()).collect();
    let v = |o: &Option<cri::UInt64Value>| o.as_ref().map(|u| u.value);
    let cpu = (!cpus.is_empty()).then(|| cri::CpuUsage {
        timestamp: now,
        usage_core_nano_seconds: sum(&cpus, |c| v(&c.usage_core_nano_seconds)).and_then(uint),
        // Only when every container has a rate (each needs two samples).
        usage_nano_cores: cpus
            .iter()
            .all(|c| c.usage_nano_cores.is_some())
            .then(|| sum(&cpus, |c| v(&c.usage_nano_cores)))
            .flatten()
            .and_then(uint),
        psi: None,
    });
    let memory = (!mems.is_empty()).then(|| cri::MemoryUsage {
        timestamp: now,
        psi: None,
        working_set_bytes: sum(&mems, |m| v(&m.working_set_bytes)).and_then(uint),
        available_bytes: None,
        usage_bytes: sum(&mems, |m| v(&m.usage_bytes)).and_then(uint),
        rss_bytes: sum(&mems, |m| v(&m.rss_bytes)).and_then(uint),
        page_faults: sum(&mems, |m| v(&m.page_faults)).and_then(uint),
        major_page_faults: sum(&mems, |m| v(&m.major_page_faults)).and_then(uint),
    });
    (cpu, memory)
}

/// The counters of `s`'s own network namespace (none with the host's network, or once it is gone).
pub(crate) fn network(now: i64, s: &Sandbox) -> Option<cri::NetworkUsage> {
    let path = s.record.namespaces.net.as_ref().filter(|_| s.record.ready)?;
    let all = match netdev::read(path) {
        Ok(all) => all,
        Err(e) => {
            tracing::debug!(sandbox = %s.record.id, "reading its network counters: {e}");
            return None;
        }
    };
    let usage = |c: &netdev::Counters| cri::NetworkInterfaceUsage {
        name: c.name.clone(),
        rx_bytes: uint(c.rx_bytes),
        rx_errors: uint(c.rx_errors),
        tx_bytes: uint(c.tx_bytes),
        tx_errors: uint(c.tx_errors),
    };
    Some(cri::NetworkUsage {
        timestamp: now,
        default_interface: all.iter().find(|c| c.name == "eth0").map(usage),
        interfaces: all.iter().map(usage).collect(),
    })
}

/// The pressure files of the cgroup at `dir` (each part None where the file is missing).
fn pressure_in(dir: &Path) -> Pressure {
    let read = |what| crius_oci::cgroup::psi::read(dir, what);
    Pressure {
        cpu: read("cpu"),
        memory: read("memory"),
        io: read("io"),
    }
}

impl Node {
    /// The pressure of `s`'s pod cgroup: none without a `cgroup_parent` naming one that exists.
    fn pod_pressure(&self, s: &Sandbox) -> Pressure {
        super::resources::writable_pod_cgroup(self.pods.cgroup_driver(), s.cgroup_parent())
            .map(|c| pressure_in(&c.dir))
            .unwrap_or_default()
    }

    /// PodSandboxStats of sandbox `id`.
    pub fn pod_stats(&self, id: &str) -> Result<cri::PodSandboxStats> {
        let s = self.pods.get("PodSandboxStats", id)?;
        Ok(self.stats_of(&s))
    }

    /// ListPodSandboxStats: the READY sandboxes `filter` selects.
    pub fn list_pod_stats(&self, filter: Option<&cri::PodSandboxStatsFilter>) -> Vec<cri::PodSandboxStats> {
        self.pods
            .sandboxes
            .list()
            .into_iter()
            .filter(|s| s.record.ready)
            .filter(|s| filter.is_none_or(|f| crate::sandbox::status::selected(s, &f.id, &f.label_selector)))
            .map(|s| self.stats_of(&s))
            .collect()
    }

    fn stats_of(&self, s: &Sandbox) -> cri::PodSandboxStats {
        let now = now_ns();
        let samples: Vec<_> = self
            .containers
            .of_sandbox(&s.record.id)
            .into_iter()
            .filter(|c| c.record.state() == State::Running)
            .map(|c| self.containers.sample(&c))
            .collect();
        let pids = samples.iter().filter_map(|(_, m)| m.map(|m| m.pids)).sum();
        let containers: Vec<cri::ContainerStats> = samples.into_iter().map(|(c, _)| c).collect();
        let (mut cpu, mut memory) = totals(now, &containers);
        let pressure = self.pod_pressure(s);
        if let Some(c) = cpu.as_mut() {
            c.psi = psi_stats(pressure.cpu);
        }
        if let Some(m) = memory.as_mut() {
            m.psi = psi_stats(pressure.memory);
        }
        cri::PodSandboxStats {
            attributes: Some(cri::PodSandboxAttributes {
                id: s.record.id.clone(),
                metadata: s.config.metadata.clone(),
                labels: s.config.labels.clone(),
                annotations: s.config.annotations.clone(),
            }),
            linux: Some(cri::LinuxPodSandboxStats {
                cpu,
                memory,
                network: network(now, s),
                process: Some(cri::ProcessUsage {
                    timestamp: now,
                    process_count: uint(pids),
                }),
                containers,
                io: io_usage(now, pressure.io),
            }),
            windows: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(cpu: u64, rate: Option<u64>, mem: u64) -> cri::ContainerStats {
        cri::ContainerStats {
            cpu: Some(cri::CpuUsage {
                usage_core_nano_seconds: uint(cpu),
                usage_nano_cores: rate.and_then(uint),
                ..Default::default()
            }),
            memory: Some(cri::MemoryUsage {
                working_set_bytes: uint(mem),
                usage_bytes: uint(mem * 2),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn the_pod_uses_what_its_containers_use() {
        let (cpu, mem) = totals(7, &[stats(10, Some(3), 100), stats(5, Some(1), 50)]);
        let (cpu, mem) = (cpu.unwrap(), mem.unwrap());
        assert_eq!(cpu.timestamp, 7);
        assert_eq!(cpu.usage_core_nano_seconds.unwrap().value, 15);
        assert_eq!(cpu.usage_nano_cores.unwrap().value, 4);
        assert_eq!(mem.working_set_bytes.unwrap().value, 150);
        assert_eq!(mem.usage_bytes.unwrap().value, 300);
        assert!(mem.rss_bytes.is_none(), "no container said");
        let (cpu, _) = totals(7, &[stats(10, Some(3), 100), stats(5, None, 50)]);
        assert!(
            cpu.unwrap().usage_nano_cores.is_none(),
            "a rate needs every container's"
        );
        assert_eq!(totals(7, &[]), (None, None));
    }

    #[test]
    fn the_pods_pressure_is_its_cgroups_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(pressure_in(dir.path()), Pressure::default(), "no PSI: none");
        let line = |t| {
            format!(
                "some avg10=0.50 avg60=0.20 avg300=0.10 total={t}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=1\n"
            )
        };
        std::fs::write(dir.path().join("cpu.pressure"), line(11)).unwrap();
        std::fs::write(dir.path().join("io.pressure"), line(33)).unwrap();
        let p = pressure_in(dir.path());
        assert_eq!(
            p.cpu.map(|p| (p.some.total, p.some.avg10, p.full.total)),
            Some((11, 0.5, 1))
        );
        assert_eq!(p.memory, None);
        assert_eq!(p.io.map(|p| p.some.total), Some(33));
    }
}
