//! Checks of CRI requests made before anything is: a refusal is InvalidArgument naming the call and the
//! field (`CreateContainer: envs[1].key "A=B" contains "="`), and nothing (record, name, snapshot, bundle,
//! shim call) exists yet when it comes. What only the kernel or the runtime can judge (a cpuset the node
//! lacks, memory below current usage) is left to them; their messages come back as they are.

use std::path::{Component, Path};

use crius_api::cri;

use crate::error::{Error, Result};

pub mod unsupported;

/// The pod's namespace options (defaults: all the pod's own).
pub fn namespace_options(c: &cri::PodSandboxConfig) -> cri::NamespaceOption {
    c.linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or_default()
}

/// The longest hostname the kernel takes (`HOST_NAME_MAX`).
pub const MAX_HOSTNAME: usize = 64;
/// The smallest memory limit accepted, as Docker keeps it: below it a container cannot start.
pub const MIN_MEMORY: i64 = 6 * 1024 * 1024;
/// cgroup v2's `cpu.max` period range, µs (1 ms to 1 s).
pub const CPU_PERIOD: std::ops::RangeInclusive<i64> = 1_000..=1_000_000;

/// The cgroup v2 interface files a `unified` entry may write, per controller (`hugetlb.<size>.max` and
/// `hugetlb.<size>.rsvd.max` besides): the writable files of cpu, cpuset, memory, io, pids, rdma and misc.
/// Anything else (a `cgroup.*` file, which moves processes or controllers, a read-only statistic, a
/// misspelling) is refused rather than written blindly.
const UNIFIED: &[&str] = &[
    "cpu.idle",
    "cpu.max",
    "cpu.max.burst",
    "cpu.uclamp.max",
    "cpu.uclamp.min",
    "cpu.weight",
    "cpu.weight.nice",
    "cpuset.cpus",
    "cpuset.cpus.exclusive",
    "cpuset.cpus.partition",
    "cpuset.mems",
    "io.bfq.weight",
    "io.latency",
    "io.max",
    "io.prio.class",
    "io.weight",
    "memory.high",
    "memory.low",
    "memory.max",
    "memory.min",
    "memory.oom.group",
    "memory.swap.high",
    "memory.swap.max",
    "memory.zswap.max",
    "memory.zswap.writeback",
    "misc.max",
    "pids.max",
    "rdma.max",
];

/// An id the call names its object by: not empty.
pub fn id(call: &'static str, field: &'static str, value: &str) -> Result<()> {
    if value.is_empty() {
        return Err(Error::invalid(call, field, "is empty"));
    }
    Ok(())
}

/// A string handed to the kernel as a C string: no NUL byte.
fn no_nul(call: &'static str, field: impl FnOnce() -> String, value: &str) -> Result<()> {
    match value.find('\0') {
        Some(at) => Err(Error::invalid(
            call,
            field(),
            format!("has a NUL byte at {at}: {value:?}"),
        )),
        None => Ok(()),
    }
}

/// A command line (argv), or any list of strings handed on as C strings: no NUL byte in any.
pub fn argv(call: &'static str, field: &'static str, args: &[String]) -> Result<()> {
    args.iter()
        .enumerate()
        .try_for_each(|(i, a)| no_nul(call, || format!("{field}[{i}]"), a))
}

/// A relative path that must stay under its base: not absolute, no `..`.
fn beneath(call: &'static str, field: &'static str, path: &str) -> Result<()> {
    let p = Path::new(path);
    if p.is_absolute() {
        return Err(Error::invalid(
            call,
            field,
            format!("{path:?} is absolute: it is relative to the pod's log_directory"),
        ));
    }
    no_parent(call, field, path, ": it must stay under the pod's log_directory")?;
    no_nul(call, || field.into(), path)?;
    // Path::components hides these ("a//b", "a/./b", "a/" read as clean): the raw string is checked, as the
    // shim opens it component by component.
    if path.split('/').any(|c| c.is_empty() || c == ".") {
        return Err(Error::invalid(
            call,
            field,
            format!(
                "{path:?} is not a clean path (an empty or \".\" component): it names a file under the pod's log_directory"
            ),
        ));
    }
    Ok(())
}

