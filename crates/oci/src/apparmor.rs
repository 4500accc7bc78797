//! AppArmor confinement of a container's process (`process.apparmorProfile`), for a container's init and for
//! `exec` alike.
//!
//! The profile is checked on the host before anything is made ([`check`]: AppArmor on, the profile loaded), so
//! a wrong name fails `create` or `exec` itself. It is entered at the program's `execve` ([`apply`], the last
//! step before it): the runtime's own setup in the container stays unconfined, and the program starts
//! confined from its first instruction.

use std::io::Write;

use crius_common::apparmor;

use crate::{Error, Result, err};

/// The profile name that means "no profile": never listed as loaded, always accepted.
const UNCONFINED: &str = "unconfined";

/// Checks, on the host, that `profile` (from `file`'s `process.apparmorProfile`) can be applied: AppArmor is
/// enabled and, where its securityfs list can be read, the profile is loaded.
pub fn check(file: &str, profile: &str) -> Result<()> {
    if profile.is_empty() || profile == UNCONFINED {
        return Ok(());
    }
    let bad = |msg: String| Err(Error::config(file, "process.apparmorProfile", msg));
    let on = std::fs::read_to_string(apparmor::ENABLED).is_ok_and(|s| s.trim_start().starts_with('Y'));
    if !on {
        return bad(format!(
            "{profile:?}: AppArmor is not enabled on this host ({} is not Y)",
            apparmor::ENABLED
        ));
    }
    // Without securityfs the list cannot be read: the kernel still refuses an unknown name at execve.
    if let Ok(text) = std::fs::read_to_string(apparmor::PROFILES)
        && !apparmor::parse_profiles(&text).iter().any(|p| p == profile)
    {
        return bad(format!(
            "{profile:?}: no AppArmor profile of that name is loaded (see {}; load it with apparmor_parser)",
            apparmor::PROFILES
        ));
    }
    Ok(())
}

/// Asks the kernel to confine this process by `profile` from its next `execve` on (`exec PROFILE` written to
/// `/proc/self/attr/apparmor/exec`, or `/proc/self/attr/exec` on kernels before 5.8). Nothing for no profile.
pub fn apply(profile: Option<&str>) -> Result<()> {
    let Some(profile) = profile.filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let request = format!("exec {profile}");
    let attrs = ["/proc/self/attr/apparmor/exec", "/proc/self/attr/exec"];
    let mut last = None;
    for attr in attrs {
        let mut f = match std::fs::OpenOptions::new().write(true).open(attr) {
            Ok(f) => f,
            Err(e) => {
                last = Some(err!("apparmor profile {profile:?}: opening {attr}: {e}"));
                continue;
            }
        };
        // The kernel reads the request from one write.
        return match f.write(request.as_bytes()) {
            Ok(n) if n == request.len() => Ok(()),
            Ok(n) => Err(err!(
                "apparmor profile {profile:?}: {attr} took {n} of {} bytes",
                request.len()
            )),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Err(err!(
                "apparmor profile {profile:?} is not loaded (writing {attr}: {e})"
            )),
            Err(e) => Err(err!("apparmor profile {profile:?}: writing {attr}: {e}")),
        };
    }
    Err(last.unwrap_or_else(|| err!("apparmor profile {profile:?}: no attr file")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_profile_and_unconfined_need_nothing() {
        check("c", "").unwrap();
        check("c", UNCONFINED).unwrap();
        apply(None).unwrap();
        apply(Some("")).unwrap();
    }

    #[test]
    fn a_profile_is_refused_by_name_where_it_cannot_apply() {
        // Here: AppArmor off (this host), or on without such a profile.
        if apparmor::loaded().is_some_and(|l| l.iter().any(|p| p == "crius-no-such-profile")) {
            return;
        }
        let e = check("c.json", "crius-no-such-profile").unwrap_err().to_string();
        assert!(
            e.contains("process.apparmorProfile") && e.contains("crius-no-such-profile"),
            "{e}"
        );
    }
}
