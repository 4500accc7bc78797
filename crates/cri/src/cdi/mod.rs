//! CDI (Container Device Interface): the devices a container asks for by fully qualified name
//! (`vendor.com/class=name`), in its ContainerConfig's `CDI_devices` and in `cdi.k8s.io/*` annotations
//! (each value a comma-separated list of names), resolved in the CDI spec files of the configured
//! directories (`[cdi] spec_dirs`; [`DEFAULT_SPEC_DIRS`]) and applied to its OCI spec in CreateContainer's
//! adjust step ([`Devices`], an `Adjust`er).
//!
//! - `spec.rs`: the spec files' form and checks, and the devices the directories hold (read again at each
//!   create that asks for a device: always current);
//! - `apply.rs`: a device's and its file's `containerEdits` made in the OCI spec.
//!
//! A device asked for twice (the field and an annotation) is applied once; a file's own edits are applied
//! once however many of its devices are asked for. An unknown device, a device defined by a file that is
//! invalid or in conflict, or a conflicting edit fails CreateContainer with InvalidArgument naming the
//! device and the file. Written from the published CDI specification. The CRI has no feature flag for
//! CDI, so Status cannot advertise it.

use std::path::PathBuf;

use crius_api::cri;
use oci_spec::runtime::Spec;

use crate::container::adjust::{Adjust, Context};
use crate::error::{Error, Result};

pub mod apply;
pub mod spec;
#[cfg(test)]
mod tests;

pub use spec::{Lookup, Registry};

/// Where CDI spec files are looked for when the config does not say: the static dir, then the dynamic one
/// (which overrides it).
pub const DEFAULT_SPEC_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];

/// The annotation prefix whose values name CDI devices.
pub const ANNOTATION_PREFIX: &str = "cdi.k8s.io/";

const CALL: &str = "CreateContainer";

/// The CDI devices `config` asks for, each with the field that names it, in order, each name once: the
/// `CDI_devices` field, then the annotations in key order.
pub fn requested(config: &cri::ContainerConfig) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |name: &str, field: String| {
        let name = name.trim();
        if !name.is_empty() && !out.iter().any(|(n, _)| n == name) {
            out.push((name.to_string(), field));
        }
    };
    for (i, d) in config.cdi_devices.iter().enumerate() {
        add(&d.name, format!("CDI_devices[{i}].name"));
    }
    let mut keys: Vec<&String> = config
        .annotations
        .keys()
        .filter(|k| k.starts_with(ANNOTATION_PREFIX))
        .collect();
    keys.sort();
    for k in keys {
        for name in config.annotations[k].split(',') {
            add(name, format!("annotations[{k}]"));
        }
    }
    out
}

/// Checks a fully qualified device name.
fn qualified(name: &str) -> std::result::Result<(), String> {
    let (kind, dev) = name
        .split_once('=')
        .ok_or_else(|| format!("{name:?} is not a fully qualified CDI name (vendor.com/class=name)"))?;
    spec::kind_ok(kind)?;
    spec::name_ok(dev)
}

/// The adjuster that applies a container's CDI devices, from the spec files in `dirs` (later overriding
/// earlier).
pub struct Devices {
    /// The spec directories, in order.
    pub dirs: Vec<PathBuf>,
}

impl Default for Devices {
    fn default() -> Devices {
        Devices {
            dirs: DEFAULT_SPEC_DIRS.iter().map(PathBuf::from).collect(),
        }
    }
}

impl Devices {
    /// Applies the devices `config` asks for to `spec`.
    pub fn apply(&self, spec: &mut Spec, config: &cri::ContainerConfig) -> Result<()> {
        let asked = requested(config);
        if asked.is_empty() {
            return Ok(());
        }
        let registry = Registry::read(&self.dirs);
        let mut found = Vec::new();
        for (name, field) in &asked {
            let refuse =
                |why: String| Error::invalid(CALL, field.clone(), format!("CDI device {name}: {why}"));
            qualified(name).map_err(refuse)?;
            match registry.lookup(name) {
                Lookup::Device(f) => found.push((name, f)),
                Lookup::Conflict(a, b) => {
                    return Err(refuse(format!(
                        "both {} and {} define it",
                        a.display(),
                        b.display()
                    )));
                }
                Lookup::Unknown(broken) => {
                    let dirs: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
                    let mut why = format!("no spec file in {} defines it", dirs.join(", "));
                    if let Some(b) = broken {
                        why += &format!("; spec file {} is invalid: {}", b.path.display(), b.why);
                    }
                    return Err(refuse(why));
                }
            }
        }
        let mut edits = apply::Edits::default();
        let mut files_done: Vec<&std::path::Path> = Vec::new();
        for (name, f) in &found {
            let who = format!("CDI device {name} ({})", f.path.display());
            if !files_done.contains(&f.path.as_path()) {
                files_done.push(&f.path);
                if let Some(e) = &f.spec.container_edits {
                    edits.add(&who, e);
                }
            }
            edits.add(&who, &f.device().container_edits);
        }
        edits
            .apply(spec)
            .map_err(|why| Error::invalid(CALL, "CDI_devices", why))
    }
}

impl Adjust for Devices {
    fn name(&self) -> &'static str {
        "CDI devices"
    }

    fn adjust(&self, spec: &mut Spec, cx: &Context<'_>) -> Result<()> {
        self.apply(spec, cx.config)
    }
}
