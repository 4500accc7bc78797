//! Translation of OCI `LinuxResources` into cgroup v2 file writes — pure, so every rule is unit-tested.
//!
//! Zero means "unset" where the OCI/CRI contracts say so (cpu quota and period, memory limit, pids limit).

use oci_spec::runtime::{LinuxBlockIo, LinuxCpu, LinuxMemory, LinuxResources};

use crate::{Error, Result};

/// One write of `value` into the cgroup file `file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    /// File name inside the cgroup directory, e.g. `cpu.max`.
    pub file: String,
    /// What to write.
    pub value: String,
}

impl Write {
    fn new(file: impl Into<String>, value: impl ToString) -> Self {
        Write {
            file: file.into(),
            value: value.to_string(),
        }
    }

    /// The controller that owns the file (`memory` for `memory.max`), or None for core `cgroup.*` files.
    pub fn controller(&self) -> Option<&str> {
        let c = self.file.split('.').next().unwrap_or("");
        (c != "cgroup").then_some(c)
    }
}

fn unsupported(what: &str) -> Error {
    Error::Msg(format!(
        "{what}: not supported on cgroup v2 (crius is cgroup-v2 only)"
    ))
}

/// The writes that apply `res`, in order. Device rules are not files on v2 and are handled separately.
pub fn plan(res: &LinuxResources) -> Result<Vec<Write>> {
    let mut w = Vec::new();
    if let Some(cpu) = res.cpu() {
        plan_cpu(cpu, &mut w)?;
    }
    if let Some(mem) = res.memory() {
        plan_memory(mem, &mut w)?;
    }
    if let Some(p) = res.pids() {
        let limit = p.limit();
        if limit > 0 {
            w.push(Write::new("pids.max", limit));
        } else if limit < 0 {
            w.push(Write::new("pids.max", "max"));
        }
    }
    if let Some(io) = res.block_io() {
        plan_io(io, &mut w);
    }
    for h in res.hugepage_limits().iter().flatten() {
        w.push(Write::new(format!("hugetlb.{}.max", h.page_size()), h.limit()));
    }
    for (dev, r) in res.rdma().iter().flatten() {
        let mut v = dev.clone();
        if let Some(h) = r.hca_handles() {
            v += &format!(" hca_handle={h}");
        }
        if let Some(o) = r.hca_objects() {
            v += &format!(" hca_object={o}");
        }
        w.push(Write::new("rdma.max", v));
    }
    if let Some(n) = res.network()
        && (n.class_id().is_some() || n.priorities().as_ref().is_some_and(|p| !p.is_empty()))
    {
        return Err(unsupported(
            "linux.resources.network (net_cls/net_prio are cgroup v1 controllers)",
        ));
    }
    let mut unified: Vec<_> = res.unified().iter().flatten().collect();
    unified.sort();
    for (key, value) in unified {
        if key.is_empty() || key.contains('/') || key.starts_with('.') || !key.contains('.') {
            return Err(Error::Msg(format!(
                "linux.resources.unified: {key:?} is not a cgroup file name"
            )));
        }
        w.push(Write::new(key.clone(), value));
    }
    Ok(w)
}

fn plan_cpu(cpu: &LinuxCpu, w: &mut Vec<Write>) -> Result<()> {
    if let Some(shares) = cpu.shares().filter(|&s| s != 0) {
        w.push(Write::new("cpu.weight", shares_to_weight(shares)));
    }
    let quota = cpu.quota().unwrap_or(0);
    let period = cpu.period().unwrap_or(0);
    if quota != 0 || period != 0 {
        let mut v = if quota > 0 {
            quota.to_string()
        } else {
            "max".to_string()
        };
        if period != 0 {
            v += &format!(" {period}");
        }
        w.push(Write::new("cpu.max", v));
    }
    if let Some(b) = cpu.burst() {
        w.push(Write::new("cpu.max.burst", b));
    }
    if let Some(i) = cpu.idle() {
        w.push(Write::new("cpu.idle", i));
    }
    if cpu.realtime_runtime().is_some_and(|r| r != 0) || cpu.realtime_period().is_some_and(|p| p != 0) {
        return Err(unsupported("linux.resources.cpu.realtimeRuntime/realtimePeriod"));
    }
    if let Some(c) = cpu.cpus().as_deref().filter(|c| !c.is_empty()) {
        w.push(Write::new("cpuset.cpus", c));
    }
    if let Some(m) = cpu.mems().as_deref().filter(|m| !m.is_empty()) {
        w.push(Write::new("cpuset.mems", m));
    }
    Ok(())
}

