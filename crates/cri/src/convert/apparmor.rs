//! A container's AppArmor profile (`process.apparmorProfile`), from its security context's `apparmor` (or the
//! deprecated `apparmor_profile`: `runtime/default`, `unconfined`, `localhost/<name>`), as containerd chooses
//! it:
//!
//! - RuntimeDefault, and nothing asked (the CRI says `runtime/default` is the same as no profile): crius's
//!   own [`super::apparmor_default`] profile, which criusd loads at start-up ([`load_default`]); none for a
//!   privileged container, and none on a node without AppArmor.
//! - Localhost: the loaded profile of that name (a `localhost/` prefix is dropped), privileged or not. A
//!   profile that is not loaded, or a node without AppArmor, is InvalidArgument naming the profile.
//! - Unconfined: none.
//!
//! The node's AppArmor state (on or off, the loaded profiles) is read by [`super::Host::probe`].

use std::io::Write;
use std::process::{Command, Stdio};

use crius_api::cri;

use super::CALL;
pub use super::apparmor_default::NAME as DEFAULT_PROFILE;
use crate::error::{Error, Result};

/// What the container asks for: a Localhost profile by its name.
pub type Wanted = super::profile::Wanted<String>;

/// A Localhost profile's name, its `localhost/` prefix (which a typed field's reference may carry) dropped.
fn localhost(field: &str, name: &str) -> Result<String> {
    let name = name.strip_prefix("localhost/").unwrap_or(name);
    if name.is_empty() || name.contains(['\0', '\n']) {
        return Err(Error::invalid(
            CALL,
            field.to_string(),
            format!("{name:?} is not an AppArmor profile name"),
        ));
    }
    Ok(name.to_string())
}

/// The profile `sc` asks for; nothing asked (the CRI says so of `runtime/default`) is the runtime's default.
/// (`apparmor_profile` is deprecated in the CRI, and still sent by older clients: it is read on purpose.)
#[allow(deprecated)]
pub fn wanted(sc: Option<&cri::LinuxContainerSecurityContext>) -> Result<Wanted> {
    const FIELDS: super::profile::Fields<String> = super::profile::Fields {
        typed: "apparmor",
        old: "apparmor_profile",
        runtime_default: &["", "runtime/default"],
        unconfined: &["unconfined"],
        hint: "runtime/default, unconfined or localhost/<profile name>",
        localhost,
    };
    super::profile::wanted(
        &FIELDS,
        sc.and_then(|s| s.apparmor.as_ref()),
        sc.map_or("", |s| s.apparmor_profile.as_str()),
    )
}

/// The profile the container gets: `loaded` is the node's loaded profiles, `None` where it has no AppArmor.
pub fn profile(wanted: &Wanted, privileged: bool, loaded: Option<&[String]>) -> Result<Option<String>> {
    match (wanted, loaded) {
        (Wanted::Unconfined, _) => Ok(None),
        (Wanted::RuntimeDefault, None) => Ok(None),
        (Wanted::RuntimeDefault, Some(_)) if privileged => Ok(None),
        (Wanted::RuntimeDefault, Some(list)) => {
            if list.iter().any(|p| p == DEFAULT_PROFILE) {
                Ok(Some(DEFAULT_PROFILE.to_string()))
            } else {
                Err(Error::invalid(
                    CALL,
                    "apparmor (RuntimeDefault)",
                    format!(
                        "needs crius's profile {DEFAULT_PROFILE:?}, which is not loaded and could not be \
                         (criusd loads it with apparmor_parser: see its log)"
                    ),
                ))
            }
        }
        (Wanted::Localhost(name), None) => Err(Error::invalid(
            CALL,
            "apparmor",
            format!("profile {name:?} asked for, but AppArmor is not enabled on this node"),
        )),
        (Wanted::Localhost(name), Some(list)) => {
            if list.iter().any(|p| p == name) {
                Ok(Some(name.clone()))
            } else {
                Err(Error::invalid(
                    CALL,
                    "apparmor",
                    format!(
                        "profile {name:?} is not loaded on this node (not in {})",
                        crius_common::apparmor::PROFILES
                    ),
                ))
            }
        }
    }
}