/// A path without a `..` component (`why` ends the message).
fn no_parent(call: &'static str, field: &'static str, path: &str, why: &str) -> Result<()> {
    if Path::new(path).components().any(|c| c == Component::ParentDir) {
        return Err(Error::invalid(call, field, format!("{path:?} has a \"..\"{why}")));
    }
    Ok(())
}

/// A ContainerConfig, before CreateContainer makes anything of it.
pub fn container_config(c: &cri::ContainerConfig) -> Result<()> {
    const CALL: &str = "CreateContainer";
    unsupported::container_config(c)?;
    if c.image.as_ref().is_none_or(|i| i.image.is_empty()) {
        return Err(Error::invalid(
            CALL,
            "image.image",
            "is empty: which image to run",
        ));
    }
    if !c.log_path.is_empty() {
        beneath(CALL, "log_path", &c.log_path)?;
    }
    argv(CALL, "command", &c.command)?;
    argv(CALL, "args", &c.args)?;
    no_nul(CALL, || "working_dir".into(), &c.working_dir)?;
    // Paths the runtime mounts or masks: a NUL there failed only at create, as an internal error.
    for (i, m) in c.mounts.iter().enumerate() {
        no_nul(CALL, || format!("mounts[{i}].container_path"), &m.container_path)?;
        no_nul(CALL, || format!("mounts[{i}].host_path"), &m.host_path)?;
    }
    if let Some(sc) = c.linux.as_ref().and_then(|l| l.security_context.as_ref()) {
        argv(CALL, "linux.security_context.masked_paths", &sc.masked_paths)?;
        argv(CALL, "linux.security_context.readonly_paths", &sc.readonly_paths)?;
    }
    for (i, e) in c.envs.iter().enumerate() {
        let key = || format!("envs[{i}].key");
        if e.key.is_empty() {
            return Err(Error::invalid(CALL, key(), "is empty"));
        }
        if e.key.contains('=') {
            return Err(Error::invalid(
                CALL,
                key(),
                format!("{:?} contains \"=\", which ends a name in the environment", e.key),
            ));
        }
        no_nul(CALL, key, &e.key)?;
        // Bytes on the wire since CRI 1.36; the OCI spec's environment is UTF-8 text.
        let value = std::str::from_utf8(&e.value).map_err(|err| {
            Error::invalid(
                CALL,
                format!("envs[{i}].value"),
                format!("is not UTF-8 ({err}): {:?}", e.value),
            )
        })?;
        no_nul(CALL, || format!("envs[{i}].value"), value)?;
    }
    if let Some(r) = c.linux.as_ref().and_then(|l| l.resources.as_ref()) {
        resources(CALL, "linux.resources", r)?;
    }
    Ok(())
}

/// LinuxContainerResources, at CreateContainer (`at` = `linux.resources`) or UpdateContainerResources
/// (`linux`). CRI zero leaves a field unset and is always accepted.
pub fn resources(call: &'static str, at: &'static str, r: &cri::LinuxContainerResources) -> Result<()> {
    let field = |name: &str| format!("{at}.{name}");
    if r.cpu_quota < 0 {
        return Err(Error::invalid(
            call,
            field("cpu_quota"),
            format!("{} is negative: 0 leaves the quota unset", r.cpu_quota),
        ));
    }
    if r.cpu_period != 0 && !CPU_PERIOD.contains(&r.cpu_period) {
        return Err(Error::invalid(
            call,
            field("cpu_period"),
            format!(
                "{} µs is outside the kernel's 1000 to 1000000 µs (1 ms to 1 s)",
                r.cpu_period
            ),
        ));
    }
    if r.memory_limit_in_bytes != 0 && r.memory_limit_in_bytes < MIN_MEMORY {
        return Err(Error::invalid(
            call,
            field("memory_limit_in_bytes"),
            format!(
                "{} is below the {MIN_MEMORY} bytes (6 MiB) a container needs to start",
                r.memory_limit_in_bytes
            ),
        ));
    }
    for key in r.unified.keys() {
        if !unified_key(key) {
            return Err(Error::invalid(
                call,
                field("unified"),
                format!("{key:?} is not a cgroup v2 file a container's limits may set"),
            ));
        }
    }
    Ok(())
}

