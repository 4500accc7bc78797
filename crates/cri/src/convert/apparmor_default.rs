//! crius's RuntimeDefault AppArmor profile, `crius-default`, written from the rules container runtimes
//! document for their default profiles: a container keeps what an unconfined process may do (files,
//! capabilities, sockets) except what reaches past its namespaces to the host:
//!
//! - no mounts, remounts or `pivot_root` (unmounting stays, as it can only take away);
//! - no writes to `/proc`'s own files (`sysrq-trigger`, `sys`'s sysctls but the network and IPC namespaces'
//!   own, the files of `acpi`, `bus`, `fs`, `irq`, `scsi`, `tty`...); a process's `/proc/PID` stays writable;
//! - nothing at all of `/proc/kcore`, `/proc/kmsg`, `/proc/sysrq-trigger`, `/sys/firmware`,
//!   `/sys/kernel/security` (AppArmor's own interface) and `/sys/devices/virtual/powercap`;
//! - no writes to `/sys` but the container's cgroup tree (`/sys/fs/cgroup`);
//! - signals only from unconfined processes (the shim, criusd, kubelet) and among the profile's own, ptrace
//!   (and reading another's /proc files) only among the profile's own.
//!
//! It has no `abi` line and includes nothing, so that any apparmor_parser since 2.x loads it as it is.

/// The profile's name: what `/proc/PID/attr/current` shows of a container under it.
pub const NAME: &str = "crius-default";

/// The `kernel.*` sysctls of the container's IPC namespace, the only ones of `kernel` it may write: every
/// other name under `/proc/sys/kernel/` is denied by the patterns below, built letter by letter (AppArmor
/// has no "except" for a deny rule): not starting with m or s; m not followed by s; ms not by g; s not by h
/// or e; sh not by m; se not by m.
const KERNEL_IPC_DENY: &[&str] = &["[^ms]", "m[^s]", "ms[^g]", "s[^he]", "sh[^m]", "se[^m]"];

/// The profile's text, for apparmor_parser.
pub fn profile() -> String {
    let mut p = String::new();
    let mut line = |s: &str| {
        p.push_str(s);
        p.push('\n');
    };
    line("# crius-default: the AppArmor profile of crius's RuntimeDefault containers (loaded by criusd).");
    line(&format!(
        "profile {NAME} flags=(attach_disconnected,mediate_deleted) {{"
    ));
    line("  file,");
    line("  capability,");
    line("  network,");
    line("  umount,");
    line("  signal (receive) peer=unconfined,");
    line(&format!("  signal (send, receive) peer={NAME},"));
    line(&format!("  ptrace (trace, read, tracedby, readby) peer={NAME},"));
    line("");
    line("  deny mount,");
    line("  deny remount,");
    line("  deny pivot_root,");
    line("");
    // The files at /proc's top, and below its directories that are not a process's (a pid starts with 1-9)
    // nor "sys" (sysctls, below).
    line("  deny /proc/* w,");
    line("  deny /proc/{[^1-9s]*,s[^y]*,sy[^s]*,sys?*}/** w,");
    // /proc/sys: only net (the network namespace's) and some of kernel (the IPC namespace's).
    line("  deny /proc/sys/[^kn]** w,");
    line("  deny /proc/sys/{k[^e],n[^e]}** w,");
    for pat in KERNEL_IPC_DENY {
        line(&format!("  deny /proc/sys/kernel/{pat}** w,"));
    }
    line("  deny /proc/kcore rwklx,");
    line("  deny /proc/kmsg rwklx,");
    line("  deny /proc/sysrq-trigger rwklx,");
    line("");
    // /sys: writes only below fs/cgroup.
    line("  deny /sys/* w,");
    line("  deny /sys/{[^f]*,f[^s]*,fs?*,fs/[^c]*,fs/c[^g]*,fs/cg[^r]*}/** w,");
    line("  deny /sys/firmware/** rwklx,");
    line("  deny /sys/kernel/security/** rwklx,");
    line("  deny /sys/devices/virtual/powercap/** rwklx,");
    line("}");
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_profile_of_balanced_braces_with_the_deny_rules() {
        let p = profile();
        assert!(p.contains("profile crius-default flags="), "{p}");
        assert_eq!(p.matches('{').count(), p.matches('}').count(), "{p}");
        for rule in [
            "deny mount,",
            "deny /proc/sysrq-trigger rwklx,",
            "deny /proc/kcore rwklx,",
            "deny /sys/firmware/** rwklx,",
            "deny /proc/sys/kernel/s[^he]** w,",
        ] {
            assert!(p.contains(rule), "{rule} missing from\n{p}");
        }
        // Every rule line ends with a comma (apparmor_parser's syntax), but the header and the closing brace.
        for l in p
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            assert!(l.ends_with(',') || l.ends_with('{') || l == "}", "{l}");
        }
    }
}