/// The node's loaded profiles for a container of `config` (`None`: no AppArmor). One that wants the default
/// profile while it is not loaded (removed since criusd started) gets it loaded again first.
pub fn probe(config: &cri::ContainerConfig) -> Option<Vec<String>> {
    let list = crius_common::apparmor::loaded()?;
    let sc = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let default = matches!(wanted(sc), Ok(Wanted::RuntimeDefault)) && !sc.is_some_and(|s| s.privileged);
    if !default || list.iter().any(|p| p == DEFAULT_PROFILE) {
        return Some(list);
    }
    match load_default() {
        Ok(_) => tracing::info!("loaded the AppArmor profile {DEFAULT_PROFILE}"),
        Err(e) => tracing::warn!("loading the AppArmor profile {DEFAULT_PROFILE}: {e}"),
    }
    crius_common::apparmor::loaded()
}

/// Loads crius's default profile with `apparmor_parser` when the kernel has AppArmor and the profile is not
/// loaded yet. `Ok(false)`: nothing to do (AppArmor off, or the profile already there).
pub fn load_default() -> std::result::Result<bool, String> {
    let Some(list) = crius_common::apparmor::loaded() else {
        return Ok(false);
    };
    if list.iter().any(|p| p == DEFAULT_PROFILE) {
        return Ok(false);
    }
    // -K: no cache file written; -r: replace (another criusd may have loaded it meanwhile). From stdin.
    let mut child = Command::new("apparmor_parser")
        .args(["-K", "-r"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            format!("running apparmor_parser (install AppArmor's tools: apt-get install apparmor): {e}")
        })?;
    let text = super::apparmor_default::profile();
    let wrote = child.stdin.take().map(|mut i| i.write_all(text.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(|e| format!("waiting for apparmor_parser: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "apparmor_parser failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    if let Some(Err(e)) = wrote {
        return Err(format!("writing the profile to apparmor_parser: {e}"));
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_default_is_nothing_without_apparmor_and_localhost_fails() {
        let local = Wanted::Localhost("my-prof".into());
        assert_eq!(profile(&Wanted::RuntimeDefault, false, None).unwrap(), None);
        assert_eq!(profile(&Wanted::Unconfined, false, None).unwrap(), None);
        let e = profile(&local, false, None).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        let msg = e.to_string();
        assert!(
            msg.contains("\"my-prof\"") && msg.contains("not enabled"),
            "{msg}"
        );
    }

    /// On a node without AppArmor (this host, not the VM): what the probe finds, and what comes of it.
    #[test]
    fn this_node_without_apparmor_runs_runtime_default_unconfined_and_refuses_localhost() {
        if crius_common::apparmor::enabled() {
            return; // the VM's test (tests/privileged/tests/vm_apparmor.rs) covers such a node
        }
        use cri::security_profile::ProfileType as T;
        let config = |t: T, r: &str| cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    apparmor: Some(cri::SecurityProfile {
                        profile_type: t as i32,
                        localhost_ref: r.into(),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let of = |c: &cri::ContainerConfig| {
            let sc = c.linux.as_ref().and_then(|l| l.security_context.as_ref());
            profile(&wanted(sc)?, false, probe(c).as_deref())
        };
        assert_eq!(probe(&config(T::RuntimeDefault, "")), None);
        assert_eq!(of(&config(T::RuntimeDefault, "")).unwrap(), None);
        assert_eq!(of(&cri::ContainerConfig::default()).unwrap(), None);
        let e = of(&config(T::Localhost, "my-prof")).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.to_string().contains("\"my-prof\""), "{e}");
    }

    #[test]
    fn with_apparmor_the_default_or_a_loaded_profile() {
        let list = vec![DEFAULT_PROFILE.to_string(), "my-prof".to_string()];
        let on = Some(list.as_slice());
        let local = |n: &str| Wanted::Localhost(n.into());
        assert_eq!(
            profile(&Wanted::RuntimeDefault, false, on).unwrap().as_deref(),
            Some(DEFAULT_PROFILE)
        );
        assert_eq!(profile(&Wanted::RuntimeDefault, true, on).unwrap(), None);
        assert_eq!(profile(&Wanted::Unconfined, false, on).unwrap(), None);
        assert_eq!(
            profile(&local("my-prof"), true, on).unwrap().as_deref(),
            Some("my-prof")
        );
        let e = profile(&local("gone"), false, on).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.to_string().contains("\"gone\" is not loaded"), "{e}");
        let e = profile(&Wanted::RuntimeDefault, false, Some(&[])).unwrap_err();
        assert!(e.to_string().contains(DEFAULT_PROFILE), "{e}");
    }
}
