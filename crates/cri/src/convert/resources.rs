//! A container's cgroup resources: CRI's LinuxContainerResources as OCI `linux.resources` (CRI zero = unset),
//! and an UpdateContainerResources request merged over what the container has.

use crius_api::cri;
use oci_spec::runtime::{
    LinuxCpuBuilder, LinuxDeviceCgroupBuilder, LinuxHugepageLimitBuilder, LinuxMemoryBuilder, LinuxResources,
    LinuxResourcesBuilder,
};

use super::{CALL, built};
use crate::error::{Error, Result};

/// A CRI number the OCI field cannot hold (a negative period, a limit past i64) is refused, naming it.
fn fits<T: TryFrom<i64>>(call: &'static str, field: &'static str, v: i64) -> Result<T> {
    T::try_from(v).map_err(|_| Error::invalid(call, field, format!("{v} is out of range")))
}

/// The OCI `linux.resources` of CRI resources: a deny-all device rule first, then what `r` sets (CRI zero =
/// unset). cpu shares only where the cgroup2 tree has the cpu controller (see [`super::cpu_controller`]).
pub fn resources(r: Option<&cri::LinuxContainerResources>, cpu_controller: bool) -> Result<LinuxResources> {
    linux_resources(CALL, r, cpu_controller)
}

/// UpdateContainerResources' part: `new` merged over the container's `old` resources ([`merge_resources`]),
/// and the OCI resources the runtime is to apply. Those carry no device rules: an update changes limits,
/// never the devices the container was made with.
pub fn update_resources(
    old: &cri::LinuxContainerResources,
    new: &cri::LinuxContainerResources,
    cpu_controller: bool,
) -> Result<(cri::LinuxContainerResources, LinuxResources)> {
    let merged = merge_resources(old, new);
    let mut oci = linux_resources("UpdateContainerResources", Some(&merged), cpu_controller)?;
    oci.set_devices(None);
    Ok((merged, oci))
}

