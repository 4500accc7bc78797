//! Checks of CRI requests made before anything is: a refusal is InvalidArgument naming the call and the
//! field (`CreateContainer: envs[1].key "A=B" contains "="`), and nothing (record, name, snapshot, bundle,
//! shim call) exists yet when it comes. What only the kernel or the runtime can judge (a cpuset the node
//! lacks, memory below current usage) is left to them; their messages come back as they are.

use std::path::{Component, Path};

use k8s_cri::v1 as cri;

use crate::error::{Error, Result};

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
    no_nul(call, || field.into(), path)
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
        no_nul(CALL, || format!("envs[{i}].value"), &e.value)?;
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
pub fn sandbox_config(c: &cri::PodSandboxConfig) -> Result<()> {
    const CALL: &str = "RunPodSandbox";
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
        for (k, v) in &l.sysctls {
            no_nul(CALL, || "linux.sysctls".into(), k)?;
            no_nul(CALL, || format!("linux.sysctls[{k:?}]"), v)?;
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

    /// Found by convert/proptests.rs: these reached config.json and failed only in the runtime.
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
            let e = sandbox_config(&bad).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.to_string().contains(&format!("{field} has a NUL")), "{e}");
        }
        assert!(sandbox_config(&pod("/kubepods", ("net.ipv4.ip_forward", "1"))).is_ok());
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
