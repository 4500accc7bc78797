//! What the kernel says of AppArmor: whether it is on, and which profiles are loaded. criusd reads it to choose
//! a container's profile (and to load its default one), crius-runc to refuse a profile that is not loaded
//! before the container starts.
//!
//! AppArmor counts as on when the module says so (`/sys/module/apparmor/parameters/enabled` is `Y`) and its
//! policy interface in securityfs can be read: without that interface no profile can be loaded or listed.

use std::path::Path;

/// The module parameter that says whether AppArmor is enabled.
pub const ENABLED: &str = "/sys/module/apparmor/parameters/enabled";
/// AppArmor's directory in securityfs.
pub const SECURITYFS: &str = "/sys/kernel/security/apparmor";
/// The list of loaded profiles, one `NAME (MODE)` a line.
pub const PROFILES: &str = "/sys/kernel/security/apparmor/profiles";

/// Whether AppArmor is on: enabled in the kernel and its securityfs interface readable.
pub fn enabled() -> bool {
    enabled_at(Path::new(ENABLED), Path::new(PROFILES))
}

fn enabled_at(param: &Path, profiles: &Path) -> bool {
    let on = std::fs::read_to_string(param).is_ok_and(|s| s.trim_start().starts_with('Y'));
    on && std::fs::File::open(profiles).is_ok()
}

/// The names of the loaded profiles, or `None` when AppArmor is not on ([`enabled`]).
pub fn loaded() -> Option<Vec<String>> {
    if !enabled() {
        return None;
    }
    std::fs::read_to_string(PROFILES).ok().map(|t| parse_profiles(&t))
}

/// The names in the text of the profiles list: each line is a name, a space and the mode in parentheses (a
/// name may itself hold spaces).
pub fn parse_profiles(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| match l.rsplit_once(" (") {
            Some((name, mode)) if mode.ends_with(')') => name.to_string(),
            _ => l.to_string(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_of_the_profiles_list() {
        let text = "crius-default (enforce)\nmy profile (complain)\n/usr/bin/x//child (enforce)\n";
        assert_eq!(
            parse_profiles(text),
            ["crius-default", "my profile", "/usr/bin/x//child"]
        );
        assert!(parse_profiles("").is_empty());
    }

    #[test]
    fn on_only_when_enabled_and_listed() {
        let d = std::env::temp_dir().join(format!("crius-aa-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let (param, list) = (d.join("enabled"), d.join("profiles"));
        std::fs::write(&param, "Y\n").unwrap();
        assert!(!enabled_at(&param, &list), "no securityfs list");
        std::fs::write(&list, "").unwrap();
        assert!(enabled_at(&param, &list));
        std::fs::write(&param, "N\n").unwrap();
        assert!(!enabled_at(&param, &list));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
