//! CDI spec files: their form ([`SpecFile`], [`ContainerEdits`]), as the CDI specification (versions 0.5.0 to
//! 1.0.x) defines it, the checks a file must pass ([`SpecFile::check`]), and the set of devices the
//! configured directories hold ([`Registry`]).
//!
//! The directories are read again at each CreateContainer that asks for a CDI device ([`Registry::read`]):
//! simple, and always current (a spec a driver writes between two creates is seen by the second); a create
//! that asks for none reads nothing. Files are `*.json` and `*.yaml` directly in a directory, read in name
//! order. As in the CDI library, a device of a later directory overrides one of the same name in an earlier
//! directory; two files of one directory that define the same device are a conflict, refused when the device
//! is asked for. A file that cannot be read or fails its checks is kept aside ([`Broken`]) and named when a
//! device of its kind is asked for; the other files still serve.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

/// One CDI spec file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SpecFile {
    /// The CDI version it is written for.
    pub cdi_version: String,
    /// `vendor.com/class`.
    pub kind: String,
    /// Its devices.
    #[serde(default)]
    pub devices: Vec<Device>,
    /// Edits every device of this file brings.
    #[serde(default)]
    pub container_edits: Option<ContainerEdits>,
}

/// One device of a spec file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Device {
    /// Its name, unique in its kind.
    pub name: String,
    /// What it changes in a container.
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

/// The changes to a container's spec a device (or its file) makes.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    /// `NAME=value` entries for the process's environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// Device nodes to create.
    #[serde(default)]
    pub device_nodes: Vec<DeviceNode>,
    /// OCI hooks to add.
    #[serde(default)]
    pub hooks: Vec<Hook>,
    /// Mounts to add.
    #[serde(default)]
    pub mounts: Vec<Mount>,
    /// The container's Intel RDT class.
    #[serde(default)]
    pub intel_rdt: Option<IntelRdt>,
    /// Groups the process is also in.
    #[serde(default, rename = "additionalGIDs")]
    pub additional_gids: Vec<u32>,
}

/// A device node: what the host does not say (type, numbers, mode, owner) is read from the host's node.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DeviceNode {
    /// Where it is in the container.
    pub path: String,
    /// Where it is on the host; empty: `path`.
    #[serde(default)]
    pub host_path: Option<String>,
    /// `c`, `b`, `u` or `p`.
    #[serde(default, rename = "type")]
    pub typ: Option<String>,
    /// Its major number.
    #[serde(default)]
    pub major: Option<i64>,
    /// Its minor number.
    #[serde(default)]
    pub minor: Option<i64>,
    /// Its permission bits.
    #[serde(default)]
    pub file_mode: Option<u32>,
    /// The cgroup access, letters of `rwm`; empty: `rwm`.
    #[serde(default)]
    pub permissions: Option<String>,
    /// Its owner.
    #[serde(default)]
    pub uid: Option<u32>,
    /// Its group.
    #[serde(default)]
    pub gid: Option<u32>,
}

/// A mount.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Mount {
    /// Its source on the host.
    pub host_path: String,
    /// Where it goes in the container.
    pub container_path: String,
    /// Its mount options.
    #[serde(default)]
    pub options: Vec<String>,
    /// Its file system type.
    #[serde(default, rename = "type")]
    pub typ: Option<String>,
}

/// An OCI hook.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Hook {
    /// When it runs: prestart, createRuntime, createContainer, startContainer, poststart or poststop.
    pub hook_name: String,
    /// The program.
    pub path: String,
    /// Its argv.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment.
    #[serde(default)]
    pub env: Vec<String>,
    /// Seconds it may take.
    #[serde(default)]
    pub timeout: Option<i64>,
}

/// An Intel RDT class.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IntelRdt {
    /// Its class of service.
    #[serde(default, rename = "closID")]
    pub clos_id: Option<String>,
    /// Its L3 cache schema.
    #[serde(default)]
    pub l3_cache_schema: Option<String>,
    /// Its memory bandwidth schema.
    #[serde(default)]
    pub mem_bw_schema: Option<String>,
}

