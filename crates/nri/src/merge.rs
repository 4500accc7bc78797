//! Merging plugins' answers, in plugin index order, into one adjustment and one list of updates, under NRI's
//! ownership rule: each field (or each entry of a keyed field: an env var, a mount destination, a device path,
//! an annotation, a unified key, a hugepage size...) may be changed by one plugin only; a second plugin changing
//! it fails the call naming both. Removing an entry counts as changing it. Removals are written in the merged
//! adjustment as NRI writes them, the key prefixed with `-` (an annotation `-key`, an env var `-NAME`, a mount
//! destination `-/path`, a device path `-/dev/x`), and [`crate::apply`] performs them before the additions.

use std::collections::HashMap;

use crate::Error;
use crate::api::{self, ContainerAdjustment, ContainerUpdate, LinuxResources};

/// `key` without its removal mark, and whether it had one.
pub(crate) fn is_removal(key: &str) -> (&str, bool) {
    match key.strip_prefix('-') {
        Some(k) => (k, true),
        None => (key, false),
    }
}

/// Which plugin changed which field of which container.
#[derive(Default)]
pub(crate) struct Owners(HashMap<(String, String), String>);

impl Owners {
    /// Records that `plugin` changes `field` of container `ctr`; an error if another plugin did.
    pub(crate) fn claim(&mut self, ctr: &str, field: String, plugin: &str) -> Result<(), Error> {
        match self.0.get(&(ctr.to_string(), field.clone())) {
            Some(owner) if owner != plugin => Err(Error::Conflict {
                field,
                plugins: [owner.clone(), plugin.to_string()],
            }),
            Some(_) => Ok(()),
            None => {
                self.0.insert((ctr.to_string(), field), plugin.to_string());
                Ok(())
            }
        }
    }
}

/// Keyed entries: a plugin's additions and removals folded into `merged`, whose removals are `-key` entries.
fn merge_keyed<T>(
    owners: &mut Owners,
    ctr: &str,
    plugin: &str,
    field: &str,
    merged: &mut Vec<T>,
    new: Vec<T>,
    key: impl Fn(&T) -> String,
) -> Result<(), Error> {
    for item in new {
        let k = key(&item);
        let (name, removed) = is_removal(&k);
        owners.claim(ctr, format!("{field} {name}"), plugin)?;
        if removed {
            // An earlier plugin's addition of the same entry is dropped with it (only the same plugin can
            // have made it, or the claim above failed).
            merged.retain(|m| is_removal(&key(m)).0 != name);
        }
        merged.push(item);
    }
    Ok(())
}

