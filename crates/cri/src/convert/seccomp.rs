//! A container's seccomp profile, from its security context's `seccomp` (or the deprecated
//! `seccomp_profile_path`: `unconfined`, `runtime/default`, `docker/default`, `localhost/<path>`).
//!
//! - Unconfined, nothing asked, or a privileged container: no filter.
//! - Localhost: the JSON profile at the path (read by [`super::Host::probe`]), in the OCI form or Docker's
//!   (its `archMap`, and rules `includes`/`excludes` by capability or architecture, resolved here against the
//!   container's capabilities). A missing or invalid file is InvalidArgument naming the path.
//! - RuntimeDefault (also `runtime/default`, `docker/default`): crius's own default profile
//!   ([`super::seccomp_default`]), resolved against the container's capabilities.

use std::path::PathBuf;

use crius_api::cri;
use oci_spec::runtime::LinuxSeccomp;
use serde_json::Value;

use super::CALL;
use crate::error::{Error, Result};

/// What the container asks for: a Localhost profile by its file.
pub type Wanted = super::profile::Wanted<PathBuf>;

/// A Localhost profile's file: an absolute path.
fn localhost(field: &str, p: &str) -> Result<PathBuf> {
    if !p.starts_with('/') {
        return Err(Error::invalid(
            CALL,
            field.to_string(),
            format!("{p:?} is not an absolute path"),
        ));
    }
    Ok(PathBuf::from(p))
}