/// The hook names a CDI spec may use (prestart: deprecated by OCI, still in the CDI spec).
pub const HOOK_NAMES: &[&str] = &[
    "prestart",
    "createRuntime",
    "createContainer",
    "startContainer",
    "poststart",
    "poststop",
];

/// Whether `v` is a CDI version crius reads: 0.5.0 to 0.8.x, and 1.0.x.
fn version_ok(v: &str) -> bool {
    let mut parts = v.split('.');
    let (Some(major), Some(minor), patch) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let num = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !num(major) || !num(minor) || patch.is_some_and(|p| !num(p)) || parts.next().is_some() {
        return false;
    }
    matches!((major, minor), ("0", "5" | "6" | "7" | "8") | ("1", "0"))
}

/// Checks a `vendor.com/class` kind.
pub fn kind_ok(kind: &str) -> Result<(), String> {
    let Some((vendor, class)) = kind.split_once('/') else {
        return Err(format!("kind {kind:?} is not vendor.com/class"));
    };
    let alnum = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_alphanumeric()) && s.ends_with(|c: char| c.is_ascii_alphanumeric())
    };
    let vendor_ok = alnum(vendor)
        && vendor
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let class_ok = alnum(class)
        && class
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if !vendor_ok {
        return Err(format!("kind {kind:?} has an invalid vendor {vendor:?}"));
    }
    if !class_ok {
        return Err(format!("kind {kind:?} has an invalid class {class:?}"));
    }
    Ok(())
}

/// Checks a device name: letters, digits, `-`, `_`, `.` and `:`, beginning and ending with a letter or
/// digit.
pub fn name_ok(name: &str) -> Result<(), String> {
    let ends = |c: char| c.is_ascii_alphanumeric();
    if name.is_empty()
        || !name.starts_with(ends)
        || !name.ends_with(ends)
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    {
        return Err(format!("device name {name:?} is invalid"));
    }
    Ok(())
}

impl ContainerEdits {
    /// Checks the edits' form (not the host's nodes: those are read when applied).
    pub fn check(&self) -> Result<(), String> {
        if let Some(e) = self
            .env
            .iter()
            .find(|e| e.split_once('=').is_none_or(|(k, _)| k.is_empty()))
        {
            return Err(format!("env entry {e:?} is not NAME=value"));
        }
        for n in &self.device_nodes {
            if !n.path.starts_with('/') {
                return Err(format!("device node path {:?} is not absolute", n.path));
            }
            if let Some(t) = n
                .typ
                .as_deref()
                .filter(|t| !t.is_empty() && !matches!(*t, "c" | "b" | "u" | "p"))
            {
                return Err(format!("device node {} has type {t:?}: c, b, u or p", n.path));
            }
            if let Some(p) = n
                .permissions
                .as_deref()
                .filter(|p| p.chars().any(|c| !matches!(c, 'r' | 'w' | 'm')))
            {
                return Err(format!(
                    "device node {} has permissions {p:?}: letters of rwm",
                    n.path
                ));
            }
        }
        for m in &self.mounts {
            if m.host_path.is_empty() || !m.container_path.starts_with('/') {
                return Err(format!(
                    "mount {:?} -> {:?} needs a hostPath and an absolute containerPath",
                    m.host_path, m.container_path
                ));
            }
        }
        for h in &self.hooks {
            if !HOOK_NAMES.contains(&h.hook_name.as_str()) {
                return Err(format!(
                    "hook {:?} has hookName {:?}: one of {}",
                    h.path,
                    h.hook_name,
                    HOOK_NAMES.join(", ")
                ));
            }
            if !h.path.starts_with('/') {
                return Err(format!("hook path {:?} is not absolute", h.path));
            }
        }
        Ok(())
    }
}

impl SpecFile {
    /// Checks the file: its version, kind, device names (unique) and edits.
    pub fn check(&self) -> Result<(), String> {
        if !version_ok(&self.cdi_version) {
            return Err(format!(
                "cdiVersion {:?} is not one crius reads (0.5.0 to 1.0.x)",
                self.cdi_version
            ));
        }
        kind_ok(&self.kind)?;
        if self.devices.is_empty() {
            return Err("it has no devices".into());
        }
        let mut seen = std::collections::HashSet::new();
        for d in &self.devices {
            name_ok(&d.name)?;
            if !seen.insert(&d.name) {
                return Err(format!("device {:?} is defined twice", d.name));
            }
            d.container_edits
                .check()
                .map_err(|e| format!("device {:?}: {e}", d.name))?;
        }
        if let Some(e) = &self.container_edits {
            e.check()?;
        }
        Ok(())
    }

