//! Usage statistics read from cgroup v2 files; a missing controller leaves its part empty.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

/// Statistics in the shape `runc events --stats` prints (`data` of a `stats` event).
#[derive(Debug, Default, Serialize)]
pub struct Stats {
    /// CPU time in nanoseconds and throttling.
    pub cpu: Cpu,
    /// Memory usage in bytes.
    pub memory: Memory,
    /// Process counts.
    pub pids: Pids,
}

/// CPU figures.
#[derive(Debug, Default, Serialize)]
pub struct Cpu {
    /// Usage.
    pub usage: CpuUsage,
    /// Throttling.
    pub throttling: Throttling,
}

/// CPU usage in nanoseconds.
#[derive(Debug, Default, Serialize)]
pub struct CpuUsage {
    /// Total.
    pub total: u64,
    /// In the kernel.
    pub kernel: u64,
    /// In user space.
    pub user: u64,
}

/// Throttling counters of the cpu controller.
#[derive(Debug, Default, Serialize)]
pub struct Throttling {
    /// Enforcement periods.
    pub periods: u64,
    /// Periods in which the group was throttled.
    #[serde(rename = "throttledPeriods")]
    pub throttled_periods: u64,
    /// Time throttled, nanoseconds.
    #[serde(rename = "throttledTime")]
    pub throttled_time: u64,
}

/// Memory figures.
#[derive(Debug, Default, Serialize)]
pub struct Memory {
    /// Current usage.
    pub usage: MemoryUsage,
    /// Swap usage.
    pub swap: MemoryUsage,
    /// memory.stat as read.
    pub raw: BTreeMap<String, u64>,
}

/// Usage and limit.
#[derive(Debug, Default, Serialize)]
pub struct MemoryUsage {
    /// Bytes in use.
    pub usage: u64,
    /// Limit in bytes (u64::MAX for "max").
    pub limit: u64,
    /// How often the limit was hit (memory.events max, or oom_kill for usage).
    pub failcnt: u64,
}

/// Process counts.
#[derive(Debug, Default, Serialize)]
pub struct Pids {
    /// Current number of tasks.
    pub current: u64,
    /// Limit (0 for none).
    pub limit: u64,
}

fn keyed(dir: &Path, file: &str) -> BTreeMap<String, u64> {
    let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

fn single(dir: &Path, file: &str) -> u64 {
    match std::fs::read_to_string(dir.join(file)) {
        Ok(s) if s.trim() == "max" => u64::MAX,
        Ok(s) => s.trim().parse().unwrap_or(0),
        Err(_) => 0,
    }
}

/// Reads the statistics of the cgroup at `dir`.
pub fn read(dir: &Path) -> Stats {
    let cpu = keyed(dir, "cpu.stat");
    let get = |m: &BTreeMap<String, u64>, k: &str| m.get(k).copied().unwrap_or(0);
    let events = keyed(dir, "memory.events");
    let pids_max = single(dir, "pids.max");
    Stats {
        cpu: Cpu {
            usage: CpuUsage {
                total: get(&cpu, "usage_usec") * 1000,
                kernel: get(&cpu, "system_usec") * 1000,
                user: get(&cpu, "user_usec") * 1000,
            },
            throttling: Throttling {
                periods: get(&cpu, "nr_periods"),
                throttled_periods: get(&cpu, "nr_throttled"),
                throttled_time: get(&cpu, "throttled_usec") * 1000,
            },
        },
        memory: Memory {
            usage: MemoryUsage {
                usage: single(dir, "memory.current"),
                limit: single(dir, "memory.max"),
                failcnt: get(&events, "oom_kill"),
            },
            swap: MemoryUsage {
                usage: single(dir, "memory.swap.current"),
                limit: single(dir, "memory.swap.max"),
                failcnt: get(&events, "max"),
            },
            raw: keyed(dir, "memory.stat"),
        },
        pids: Pids {
            current: single(dir, "pids.current"),
            limit: if pids_max == u64::MAX { 0 } else { pids_max },
        },
    }
}
