//! Container statistics: the runtime's `events --stats` JSON (runc's layout) as containerd's cgroup v2
//! `Metrics` (`io.containerd.cgroups.v2.Metrics`): cpu, memory, pids, io.

use containerd_shim_protos::cgroups_v2::metrics::{CPUStat, IOEntry, IOStat, MemoryStat, Metrics, PidsStat};
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// Converts the `data` object of a runtime stats event.
pub(crate) fn metrics(d: &Value) -> Metrics {
    let cpu = &d["cpu"];
    let mem = &d["memory"];
    let raw = if mem["raw"].is_object() {
        &mem["raw"]
    } else {
        &mem["stats"]
    };
    let io: Vec<IOEntry> = d["blkio"]["ioServiceBytesRecursive"]
        .as_array()
        .into_iter()
        .flatten()
        .fold(Vec::<IOEntry>::new(), |mut acc, e| {
            let (major, minor) = (u(&e["major"]), u(&e["minor"]));
            let i = match acc.iter().position(|x| x.major == major && x.minor == minor) {
                Some(i) => i,
                None => {
                    acc.push(IOEntry {
                        major,
                        minor,
                        ..Default::default()
                    });
                    acc.len() - 1
                }
            };
            match e["op"].as_str().unwrap_or_default().to_ascii_lowercase().as_str() {
                "read" => acc[i].rbytes += u(&e["value"]),
                "write" => acc[i].wbytes += u(&e["value"]),
                _ => {}
            }
            acc
        });
    Metrics {
        pids: Some(PidsStat {
            current: u(&d["pids"]["current"]),
            limit: u(&d["pids"]["limit"]),
            ..Default::default()
        })
        .into(),
        cpu: Some(CPUStat {
            usage_usec: u(&cpu["usage"]["total"]) / 1000,
            user_usec: u(&cpu["usage"]["user"]) / 1000,
            system_usec: u(&cpu["usage"]["kernel"]) / 1000,
            nr_periods: u(&cpu["throttling"]["periods"]),
            nr_throttled: u(&cpu["throttling"]["throttledPeriods"]),
            throttled_usec: u(&cpu["throttling"]["throttledTime"]) / 1000,
            ..Default::default()
        })
        .into(),
        memory: Some(MemoryStat {
            usage: u(&mem["usage"]["usage"]),
            usage_limit: u(&mem["usage"]["limit"]),
            swap_usage: u(&mem["swap"]["usage"]),
            swap_limit: u(&mem["swap"]["limit"]),
            anon: u(&raw["anon"]),
            file: u(&raw["file"]),
            inactive_file: u(&raw["inactive_file"]),
            active_file: u(&raw["active_file"]),
            ..Default::default()
        })
        .into(),
        io: (!io.is_empty())
            .then(|| IOStat {
                usage: io,
                ..Default::default()
            })
            .into(),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_stats_become_cgroup_v2_metrics() {
        let d = serde_json::json!({
            "cpu": {"usage": {"total": 5_000_000, "user": 3_000_000, "kernel": 2_000_000},
                    "throttling": {"periods": 10, "throttledPeriods": 2, "throttledTime": 7_000}},
            "memory": {"usage": {"usage": 4096, "limit": 8192}, "swap": {"usage": 0, "limit": 0},
                       "raw": {"anon": 100, "file": 200}},
            "pids": {"current": 3, "limit": 10},
            "blkio": {"ioServiceBytesRecursive": [
                {"major": 8, "minor": 0, "op": "Read", "value": 11},
                {"major": 8, "minor": 0, "op": "Write", "value": 22}]}
        });
        let m = metrics(&d);
        assert_eq!(
            (m.cpu.usage_usec, m.cpu.user_usec, m.cpu.system_usec),
            (5000, 3000, 2000)
        );
        assert_eq!((m.cpu.nr_throttled, m.cpu.throttled_usec), (2, 7));
        assert_eq!(
            (m.memory.usage, m.memory.usage_limit, m.memory.anon, m.memory.file),
            (4096, 8192, 100, 200)
        );
        assert_eq!((m.pids.current, m.pids.limit), (3, 10));
        assert_eq!(m.io.usage.len(), 1);
        assert_eq!((m.io.usage[0].rbytes, m.io.usage[0].wbytes), (11, 22));
    }
}
