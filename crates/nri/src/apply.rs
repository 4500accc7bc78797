//! Puts a (merged) [`api::ContainerAdjustment`] into an OCI runtime spec, as containerd and CRI-O do, between
//! the CRI→OCI conversion and the shim. The spec is edited in its OCI JSON form: NRI carries OCI's own names
//! for enums (`RLIMIT_NOFILE`, `SCMP_ACT_ERRNO`, `SCHED_FIFO`, `MPOL_BIND`...), so the JSON is read back by
//! oci-spec, which refuses a name it does not know ([`Error::Invalid`] naming the field).
//!
//! Entries marked for removal (key `-NAME`, see src/merge.rs) are removed first, then additions replace an
//! entry with the same key in place (env name, mount destination, device path, rlimit type, hugepage size) or
//! are appended. CDI devices are not resolved here: their names are returned for the caller's CDI code.
//! A blockio class has no place in an OCI spec (containerd maps it through its own class config): it is logged
//! and left out. Fields the spec has no place for are likewise ignored with a warning.

use serde_json::{Map, Value, json};

use crate::merge::is_removal;
use crate::{Error, api};

/// Applies `adjust` to `spec`; returns the CDI device names it asks for, in order.
pub fn apply(
    adjust: &api::ContainerAdjustment,
    spec: &mut oci_spec::runtime::Spec,
) -> Result<Vec<String>, Error> {
    let mut v = serde_json::to_value(&*spec).map_err(|e| invalid("spec", e))?;
    let root = v
        .as_object_mut()
        .ok_or_else(|| invalid("spec", "not an object"))?;
    apply_annotations(root, adjust);
    apply_mounts(root, &adjust.mounts);
    apply_process(root, adjust);
    apply_hooks(root, adjust.hooks.as_ref());
    if let Some(l) = &adjust.linux {
        apply_linux(root, l)?;
    }
    let parsed: oci_spec::runtime::Spec = serde_json::from_value(v).map_err(|e| invalid("OCI spec", e))?;
    *spec = parsed;
    Ok(adjust
        .cdi_devices
        .iter()
        .filter(|d| !is_removal(&d.name).1)
        .map(|d| d.name.clone())
        .collect())
}

fn invalid(field: &str, reason: impl ToString) -> Error {
    Error::Invalid {
        field: field.into(),
        reason: reason.to_string(),
    }
}

/// `parent[key]` as an object, made if absent.
pub(crate) fn obj<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let slot = parent.entry(key).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    slot.as_object_mut().expect("an object")
}

/// `parent[key]` as an array, made if absent.
pub(crate) fn arr<'a>(parent: &'a mut Map<String, Value>, key: &str) -> &'a mut Vec<Value> {
    let slot = parent.entry(key).or_insert_with(|| json!([]));
    if !slot.is_array() {
        *slot = json!([]);
    }
    slot.as_array_mut().expect("an array")
}

/// Keyed edits of a map (`-key` removes).
fn edit_map<'a>(map: &mut Map<String, Value>, entries: impl IntoIterator<Item = (&'a String, Value)>) {
    let entries: Vec<_> = entries.into_iter().collect();
    for (k, _) in &entries {
        if let (name, true) = is_removal(k) {
            map.remove(name);
        }
    }
    for (k, v) in entries {
        if !is_removal(k).1 {
            map.insert(k.clone(), v);
        }
    }
}

/// Keyed edits of a list: `key(item)` names an entry; `-key` removes; an addition replaces its key's entry.
fn edit_list(
    list: &mut Vec<Value>,
    entries: Vec<(String, Option<Value>)>,
    key: impl Fn(&Value) -> Option<String>,
) {
    for (k, _) in entries.iter().filter(|(_, v)| v.is_none()) {
        list.retain(|item| key(item).as_deref() != Some(k.as_str()));
    }
    for (k, v) in entries {
        let Some(v) = v else { continue };
        // In place, as NRI replaces an env var or rlimit (the first of that key; any other goes).
        match list
            .iter()
            .position(|item| key(item).as_deref() == Some(k.as_str()))
        {
            Some(at) => {
                list[at] = v;
                let mut seen = 0;
                list.retain(|item| {
                    let same = key(item).as_deref() == Some(k.as_str());
                    seen += usize::from(same);
                    !same || seen == 1
                });
            }
            None => list.push(v),
        }
    }
}

fn field(name: &str) -> impl Fn(&Value) -> Option<String> + '_ {
    move |v| v.get(name).and_then(Value::as_str).map(str::to_string)
}

fn apply_annotations(root: &mut Map<String, Value>, a: &api::ContainerAdjustment) {
    if !a.annotations.is_empty() {
        edit_map(
            obj(root, "annotations"),
            a.annotations.iter().map(|(k, v)| (k, json!(v))),
        );
    }
}

