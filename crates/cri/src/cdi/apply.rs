//! Applying CDI `containerEdits` to a container's OCI spec ([`Edits::apply`]): env (a name already set is
//! replaced in its place), device nodes (each also gets a cgroup allow rule; what the spec does not say of
//! a node is read from the host's node with `convert`'s device stat), mounts (one at the same container
//! path is replaced), hooks in their OCI lists, `additionalGIDs` (0 and duplicates left out) and the
//! Intel RDT class.
//!
//! Edits are gathered first ([`Edits::add`]), each with the device it came from, so that a conflict (two
//! different nodes at one container path) names both devices before anything changes.

use std::path::{Path, PathBuf};

use oci_spec::runtime::{
    HookBuilder, Hooks, LinuxBuilder, LinuxDevice, LinuxDeviceBuilder, LinuxDeviceCgroupBuilder,
    LinuxDeviceType, LinuxIntelRdtBuilder, LinuxResourcesBuilder, MountBuilder, Spec,
};

use super::spec::{ContainerEdits, DeviceNode, Hook, IntelRdt, Mount};

/// The edits of the asked devices, each with who asked for it (`device (file)`).
#[derive(Debug, Default)]
pub struct Edits<'a> {
    env: Vec<(&'a str, &'a String)>,
    nodes: Vec<(String, &'a DeviceNode)>,
    mounts: Vec<&'a Mount>,
    hooks: Vec<&'a Hook>,
    gids: Vec<u32>,
    rdt: Option<&'a IntelRdt>,
}

/// A node made: who asked for it, its OCI entry, its cgroup access.
type Made = (String, LinuxDevice, String);

/// An edit that cannot be made: what, naming the device.
pub type Refusal = String;

fn typ(t: &str) -> LinuxDeviceType {
    match t {
        "b" => LinuxDeviceType::B,
        "u" => LinuxDeviceType::U,
        "p" => LinuxDeviceType::P,
        _ => LinuxDeviceType::C,
    }
}

/// The OCI entry of `n`: what it leaves out read from the host's node (its `hostPath`, else its `path`).
fn device(n: &DeviceNode) -> Result<LinuxDevice, String> {
    let host = n
        .host_path
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(&n.path);
    let fifo = n.typ.as_deref() == Some("p");
    let complete =
        n.typ.as_deref().is_some_and(|t| !t.is_empty()) && (fifo || (n.major.is_some() && n.minor.is_some()));
    let stat = if complete {
        None
    } else {
        Some(crate::convert::host_device(Path::new(host)).map_err(|why| format!("host node {host}: {why}"))?)
    };
    let t = match (n.typ.as_deref().filter(|t| !t.is_empty()), &stat) {
        (Some(t), _) => typ(t),
        (None, Some(d)) if d.block => LinuxDeviceType::B,
        (None, _) => LinuxDeviceType::C,
    };
    let mut b = LinuxDeviceBuilder::default()
        .path(PathBuf::from(&n.path))
        .typ(t)
        .major(n.major.or(stat.as_ref().map(|d| d.major as i64)).unwrap_or(0))
        .minor(n.minor.or(stat.as_ref().map(|d| d.minor as i64)).unwrap_or(0));
    if let Some(m) = n.file_mode.or(stat.as_ref().map(|d| d.mode)) {
        b = b.file_mode(m);
    }
    if let Some(u) = n.uid.or(stat.as_ref().map(|d| d.uid)) {
        b = b.uid(u);
    }
    if let Some(g) = n.gid.or(stat.as_ref().map(|d| d.gid)) {
        b = b.gid(g);
    }
    b.build().map_err(|e| e.to_string())
}

impl<'a> Edits<'a> {
    /// Adds `e`, which `who` (`device (file)`) brings.
    pub fn add(&mut self, who: &str, e: &'a ContainerEdits) {
        for v in &e.env {
            let name = v.split_once('=').map_or(v.as_str(), |(k, _)| k);
            self.env.push((name, v));
        }
        self.nodes
            .extend(e.device_nodes.iter().map(|n| (who.to_string(), n)));
        self.mounts.extend(&e.mounts);
        self.hooks.extend(&e.hooks);
        self.gids
            .extend(e.additional_gids.iter().copied().filter(|&g| g != 0));
        if e.intel_rdt.is_some() {
            self.rdt = e.intel_rdt.as_ref();
        }
    }

