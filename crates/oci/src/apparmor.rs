//! AppArmor confinement of a container's process (`process.apparmorProfile`), for a container's init and for
//! `exec` alike.
//!
//! The profile is checked on the host before anything is made ([`check`]: AppArmor on, the profile loaded), so
//! a wrong name fails `create` or `exec` itself. It is entered at the program's `execve` ([`apply`], the last
//! step before it): the runtime's own setup in the container stays unconfined, and the program starts
//! confined from its first instruction.

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

/// Asks the kernel to confine this thread by `profile` from its next `execve` on (`exec PROFILE` written to
/// `attr/apparmor/exec` of this thread's procfs directory, or `attr/exec` on kernels before 5.8). The file is
/// opened through [`crate::procfs`], so a file mounted over it cannot swallow the request and leave the process
/// unconfined (CVE-2025-52881). Nothing for no profile.
pub fn apply(profile: Option<&str>) -> Result<()> {
    let Some(profile) = profile.filter(|p| !p.is_empty()) else {
        return Ok(());
    };
    let request = format!("exec {profile}");
    let proc = crate::procfs::Proc::open().map_err(|e| err!("apparmor profile {profile:?}: {e}"))?;
    let me = proc
        .thread_self()
        .map_err(|e| err!("apparmor profile {profile:?}: {e}"))?;
    let attrs = ["attr/apparmor/exec", "attr/exec"];
    let mut last = None;
    for attr in attrs {
        let rel = format!("{me}/{attr}");
        // The kernel reads the request from one write.
        return match proc.write(&rel, request.as_bytes()) {
            Ok(n) if n == request.len() => Ok(()),
            Ok(n) => Err(err!(
                "apparmor profile {profile:?}: /proc/{rel} took {n} of {} bytes",
                request.len()
            )),
            // attr/apparmor/ is missing before Linux 5.8 (an open that failed: no errno of a write): try the
            // older file.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && e.raw_os_error().is_none()
                    && attr == attrs[0] =>
            {
                last = Some(err!("apparmor profile {profile:?}: opening /proc/{rel}: {e}"));
                continue;
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Err(err!(
                "apparmor profile {profile:?} is not loaded (writing /proc/{rel}: {e})"
            )),
            Err(e) => Err(err!("apparmor profile {profile:?}: writing /proc/{rel}: {e}")),
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