/// Mounts replace those at the same destination; then, as NRI does, all are ordered parents first (by depth,
/// then destination), so that a plugin's `/data` does not hide a volume at `/data/sub`. A mount asking for
/// `rshared` makes the root's propagation `rshared`, one asking for `rslave` makes it `rslave` unless it is
/// already one of the two (whether the host's source is itself shared is left to the runtime).
fn apply_mounts(root: &mut Map<String, Value>, mounts: &[api::Mount]) {
    if mounts.is_empty() {
        return;
    }
    for m in mounts.iter().filter(|m| !is_removal(&m.destination).1) {
        let wanted = m.options.iter().find(|o| *o == "rshared" || *o == "rslave");
        let linux = obj(root, "linux");
        let current = linux.get("rootfsPropagation").and_then(Value::as_str);
        match wanted.map(String::as_str) {
            Some("rshared") => {
                linux.insert("rootfsPropagation".into(), json!("rshared"));
            }
            Some("rslave") if !matches!(current, Some("rshared" | "rslave")) => {
                linux.insert("rootfsPropagation".into(), json!("rslave"));
            }
            _ => {}
        }
    }
    let entries = mounts
        .iter()
        .map(|m| match is_removal(&m.destination) {
            (dest, true) => (dest.to_string(), None),
            (dest, false) => {
                let mut v = json!({"destination": dest, "source": m.source, "options": m.options});
                if !m.r#type.is_empty() {
                    v["type"] = json!(m.r#type);
                }
                (dest.to_string(), Some(v))
            }
        })
        .collect();
    let list = arr(root, "mounts");
    edit_list(list, entries, field("destination"));
    let depth = |m: &Value| {
        let dest = field("destination")(m).unwrap_or_default();
        let parts = dest.split('/').filter(|p| !p.is_empty() && *p != ".").count();
        (parts, dest)
    };
    list.sort_by_key(depth);
}

fn apply_process(root: &mut Map<String, Value>, a: &api::ContainerAdjustment) {
    let linux = a.linux.as_ref();
    let (oom, io, sched) = (
        linux.and_then(|l| l.oom_score_adj),
        linux.and_then(|l| l.io_priority),
        linux.and_then(|l| l.scheduler.as_ref()),
    );
    if a.env.is_empty()
        && a.args.is_empty()
        && a.rlimits.is_empty()
        && oom.is_none()
        && io.is_none()
        && sched.is_none()
    {
        return;
    }
    let p = obj(root, "process");
    if !a.env.is_empty() {
        let env = arr(p, "env");
        let name = |v: &Value| {
            v.as_str()
                .map(|s| s.split_once('=').map_or(s, |(k, _)| k).to_string())
        };
        let entries = a
            .env
            .iter()
            .map(|kv| match is_removal(&kv.key) {
                (k, true) => (k.to_string(), None),
                (k, false) => (k.to_string(), Some(json!(format!("{k}={}", kv.value)))),
            })
            .collect();
        edit_list(env, entries, name);
    }
    if !a.args.is_empty() {
        p.insert("args".into(), json!(a.args));
    }
    if !a.rlimits.is_empty() {
        let entries = a
            .rlimits
            .iter()
            .map(|r| match is_removal(&r.r#type) {
                (t, true) => (t.to_string(), None),
                (t, false) => (
                    t.to_string(),
                    Some(json!({"type": t, "hard": r.hard, "soft": r.soft})),
                ),
            })
            .collect();
        edit_list(arr(p, "rlimits"), entries, field("type"));
    }
    if let Some(o) = oom {
        p.insert("oomScoreAdj".into(), json!(o.value));
    }
    if let Some(io) = io {
        let class = api::IoPrioClass::try_from(io.class).map_or("?", |c| c.as_str_name());
        p.insert(
            "ioPriority".into(),
            json!({"class": class, "priority": io.priority}),
        );
    }
    if let Some(s) = sched {
        let policy = api::LinuxSchedulerPolicy::try_from(s.policy).map_or("?", |c| c.as_str_name());
        let flags: Vec<_> = s
            .flags
            .iter()
            .map(|&f| api::LinuxSchedulerFlag::try_from(f).map_or("?", |f| f.as_str_name()))
            .collect();
        p.insert(
            "scheduler".into(),
            json!({"policy": policy, "nice": s.nice, "priority": s.priority, "flags": flags,
                "runtime": s.runtime, "deadline": s.deadline, "period": s.period}),
        );
    }
}