/// Folds one plugin's adjustment of container `ctr` into `merged`.
pub(crate) fn merge_adjustment(
    owners: &mut Owners,
    ctr: &str,
    plugin: &str,
    merged: &mut ContainerAdjustment,
    new: ContainerAdjustment,
) -> Result<(), Error> {
    for (k, v) in new.annotations {
        let (name, removed) = is_removal(&k);
        owners.claim(ctr, format!("annotation {name}"), plugin)?;
        if removed {
            merged.annotations.remove(name);
        }
        merged.annotations.insert(k, v);
    }
    merge_keyed(
        owners,
        ctr,
        plugin,
        "mount",
        &mut merged.mounts,
        new.mounts,
        |m| m.destination.clone(),
    )?;
    merge_keyed(owners, ctr, plugin, "env", &mut merged.env, new.env, |e| {
        e.key.clone()
    })?;
    merge_keyed(
        owners,
        ctr,
        plugin,
        "rlimit",
        &mut merged.rlimits,
        new.rlimits,
        |r| r.r#type.clone(),
    )?;
    merge_keyed(
        owners,
        ctr,
        plugin,
        "CDI device",
        &mut merged.cdi_devices,
        new.cdi_devices,
        |d| d.name.clone(),
    )?;
    if !new.args.is_empty() {
        owners.claim(ctr, "args".into(), plugin)?;
        merged.args = new.args;
    }
    if let Some(h) = new.hooks.filter(|h| *h != api::Hooks::default()) {
        owners.claim(ctr, "OCI hooks".into(), plugin)?;
        let m = merged.hooks.get_or_insert_with(Default::default);
        m.prestart.extend(h.prestart);
        m.create_runtime.extend(h.create_runtime);
        m.create_container.extend(h.create_container);
        m.start_container.extend(h.start_container);
        m.poststart.extend(h.poststart);
        m.poststop.extend(h.poststop);
    }
    let Some(l) = new.linux else { return Ok(()) };
    let m = merged.linux.get_or_insert_with(Default::default);
    merge_keyed(owners, ctr, plugin, "device", &mut m.devices, l.devices, |d| {
        d.path.clone()
    })?;
    if let Some(r) = l.resources {
        merge_resources(
            owners,
            ctr,
            plugin,
            m.resources.get_or_insert_with(Default::default),
            r,
        )?;
    }
    macro_rules! simple {
        ($($f:ident: $name:literal),*) => {$(
            if l.$f.is_some() {
                owners.claim(ctr, $name.into(), plugin)?;
                m.$f = l.$f;
            }
        )*};
    }
    simple!(oom_score_adj: "OOM score adj", io_priority: "IO priority", seccomp_policy: "seccomp policy",
        scheduler: "scheduler", rdt: "RDT", memory_policy: "memory policy");
    if !l.cgroups_path.is_empty() {
        owners.claim(ctr, "cgroups path".into(), plugin)?;
        m.cgroups_path = l.cgroups_path;
    }
    merge_keyed(
        owners,
        ctr,
        plugin,
        "namespace",
        &mut m.namespaces,
        l.namespaces,
        |n| n.r#type.clone(),
    )?;
    for (k, v) in l.sysctl {
        owners.claim(ctr, format!("sysctl {}", is_removal(&k).0), plugin)?;
        m.sysctl.insert(k, v);
    }
    for (k, v) in l.net_devices {
        owners.claim(ctr, format!("net device {}", is_removal(&k).0), plugin)?;
        m.net_devices.insert(k, v);
    }
    Ok(())
}

