//! CRI to OCI: the runtime spec (config.json) of a CRI container, as oci-spec's typed [`Spec`]. Its process
//! from the ContainerConfig over the image config (command, args, env, working dir, user), the pod's
//! namespaces joined by path (its user namespace too, with its mappings), the pod's hostname, hosts and
//! resolv.conf files, kubelet's mounts (idmapped when they have mappings), kubelet's devices (a conversion
//! copying the host's nodes, `devices.rs`, not an adjustment), resources (CRI zero = unset), capabilities
//! and kubelet's masked and read-only paths (none when it sends none: `procMount: Unmasked`). What containerd's CRI plugin does by default, unless said
//! otherwise here.
//!
//! [`spec`] is a pure function of the request ([`Input`]) and the facts it needs from the node and the
//! image's files ([`Host`]): it reads and writes nothing. The create path reads the facts before it
//! ([`Host::probe`]) and makes the mounts' missing host paths after it ([`create_mount_sources`]). What the
//! request points at outside itself (image volumes' snapshots; CDI devices and NRI later) is not here: the
//! create path's adjust step (`container::adjust`) changes the spec for it.
//!
//! ```text
//!   ContainerConfig ─┐
//!   Sandbox (record) ├─ Input ──────┐
//!   image config ────┘              ├─ spec() ─> Spec ─> config.json
//!   Host::probe(&input, driver) ────┘
//! ```
//!
//! The specs are pinned by golden files (`golden/<case>.json`, see `golden.rs`).

mod apparmor;
mod apparmor_default;
mod caps;
mod devices;
mod host;
mod image_files;
mod mounts;
mod process;
mod profile;
mod resources;
mod seccomp;
mod seccomp_default;

#[cfg(test)]
mod golden;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::path::Path;

use crius_api::cri;
use oci_spec::OciSpecError;
use oci_spec::runtime::{
    LinuxBuilder, LinuxNamespace, LinuxNamespaceBuilder, LinuxNamespaceType, RootBuilder, Spec, SpecBuilder,
};
use serde_json::Value;

pub use apparmor::{DEFAULT_PROFILE as APPARMOR_DEFAULT_PROFILE, load_default as load_apparmor_default};
pub use caps::{ALL_CAPS, DEFAULT_CAPS};
pub use devices::{AtHostPath, HostDevice, host_device};
pub use host::{Host, bounding_set, cpu_controller, create_mount_sources};
pub use mounts::{image_volume_mount, is_image_volume};
pub use process::{args, env, user};
pub use resources::{merge_resources, resources, update_resources};

use crate::error::{Error, Result};
use crate::store::sandbox::Sandbox;

/// The CRI call whose request is converted, as errors name it.
const CALL: &str = "CreateContainer";

/// The annotation that groups a pod's containers into one shim.
pub const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

/// Everything a container's spec is made from, besides the [`Host`] facts.
pub struct Input<'a> {
    /// The container id.
    pub id: &'a str,
    /// kubelet's ContainerConfig.
    pub config: &'a cri::ContainerConfig,
    /// The pod it belongs to.
    pub sandbox: &'a Sandbox,
    /// Where the pod's hostname, hosts and resolv.conf files are.
    pub sandbox_files: &'a Path,
    /// The image's config JSON (its `config` holds Env, Entrypoint, Cmd, WorkingDir, User).
    pub image_config: &'a Value,
    /// The container's root filesystem (mounted).
    pub rootfs: &'a Path,
    /// The PID namespace of the container that a PID mode of TARGET names (`/proc/<pid>/ns/pid`).
    pub pid_target: Option<&'a Path>,
}

/// oci-spec's builders check only what this conversion never sets (a mount's ID mappings given alone, an
/// exec CPU affinity), so a failure is a bug here; it is refused with its cause rather than a panic.
fn built<T>(r: std::result::Result<T, OciSpecError>) -> Result<T> {
    r.map_err(|e| Error::invalid(CALL, "config.json", format!("cannot be made: {e}")))
}

fn ns_mode(opts: &cri::NamespaceOption, which: fn(&cri::NamespaceOption) -> i32) -> cri::NamespaceMode {
    cri::NamespaceMode::try_from(which(opts)).unwrap_or(cri::NamespaceMode::Pod)
}

fn namespace(typ: LinuxNamespaceType, path: Option<&Path>) -> Result<LinuxNamespace> {
    let ns = LinuxNamespaceBuilder::default().typ(typ);
    built(match path {
        Some(p) => ns.path(p).build(),
        None => ns.build(),
    })
}

