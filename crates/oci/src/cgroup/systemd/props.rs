//! The unit properties that keep a container's limits, derived from the same file writes that
//! [`crate::cgroup::plan`] makes, so systemd and the cgroup files never disagree.
//!
//! | file | property |
//! |---|---|
//! | `cpu.weight` | `CPUWeight` |
//! | `cpu.max` | `CPUQuotaPerSecUSec` (rounded up to 10 ms, as systemd keeps it as a percentage) and `CPUQuotaPeriodUSec` |
//! | `memory.max`, `memory.high`, `memory.low`, `memory.min`, `memory.swap.max` | `MemoryMax`, `MemoryHigh`, `MemoryLow`, `MemoryMin`, `MemorySwapMax` |
//! | `pids.max` | `TasksMax` |
//! | `cpuset.cpus`, `cpuset.mems` | `AllowedCPUs`, `AllowedMemoryNodes` |
//! | `io.weight` | `IOWeight` |
//!
//! Files systemd does not manage (hugetlb, rdma, `io.max`, `cpu.idle`, ...) have no property: systemd leaves
//! them alone, and the direct write is what holds.

use crate::cgroup::Write;
use crate::{Result, err};

/// The kernel's default CPU period (µs), for a `cpu.max` that names none.
const DEFAULT_PERIOD: u64 = 100_000;
/// systemd's "infinity" for the u64 properties.
pub const INFINITY: u64 = u64::MAX;

/// A property's value, as D-Bus types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// `t`
    U64(u64),
    /// `b`
    Bool(bool),
    /// `s`
    Str(String),
    /// `ay` (a CPU or NUMA node bitmask)
    Bytes(Vec<u8>),
    /// `au` (pids)
    U32s(Vec<u32>),
}

/// One unit property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// Its name, e.g. `MemoryMax`.
    pub name: &'static str,
    /// Its value.
    pub value: Value,
}

fn p(name: &'static str, value: Value) -> Property {
    Property { name, value }
}

/// The properties of the writes `writes` (see the table above).
pub fn of_writes(writes: &[Write]) -> Result<Vec<Property>> {
    let mut out = Vec::new();
    for w in writes {
        let v = w.value.trim();
        let bytes = |name| -> Result<Property> { Ok(p(name, Value::Bytes(bitmask(v)?))) };
        match w.file.as_str() {
            "cpu.weight" => out.push(p("CPUWeight", Value::U64(number(w)?))),
            "io.weight" if v.parse::<u64>().is_ok() => out.push(p("IOWeight", Value::U64(number(w)?))),
            "cpu.max" => {
                let (quota, period) = v.split_once(' ').unwrap_or((v, ""));
                let period = match period {
                    "" => DEFAULT_PERIOD,
                    s => s.parse().map_err(|_| bad(w))?,
                };
                let per_sec = match quota {
                    "max" => INFINITY,
                    q => {
                        let q: u64 = q.parse().map_err(|_| bad(w))?;
                        // systemd stores the quota as a percentage of a second: round up to a whole 10 ms, so the
                        // quota it writes back is never below the one asked for.
                        (q * 1_000_000 / period.max(1)).div_ceil(10_000) * 10_000
                    }
                };
                out.push(p("CPUQuotaPerSecUSec", Value::U64(per_sec)));
                out.push(p("CPUQuotaPeriodUSec", Value::U64(period)));
            }
            "memory.max" => out.push(p("MemoryMax", Value::U64(limit(w)?))),
            "memory.high" => out.push(p("MemoryHigh", Value::U64(limit(w)?))),
            "memory.low" => out.push(p("MemoryLow", Value::U64(limit(w)?))),
            "memory.min" => out.push(p("MemoryMin", Value::U64(limit(w)?))),
            "memory.swap.max" => out.push(p("MemorySwapMax", Value::U64(limit(w)?))),
            "pids.max" => out.push(p("TasksMax", Value::U64(limit(w)?))),
            "cpuset.cpus" => out.push(bytes("AllowedCPUs")?),
            "cpuset.mems" => out.push(bytes("AllowedMemoryNodes")?),
            _ => {}
        }
    }
    Ok(out)
}