/// Shows the next plugin the container as the earlier ones left it (as NRI does): annotations, env, mounts,
/// args, rlimits, CDI devices, device nodes and resources.
pub(crate) fn reflect(ctr: &mut api::Container, a: &ContainerAdjustment) {
    for (k, v) in &a.annotations {
        match is_removal(k) {
            (k, true) => drop(ctr.annotations.remove(k)),
            (k, false) => drop(ctr.annotations.insert(k.to_string(), v.clone())),
        }
    }
    for kv in &a.env {
        let (name, removed) = is_removal(&kv.key);
        ctr.env
            .retain(|e| e.split_once('=').map_or(e.as_str(), |(k, _)| k) != name);
        if !removed {
            ctr.env.push(format!("{name}={}", kv.value));
        }
    }
    for m in &a.mounts {
        let (dest, removed) = is_removal(&m.destination);
        ctr.mounts.retain(|c| c.destination != dest);
        if !removed {
            ctr.mounts.push(m.clone());
        }
    }
    if !a.args.is_empty() {
        ctr.args = a.args.clone();
    }
    for r in &a.rlimits {
        ctr.rlimits.retain(|c| c.r#type != r.r#type);
        ctr.rlimits.push(r.clone());
    }
    ctr.cdi_devices
        .extend(a.cdi_devices.iter().filter(|d| !is_removal(&d.name).1).cloned());
    let Some(l) = &a.linux else { return };
    let linux = ctr.linux.get_or_insert_with(Default::default);
    for d in &l.devices {
        let (path, removed) = is_removal(&d.path);
        linux.devices.retain(|c| c.path != path);
        if !removed {
            linux.devices.push(d.clone());
        }
    }
    if let Some(r) = &l.resources {
        // Nobody owns the container's own values: the next plugin's changes go over them.
        let into = linux.resources.get_or_insert_with(Default::default);
        let _ = merge_resources(&mut Owners::default(), "", "", into, r.clone());
    }
    if l.oom_score_adj.is_some() {
        linux.oom_score_adj = l.oom_score_adj;
    }
}

/// Folds one plugin's resources for container `ctr` into `merged`, field by field.
pub(crate) fn merge_resources(
    owners: &mut Owners,
    ctr: &str,
    plugin: &str,
    merged: &mut LinuxResources,
    new: LinuxResources,
) -> Result<(), Error> {
    macro_rules! fields {
        ($parent:ident { $($f:ident: $name:literal),* }) => {
            if let Some(n) = new.$parent {
                let m = merged.$parent.get_or_insert_with(Default::default);
                $(if n.$f.is_some() {
                    owners.claim(ctr, $name.into(), plugin)?;
                    m.$f = n.$f;
                })*
            }
        };
    }
    fields!(memory {
        limit: "memory limit",
        reservation: "memory reservation",
        swap: "memory swap limit",
        kernel: "memory kernel limit",
        kernel_tcp: "memory kernel TCP limit",
        swappiness: "memory swappiness",
        disable_oom_killer: "memory OOM killer",
        use_hierarchy: "memory use_hierarchy"
    });
    if let Some(c) = &new.cpu {
        let m = merged.cpu.get_or_insert_with(Default::default);
        for (value, into, name) in [
            (&c.cpus, &mut m.cpus, "cpuset cpus"),
            (&c.mems, &mut m.mems, "cpuset mems"),
        ] {
            if !value.is_empty() {
                owners.claim(ctr, name.into(), plugin)?;
                *into = value.clone();
            }
        }
    }
    fields!(cpu {
        shares: "CPU shares",
        quota: "CPU quota",
        period: "CPU period",
        realtime_runtime: "CPU realtime runtime",
        realtime_period: "CPU realtime period"
    });
    for h in new.hugepage_limits {
        owners.claim(ctr, format!("hugepage limit {}", h.page_size), plugin)?;
        merged.hugepage_limits.retain(|m| m.page_size != h.page_size);
        merged.hugepage_limits.push(h);
    }
    for (k, v) in new.unified {
        owners.claim(ctr, format!("unified {k}"), plugin)?;
        merged.unified.insert(k, v);
    }
    for (value, into, name) in [
        (new.blockio_class, &mut merged.blockio_class, "blockio class"),
        (new.rdt_class, &mut merged.rdt_class, "RDT class"),
    ] {
        if value.is_some() {
            owners.claim(ctr, name.into(), plugin)?;
            *into = value;
        }
    }
    if let Some(p) = new.pids {
        owners.claim(ctr, "pids limit".into(), plugin)?;
        merged.pids = Some(p);
    }
    if !new.devices.is_empty() {
        owners.claim(ctr, "device cgroup rules".into(), plugin)?;
        merged.devices.extend(new.devices);
    }
    Ok(())
}

/// Updates of several containers, merged per container in the order they were first asked for.
#[derive(Default)]
pub(crate) struct Updates {
    pub(crate) list: Vec<ContainerUpdate>,
}

impl Updates {
    /// Folds one plugin's updates in. A conflicting update marked `ignore_failure` is dropped with a warning.
    pub(crate) fn add(
        &mut self,
        owners: &mut Owners,
        plugin: &str,
        updates: Vec<ContainerUpdate>,
    ) -> Result<(), Error> {
        for u in updates {
            let Some(resources) = u.linux.and_then(|l| l.resources) else {
                continue;
            };
            let i = match self.list.iter().position(|m| m.container_id == u.container_id) {
                Some(i) => i,
                None => {
                    self.list.push(ContainerUpdate {
                        container_id: u.container_id.clone(),
                        linux: Some(Default::default()),
                        ignore_failure: u.ignore_failure,
                    });
                    self.list.len() - 1
                }
            };
            let m = &mut self.list[i];
            m.ignore_failure &= u.ignore_failure;
            let into = m
                .linux
                .get_or_insert_with(Default::default)
                .resources
                .get_or_insert_with(Default::default);
            // Merge into a copy, so that an ignored conflict leaves nothing half-applied.
            let mut merged = into.clone();
            match merge_resources(owners, &u.container_id, plugin, &mut merged, resources) {
                Ok(()) => *into = merged,
                Err(e) if u.ignore_failure => {
                    tracing::warn!("NRI: update of {} dropped: {e}", u.container_id);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