fn linux_resources(
    call: &'static str,
    r: Option<&cri::LinuxContainerResources>,
    cpu_controller: bool,
) -> Result<LinuxResources> {
    let deny_all = built(
        LinuxDeviceCgroupBuilder::default()
            .allow(false)
            .access("rwm")
            .build(),
    )?;
    let mut out = built(LinuxResourcesBuilder::default().devices(vec![deny_all]).build())?;
    let Some(r) = r else { return Ok(out) };
    let mut cpu = LinuxCpuBuilder::default();
    let mut any_cpu = false;
    if r.cpu_shares != 0 && cpu_controller {
        cpu = cpu.shares(fits::<u64>(call, "cpu_shares", r.cpu_shares)?);
        any_cpu = true;
    }
    if r.cpu_quota != 0 {
        cpu = cpu.quota(r.cpu_quota);
        any_cpu = true;
    }
    if r.cpu_period != 0 {
        cpu = cpu.period(fits::<u64>(call, "cpu_period", r.cpu_period)?);
        any_cpu = true;
    }
    if !r.cpuset_cpus.is_empty() {
        cpu = cpu.cpus(r.cpuset_cpus.clone());
        any_cpu = true;
    }
    if !r.cpuset_mems.is_empty() {
        cpu = cpu.mems(r.cpuset_mems.clone());
        any_cpu = true;
    }
    if any_cpu {
        out.set_cpu(Some(built(cpu.build())?));
    }
    if r.memory_limit_in_bytes != 0 {
        let mut memory = LinuxMemoryBuilder::default().limit(r.memory_limit_in_bytes);
        if r.memory_swap_limit_in_bytes != 0 {
            memory = memory.swap(r.memory_swap_limit_in_bytes);
        }
        out.set_memory(Some(built(memory.build())?));
    }
    if !r.hugepage_limits.is_empty() {
        let limits = r
            .hugepage_limits
            .iter()
            // kubelet sends a limit of 0 for each page size it knows of; one this host lacks is left out, as
            // containerd's tolerate_missing_hugetlb_controller does. A real limit still goes to the runtime.
            .filter(|h| h.limit != 0 || page_size_kb(&h.page_size).is_some_and(host_has_page_size))
            .map(|h| {
                let limit = i64::try_from(h.limit).map_err(|_| {
                    Error::invalid(call, "hugepage_limits", format!("{} is out of range", h.limit))
                })?;
                built(
                    LinuxHugepageLimitBuilder::default()
                        .page_size(h.page_size.clone())
                        .limit(limit)
                        .build(),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        if !limits.is_empty() {
            out.set_hugepage_limits(Some(limits));
        }
    }
    if !r.unified.is_empty() {
        out.set_unified(Some(r.unified.clone()));
    }
    Ok(out)
}

/// `new` over `old` as UpdateContainerResources applies it: the fields `new` sets (non-zero, non-empty) replace
/// those of `old`; the `unified` entries are merged; the OOM score cannot change after creation.
pub fn merge_resources(
    old: &cri::LinuxContainerResources,
    new: &cri::LinuxContainerResources,
) -> cri::LinuxContainerResources {
    let mut m = old.clone();
    let pick = |o: &mut i64, n: i64| {
        if n != 0 {
            *o = n;
        }
    };
    pick(&mut m.cpu_period, new.cpu_period);
    pick(&mut m.cpu_quota, new.cpu_quota);
    pick(&mut m.cpu_shares, new.cpu_shares);
    pick(&mut m.memory_limit_in_bytes, new.memory_limit_in_bytes);
    pick(&mut m.memory_swap_limit_in_bytes, new.memory_swap_limit_in_bytes);
    if !new.cpuset_cpus.is_empty() {
        m.cpuset_cpus = new.cpuset_cpus.clone();
    }
    if !new.cpuset_mems.is_empty() {
        m.cpuset_mems = new.cpuset_mems.clone();
    }
    if !new.hugepage_limits.is_empty() {
        m.hugepage_limits = new.hugepage_limits.clone();
    }
    m.unified.extend(new.unified.clone());
    m
}

/// A CRI page size (`2MB`, `1GB`, `64KB`) in kB.
fn page_size_kb(size: &str) -> Option<u64> {
    let i = size.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = size.split_at(i);
    let n: u64 = n.parse().ok()?;
    let scale = match unit {
        "KB" | "kB" => 1,
        "MB" => 1 << 10,
        "GB" => 1 << 20,
        "TB" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

/// Whether the kernel has huge pages of `kb` kB, and the cgroup tree a hugetlb controller to limit them.
fn host_has_page_size(kb: u64) -> bool {
    let pages = std::path::Path::new("/sys/kernel/mm/hugepages").join(format!("hugepages-{kb}kB"));
    let controller = crius_oci::cgroup::mount_point()
        .ok()
        .and_then(|m| std::fs::read_to_string(m.join("cgroup.controllers")).ok())
        .is_some_and(|c| c.split_whitespace().any(|w| w == "hugetlb"));
    pages.is_dir() && controller
}

#[cfg(test)]
mod hugepage_tests {
    use super::*;

    #[test]
    fn page_sizes_read_as_kubelet_writes_them() {
        assert_eq!(page_size_kb("2MB"), Some(2048));
        assert_eq!(page_size_kb("1GB"), Some(1 << 20));
        assert_eq!(page_size_kb("64KB"), Some(64));
        assert_eq!(page_size_kb("2mb"), None);
        assert_eq!(page_size_kb("MB"), None);
    }

    #[test]
    fn a_zero_limit_of_a_page_size_the_host_lacks_is_left_out_a_real_one_kept() {
        let limit = |page_size: &str, limit: u64| cri::LinuxContainerResources {
            hugepage_limits: vec![cri::HugepageLimit {
                page_size: page_size.into(),
                limit,
            }],
            ..Default::default()
        };
        // No machine has 16 GB pages.
        let r = resources(Some(&limit("16GB", 0)), true).unwrap();
        assert!(r.hugepage_limits().is_none(), "{r:?}");
        let r = resources(Some(&limit("16GB", 1 << 34)), true).unwrap();
        assert_eq!(r.hugepage_limits().as_ref().map(Vec::len), Some(1));
    }
}
