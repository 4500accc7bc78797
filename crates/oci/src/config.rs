//! Loading and checking a bundle's `config.json`.
//!
//! Errors name the file and the JSON path of the offending field (`process.user.uid`), so a malformed config is
//! fixed in one look instead of by bisection.

use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::{Error, Result};

/// A parsed and checked bundle.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Absolute path of the bundle directory.
    pub dir: PathBuf,
    /// Absolute path of the root filesystem.
    pub rootfs: PathBuf,
    /// The configuration.
    pub spec: Spec,
}

/// Parses `config.json` text; `file` is only used in error messages.
pub fn parse(file: &str, text: &[u8]) -> Result<Spec> {
    let de = &mut serde_json::Deserializer::from_slice(text);
    serde_path_to_error::deserialize::<_, Spec>(de).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            "(document)".to_string()
        } else {
            path
        };
        Error::config(file, field, e.into_inner().to_string())
    })
}

/// Reads, parses and checks `<dir>/config.json`.
pub fn load(dir: &Path) -> Result<Bundle> {
    let dir = std::path::absolute(dir).map_err(|e| crate::err!("bundle {}: {e}", dir.display()))?;
    let file = dir.join("config.json");
    let name = file.display().to_string();
    let text = std::fs::read(&file).map_err(|e| crate::err!("reading {name}: {e}"))?;
    let spec = parse(&name, &text)?;
    let rootfs = check(&name, &dir, &spec)?;
    Ok(Bundle { dir, rootfs, spec })
}

/// Checks what serde cannot: required fields and values that make sense. Returns the absolute rootfs path.
pub fn check(file: &str, dir: &Path, spec: &Spec) -> Result<PathBuf> {
    let bad = |field: &str, msg: &str| Err(Error::config(file, field, msg));
    if spec.version().is_empty() {
        return bad("ociVersion", "missing");
    }
    let Some(root) = spec.root() else {
        return bad("root", "missing");
    };
    if root.path().as_os_str().is_empty() {
        return bad("root.path", "missing");
    }
    let rootfs = dir.join(root.path());
    match std::fs::metadata(&rootfs) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return bad("root.path", &format!("{} is not a directory", rootfs.display())),
        Err(e) => return bad("root.path", &format!("{}: {e}", rootfs.display())),
    }
    let Some(process) = spec.process() else {
        return bad("process", "missing");
    };
    check_process(file, process)?;
    for (i, m) in spec.mounts().iter().flatten().enumerate() {
        if !m.destination().is_absolute() {
            return bad(&format!("mounts[{i}].destination"), "must be an absolute path");
        }
    }
    let Some(linux) = spec.linux() else {
        return bad("linux", "missing");
    };
    let mut seen = Vec::new();
    for (i, ns) in linux.namespaces().iter().flatten().enumerate() {
        if seen.contains(&ns.typ()) {
            return bad(
                &format!("linux.namespaces[{i}]"),
                &format!("namespace {:?} listed twice", ns.typ()),
            );
        }
        seen.push(ns.typ());
        if let Some(p) = ns.path()
            && !p.is_absolute()
        {
            return bad(&format!("linux.namespaces[{i}].path"), "must be an absolute path");
        }
    }
    // Without a mount namespace of its own the container shares the runtime's: its mounts are made there and
    // it is chrooted into the rootfs (as runc does); what only a mount namespace can hold is refused.
    if !seen.contains(&LinuxNamespaceType::Mount) {
        let need = "needs a mount namespace (linux.namespaces has none)";
        if linux.masked_paths().as_ref().is_some_and(|p| !p.is_empty()) {
            return bad("linux.maskedPaths", &format!("masking paths {need}"));
        }
        if linux.readonly_paths().as_ref().is_some_and(|p| !p.is_empty()) {
            return bad("linux.readonlyPaths", &format!("read-only paths {need}"));
        }
        if spec.root().as_ref().and_then(|r| r.readonly()) == Some(true) {
            return bad("root.readonly", &format!("a read-only rootfs {need}"));
        }
    }
    if spec.hostname().as_deref().is_some_and(|h| !h.is_empty()) && !seen.contains(&LinuxNamespaceType::Uts) {
        return bad("hostname", "setting a hostname needs a uts namespace");
    }
    unsupported(file, spec)?;
    let userns = seen.contains(&LinuxNamespaceType::User);
    let maps = linux.uid_mappings().as_ref().is_some_and(|m| !m.is_empty());
    if userns && !maps && linux.namespaces().iter().flatten().all(|n| n.path().is_none()) {
        return bad(
            "linux.uidMappings",
            "a new user namespace needs uid and gid mappings",
        );
    }
    Ok(rootfs)
}