/// What a new scope gets besides its limits: what a slice gets, and its slice, the container's first process
/// and delegation.
pub fn scope(description: String, slice: &str, pid: u32) -> Vec<Property> {
    let mut out = self::slice(description);
    out.extend([
        p("Slice", Value::Str(slice.into())),
        p("PIDs", Value::U32s(vec![pid])),
        p("Delegate", Value::Bool(true)),
    ]);
    out
}

/// What a new slice gets besides its limits (a pod's slice: not delegated, as kubelet makes them): its
/// description, no default dependencies and accounting for every controller systemd manages.
pub fn slice(description: String) -> Vec<Property> {
    let mut out = vec![
        p("Description", Value::Str(description)),
        // No ordering against shutdown.target and friends: the unit's lifetime is its runtime's business.
        p("DefaultDependencies", Value::Bool(false)),
    ];
    for a in [
        "MemoryAccounting",
        "CPUAccounting",
        "IOAccounting",
        "TasksAccounting",
    ] {
        out.push(p(a, Value::Bool(true)));
    }
    out
}

/// The properties that keep `res`: those of the file writes [`crate::cgroup::plan`] makes of it.
pub fn of_resources(res: &oci_spec::runtime::LinuxResources) -> Result<Vec<Property>> {
    of_writes(&crate::cgroup::plan(res)?)
}

fn bad(w: &Write) -> crate::Error {
    err!("{}={:?}: no systemd property takes that value", w.file, w.value)
}

fn number(w: &Write) -> Result<u64> {
    w.value.trim().parse().map_err(|_| bad(w))
}

/// A byte count or `max` (infinity).
fn limit(w: &Write) -> Result<u64> {
    match w.value.trim() {
        "max" => Ok(INFINITY),
        _ => number(w),
    }
}

/// A cpuset list (`0-3,6`) as systemd's bitmask: bit `n % 8` of byte `n / 8` is CPU (or node) `n`.
fn bitmask(list: &str) -> Result<Vec<u8>> {
    let mut bits: Vec<u8> = Vec::new();
    let bad = || err!("{list:?} is not a cpuset list (such as 0-3,6)");
    for part in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (usize, usize) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
        if a > b || b >= 1 << 16 {
            return Err(bad());
        }
        for n in a..=b {
            if bits.len() <= n / 8 {
                bits.resize(n / 8 + 1, 0);
            }
            bits[n / 8] |= 1 << (n % 8);
        }
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(file: &str, value: &str) -> Write {
        Write {
            file: file.into(),
            value: value.into(),
        }
    }

    fn one(file: &str, value: &str) -> Vec<(&'static str, Value)> {
        of_writes(&[w(file, value)])
            .unwrap()
            .into_iter()
            .map(|p| (p.name, p.value))
            .collect()
    }

    #[test]
    fn each_managed_file_has_its_property() {
        assert_eq!(
            one("memory.max", "268435456"),
            [("MemoryMax", Value::U64(268435456))]
        );
        assert_eq!(one("memory.max", "max"), [("MemoryMax", Value::U64(INFINITY))]);
        assert_eq!(one("memory.swap.max", "0"), [("MemorySwapMax", Value::U64(0))]);
        assert_eq!(one("cpu.weight", "79"), [("CPUWeight", Value::U64(79))]);
        assert_eq!(one("pids.max", "max"), [("TasksMax", Value::U64(INFINITY))]);
        assert_eq!(one("hugetlb.2MB.max", "0"), []);
        assert_eq!(
            one("cpuset.cpus", "0-2,9"),
            [("AllowedCPUs", Value::Bytes(vec![0b111, 0b10]))]
        );
        assert!(of_writes(&[w("cpuset.mems", "2-1")]).is_err());
    }

    #[test]
    fn cpu_quota_is_per_second_rounded_up_to_10ms() {
        let q = |v| one("cpu.max", v);
        assert_eq!(
            q("50000 100000"),
            [
                ("CPUQuotaPerSecUSec", Value::U64(500_000)),
                ("CPUQuotaPeriodUSec", Value::U64(100_000))
            ]
        );
        // 15m of a CPU: 15 ms per second becomes 20 ms.
        assert_eq!(q("1500 100000")[0], ("CPUQuotaPerSecUSec", Value::U64(20_000)));
        assert_eq!(q("max 100000")[0], ("CPUQuotaPerSecUSec", Value::U64(INFINITY)));
        assert_eq!(q("20000")[1], ("CPUQuotaPeriodUSec", Value::U64(DEFAULT_PERIOD)));
    }
}
