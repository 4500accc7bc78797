//! Container statistics: the runtime's `events --stats` JSON (runc's layout) as containerd's cgroup v2
//! `Metrics` (`io.containerd.cgroups.v2.Metrics`): cpu, memory, pids, io, and each one's pressure (PSI) where
//! the runtime gives it.

use containerd_shim_protos::cgroups_v2::metrics::{
    CPUStat, IOEntry, IOStat, MemoryStat, Metrics, PSIData, PSIStats, PidsStat,
};
use serde_json::Value;

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// A runtime's `psi` object (`some` and `full`, runc's layout) as containerd's PSIStats; absent, absent.
fn psi(v: &Value) -> containerd_shim_protos::protobuf::MessageField<PSIStats> {
    let data = |d: &Value| PSIData {
        avg10: d["avg10"].as_f64().unwrap_or(0.0),
        avg60: d["avg60"].as_f64().unwrap_or(0.0),
        avg300: d["avg300"].as_f64().unwrap_or(0.0),
        total: u(&d["total"]),
        ..Default::default()
    };
    v.is_object()
        .then(|| PSIStats {
            some: Some(data(&v["some"])).into(),
            full: Some(data(&v["full"])).into(),
            ..Default::default()
        })
        .into()
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
    let blkio = &d["blkio"];
    let io: Vec<IOEntry> = ["ioServiceBytesRecursive", "ioServicedRecursive"]
        .iter()
        .flat_map(|list| {
            blkio[list]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |e| (*list, e))
        })
        .fold(Vec::<IOEntry>::new(), |mut acc, (list, e)| {
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
            let bytes = list == "ioServiceBytesRecursive";
            match (
                e["op"].as_str().unwrap_or_default().to_ascii_lowercase().as_str(),
                bytes,
            ) {
                ("read", true) => acc[i].rbytes += u(&e["value"]),
                ("write", true) => acc[i].wbytes += u(&e["value"]),
                ("read", false) => acc[i].rios += u(&e["value"]),
                ("write", false) => acc[i].wios += u(&e["value"]),
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
            psi: psi(&cpu["psi"]),
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
            psi: psi(&mem["psi"]),
            ..Default::default()
        })
        .into(),
        io: (!io.is_empty() || blkio["psi"].is_object())
            .then(|| IOStat {
                usage: io,
                psi: psi(&blkio["psi"]),
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
                {"major": 8, "minor": 0, "op": "Write", "value": 22}],
                "ioServicedRecursive": [
                {"major": 8, "minor": 0, "op": "Read", "value": 3},
                {"major": 8, "minor": 0, "op": "Write", "value": 4}]}
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
        assert_eq!((m.io.usage[0].rios, m.io.usage[0].wios), (3, 4));
        assert!(
            m.cpu.psi.is_none() && m.memory.psi.is_none() && m.io.psi.is_none(),
            "no PSI given"
        );
    }

    #[test]
    fn pressure_is_carried_where_the_runtime_gives_it() {
        let p = |t: u64| {
            serde_json::json!({"some": {"avg10": 1.5, "avg60": 0.5, "avg300": 0.25, "total": t},
                                            "full": {"avg10": 0.5, "avg60": 0.0, "avg300": 0.0, "total": t / 2}})
        };
        let d = serde_json::json!({"cpu": {"psi": p(10)}, "memory": {"psi": p(20)}, "blkio": {"psi": p(30)}});
        let m = metrics(&d);
        assert_eq!(m.cpu.psi.some.total, 10);
        assert_eq!((m.cpu.psi.some.avg10, m.cpu.psi.some.avg300), (1.5, 0.25));
        assert_eq!(m.memory.psi.full.total, 10);
        assert!(m.io.usage.is_empty(), "no io.stat entries");
        assert_eq!((m.io.psi.some.total, m.io.psi.full.avg10), (30, 0.5));
    }
}
