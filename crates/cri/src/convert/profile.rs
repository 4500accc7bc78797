//! What a container asks of a security profile, AppArmor's or seccomp's: the CRI carries each request twice,
//! as a typed `SecurityProfile` field (`apparmor`, `seccomp`) and as a deprecated string that older clients
//! still send (`apparmor_profile`, `seccomp_profile_path`). [`wanted`] reads both the same way for either,
//! told by a [`Fields`] what differs: the field names, which words of the string mean what, and what a
//! Localhost reference must be (a profile name, an absolute path).

use crius_api::cri;

use super::CALL;
use crate::error::{Error, Result};

/// What the container asks for; `L` is how a Localhost profile is named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted<L> {
    /// No profile.
    Unconfined,
    /// The runtime's default profile.
    RuntimeDefault,
    /// The profile the node holds under this name.
    Localhost(L),
}

/// How one kind of profile is asked for.
pub(super) struct Fields<L> {
    /// The typed field (`apparmor`): errors name `<typed>.profile_type`, `<typed>.localhost_ref`.
    pub typed: &'static str,
    /// The deprecated string field (`apparmor_profile`).
    pub old: &'static str,
    /// The words of the string that mean the runtime's default ("" among them if nothing asked means it).
    pub runtime_default: &'static [&'static str],
    /// The words of the string that mean none.
    pub unconfined: &'static [&'static str],
    /// What the string may say, for its error.
    pub hint: &'static str,
    /// The Localhost reference in field `field` (the string's with its `localhost/` taken off), checked.
    pub localhost: fn(field: &str, reference: &str) -> Result<L>,
}

/// The profile asked for by `typed` (which wins) or else `old`, as `fields` reads them.
pub(super) fn wanted<L>(
    fields: &Fields<L>,
    typed: Option<&cri::SecurityProfile>,
    old: &str,
) -> Result<Wanted<L>> {
    use cri::security_profile::ProfileType;
    if let Some(p) = typed {
        return match ProfileType::try_from(p.profile_type) {
            Ok(ProfileType::RuntimeDefault) => Ok(Wanted::RuntimeDefault),
            Ok(ProfileType::Unconfined) => Ok(Wanted::Unconfined),
            Ok(ProfileType::Localhost) => {
                (fields.localhost)(&format!("{}.localhost_ref", fields.typed), &p.localhost_ref)
                    .map(Wanted::Localhost)
            }
            Err(_) => Err(Error::invalid(
                CALL,
                format!("{}.profile_type", fields.typed),
                format!("{} is not a profile type", p.profile_type),
            )),
        };
    }
    if fields.runtime_default.contains(&old) {
        return Ok(Wanted::RuntimeDefault);
    }
    if fields.unconfined.contains(&old) {
        return Ok(Wanted::Unconfined);
    }
    match old.strip_prefix("localhost/") {
        Some(reference) => (fields.localhost)(fields.old, reference).map(Wanted::Localhost),
        None => Err(Error::invalid(
            CALL,
            fields.old,
            format!("{old:?}: use {}", fields.hint),
        )),
    }
}

#[cfg(test)]
mod tests {
    use cri::security_profile::ProfileType as T;

    use super::*;

    #[derive(Debug, Clone, Copy)]
    enum Of {
        AppArmor,
        Seccomp,
    }

    /// What a security context with the deprecated string `old` and the typed field `typed` asks of `of`'s
    /// profile, as text: the variant, or the field an InvalidArgument names.
    #[allow(deprecated)]
    fn asked(of: Of, old: &str, typed: Option<(i32, &str)>) -> String {
        let typed = typed.map(|(t, r)| cri::SecurityProfile {
            profile_type: t,
            localhost_ref: r.into(),
        });
        let mut sc = cri::LinuxContainerSecurityContext::default();
        fn shown<L: std::fmt::Debug>(w: Result<Wanted<L>>) -> String {
            match w {
                Ok(w) => format!("{w:?}"),
                Err(Error::InvalidArgument { field, .. }) => format!("invalid {field}"),
                Err(e) => panic!("{e}"),
            }
        }
        match of {
            Of::AppArmor => {
                (sc.apparmor_profile, sc.apparmor) = (old.into(), typed);
                shown(super::super::apparmor::wanted(Some(&sc)))
            }
            Of::Seccomp => {
                (sc.seccomp_profile_path, sc.seccomp) = (old.into(), typed);
                shown(super::super::seccomp::wanted(Some(&sc)))
            }
        }
    }

    #[test]
    fn the_profile_asked_for_by_either_field() {
        use Of::{AppArmor, Seccomp};
        let (rd, lh) = (T::RuntimeDefault as i32, T::Localhost as i32);
        assert_eq!(
            format!("{:?}", super::super::apparmor::wanted(None).unwrap()),
            "RuntimeDefault"
        );
        assert_eq!(
            format!("{:?}", super::super::seccomp::wanted(None).unwrap()),
            "Unconfined"
        );
        for (of, old, typed, want) in [
            (AppArmor, "", None, "RuntimeDefault"),
            (AppArmor, "runtime/default", None, "RuntimeDefault"),
            (AppArmor, "unconfined", None, "Unconfined"),
            (AppArmor, "localhost/my-prof", None, r#"Localhost("my-prof")"#),
            // The typed field wins over the deprecated string; its localhost_ref may carry the prefix too.
            (
                AppArmor,
                "unconfined",
                Some((lh, "localhost/p")),
                r#"Localhost("p")"#,
            ),
            (AppArmor, "", Some((lh, "p")), r#"Localhost("p")"#),
            (AppArmor, "", Some((T::Unconfined as i32, "")), "Unconfined"),
            (AppArmor, "", Some((rd, "")), "RuntimeDefault"),
            (AppArmor, "docker-default", None, "invalid apparmor_profile"),
            (AppArmor, "localhost/", None, "invalid apparmor_profile"),
            (AppArmor, "", Some((lh, "")), "invalid apparmor.localhost_ref"),
            (AppArmor, "", Some((9, "")), "invalid apparmor.profile_type"),
            (Seccomp, "", None, "Unconfined"),
            (Seccomp, "runtime/default", None, "RuntimeDefault"),
            (Seccomp, "docker/default", None, "RuntimeDefault"),
            (Seccomp, "localhost//p/x.json", None, r#"Localhost("/p/x.json")"#),
            (Seccomp, "", Some((rd, "")), "RuntimeDefault"),
            (
                Seccomp,
                "unconfined",
                Some((lh, "/p/y.json")),
                r#"Localhost("/p/y.json")"#,
            ),
            (
                Seccomp,
                "localhost/rel.json",
                None,
                "invalid seccomp_profile_path",
            ),
            (Seccomp, "weird", None, "invalid seccomp_profile_path"),
            (
                Seccomp,
                "",
                Some((lh, "rel.json")),
                "invalid seccomp.localhost_ref",
            ),
            (Seccomp, "", Some((9, "")), "invalid seccomp.profile_type"),
        ] {
            assert_eq!(asked(of, old, typed), want, "{of:?} {old:?} {typed:?}");
        }
    }
}