/// Fields crius does not apply yet: refused by name rather than silently ignored.
fn unsupported(file: &str, spec: &Spec) -> Result<()> {
    let no = |field: &str| Err(Error::config(file, field, "not supported by crius yet"));
    let linux = spec.linux().as_ref();
    if let Some(l) = linux {
        if l.intel_rdt().is_some() {
            return no("linux.intelRdt");
        }
        if l.memory_policy().is_some() {
            return no("linux.memoryPolicy");
        }
        if l.time_offsets().as_ref().is_some_and(|t| !t.is_empty()) {
            return no("linux.timeOffsets");
        }
        if l.net_devices().as_ref().is_some_and(|d| !d.is_empty()) {
            return no("linux.netDevices");
        }
        if l.personality()
            .as_ref()
            .is_some_and(|p| p.flags().as_ref().is_some_and(|f| !f.is_empty()))
        {
            return no("linux.personality.flags");
        }
    }
    if let Some(p) = spec.process() {
        if p.scheduler().is_some() {
            return no("process.scheduler");
        }
        if p.exec_cpu_affinity().is_some() {
            return no("process.execCPUAffinity");
        }
    }
    Ok(())
}

/// Checks a process description (shared by create and exec).
pub fn check_process(file: &str, p: &oci_spec::runtime::Process) -> Result<()> {
    let bad = |field: &str, msg: &str| Err(Error::config(file, field, msg));
    match p.args() {
        Some(a) if !a.is_empty() && !a[0].is_empty() => {}
        _ => return bad("process.args", "must name the program to run"),
    }
    if !p.cwd().is_absolute() {
        return bad("process.cwd", "must be an absolute path");
    }
    for (i, e) in p.env().iter().flatten().enumerate() {
        if !e.contains('=') {
            return bad(&format!("process.env[{i}]"), "must have the form NAME=value");
        }
    }
    if let Some(profile) = p.apparmor_profile() {
        crate::apparmor::check(file, profile)?;
    }
    if let Some(c) = p.capabilities() {
        let sets = crate::caps::Sets::from_oci(c)?;
        let left = sets.unraisable_ambient();
        if left != 0 {
            crate::log::warn(&format!(
                "{file}: process.capabilities.ambient: {} not raised: an ambient capability must also be \
                 permitted and inheritable",
                crate::caps::names_of(left).join(", ")
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"ociVersion":"1.0.2","root":{"path":"rootfs"},
        "process":{"cwd":"/","args":["sh"],"user":{"uid":0,"gid":0}},
        "linux":{"namespaces":[{"type":"mount"}]}}"#;

    #[test]
    fn malformed_field_is_named() {
        let text = GOOD.replace(r#""uid":0"#, r#""uid":"root""#);
        let e = parse("c.json", text.as_bytes()).unwrap_err().to_string();
        assert!(e.contains("process.user.uid"), "{e}");
        let e = parse("c.json", b"{not json").unwrap_err().to_string();
        assert!(e.starts_with("invalid config c.json"), "{e}");
    }

    #[test]
    fn semantic_checks_name_the_field() {
        let dir = tempfile::tempdir().unwrap();
        let spec = parse("c", GOOD.as_bytes()).unwrap();
        let e = check("c", dir.path(), &spec).unwrap_err().to_string();
        assert!(e.contains("root.path") && e.contains("No such file"), "{e}");
        std::fs::create_dir(dir.path().join("rootfs")).unwrap();
        check("c", dir.path(), &spec).unwrap();
        for (from, to, field) in [
            (r#""args":["sh"]"#, r#""args":[]"#, "process.args"),
            (r#""cwd":"/""#, r#""cwd":"rel""#, "process.cwd"),
            (
                r#"{"type":"mount"}]"#,
                r#"{"type":"uts"}],"maskedPaths":["/proc/kcore"]"#,
                "linux.maskedPaths: masking paths needs a mount namespace",
            ),
            (r#""ociVersion":"1.0.2","#, "", "ociVersion"),
            (
                r#""cwd":"/","#,
                r#""cwd":"/","scheduler":{"policy":"SCHED_FIFO"},"#,
                "process.scheduler",
            ),
            (
                r#"{"type":"mount"}]"#,
                r#"{"type":"mount"}],"intelRdt":{"closID":"x"}"#,
                "linux.intelRdt",
            ),
        ] {
            let spec = parse("c", GOOD.replace(from, to).as_bytes()).unwrap();
            let e = check("c", dir.path(), &spec).unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
    }
}
