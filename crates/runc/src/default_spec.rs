//! What `crius-runc spec` writes and what `crius-runc features` reports.

use serde_json::{Value, json};

const DEFAULT_CAPS: &[&str] = &["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];

/// A default config.json: `sh` on a terminal (as runc's), in new namespaces with the usual mounts and
/// restrictions. A cgroup namespace only where `pure_v2` (the host's cgroups are cgroup v2 alone), as runc
/// decides: on a hybrid host the container's cgroup2 mount needs the host's view.
pub fn config(pure_v2: bool) -> String {
    let mut v = json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": true,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "TERM=xterm"],
            "cwd": "/",
            "capabilities": {
                "bounding": DEFAULT_CAPS, "effective": DEFAULT_CAPS, "permitted": DEFAULT_CAPS,
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "crius",
        "mounts": [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
            {"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
            {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
        ],
        "linux": {
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
        }
    });
    if pure_v2 && let Some(ns) = v["linux"]["namespaces"].as_array_mut() {
        ns.push(json!({"type": "cgroup"}));
    }
    serde_json::to_string_pretty(&v).expect("static JSON")
}

/// The OCI runtime features document.
pub fn features() -> Value {
    let last = crius_oci::caps::last_cap();
    let mut caps: Vec<(u8, String)> = crius_oci::caps::all_names()
        .into_iter()
        .filter(|(i, _)| *i <= last)
        .collect();
    caps.sort();
    let caps: Vec<String> = caps.into_iter().map(|(_, name)| name).collect();
    let mut mount_options: Vec<&str> =
        "async atime bind defaults dev diratime dirsync exec mand noatime nodev \
        nodiratime noexec nomand norelatime nostrictatime nosuid private rbind relatime remount ro rprivate \
        rshared rslave runbindable rw shared slave strictatime suid sync tmpcopyup unbindable"
            .split_whitespace()
            .collect();
    // The recursive ones (`rro`, ...): what a CRI client looks for to send recursive read-only mounts.
    mount_options.extend(crius_oci::rootfs::recursive_names());
    // Idmapped mounts (a mount's uidMappings and gidMappings; `ridmap` for its submounts too).
    mount_options.extend(["idmap", "ridmap"]);
    mount_options.sort_unstable();
    json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": crate::help::SPEC_VERSION,
        "hooks": ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"],
        "mountOptions": mount_options,
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts"],
            "capabilities": caps,
            "cgroup": {"v1": false, "v2": true, "systemd": true, "systemdUser": false, "rdma": true},
            "seccomp": {
                "enabled": true,
                "actions": ["SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
                    "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_NOTIFY", "SCMP_ACT_TRACE", "SCMP_ACT_TRAP"],
                "operators": ["SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT",
                    "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"],
                "archs": ["SCMP_ARCH_X86", "SCMP_ARCH_X86_64", "SCMP_ARCH_X32", "SCMP_ARCH_AARCH64", "SCMP_ARCH_ARM"],
                "knownFlags": ["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW"],
                "supportedFlags": ["SECCOMP_FILTER_FLAG_LOG", "SECCOMP_FILTER_FLAG_SPEC_ALLOW"]
            },
            "apparmor": {"enabled": true},
            "selinux": {"enabled": false},
            "intelRdt": {"enabled": false},
            "mountExtensions": {"idmap": {"enabled": true}}
        },
        "annotations": {"io.crius.runtime.version": env!("CARGO_PKG_VERSION")}
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn default_config_parses_as_an_oci_spec() {
        let spec = crius_oci::config::parse("default", super::config(true).as_bytes()).unwrap();
        let process = spec.process().as_ref().unwrap();
        assert_eq!(process.args().as_ref().unwrap()[0], "sh");
        assert_eq!(
            process.terminal(),
            Some(true),
            "runc spec's process is on a terminal"
        );
    }

    #[test]
    fn a_cgroup_namespace_only_on_a_pure_v2_host() {
        let has_cgroupns = |pure_v2| {
            let v: serde_json::Value = serde_json::from_str(&super::config(pure_v2)).unwrap();
            v["linux"]["namespaces"]
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n["type"] == "cgroup")
        };
        assert!(has_cgroupns(true));
        assert!(!has_cgroupns(false));
    }

    #[test]
    fn features_list_the_recursive_mount_options_sorted() {
        let doc = super::features();
        let opts: Vec<&str> = doc["mountOptions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert!(opts.contains(&"rro") && opts.contains(&"rnoexec") && opts.contains(&"ro"));
        assert!(opts.is_sorted(), "{opts:?}");
        assert!(opts.contains(&"idmap") && doc["linux"]["mountExtensions"]["idmap"]["enabled"] == true);
    }
}