/// Whether `key` is a cgroup v2 interface file a `unified` entry may write.
fn unified_key(key: &str) -> bool {
    if UNIFIED.contains(&key) {
        return true;
    }
    // hugetlb.<size>.max and hugetlb.<size>.rsvd.max, with sizes like 2MB or 1GB.
    let Some(rest) = key.strip_prefix("hugetlb.") else {
        return false;
    };
    let size = rest
        .strip_suffix(".rsvd.max")
        .or_else(|| rest.strip_suffix(".max"))
        .unwrap_or_default();
    let digits = size.trim_end_matches(['K', 'M', 'G', 'T', 'B']);
    !digits.is_empty() && digits.len() < size.len() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// A PodSandboxConfig, before RunPodSandbox makes anything of it.
pub fn sandbox_config(c: &cri::PodSandboxConfig, driver: crate::cgroup_driver::Driver) -> Result<()> {
    const CALL: &str = "RunPodSandbox";
    unsupported::sandbox_config(c)?;
    if c.hostname.len() > MAX_HOSTNAME {
        return Err(Error::invalid(
            CALL,
            "hostname",
            format!(
                "is {} bytes long: the kernel takes at most {MAX_HOSTNAME}",
                c.hostname.len()
            ),
        ));
    }
    no_nul(CALL, || "hostname".into(), &c.hostname)?;
    if !c.log_directory.is_empty() {
        let p = Path::new(&c.log_directory);
        if !p.is_absolute() {
            return Err(Error::invalid(
                CALL,
                "log_directory",
                format!("{:?} is relative: it must be an absolute path", c.log_directory),
            ));
        }
        no_parent(CALL, "log_directory", &c.log_directory, "")?;
        no_nul(CALL, || "log_directory".into(), &c.log_directory)?;
    }
    if let Some(l) = &c.linux {
        // The parent of every container's cgroup path, and sysctls written under /proc/sys.
        no_nul(CALL, || "linux.cgroup_parent".into(), &l.cgroup_parent)?;
        driver.check_parent(CALL, &l.cgroup_parent)?;
        for (k, v) in &l.sysctls {
            no_nul(CALL, || "linux.sysctls".into(), k)?;
            no_nul(CALL, || format!("linux.sysctls[{k:?}]"), v)?;
        }
        let ns = namespace_options(c);
        let node = cri::NamespaceMode::Node as i32;
        let own = Own {
            net: ns.network != node,
            ipc: ns.ipc != node,
            // A pod on the host's network has the host's UTS namespace too (RunPodSandbox pins none).
            uts: ns.network != node,
        };
        sysctls(CALL, &l.sysctls, own)?;
    }
    Ok(())
}

/// The namespaces a pod has of its own (not the host's): what decides which sysctls it may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Own {
    /// A network namespace of its own.
    pub net: bool,
    /// An IPC namespace of its own.
    pub ipc: bool,
    /// A UTS namespace of its own.
    pub uts: bool,
}

