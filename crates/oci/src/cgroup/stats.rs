//! Usage statistics read from cgroup v2 files; a missing controller leaves its part empty, missing pressure
//! files (no PSI) leave `psi` out.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

use super::psi::{self, Psi};

/// Statistics in the shape `runc events --stats` prints (`data` of a `stats` event).
#[derive(Debug, Default, Serialize)]
pub struct Stats {
    /// CPU time in nanoseconds and throttling.
    pub cpu: Cpu,
    /// Memory usage in bytes.
    pub memory: Memory,
    /// Process counts.
    pub pids: Pids,
    /// Block I/O per device (io.stat).
    pub blkio: Blkio,
}

/// Block I/O, as runc names it.
#[derive(Debug, Default, Serialize)]
pub struct Blkio {
    /// Bytes read and written per device.
    #[serde(rename = "ioServiceBytesRecursive")]
    pub bytes: Vec<BlkioEntry>,
    /// Read and write operations per device.
    #[serde(rename = "ioServicedRecursive")]
    pub ops: Vec<BlkioEntry>,
    /// io.pressure, where the kernel has PSI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
}

/// One device's count for one operation.
#[derive(Debug, Default, Serialize)]
pub struct BlkioEntry {
    /// Device major number.
    pub major: u64,
    /// Device minor number.
    pub minor: u64,
    /// `Read` or `Write`.
    pub op: &'static str,
    /// The count.
    pub value: u64,
}

/// Parses io.stat: `MAJ:MIN rbytes=… wbytes=… rios=… wios=… …` per line.
fn blkio(dir: &Path) -> Blkio {
    let mut b = Blkio::default();
    for line in std::fs::read_to_string(dir.join("io.stat"))
        .unwrap_or_default()
        .lines()
    {
        let mut parts = line.split_whitespace();
        let Some((major, minor)) = parts.next().and_then(|d| d.split_once(':')) else {
            continue;
        };
        let (Ok(major), Ok(minor)) = (major.parse(), minor.parse()) else {
            continue;
        };
        for kv in parts {
            let Some((k, v)) = kv.split_once('=') else {
                continue;
            };
            let value = v.parse().unwrap_or(0);
            let (list, op) = match k {
                "rbytes" => (&mut b.bytes, "Read"),
                "wbytes" => (&mut b.bytes, "Write"),
                "rios" => (&mut b.ops, "Read"),
                "wios" => (&mut b.ops, "Write"),
                _ => continue,
            };
            list.push(BlkioEntry {
                major,
                minor,
                op,
                value,
            });
        }
    }
    b
}

/// CPU figures.
#[derive(Debug, Default, Serialize)]
pub struct Cpu {
    /// Usage.
    pub usage: CpuUsage,
    /// Throttling.
    pub throttling: Throttling,
    /// cpu.pressure, where the kernel has PSI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
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
    /// memory.pressure, where the kernel has PSI.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub psi: Option<Psi>,
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

/// The processes in the cgroup at `dir` and below: pids.current, or where the pids controller is not on this
/// hierarchy (a hybrid host), the processes listed in its and its children's cgroup.procs.
fn pids_current(dir: &Path) -> u64 {
    if dir.join("pids.current").exists() {
        return single(dir, "pids.current");
    }
    let here = std::fs::read_to_string(dir.join("cgroup.procs")).map_or(0, |s| s.lines().count() as u64);
    let below: u64 = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| pids_current(&e.path()))
        .sum();
    here + below
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
            psi: psi::read(dir, "cpu"),
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
            psi: psi::read(dir, "memory"),
        },
        pids: Pids {
            current: pids_current(dir),
            limit: if pids_max == u64::MAX { 0 } else { pids_max },
        },
        blkio: Blkio {
            psi: psi::read(dir, "io"),
            ..blkio(dir)
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_stat_becomes_runc_blkio_entries() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("io.stat"),
            "8:0 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n253:1 rbytes=5 wbytes=0\n",
        )
        .unwrap();
        let b = blkio(dir.path());
        let v = serde_json::to_value(&b).unwrap();
        assert_eq!(
            v["ioServiceBytesRecursive"][1],
            serde_json::json!({"major": 8, "minor": 0, "op": "Write", "value": 314773504u64})
        );
        assert_eq!(b.bytes.len(), 4);
        assert_eq!(b.ops.len(), 2);
        assert_eq!(
            (b.bytes[2].major, b.bytes[2].minor, b.bytes[2].value),
            (253, 1, 5)
        );
    }

    #[test]
    fn processes_are_counted_from_cgroup_procs_without_the_pids_controller() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "12\n13\n").unwrap();
        std::fs::create_dir(dir.path().join("child")).unwrap();
        std::fs::write(dir.path().join("child/cgroup.procs"), "14\n").unwrap();
        assert_eq!(pids_current(dir.path()), 3);
        std::fs::write(dir.path().join("pids.current"), "7\n").unwrap();
        assert_eq!(pids_current(dir.path()), 7, "pids.current wins where it exists");
    }
}