fn apply_hooks(root: &mut Map<String, Value>, hooks: Option<&api::Hooks>) {
    let Some(h) = hooks else { return };
    let phases = [
        ("prestart", &h.prestart),
        ("createRuntime", &h.create_runtime),
        ("createContainer", &h.create_container),
        ("startContainer", &h.start_container),
        ("poststart", &h.poststart),
        ("poststop", &h.poststop),
    ];
    for (phase, list) in phases {
        if list.is_empty() {
            continue;
        }
        let into = arr(obj(root, "hooks"), phase);
        for hook in list {
            let mut v = json!({"path": hook.path});
            if !hook.args.is_empty() {
                v["args"] = json!(hook.args);
            }
            if !hook.env.is_empty() {
                v["env"] = json!(hook.env);
            }
            if let Some(t) = hook.timeout {
                v["timeout"] = json!(t.value);
            }
            into.push(v);
        }
    }
}

fn apply_linux(root: &mut Map<String, Value>, l: &api::LinuxContainerAdjustment) -> Result<(), Error> {
    let linux = obj(root, "linux");
    if !l.devices.is_empty() {
        apply_devices(linux, &l.devices)?;
    }
    if let Some(r) = &l.resources {
        crate::apply_resources::resources(linux, r);
    }
    if !l.cgroups_path.is_empty() {
        linux.insert("cgroupsPath".into(), json!(l.cgroups_path));
    }
    if let Some(s) = &l.seccomp_policy {
        linux.insert("seccomp".into(), crate::apply_resources::seccomp(s));
    }
    if !l.namespaces.is_empty() {
        let entries = l
            .namespaces
            .iter()
            .map(|n| match is_removal(&n.r#type) {
                (t, true) => (t.to_string(), None),
                (t, false) if n.path.is_empty() => (t.to_string(), Some(json!({"type": t}))),
                (t, false) => (t.to_string(), Some(json!({"type": t, "path": n.path}))),
            })
            .collect();
        edit_list(arr(linux, "namespaces"), entries, field("type"));
    }
    if !l.sysctl.is_empty() {
        edit_map(obj(linux, "sysctl"), l.sysctl.iter().map(|(k, v)| (k, json!(v))));
    }
    if !l.net_devices.is_empty() {
        edit_map(
            obj(linux, "netDevices"),
            l.net_devices.iter().map(|(k, d)| (k, json!({"name": d.name}))),
        );
    }
    if let Some(rdt) = &l.rdt {
        crate::apply_resources::rdt(linux, rdt);
    }
    if let Some(m) = &l.memory_policy {
        let mode = api::MpolMode::try_from(m.mode).map_or("?", |m| m.as_str_name());
        let flags: Vec<_> = m
            .flags
            .iter()
            .map(|&f| api::MpolFlag::try_from(f).map_or("?", |f| f.as_str_name()))
            .collect();
        linux.insert(
            "memoryPolicy".into(),
            json!({"mode": mode, "nodes": m.nodes, "flags": flags}),
        );
    }
    Ok(())
}

/// Device nodes, each with a cgroup rule allowing it as NRI does (`rw`, and `m` too for a block device); a
/// removal takes the node and its rule out.
fn apply_devices(linux: &mut Map<String, Value>, devices: &[api::LinuxDevice]) -> Result<(), Error> {
    let mut entries = Vec::new();
    let mut rules = Vec::new();
    for d in devices {
        let (path, removed) = is_removal(&d.path);
        if removed {
            entries.push((path.to_string(), None));
            continue;
        }
        if !["c", "b", "u", "p"].contains(&d.r#type.as_str()) {
            return Err(invalid(
                &format!("device {path}"),
                format!("type {:?} is not one of c, b, u, p", d.r#type),
            ));
        }
        let mut v = json!({"path": path, "type": d.r#type, "major": d.major, "minor": d.minor});
        if let Some(m) = d.file_mode {
            v["fileMode"] = json!(m.value);
        }
        if let Some(u) = d.uid {
            v["uid"] = json!(u.value);
        }
        if let Some(g) = d.gid {
            v["gid"] = json!(g.value);
        }
        entries.push((path.to_string(), Some(v)));
        // A fifo has no cgroup rule: the device controller only knows c, b and a.
        if d.r#type != "p" {
            let typ = if d.r#type == "u" { "c" } else { d.r#type.as_str() };
            let access = if typ == "b" { "rwm" } else { "rw" };
            rules.push(
                json!({"allow": true, "type": typ, "major": d.major, "minor": d.minor, "access": access}),
            );
        }
    }
    // The rules that allowed a removed node go with it.
    let removed: Vec<Value> = arr(linux, "devices")
        .iter()
        .filter(|d| {
            entries
                .iter()
                .any(|(p, v)| v.is_none() && field("path")(d).as_deref() == Some(p))
        })
        .map(|d| json!([d["type"], d["major"], d["minor"]]))
        .collect();
    let cgroup = arr(obj(linux, "resources"), "devices");
    cgroup.retain(|r| {
        !(r["allow"] == json!(true) && removed.contains(&json!([r["type"], r["major"], r["minor"]])))
    });
    cgroup.extend(rules);
    edit_list(arr(linux, "devices"), entries, field("path"));
    Ok(())
}

#[cfg(test)]
mod tests;