    /// Makes the edits in `spec`; on an error `spec` may be half changed (the create fails anyway).
    pub fn apply(&self, spec: &mut Spec) -> Result<(), Refusal> {
        let mut made: Vec<Made> = Vec::new();
        for (who, n) in &self.nodes {
            let d = device(n).map_err(|why| format!("{who}: {why}"))?;
            if let Some((first, old, _)) = made.iter().find(|(_, o, _)| o.path() == d.path()) {
                if (old.typ(), old.major(), old.minor()) != (d.typ(), d.major(), d.minor()) {
                    return Err(format!(
                        "{who}: device node {} conflicts with the one {first} puts there",
                        n.path
                    ));
                }
                continue;
            }
            let access = n.permissions.clone().filter(|p| !p.is_empty());
            made.push((who.clone(), d, access.unwrap_or_else(|| "rwm".into())));
        }
        self.env_into(spec);
        self.nodes_into(spec, &made);
        self.mounts_into(spec).map_err(|e| format!("a mount: {e}"))?;
        self.hooks_into(spec).map_err(|e| format!("a hook: {e}"))?;
        self.gids_into(spec);
        if let Some(r) = self.rdt {
            let mut b = LinuxIntelRdtBuilder::default();
            if let Some(c) = &r.clos_id {
                b = b.clos_id(c);
            }
            if let Some(s) = &r.l3_cache_schema {
                b = b.l3_cache_schema(s);
            }
            if let Some(s) = &r.mem_bw_schema {
                b = b.mem_bw_schema(s);
            }
            let rdt = b.build().map_err(|e| format!("intelRdt: {e}"))?;
            linux(spec).set_intel_rdt(Some(rdt));
        }
        Ok(())
    }

    fn env_into(&self, spec: &mut Spec) {
        if self.env.is_empty() {
            return;
        }
        let Some(p) = spec.process_mut() else { return };
        let mut env = p.env().clone().unwrap_or_default();
        for (name, v) in &self.env {
            let prefix = format!("{name}=");
            match env.iter_mut().find(|e| e.starts_with(&prefix)) {
                Some(old) => *old = (*v).clone(),
                None => env.push((*v).clone()),
            }
        }
        p.set_env(Some(env));
    }

    fn nodes_into(&self, spec: &mut Spec, made: &[Made]) {
        if made.is_empty() {
            return;
        }
        let l = linux(spec);
        let mut devs = l.devices().clone().unwrap_or_default();
        for (_, d, _) in made {
            devs.retain(|o| o.path() != d.path());
            devs.push(d.clone());
        }
        l.set_devices(Some(devs));
        let mut res = l
            .resources()
            .clone()
            .unwrap_or_else(|| LinuxResourcesBuilder::default().build().unwrap_or_default());
        let mut rules = res.devices().clone().unwrap_or_default();
        for (_, d, access) in made {
            if d.typ() == LinuxDeviceType::P {
                continue;
            }
            if let Ok(rule) = LinuxDeviceCgroupBuilder::default()
                .allow(true)
                .typ(d.typ())
                .major(d.major())
                .minor(d.minor())
                .access(access.as_str())
                .build()
            {
                rules.push(rule);
            }
        }
        res.set_devices(Some(rules));
        l.set_resources(Some(res));
    }

    fn mounts_into(&self, spec: &mut Spec) -> Result<(), String> {
        if self.mounts.is_empty() {
            return Ok(());
        }
        let mut mounts = spec.mounts().clone().unwrap_or_default();
        for m in &self.mounts {
            let mut b = MountBuilder::default()
                .destination(PathBuf::from(&m.container_path))
                .source(PathBuf::from(&m.host_path))
                .options(m.options.clone());
            if let Some(t) = m.typ.as_deref().filter(|t| !t.is_empty()) {
                b = b.typ(t);
            }
            let mount = b.build().map_err(|e| e.to_string())?;
            mounts.retain(|o| o.destination() != mount.destination());
            mounts.push(mount);
        }
        spec.set_mounts(Some(mounts));
        Ok(())
    }

    fn hooks_into(&self, spec: &mut Spec) -> Result<(), String> {
        if self.hooks.is_empty() {
            return Ok(());
        }
        let mut hooks: Hooks = spec.hooks().clone().unwrap_or_default();
        for h in &self.hooks {
            let mut b = HookBuilder::default().path(PathBuf::from(&h.path));
            if !h.args.is_empty() {
                b = b.args(h.args.clone());
            }
            if !h.env.is_empty() {
                b = b.env(h.env.clone());
            }
            if let Some(t) = h.timeout {
                b = b.timeout(t);
            }
            let hook = b.build().map_err(|e| e.to_string())?;
            #[allow(deprecated)]
            let list = match h.hook_name.as_str() {
                "prestart" => hooks.prestart_mut(),
                "createRuntime" => hooks.create_runtime_mut(),
                "createContainer" => hooks.create_container_mut(),
                "startContainer" => hooks.start_container_mut(),
                "poststart" => hooks.poststart_mut(),
                _ => hooks.poststop_mut(),
            };
            list.get_or_insert_with(Vec::new).push(hook);
        }
        spec.set_hooks(Some(hooks));
        Ok(())
    }

    fn gids_into(&self, spec: &mut Spec) {
        if self.gids.is_empty() {
            return;
        }
        let Some(p) = spec.process_mut() else { return };
        let gids = p.user_mut().additional_gids_mut().get_or_insert_with(Vec::new);
        for g in &self.gids {
            if !gids.contains(g) {
                gids.push(*g);
            }
        }
    }
}

/// The spec's `linux`, made if it has none.
fn linux(spec: &mut Spec) -> &mut oci_spec::runtime::Linux {
    spec.linux_mut()
        .get_or_insert_with(|| LinuxBuilder::default().build().unwrap_or_default())
}
