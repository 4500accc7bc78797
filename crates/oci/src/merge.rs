//! Merging an `update` into the resources a container already has: fields present in the update replace the old
//! ones, absent fields are kept (as `runc update` does).

use oci_spec::runtime::{LinuxCpu, LinuxMemory, LinuxResources};

macro_rules! take {
    ($old:ident, $new:ident, $($field:ident => $set:ident),+ $(,)?) => {
        $( if let Some(v) = $new.$field().clone() { $old.$set(Some(v)); } )+
    };
}

fn cpu(mut old: LinuxCpu, new: &LinuxCpu) -> LinuxCpu {
    take!(old, new, shares => set_shares, quota => set_quota, period => set_period, burst => set_burst,
          idle => set_idle, realtime_runtime => set_realtime_runtime, realtime_period => set_realtime_period,
          cpus => set_cpus, mems => set_mems);
    old
}

fn memory(mut old: LinuxMemory, new: &LinuxMemory) -> LinuxMemory {
    // As runc: an unlimited memory limit without a swap value lifts the swap limit too (a kept memory+swap
    // total has no memory limit to be measured from).
    if new.limit() == Some(-1) && new.swap().is_none() {
        old.set_swap(Some(-1));
    }
    take!(old, new, limit => set_limit, reservation => set_reservation, swap => set_swap, kernel => set_kernel,
          kernel_tcp => set_kernel_tcp, swappiness => set_swappiness, disable_oom_killer => set_disable_oom_killer,
          check_before_update => set_check_before_update);
    old
}

/// `old` with every field that `new` sets replaced.
pub fn resources(mut old: LinuxResources, new: &LinuxResources) -> LinuxResources {
    if let Some(c) = new.cpu() {
        old.set_cpu(Some(cpu(old.cpu().clone().unwrap_or_default(), c)));
    }
    if let Some(m) = new.memory() {
        old.set_memory(Some(memory((*old.memory()).unwrap_or_default(), m)));
    }
    take!(old, new, pids => set_pids, block_io => set_block_io, hugepage_limits => set_hugepage_limits,
          devices => set_devices, network => set_network, rdma => set_rdma);
    if let Some(u) = new.unified() {
        let mut all = old.unified().clone().unwrap_or_default();
        all.extend(u.clone());
        old.set_unified(Some(all));
    }
    old
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn update_replaces_only_given_fields() {
        let old: LinuxResources = serde_json::from_str(
            r#"{"cpu":{"shares":1024,"quota":50000,"period":100000},"memory":{"limit":1000},"unified":{"a.b":"1"}}"#,
        )
        .unwrap();
        let new: LinuxResources =
            serde_json::from_str(r#"{"cpu":{"quota":20000},"pids":{"limit":5},"unified":{"c.d":"2"}}"#)
                .unwrap();
        let m = resources(old, &new);
        let cpu = m.cpu().clone().unwrap();
        assert_eq!(
            (cpu.shares(), cpu.quota(), cpu.period()),
            (Some(1024), Some(20000), Some(100000))
        );
        assert_eq!((*m.memory()).unwrap().limit(), Some(1000));
        assert_eq!((*m.pids()).unwrap().limit(), 5);
        assert_eq!(m.unified().clone().unwrap().len(), 2);
    }

    #[test]
    fn an_unlimited_memory_limit_lifts_the_swap_limit_unless_given() {
        let old: LinuxResources =
            serde_json::from_str(r#"{"memory":{"limit":52428800,"swap":96468992}}"#).unwrap();
        let up = |new: &str| {
            let new: LinuxResources = serde_json::from_str(new).unwrap();
            let m = (*resources(old.clone(), &new).memory()).unwrap();
            (m.limit(), m.swap())
        };
        assert_eq!(up(r#"{"memory":{"limit":-1}}"#), (Some(-1), Some(-1)));
        assert_eq!(up(r#"{"memory":{"limit":-1,"swap":-1}}"#), (Some(-1), Some(-1)));
        assert_eq!(
            up(r#"{"memory":{"limit":67108864}}"#),
            (Some(67108864), Some(96468992))
        );
    }
}
