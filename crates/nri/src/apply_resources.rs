//! The parts of [`crate::apply`] that write `linux.resources`, `linux.seccomp` and `linux.intelRdt`.

use serde_json::{Map, Value, json};

use crate::api;
use crate::apply::{arr, obj};

/// Sets each resource the plugins set, leaving the others as the conversion made them.
pub(crate) fn resources(linux: &mut Map<String, Value>, r: &api::LinuxResources) {
    let res = obj(linux, "resources");
    if let Some(m) = &r.memory {
        let mem = obj(res, "memory");
        let fields = [
            ("limit", m.limit.map(|v| json!(v.value))),
            ("reservation", m.reservation.map(|v| json!(v.value))),
            ("swap", m.swap.map(|v| json!(v.value))),
            ("kernel", m.kernel.map(|v| json!(v.value))),
            ("kernelTCP", m.kernel_tcp.map(|v| json!(v.value))),
            ("swappiness", m.swappiness.map(|v| json!(v.value))),
            ("disableOOMKiller", m.disable_oom_killer.map(|v| json!(v.value))),
            ("useHierarchy", m.use_hierarchy.map(|v| json!(v.value))),
        ];
        set_all(mem, fields);
    }
    if let Some(c) = &r.cpu {
        let cpu = obj(res, "cpu");
        let text = |s: &String| (!s.is_empty()).then(|| json!(s));
        let fields = [
            ("shares", c.shares.map(|v| json!(v.value))),
            ("quota", c.quota.map(|v| json!(v.value))),
            ("period", c.period.map(|v| json!(v.value))),
            ("realtimeRuntime", c.realtime_runtime.map(|v| json!(v.value))),
            ("realtimePeriod", c.realtime_period.map(|v| json!(v.value))),
            ("cpus", text(&c.cpus)),
            ("mems", text(&c.mems)),
        ];
        set_all(cpu, fields);
    }
    if !r.hugepage_limits.is_empty() {
        let list = arr(res, "hugepageLimits");
        for h in &r.hugepage_limits {
            list.retain(|v| v["pageSize"] != json!(h.page_size));
            list.push(json!({"pageSize": h.page_size, "limit": h.limit}));
        }
    }
    if !r.unified.is_empty() {
        let unified = obj(res, "unified");
        for (k, v) in &r.unified {
            unified.insert(k.clone(), json!(v));
        }
    }
    if let Some(p) = &r.pids {
        res.insert("pids".into(), json!({"limit": p.limit}));
    }
    if !r.devices.is_empty() {
        let rules = arr(res, "devices");
        for d in &r.devices {
            let mut v = json!({"allow": d.allow, "access": d.access});
            if !d.r#type.is_empty() {
                v["type"] = json!(d.r#type);
            }
            if let Some(m) = d.major {
                v["major"] = json!(m.value);
            }
            if let Some(m) = d.minor {
                v["minor"] = json!(m.value);
            }
            rules.push(v);
        }
    }
    if let Some(class) = &r.rdt_class {
        obj(linux, "intelRdt").insert("closID".into(), json!(class.value));
    }
    if let Some(class) = &r.blockio_class {
        tracing::warn!(
            "NRI: blockio class {:?} ignored: an OCI spec has no place for it",
            class.value
        );
    }
}

/// The OCI seccomp policy NRI carries with OCI's names.
pub(crate) fn seccomp(s: &api::LinuxSeccomp) -> Value {
    let mut v = json!({"defaultAction": s.default_action});
    if let Some(e) = s.default_errno {
        v["defaultErrnoRet"] = json!(e.value);
    }
    if !s.architectures.is_empty() {
        v["architectures"] = json!(s.architectures);
    }
    if !s.flags.is_empty() {
        v["flags"] = json!(s.flags);
    }
    if !s.listener_path.is_empty() {
        v["listenerPath"] = json!(s.listener_path);
    }
    if !s.listener_metadata.is_empty() {
        v["listenerMetadata"] = json!(s.listener_metadata);
    }
    let syscalls: Vec<Value> = s
        .syscalls
        .iter()
        .map(|c| {
            let mut v = json!({"names": c.names, "action": c.action});
            if let Some(e) = c.errno_ret {
                v["errnoRet"] = json!(e.value);
            }
            if !c.args.is_empty() {
                let args: Vec<Value> = c
                    .args
                    .iter()
                    .map(|a| json!({"index": a.index, "value": a.value, "valueTwo": a.value_two, "op": a.op}))
                    .collect();
                v["args"] = json!(args);
            }
            v
        })
        .collect();
    if !syscalls.is_empty() {
        v["syscalls"] = json!(syscalls);
    }
    v
}

/// Intel RDT: the class (CLOS), schemata and monitoring, or none at all (`remove`).
pub(crate) fn rdt(linux: &mut Map<String, Value>, r: &api::LinuxRdt) {
    if r.remove {
        linux.remove("intelRdt");
        return;
    }
    let fields = [
        ("closID", r.clos_id.as_ref().map(|v| json!(v.value))),
        ("schemata", r.schemata.as_ref().map(|v| json!(v.value))),
        ("enableMonitoring", r.enable_monitoring.map(|v| json!(v.value))),
    ];
    set_all(obj(linux, "intelRdt"), fields);
}

fn set_all<const N: usize>(into: &mut Map<String, Value>, fields: [(&str, Option<Value>); N]) {
    for (k, v) in fields {
        if let Some(v) = v {
            into.insert(k.into(), v);
        }
    }
}
