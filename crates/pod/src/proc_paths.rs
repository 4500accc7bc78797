//! The masked and read-only paths kubelet sends for a container's `procMount` (k8s.io/kubernetes
//! `pkg/securitycontext`): its lists for `Default` (or none given), none for `Unmasked` (KEP-4265). The runtime
//! applies what it is sent and adds nothing (crius's `convert`, as containerd 2.x and CRI-O), so the engine
//! sends them as kubelet does.

/// kubelet's masked paths for `procMount: Default`.
const MASKED: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/interrupts",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

/// kubelet's read-only paths for `procMount: Default`.
const READONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The (masked, read-only) paths of a container whose `procMount` is `proc_mount`.
pub(crate) fn paths(proc_mount: Option<&str>) -> (Vec<String>, Vec<String>) {
    if proc_mount == Some("Unmasked") {
        return (Vec::new(), Vec::new());
    }
    let owned = |l: &[&str]| l.iter().map(|p| p.to_string()).collect();
    (owned(MASKED), owned(READONLY))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sends_kubelet_s_lists_and_unmasked_none() {
        for default in [None, Some("Default")] {
            let (masked, readonly) = paths(default);
            assert!(masked.contains(&"/proc/kcore".to_string()) && masked.len() == MASKED.len());
            assert_eq!(readonly, READONLY);
        }
        assert_eq!(paths(Some("Unmasked")), (vec![], vec![]));
    }
}