/// The container's config.json: a pure function of `inp` and `host`.
pub fn spec(inp: &Input<'_>, host: &Host) -> Result<Spec> {
    let c = inp.config;
    let sc = c.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let privileged = sc.is_some_and(|s| s.privileged);
    let mut process = process::process(c, sc, inp.image_config, host)?;
    process.set_apparmor_profile(apparmor::profile(
        &apparmor::wanted(sc)?,
        privileged,
        host.apparmor.as_deref(),
    )?);

    // The container's own namespace options, else the pod's: a PID option of NODE means the host's PID
    // namespace, TARGET the target container's (`kubectl debug --target`); the pod's pinned namespaces are
    // joined whatever the container's options say.
    let pod_ns = crate::validate::namespace_options(&inp.sandbox.config);
    let ctr_ns = sc
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_else(|| pod_ns.clone());
    let pins = &inp.sandbox.record.namespaces;
    let mut namespaces = vec![namespace(LinuxNamespaceType::Mount, None)?];
    // PID: the host's; the pod's shared one (when the pod holds one); else the container's own.
    match (ns_mode(&ctr_ns, |o| o.pid), &pins.pid) {
        (cri::NamespaceMode::Node, _) => {}
        (cri::NamespaceMode::Target, _) => {
            let target = inp.pid_target.ok_or_else(|| {
                Error::invalid(
                    CALL,
                    "linux.security_context.namespace_options.target_id",
                    "PID mode TARGET needs a running target container",
                )
            })?;
            namespaces.push(namespace(LinuxNamespaceType::Pid, Some(target))?);
        }
        (cri::NamespaceMode::Pod, Some(pin)) => {
            namespaces.push(namespace(LinuxNamespaceType::Pid, Some(pin))?);
        }
        _ => namespaces.push(namespace(LinuxNamespaceType::Pid, None)?),
    }
    for (typ, pin) in [
        (LinuxNamespaceType::Network, &pins.net),
        (LinuxNamespaceType::Ipc, &pins.ipc),
        (LinuxNamespaceType::Uts, &pins.uts),
    ] {
        if let Some(p) = pin {
            namespaces.push(namespace(typ, Some(p))?);
        }
    }
    namespaces.push(namespace(LinuxNamespaceType::Cgroup, None)?);
    // The pod's user namespace (`hostUsers: false`), with its mappings, if it has one.
    crate::sandbox::userns::same_as_pod(CALL, sc.and_then(|s| s.namespace_options.as_ref()), &pod_ns)?;
    let userns = match &pins.user {
        Some(pin) => {
            namespaces.push(namespace(LinuxNamespaceType::User, Some(pin))?);
            crate::sandbox::userns::wanted(CALL, "the pod's linux.security_context", Some(&pod_ns))?
        }
        None => None,
    };

    let ro = sc.is_some_and(|s| s.readonly_rootfs);
    let pod_ipc = ns_mode(&ctr_ns, |o| o.ipc) == cri::NamespaceMode::Pod;
    let mounts = mounts::mounts(inp, privileged, pod_ipc, ro)?;

    let pod_linux = inp.sandbox.config.linux.as_ref();
    let parent = pod_linux.map(|l| l.cgroup_parent.as_str()).unwrap_or_default();
    // kubelet's devices (device plugins'): nodes copied from the host's, and their allow rules after the
    // deny-all one; a privileged container also gets the host's nodes and every device allowed.
    if userns.is_some() {
        devices::same_paths_in_userns(c)?;
    }
    let (mut devices, mut device_rules) = devices::devices(c, &host.devices)?;
    if privileged {
        devices::privileged(&host.host_devices, &mut devices, &mut device_rules)?;
    }
    let mut res = resources(
        c.linux.as_ref().and_then(|l| l.resources.as_ref()),
        host.cpu_controller,
    )?;
    let mut rules = res.devices().clone().unwrap_or_default();
    rules.extend(device_rules);
    res.set_devices(Some(rules));
    let mut linux = built(
        LinuxBuilder::default()
            .namespaces(namespaces)
            .cgroups_path(host.cgroup_driver.cgroups_path(parent, inp.id))
            .resources(res)
            .build(),
    )?;
    if !devices.is_empty() {
        linux.set_devices(Some(devices));
    }
    // The masked and read-only paths are kubelet's, as given, as containerd 2.x and CRI-O do: kubelet sends its
    // defaults for `procMount: Default` and none for `Unmasked` (KEP-4265), and a runtime adds none of its
    // own. A privileged container has none (Linux's Default, which the builder starts from, has runc's).
    let paths = |v: Option<&Vec<String>>| match v {
        Some(v) if !privileged && !v.is_empty() => Some(v.clone()),
        _ => None,
    };
    let (masked, readonly) = (
        paths(sc.map(|s| &s.masked_paths)),
        paths(sc.map(|s| &s.readonly_paths)),
    );
    if let Some((uids, gids)) = userns {
        linux.set_uid_mappings(Some(uids));
        linux.set_gid_mappings(Some(gids));
    }
    linux.set_masked_paths(masked);
    linux.set_readonly_paths(readonly);
    linux.set_rootfs_propagation(mounts::rootfs_propagation(&c.mounts));
    let caps: Vec<String> = process
        .capabilities()
        .as_ref()
        .and_then(|c| c.bounding().as_ref())
        .map(|b| b.iter().map(|c| format!("CAP_{c}")).collect())
        .unwrap_or_default();
    linux.set_seccomp(seccomp::profile(
        &seccomp::wanted(sc)?,
        privileged,
        &caps,
        host.kernel,
        host.seccomp_file.as_ref(),
    )?);
    let sysctls = pod_linux.map(|l| l.sysctls.clone()).unwrap_or_default();
    if !sysctls.is_empty() {
        linux.set_sysctl(Some(sysctls));
    }

    let mut annotations: HashMap<String, String> = c.annotations.clone();
    annotations.insert(SANDBOX_ID.into(), inp.sandbox.record.id.clone());
    annotations.insert("io.kubernetes.cri.container-type".into(), "container".into());
    let mut spec = built(
        SpecBuilder::default()
            .version("1.0.2")
            .process(process)
            .root(built(
                RootBuilder::default().path(inp.rootfs).readonly(ro).build(),
            )?)
            .mounts(mounts)
            .linux(linux)
            .annotations(annotations)
            .build(),
    )?;
    // The pod's hostname when it has a UTS namespace of its own; else none (Spec's Default has one).
    spec.set_hostname(pins.uts.as_ref().map(|_| host.hostname.trim().to_string()));
    Ok(spec)
}