/// The profile `sc` asks for; nothing asked is no filter. (`seccomp_profile_path` is deprecated in the CRI,
/// and still sent by older clients: it is read on purpose.)
#[allow(deprecated)]
pub fn wanted(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<Wanted> {
    const FIELDS: super::profile::Fields<PathBuf> = super::profile::Fields {
        typed: "seccomp",
        old: "seccomp_profile_path",
        runtime_default: &["runtime/default", "docker/default"],
        unconfined: &["", "unconfined"],
        hint: "unconfined, runtime/default or localhost/<absolute path>",
        localhost,
    };
    super::profile::wanted(
        &FIELDS,
        sc.and_then(|s| s.seccomp.as_ref()),
        sc.map_or("", |s| s.seccomp_profile_path.as_str()),
    )
}

/// This machine's architecture as Docker profiles name it.
fn docker_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// `major.minor` of a kernel version (`6.1.0-18-amd64`, `4.8`).
pub fn major_minor(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// Whether a Docker rule's `includes`/`excludes` let it apply to a container with capabilities `caps` on a
/// kernel `kernel` (a rule's `includes.minKernel` asks for that version or later).
fn applies(rule: &Value, caps: &[String], kernel: (u32, u32)) -> std::result::Result<bool, String> {
    let list = |v: &Value, key: &str| -> Vec<String> {
        v[key]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
            .unwrap_or_default()
    };
    let has_cap = |c: &String| caps.contains(c);
    let (inc, exc) = (&rule["includes"], &rule["excludes"]);
    let arch = docker_arch().to_string();
    let inc_caps = list(inc, "caps");
    let inc_arches = list(inc, "arches");
    let new_enough = match &inc["minKernel"] {
        Value::Null => true,
        Value::String(v) => {
            kernel >= major_minor(v).ok_or_else(|| format!("minKernel {v:?} is no version"))?
        }
        other => return Err(format!("minKernel {other} is no version")),
    };
    Ok(new_enough
        && inc_caps.iter().all(has_cap)
        && (inc_arches.is_empty() || inc_arches.contains(&arch))
        && !list(exc, "caps").iter().any(has_cap)
        && !list(exc, "arches").contains(&arch))
}

/// The OCI form of a profile file's text `text` (at `path`) for a container with capabilities `caps` on kernel
/// `kernel` (major, minor).
pub fn parse(path: &str, text: &str, caps: &[String], kernel: (u32, u32)) -> Result<LinuxSeccomp> {
    let bad = |why: String| Error::invalid(CALL, "seccomp profile", format!("{path}: {why}"));
    let mut v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let obj = v.as_object_mut().ok_or_else(|| bad("not a JSON object".into()))?;
    if let Some(map) = obj.remove("archMap") {
        let arches: Vec<Value> = map
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| {
                std::iter::once(m["architecture"].clone())
                    .chain(m["subArchitectures"].as_array().cloned().unwrap_or_default())
            })
            .filter(Value::is_string)
            .collect();
        obj.entry("architectures").or_insert(Value::Array(arches));
    }
    if let Some(Value::Array(rules)) = obj.get_mut("syscalls") {
        let mut kept = Vec::with_capacity(rules.len());
        for r in rules.drain(..) {
            if applies(&r, caps, kernel).map_err(&bad)? {
                kept.push(r);
            }
        }
        *rules = kept;
        for r in rules.iter_mut().filter_map(Value::as_object_mut) {
            for k in ["includes", "excludes", "comment"] {
                r.remove(k);
            }
        }
    }
    for k in ["defaultErrno", "comment"] {
        if obj.get(k).is_some_and(|e| !e.is_number()) {
            obj.remove(k);
        }
    }
    serde_json::from_value(v).map_err(|e| bad(format!("not a seccomp profile: {e}")))
}

/// The filter the container gets: `file` is what [`super::Host::probe`] read of a Localhost profile.
pub fn profile(
    wanted: &Wanted,
    privileged: bool,
    caps: &[String],
    kernel: (u32, u32),
    file: Option<&std::result::Result<String, String>>,
) -> Result<Option<LinuxSeccomp>> {
    match wanted {
        _ if privileged => Ok(None),
        Wanted::Unconfined => Ok(None),
        Wanted::RuntimeDefault => parse(
            "RuntimeDefault",
            &super::seccomp_default::profile().to_string(),
            caps,
            kernel,
        )
        .map(Some),
        Wanted::Localhost(path) => {
            let shown = path.display().to_string();
            match file {
                Some(Ok(text)) => parse(&shown, text, caps, kernel).map(Some),
                Some(Err(e)) => Err(Error::invalid(CALL, "seccomp profile", format!("{shown}: {e}"))),
                None => Err(Error::invalid(
                    CALL,
                    "seccomp profile",
                    format!("{shown}: not read"),
                )),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_profiles_are_resolved_for_the_container() {
        let text = r#"{
            "defaultAction": "SCMP_ACT_ERRNO",
            "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
            "syscalls": [
                {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
                {"names": ["clone"], "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_SYS_ADMIN"]},
                 "comment": "no new namespaces"},
                {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}}
            ]
        }"#;
        let names = |s: &LinuxSeccomp| -> Vec<String> {
            s.syscalls()
                .iter()
                .flatten()
                .flat_map(|r| r.names().clone())
                .collect()
        };
        let plain = parse("/p", text, &["CAP_CHOWN".into()], (4, 7)).unwrap();
        assert_eq!(names(&plain), ["read", "clone"], "4.7 is before minKernel");
        assert_eq!(plain.architectures().as_ref().map(Vec::len), Some(2));
        let admin = parse("/p", text, &["CAP_SYS_ADMIN".into()], (4, 8)).unwrap();
        assert_eq!(names(&admin), ["read", "mount", "ptrace"]);
        assert_eq!(major_minor("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(major_minor("4.10"), Some((4, 10)));
        assert!((4, 10) > (4, 8), "compared as numbers, not as text");
        for bad in [
            "nope",
            "[1]",
            r#"{"defaultAction": "SCMP_ACT_WHAT"}"#,
            r#"{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["ptrace"],
                "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "four"}}]}"#,
        ] {
            let e = parse("/p/bad.json", bad, &[], (6, 1)).unwrap_err();
            assert!(e.to_string().contains("/p/bad.json"), "{e}");
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
        }
        let missing = profile(
            &Wanted::Localhost("/p/gone.json".into()),
            false,
            &[],
            (6, 1),
            Some(&Err("no such file".into())),
        );
        assert!(
            missing
                .unwrap_err()
                .to_string()
                .contains("/p/gone.json: no such file")
        );
        assert_eq!(
            profile(&Wanted::Localhost("/p".into()), true, &[], (6, 1), None).unwrap(),
            None,
            "privileged"
        );
    }
}