    /// Reads and checks the file at `path` (JSON for `*.json`, else YAML).
    pub fn read(path: &Path) -> Result<SpecFile, String> {
        let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
        let spec: SpecFile = if path.extension().is_some_and(|e| e == "json") {
            serde_json::from_str(&text).map_err(|e| e.to_string())?
        } else {
            serde_yaml_ng::from_str(&text).map_err(|e| e.to_string())?
        };
        spec.check()?;
        Ok(spec)
    }
}

/// A spec file that could not be used.
#[derive(Debug, Clone)]
pub struct Broken {
    /// The file.
    pub path: PathBuf,
    /// Its kind, if that much could be read.
    pub kind: Option<String>,
    /// Why.
    pub why: String,
}

/// Where a device is defined.
#[derive(Debug, Clone)]
pub struct Found {
    /// The file.
    pub path: PathBuf,
    /// The file's spec.
    pub spec: Arc<SpecFile>,
    /// The device's index in `spec.devices`.
    pub index: usize,
}

impl Found {
    /// The device.
    pub fn device(&self) -> &Device {
        &self.spec.devices[self.index]
    }
}

/// What a device's fully qualified name resolves to.
#[derive(Debug, Clone)]
pub enum Lookup<'a> {
    /// The device.
    Device(&'a Found),
    /// Two files of one directory define it.
    Conflict(&'a Path, &'a Path),
    /// No file defines it; a broken file of its kind, if there is one.
    Unknown(Option<&'a Broken>),
}

/// The devices of the configured directories.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    devices: HashMap<String, Found>,
    conflicts: HashMap<String, (PathBuf, PathBuf)>,
    broken: Vec<Broken>,
}

/// The spec files directly in `dir` (`*.json`, `*.yaml`), in name order; none if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json" || e == "yaml") && p.is_file())
        .collect();
    out.sort();
    out
}

/// The `kind` of a file that failed its checks, if it parses that far.
fn loose_kind(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).ok()?;
    v.get("kind")?.as_str().map(str::to_string)
}

impl Registry {
    /// The devices `dirs` hold now, a later directory's overriding an earlier one's.
    pub fn read(dirs: &[PathBuf]) -> Registry {
        let mut r = Registry::default();
        for dir in dirs {
            let mut here: HashMap<String, Found> = HashMap::new();
            let mut clashes: HashMap<String, (PathBuf, PathBuf)> = HashMap::new();
            for path in files(dir) {
                let spec = match SpecFile::read(&path) {
                    Ok(s) => Arc::new(s),
                    Err(why) => {
                        let kind = loose_kind(&path);
                        r.broken.push(Broken { path, kind, why });
                        continue;
                    }
                };
                for (index, d) in spec.devices.iter().enumerate() {
                    let name = format!("{}={}", spec.kind, d.name);
                    let found = Found {
                        path: path.clone(),
                        spec: spec.clone(),
                        index,
                    };
                    if let Some(first) = here.get(&name) {
                        clashes.insert(name, (first.path.clone(), path.clone()));
                    } else {
                        here.insert(name, found);
                    }
                }
            }
            for (name, found) in here {
                r.conflicts.remove(&name);
                r.devices.insert(name, found);
            }
            r.conflicts.extend(clashes);
        }
        r
    }

    /// What the fully qualified `name` (`vendor.com/class=name`) resolves to.
    pub fn lookup(&self, name: &str) -> Lookup<'_> {
        if let Some((a, b)) = self.conflicts.get(name) {
            return Lookup::Conflict(a, b);
        }
        if let Some(f) = self.devices.get(name) {
            return Lookup::Device(f);
        }
        let kind = name.split_once('=').map(|(k, _)| k);
        Lookup::Unknown(
            self.broken
                .iter()
                .find(|b| b.kind.as_deref() == kind)
                .or_else(|| self.broken.iter().find(|b| b.kind.is_none())),
        )
    }
}
