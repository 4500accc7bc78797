//! ContainerStats and ListContainerStats: cpu and memory from the pod's shim (cgroup v2 metrics), with their
//! pressure and io's (PSI, KEP-4205) where the kernel has it, the writable layer from the container's snapshot.

use crius_api::cri;

use super::Containers;
use super::status::selected;
use crate::shim::{Metrics, Psi};
use crate::store::container::{Container, State};
use crate::store::now_ns;

impl Containers {
    /// ContainerStats: cpu and memory from the shim (cgroup v2 figures; none for a container that is not
    /// running), the writable layer from its snapshot. CPU use per second needs two samples: the first
    /// call reports the cumulative figure only.
    pub fn stats(&self, c: &Container) -> cri::ContainerStats {
        self.sample(c).0
    }

    /// ContainerStats of `c` and the shim's figures it was made from (none if the shim has none).
    pub(crate) fn sample(&self, c: &Container) -> (cri::ContainerStats, Option<Metrics>) {
        let now = now_ns();
        let uint = |v: u64| Some(cri::UInt64Value { value: v });
        let (layer, upper) = self.images.snapshot_usage(&c.record.id);
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
        let Ok(Some(m)) = self.shims.stats(&c.record.sandbox_id, &c.record.id) else {
            return (out, None);
        };
        let used_ns = m.cpu_usage_ns;
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
            psi: psi_stats(m.psi.cpu),
        });
        let working_set = m.memory_usage.saturating_sub(m.inactive_file);
        // An unlimited cgroup reports a huge limit: no "available" then.
        let limited = m.memory_limit != 0 && m.memory_limit < (1 << 62);
        out.memory = Some(cri::MemoryUsage {
            timestamp: now,
            psi: psi_stats(m.psi.memory),
            working_set_bytes: uint(working_set),
            available_bytes: if limited {
                uint(m.memory_limit.saturating_sub(working_set))
            } else {
                None
            },
            usage_bytes: uint(m.memory_usage),
            rss_bytes: uint(m.anon),
            page_faults: uint(m.pgfault),
            major_page_faults: uint(m.pgmajfault),
        });
        // IoUsage holds nothing but the pressure: none without it.
        out.io = io_usage(now, m.psi.io);
        (out, Some(m))
    }
}

/// The CRI's PsiStats of a pressure file's figures (none without PSI).
pub(crate) fn psi_stats(p: Option<Psi>) -> Option<cri::PsiStats> {
    let data = |d: crate::shim::PsiData| cri::PsiData {
        total: d.total,
        avg10: d.avg10,
        avg60: d.avg60,
        avg300: d.avg300,
    };
    p.map(|p| cri::PsiStats {
        full: Some(data(p.full)),
        some: Some(data(p.some)),
    })
}

/// The CRI's IoUsage at `now`: io's pressure, none without it.
pub(crate) fn io_usage(now: i64, p: Option<Psi>) -> Option<cri::IoUsage> {
    psi_stats(p).map(|psi| cri::IoUsage {
        timestamp: now,
        psi: Some(psi),
    })
}

/// ListContainerStats: the stats of the running containers `filter` selects.
pub fn list_stats(all: &Containers, filter: Option<&cri::ContainerStatsFilter>) -> Vec<cri::ContainerStats> {
    all.list_where(|c| {
        c.record.state() == State::Running
            && filter.is_none_or(|f| selected(c, &f.id, &f.pod_sandbox_id, &f.label_selector))
    })
    .into_iter()
    .map(|c| all.stats(&c))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shim::fake::FAKE_PSI;

    #[test]
    fn pressure_becomes_the_cris_psi_stats() {
        let p = psi_stats(Some(FAKE_PSI)).unwrap();
        let (some, full) = (p.some.unwrap(), p.full.unwrap());
        assert_eq!(
            (some.total, some.avg10, some.avg60, some.avg300),
            (1000, 1.5, 0.5, 0.25)
        );
        assert_eq!((full.total, full.avg10), (400, 0.5));
        assert_eq!(psi_stats(None), None, "no PSI: unset, not zeros");
    }

    #[test]
    fn io_usage_is_there_only_with_ios_pressure() {
        assert_eq!(io_usage(7, None), None);
        let io = io_usage(7, Some(FAKE_PSI)).unwrap();
        assert_eq!(io.timestamp, 7);
        assert_eq!(io.psi.unwrap().some.unwrap().total, 1000);
    }
}