/// The IPC namespace's sysctls besides `fs.mqueue.*`.
const IPC_SYSCTLS: &[&str] = &[
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

/// A sysctl name in dotted form: `net/ipv4/conf/eth0.100/rp_filter` (sysctl(8)'s other form, slashes
/// first) becomes `net.ipv4.conf.eth0/100.rp_filter`.
fn dotted(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(at) if name.as_bytes()[at] == b'/' => name
            .chars()
            .map(|c| match c {
                '/' => '.',
                '.' => '/',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// The pod's sysctls, as runc judges them: only a namespaced one, in a namespace the pod has of its own
/// (`own`), is written; anything else would set the host's value (or is not namespaced at all) and is
/// refused naming it. IPC: kernel.msg*, kernel.sem, kernel.shm*, fs.mqueue.*; network: net.*; UTS:
/// kernel.domainname (kernel.hostname is the pod's `hostname` field).
pub fn sysctls(
    call: &'static str,
    sysctls: &std::collections::HashMap<String, String>,
    own: Own,
) -> Result<()> {
    let mut names: Vec<&String> = sysctls.keys().collect();
    names.sort();
    for name in names {
        let field = || format!("linux.sysctls[{name:?}]");
        let s = dotted(name);
        let refuse = |why: String| Err(Error::invalid(call, field(), why));
        if IPC_SYSCTLS.contains(&s.as_str()) || s.starts_with("fs.mqueue.") {
            if !own.ipc {
                return refuse(format!(
                    "{s} is an IPC namespace's and the pod uses the host's (namespace_options.ipc NODE): it would set the host's"
                ));
            }
        } else if s.starts_with("net.") {
            if !own.net {
                return refuse(format!(
                    "{s} is a network namespace's and the pod uses the host's (namespace_options.network NODE): it would set the host's"
                ));
            }
        } else if s == "kernel.domainname" || s == "kernel.hostname" {
            if !own.uts {
                return refuse(format!(
                    "{s} is a UTS namespace's and the pod uses the host's (on the host's network): it would set the host's"
                ));
            }
            if s == "kernel.hostname" {
                return refuse(
                    "kernel.hostname conflicts with the pod's hostname field: set that instead".into(),
                );
            }
        } else {
            return refuse(format!(
                "{s} is not in a namespace of the pod's own: it would set the host's value (only kernel.msg*, kernel.sem, kernel.shm*, fs.mqueue.*, net.* and kernel.domainname are namespaced)"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Every path under `dir`, sorted: what a refused call must leave as it was.
    pub(crate) fn tree(dir: &Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            out.push(e.path());
            out.extend(tree(&e.path()));
        }
        out.sort();
        out
    }

    #[test]
    fn nul_bytes_in_paths_and_sysctls_are_refused() {
        let image = Some(cri::ImageSpec {
            image: "busybox".into(),
            ..Default::default()
        });
        let mount = cri::ContainerConfig {
            image: image.clone(),
            mounts: vec![cri::Mount {
                container_path: "/data".into(),
                host_path: "/srv/a\0b".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let e = container_config(&mount).unwrap_err();
        assert!(e.to_string().contains("mounts[0].host_path has a NUL"), "{e}");
        let masked = cri::ContainerConfig {
            image,
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    masked_paths: vec!["/proc/kcore".into(), "\0".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let e = container_config(&masked).unwrap_err();
        assert!(e.to_string().contains("masked_paths[1] has a NUL"), "{e}");
        let pod = |cgroup_parent: &str, sysctl: (&str, &str)| cri::PodSandboxConfig {
            linux: Some(cri::LinuxPodSandboxConfig {
                cgroup_parent: cgroup_parent.into(),
                sysctls: [(sysctl.0.to_string(), sysctl.1.to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        for (bad, field) in [
            (
                pod("/kubepods\0", ("net.ipv4.ip_forward", "1")),
                "linux.cgroup_parent",
            ),
            (pod("", ("net.ipv4\0", "1")), "linux.sysctls"),
            (
                pod("", ("net.ipv4.ip_forward", "1\0")),
                "linux.sysctls[\"net.ipv4.ip_forward\"]",
            ),
        ] {
            let e = sandbox_config(&bad, Default::default()).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.to_string().contains(&format!("{field} has a NUL")), "{e}");
        }
        assert!(
            sandbox_config(
                &pod("/kubepods", ("net.ipv4.ip_forward", "1")),
                Default::default()
            )
            .is_ok()
        );
    }

    #[test]
    fn log_paths_must_be_clean_and_relative() {
        let with = |log_path: &str| cri::ContainerConfig {
            image: Some(cri::ImageSpec {
                image: "busybox".into(),
                ..Default::default()
            }),
            log_path: log_path.into(),
            ..Default::default()
        };
        for bad in [
            "../x",
            "/var/log/x",
            "a/../../x",
            "a//b.log",
            "a/",
            "./a.log",
            "a/./b.log",
            "a\0b",
        ] {
            let e = container_config(&with(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument, "{bad}");
            assert!(e.to_string().contains("log_path"), "{e}");
        }
        for ok in ["c/0.log", "0.log", "a.b/c..d/0.log"] {
            container_config(&with(ok)).unwrap();
        }
    }

    fn own(net: bool, ipc: bool, uts: bool) -> Own {
        Own { net, ipc, uts }
    }

    fn one(k: &str) -> std::collections::HashMap<String, String> {
        [(k.to_string(), "1".to_string())].into()
    }

    #[test]
    fn sysctls_as_runc_judges_them() {
        let all = own(true, true, true);
        for ok in [
            "kernel.shmmax",
            "kernel.shm_rmid_forced",
            "kernel.msgmax",
            "kernel.sem",
            "fs.mqueue.msg_max",
            "net.ipv4.ip_forward",
            "net/ipv4/conf/eth0.100/rp_filter",
            "kernel.domainname",
        ] {
            sysctls("RunPodSandbox", &one(ok), all).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for (bad, ns, why) in [
            ("kernel.panic", all, "not in a namespace"),
            ("vm.swappiness", all, "not in a namespace"),
            ("kernel.shmmaxx", all, "not in a namespace"),
            ("kernel.hostname", all, "hostname field"),
            (
                "net.ipv4.ip_forward",
                own(false, true, false),
                "namespace_options.network NODE",
            ),
            (
                "net/ipv4/ip_forward",
                own(false, true, false),
                "namespace_options.network NODE",
            ),
            (
                "kernel.shmmax",
                own(true, false, true),
                "namespace_options.ipc NODE",
            ),
            (
                "fs.mqueue.queues_max",
                own(true, false, true),
                "namespace_options.ipc NODE",
            ),
            ("kernel.domainname", own(false, true, false), "UTS"),
        ] {
            let e = sysctls("RunPodSandbox", &one(bad), ns).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            let msg = e.to_string();
            assert!(
                msg.contains(&format!("linux.sysctls[{bad:?}]")) && msg.contains(why),
                "{bad}: {msg}"
            );
        }
    }

    #[test]
    fn a_pods_sysctls_are_judged_by_its_namespace_options() {
        let pod = |network: cri::NamespaceMode, ipc: cri::NamespaceMode, k: &str| cri::PodSandboxConfig {
            linux: Some(cri::LinuxPodSandboxConfig {
                sysctls: one(k),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(cri::NamespaceOption {
                        network: network as i32,
                        ipc: ipc as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        use cri::NamespaceMode::{Node, Pod};
        assert!(sandbox_config(&pod(Pod, Pod, "net.ipv4.ip_forward"), Default::default()).is_ok());
        assert!(sandbox_config(&pod(Node, Pod, "net.ipv4.ip_forward"), Default::default()).is_err());
        assert!(sandbox_config(&pod(Node, Pod, "kernel.shmmax"), Default::default()).is_ok());
        assert!(sandbox_config(&pod(Pod, Node, "kernel.shmmax"), Default::default()).is_err());
        assert!(sandbox_config(&pod(Pod, Pod, "kernel.panic"), Default::default()).is_err());
    }

    #[test]
    fn unified_keys() {
        for ok in [
            "memory.oom.group",
            "memory.high",
            "pids.max",
            "hugetlb.2MB.max",
            "hugetlb.1GB.rsvd.max",
        ] {
            assert!(unified_key(ok), "{ok}");
        }
        for bad in [
            "cgroup.procs",
            "cgroup.subtree_control",
            "memory.current",
            "memory.stat",
            "memroy.max",
            "../memory.max",
            "hugetlb.max",
            "hugetlb.MB.max",
            "hugetlb.2MB.current",
            "",
        ] {
            assert!(!unified_key(bad), "{bad}");
        }
    }
}