fn plan_memory(mem: &LinuxMemory, w: &mut Vec<Write>) -> Result<()> {
    let limit = mem.limit().unwrap_or(0);
    if limit != 0 {
        w.push(Write::new(
            "memory.max",
            if limit > 0 {
                limit.to_string()
            } else {
                "max".into()
            },
        ));
    }
    if let Some(r) = mem.reservation().filter(|&r| r != 0) {
        w.push(Write::new(
            "memory.low",
            if r > 0 { r.to_string() } else { "max".into() },
        ));
    }
    if let Some(swap) = mem.swap().filter(|&s| s != 0) {
        w.push(Write::new("memory.swap.max", swap_value(swap, limit)?));
    }
    if mem.swappiness().is_some_and(|s| s != 0) {
        return Err(unsupported("linux.resources.memory.swappiness"));
    }
    if mem.disable_oom_killer() == Some(true) {
        return Err(unsupported("linux.resources.memory.disableOOMKiller"));
    }
    Ok(())
}

/// OCI `swap` is memory+swap; cgroup v2 `memory.swap.max` is swap alone.
fn swap_value(swap: i64, limit: i64) -> Result<String> {
    if swap < 0 {
        return Ok("max".into());
    }
    if limit <= 0 {
        return Err(Error::Msg(
            "linux.resources.memory.swap: a swap limit needs a memory limit (OCI swap is memory+swap)".into(),
        ));
    }
    if swap < limit {
        return Err(Error::Msg(format!(
            "linux.resources.memory.swap: {swap} is below the memory limit {limit} (OCI swap is memory+swap)"
        )));
    }
    Ok((swap - limit).to_string())
}

fn plan_io(io: &LinuxBlockIo, w: &mut Vec<Write>) {
    if let Some(weight) = io.weight().filter(|&x| x != 0) {
        w.push(Write::new(
            "io.weight",
            format!("default {}", blkio_to_io_weight(weight.into())),
        ));
    }
    for d in io.weight_device().iter().flatten() {
        if let Some(weight) = d.weight() {
            let v = blkio_to_io_weight(weight.into());
            w.push(Write::new(
                "io.weight",
                format!("{}:{} {v}", d.major(), d.minor()),
            ));
        }
    }
    let throttles = [
        ("rbps", io.throttle_read_bps_device()),
        ("wbps", io.throttle_write_bps_device()),
        ("riops", io.throttle_read_iops_device()),
        ("wiops", io.throttle_write_iops_device()),
    ];
    for (key, list) in throttles {
        for d in list.iter().flatten() {
            let rate = if d.rate() == 0 {
                "max".to_string()
            } else {
                d.rate().to_string()
            };
            w.push(Write::new(
                "io.max",
                format!("{}:{} {key}={rate}", d.major(), d.minor()),
            ));
        }
    }
}

/// blkio weight (10..1000) to io.weight (1..10000), linearly.
fn blkio_to_io_weight(weight: u64) -> u64 {
    1 + (weight.clamp(10, 1000) - 10) * 9999 / 990
}

/// CPU shares (2..262144) to cpu.weight (1..10000) with the quadratic mapping that runc ≥ 1.3.2, crun ≥ 1.23 and
/// youki use: `ceil(10^((L² + 125·L)/612 − 7/34))` with `L = log2(shares)`, so 2→1, 1024→100, 262144→10000.
pub fn shares_to_weight(shares: u64) -> u64 {
    let l = (shares.clamp(2, 262_144) as f64).log2();
    let x = 10f64.powf((l * l + 125.0 * l) / 612.0 - 7.0 / 34.0);
    // Exact points such as 100.00000000001 must not round up to the next integer.
    let w = if (x - x.round()).abs() < 1e-6 {
        x.round()
    } else {
        x.ceil()
    };
    (w as u64).clamp(1, 10_000)
}

#[cfg(test)]
mod tests;
