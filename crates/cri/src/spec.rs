//! The OCI runtime spec (config.json) of a CRI container: its process from the ContainerConfig over the image
//! config (command, args, env, working dir, user), the pod's namespaces joined by path, the pod's hostname,
//! hosts and resolv.conf files, kubelet's mounts, resources (CRI zero = unset), capabilities and the usual
//! masked and read-only paths. What containerd's CRI plugin does by default, unless said otherwise here.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_cri::v1 as cri;
use serde_json::{Value, json};
use tonic::Status;

use crate::sandbox::Sandbox;

/// The annotation that groups a pod's containers into one shim.
pub const SANDBOX_ID: &str = "io.kubernetes.cri.sandbox-id";

/// The capabilities a container gets by default (containerd's and Docker's list).
pub const DEFAULT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Every capability, by number (bit `n` of a capability set is `ALL_CAPS[n]`).
pub const ALL_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The capabilities criusd itself may hand on (its bounding set): what "all" means for a privileged
/// container, as containerd's "all current capabilities" does. Every capability if it cannot be read.
pub fn bounding_set() -> Vec<String> {
    let mask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| {
                    l.strip_prefix("CapBnd:")
                        .map(|h| u64::from_str_radix(h.trim(), 16).ok())
                })
                .flatten()
        })
        .unwrap_or(u64::MAX);
    ALL_CAPS
        .iter()
        .enumerate()
        .filter(|(n, _)| mask & (1 << n) != 0)
        .map(|(_, c)| c.to_string())
        .collect()
}

const MASKED: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
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
const READONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Everything a container's spec is made from.
pub struct Input<'a> {
    /// The container id.
    pub id: &'a str,
    /// kubelet's ContainerConfig.
    pub config: &'a cri::ContainerConfig,
    /// The pod it belongs to.
    pub sandbox: &'a Sandbox,
    /// Where the pod's hostname, hosts and resolv.conf files are.
    pub sandbox_files: &'a Path,
    /// The image's config JSON (its `config` holds Env, Entrypoint, Cmd, WorkingDir, User).
    pub image_config: &'a Value,
    /// The container's root filesystem (mounted).
    pub rootfs: &'a Path,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_string))
        .collect()
}

/// The process's arguments, as kubelet and Docker define them: `command` replaces the image's Entrypoint,
/// `args` its Cmd (and a `command` alone drops the Cmd).
pub fn args(config: &cri::ContainerConfig, image: &Value) -> Result<Vec<String>, Status> {
    let (entry, cmd) = (
        strings(&image["config"]["Entrypoint"]),
        strings(&image["config"]["Cmd"]),
    );
    let mut out = if config.command.is_empty() {
        entry
    } else {
        config.command.clone()
    };
    if !config.args.is_empty() {
        out.extend(config.args.iter().cloned());
    } else if config.command.is_empty() {
        out.extend(cmd);
    }
    if out.is_empty() {
        return Err(Status::invalid_argument(
            "CreateContainer: no command: the container config gives none and the image has no Entrypoint or Cmd",
        ));
    }
    Ok(out)
}

/// The image's env with the config's on top (a key set twice keeps the last value, in first position).
pub fn env(config: &cri::ContainerConfig, image: &Value) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    let mut vals: BTreeMap<String, String> = BTreeMap::new();
    let pairs = strings(&image["config"]["Env"])
        .into_iter()
        .map(|kv| match kv.split_once('=') {
            Some((k, v)) => (k.to_string(), v.to_string()),
            None => (kv, String::new()),
        });
    for (k, v) in pairs.chain(config.envs.iter().map(|e| (e.key.clone(), e.value.clone()))) {
        if !vals.contains_key(&k) {
            keys.push(k.clone());
        }
        vals.insert(k, v);
    }
    keys.into_iter().map(|k| format!("{k}={}", vals[&k])).collect()
}

fn lookup(file: &Path, name: &str) -> Option<Vec<String>> {
    std::fs::read_to_string(file)
        .ok()?
        .lines()
        .map(|l| l.split(':').map(str::to_string).collect::<Vec<_>>())
        .find(|f| f.first().map(String::as_str) == Some(name))
}

/// The process user: the security context's run_as_user/run_as_username/run_as_group, else the image's User
/// (`uid`, `name`, `uid:gid`, `name:group`), names looked up in the rootfs's /etc/passwd and /etc/group.
pub fn user(config: &cri::ContainerConfig, image: &Value, rootfs: &Path) -> Result<Value, Status> {
    let sc = config.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let image_user = image["config"]["User"].as_str().unwrap_or_default();
    let (mut who, mut group) = match image_user.split_once(':') {
        Some((u, g)) => (u.to_string(), Some(g.to_string())),
        None => (image_user.to_string(), None),
    };
    if let Some(sc) = sc {
        if sc.run_as_group.is_some() && sc.run_as_user.is_none() && sc.run_as_username.is_empty() {
            return Err(Status::invalid_argument(
                "CreateContainer: run_as_group needs run_as_user or run_as_username",
            ));
        }
        if let Some(u) = &sc.run_as_user {
            who = u.value.to_string();
        } else if !sc.run_as_username.is_empty() {
            who = sc.run_as_username.clone();
        }
        if let Some(g) = &sc.run_as_group {
            group = Some(g.value.to_string());
        }
    }
    let passwd = rootfs.join("etc/passwd");
    let (uid, mut gid) = if who.is_empty() {
        (0, 0)
    } else if let Ok(uid) = who.parse::<u32>() {
        // A numeric uid: its primary group from passwd if it has an entry there.
        let gid = std::fs::read_to_string(&passwd)
            .unwrap_or_default()
            .lines()
            .map(|l| l.split(':').collect::<Vec<_>>())
            .find(|f| f.get(2).and_then(|u| u.parse::<u32>().ok()) == Some(uid))
            .and_then(|f| f.get(3).and_then(|g| g.parse().ok()))
            .unwrap_or(0);
        (uid, gid)
    } else {
        let f = lookup(&passwd, &who).ok_or_else(|| {
            Status::invalid_argument(format!(
                "CreateContainer: user {who:?} is not in the image's /etc/passwd"
            ))
        })?;
        let num = |i: usize| f.get(i).and_then(|x| x.parse::<u32>().ok()).unwrap_or(0);
        (num(2), num(3))
    };
    if let Some(g) = group.filter(|g| !g.is_empty()) {
        gid = match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => lookup(&rootfs.join("etc/group"), &g)
                .and_then(|f| f.get(2).and_then(|x| x.parse().ok()))
                .ok_or_else(|| {
                    Status::invalid_argument(format!(
                        "CreateContainer: group {g:?} is not in the image's /etc/group"
                    ))
                })?,
        };
    }
    let extra: Vec<i64> = sc.map(|s| s.supplemental_groups.clone()).unwrap_or_default();
    let mut u = json!({"uid": uid, "gid": gid});
    if !extra.is_empty() {
        u["additionalGids"] = json!(extra);
    }
    Ok(u)
}

/// The container's capabilities: the defaults (or, privileged, all of `bounding`), with the security
/// context's additions and drops. Adding one outside `bounding` is refused, naming it.
fn capabilities(
    sc: Option<&cri::LinuxContainerSecurityContext>,
    bounding: &[String],
) -> Result<Vec<String>, Status> {
    let privileged = sc.is_some_and(|s| s.privileged);
    let mut caps: Vec<String> = if privileged {
        bounding.to_vec()
    } else {
        DEFAULT_CAPS
            .iter()
            .map(|c| c.to_string())
            .filter(|c| bounding.contains(c))
            .collect()
    };
    let norm = |c: &str| {
        let c = c.to_ascii_uppercase();
        if c.starts_with("CAP_") {
            c
        } else {
            format!("CAP_{c}")
        }
    };
    if let Some(c) = sc.and_then(|s| s.capabilities.as_ref()) {
        for add in &c.add_capabilities {
            if add.eq_ignore_ascii_case("ALL") {
                caps = bounding.to_vec();
            } else if !bounding.contains(&norm(add)) {
                return Err(Status::invalid_argument(format!(
                    "CreateContainer: capability {} cannot be added: {}",
                    norm(add),
                    if ALL_CAPS.contains(&norm(add).as_str()) {
                        "criusd itself does not hold it (not in its bounding set)"
                    } else {
                        "no such capability"
                    }
                )));
            } else if !caps.contains(&norm(add)) {
                caps.push(norm(add));
            }
        }
        for drop in &c.drop_capabilities {
            if drop.eq_ignore_ascii_case("ALL") {
                caps.clear();
            } else {
                caps.retain(|c| *c != norm(drop));
            }
        }
        // Added after dropping ALL: `drop: [ALL], add: [NET_BIND_SERVICE]` keeps the additions.
        if c.drop_capabilities.iter().any(|d| d.eq_ignore_ascii_case("ALL")) {
            for add in c
                .add_capabilities
                .iter()
                .filter(|a| !a.eq_ignore_ascii_case("ALL"))
            {
                if !caps.contains(&norm(add)) {
                    caps.push(norm(add));
                }
            }
        }
    }
    Ok(caps)
}

/// Whether the cgroup2 tree has the cpu controller. A hybrid host's may not (here: hugetlb alone); cpu shares
/// are then left out, with a warning once, since a relative weight is not a limit and kubelet asks for one in
/// every container (2 for BestEffort ones). A cpu quota still fails there, naming the missing controller.
fn cpu_controller() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        let mount = crius_shim::client::cgroup2_mount().unwrap_or_else(|| "/sys/fs/cgroup".into());
        let list = std::fs::read_to_string(mount.join("cgroup.controllers")).unwrap_or_default();
        let has = list.split_whitespace().any(|c| c == "cpu");
        if !has {
            tracing::warn!(
                "the cgroup2 tree at {} has no cpu controller (it has [{}]): cpu shares are not applied",
                mount.display(),
                list.trim()
            );
        }
        has
    })
}

/// The OCI `linux.resources` of CRI resources (a deny-all device rule first; CRI zero = unset).
pub fn resources(r: Option<&cri::LinuxContainerResources>) -> Value {
    let mut out = json!({"devices": [{"allow": false, "access": "rwm"}]});
    let Some(r) = r else { return out };
    let mut cpu = serde_json::Map::new();
    if r.cpu_shares != 0 && cpu_controller() {
        cpu.insert("shares".into(), json!(r.cpu_shares));
    }
    if r.cpu_quota != 0 {
        cpu.insert("quota".into(), json!(r.cpu_quota));
    }
    if r.cpu_period != 0 {
        cpu.insert("period".into(), json!(r.cpu_period));
    }
    if !r.cpuset_cpus.is_empty() {
        cpu.insert("cpus".into(), json!(r.cpuset_cpus));
    }
    if !r.cpuset_mems.is_empty() {
        cpu.insert("mems".into(), json!(r.cpuset_mems));
    }
    if !cpu.is_empty() {
        out["cpu"] = Value::Object(cpu);
    }
    if r.memory_limit_in_bytes != 0 {
        out["memory"] = json!({"limit": r.memory_limit_in_bytes});
        if r.memory_swap_limit_in_bytes != 0 {
            out["memory"]["swap"] = json!(r.memory_swap_limit_in_bytes);
        }
    }
    if !r.hugepage_limits.is_empty() {
        let h: Vec<Value> = r
            .hugepage_limits
            .iter()
            .map(|h| json!({"pageSize": h.page_size, "limit": h.limit}))
            .collect();
        out["hugepageLimits"] = json!(h);
    }
    if !r.unified.is_empty() {
        out["unified"] = json!(r.unified);
    }
    out
}

/// `new` over `old` as UpdateContainerResources applies it: the fields `new` sets (non-zero, non-empty) replace
/// those of `old`; the `unified` entries are merged; the OOM score cannot change after creation.
pub fn merge_resources(
    old: &cri::LinuxContainerResources,
    new: &cri::LinuxContainerResources,
) -> cri::LinuxContainerResources {
    let mut m = old.clone();
    let pick = |o: &mut i64, n: i64| {
        if n != 0 {
            *o = n;
        }
    };
    pick(&mut m.cpu_period, new.cpu_period);
    pick(&mut m.cpu_quota, new.cpu_quota);
    pick(&mut m.cpu_shares, new.cpu_shares);
    pick(&mut m.memory_limit_in_bytes, new.memory_limit_in_bytes);
    pick(&mut m.memory_swap_limit_in_bytes, new.memory_swap_limit_in_bytes);
    if !new.cpuset_cpus.is_empty() {
        m.cpuset_cpus = new.cpuset_cpus.clone();
    }
    if !new.cpuset_mems.is_empty() {
        m.cpuset_mems = new.cpuset_mems.clone();
    }
    if !new.hugepage_limits.is_empty() {
        m.hugepage_limits = new.hugepage_limits.clone();
    }
    m.unified.extend(new.unified.clone());
    m
}

fn propagation(p: i32) -> &'static str {
    match cri::MountPropagation::try_from(p) {
        Ok(cri::MountPropagation::PropagationHostToContainer) => "rslave",
        Ok(cri::MountPropagation::PropagationBidirectional) => "rshared",
        _ => "rprivate",
    }
}

fn ns_mode(opts: &cri::NamespaceOption, which: fn(&cri::NamespaceOption) -> i32) -> cri::NamespaceMode {
    cri::NamespaceMode::try_from(which(opts)).unwrap_or(cri::NamespaceMode::Pod)
}

/// The container's config.json.
pub fn build(inp: &Input<'_>) -> Result<Value, Status> {
    let c = inp.config;
    let sc = c.linux.as_ref().and_then(|l| l.security_context.as_ref());
    let privileged = sc.is_some_and(|s| s.privileged);
    let caps = capabilities(sc, &bounding_set())?;
    let image_dir = inp.image_config["config"]["WorkingDir"]
        .as_str()
        .unwrap_or_default();
    let cwd = [c.working_dir.as_str(), image_dir]
        .into_iter()
        .find(|d| !d.is_empty())
        .unwrap_or("/");
    let mut process = json!({
        "terminal": c.tty,
        "user": user(c, inp.image_config, inp.rootfs)?,
        "args": args(c, inp.image_config)?,
        "env": env(c, inp.image_config),
        "cwd": cwd,
        "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        "noNewPrivileges": sc.is_some_and(|s| s.no_new_privs),
    });
    if let Some(adj) = c
        .linux
        .as_ref()
        .and_then(|l| l.resources.as_ref())
        .map(|r| r.oom_score_adj)
        && adj != 0
    {
        process["oomScoreAdj"] = json!(adj);
    }

    let pod_ns = crate::pod::namespace_options(&inp.sandbox.config);
    let ctr_ns = sc
        .and_then(|s| s.namespace_options.clone())
        .unwrap_or(pod_ns.clone());
    let pins = &inp.sandbox.record.namespaces;
    let mut namespaces = vec![json!({"type": "mount"})];
    if ns_mode(&ctr_ns, |o| o.pid) != cri::NamespaceMode::Node {
        namespaces.push(json!({"type": "pid"}));
    }
    for (kind, pin) in [("network", &pins.net), ("ipc", &pins.ipc), ("uts", &pins.uts)] {
        if let Some(p) = pin {
            namespaces.push(json!({"type": kind, "path": p}));
        }
    }
    namespaces.push(json!({"type": "cgroup"}));

    let sys_opts = if privileged { "rw" } else { "ro" };
    let mut mounts = vec![
        json!({"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]}),
        json!({"destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]}),
        json!({"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]}),
        json!({"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", sys_opts]}),
        json!({"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup", "options": ["nosuid", "noexec", "nodev", "relatime", sys_opts]}),
    ];
    // The pod's /dev/shm when the container shares the pod's IPC namespace, else a private one.
    match &pins.shm {
        Some(shm) if ns_mode(&ctr_ns, |o| o.ipc) == cri::NamespaceMode::Pod => mounts.push(
            json!({"destination": "/dev/shm", "type": "bind", "source": shm, "options": ["rbind", "rprivate", "rw"]}),
        ),
        _ => mounts.push(
            json!({"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]}),
        ),
    }
    let kubelet_has = |dest: &str| c.mounts.iter().any(|m| m.container_path == dest);
    let ro = sc.is_some_and(|s| s.readonly_rootfs);
    for (dest, file) in [
        ("/etc/hostname", "hostname"),
        ("/etc/hosts", "hosts"),
        ("/etc/resolv.conf", "resolv.conf"),
    ] {
        if !kubelet_has(dest) {
            let mode = if ro { "ro" } else { "rw" };
            mounts.push(
                json!({"destination": dest, "type": "bind", "source": inp.sandbox_files.join(file),
                "options": ["rbind", "rprivate", mode]}),
            );
        }
    }
    for m in &c.mounts {
        if m.host_path.is_empty() || m.container_path.is_empty() {
            return Err(Status::invalid_argument(format!(
                "CreateContainer: a mount needs a host_path and a container_path (got {:?} -> {:?})",
                m.host_path, m.container_path
            )));
        }
        let host = Path::new(&m.host_path);
        if !host.exists() {
            // As containerd does: a missing host path becomes a directory.
            std::fs::create_dir_all(host).map_err(|e| {
                Status::internal(format!(
                    "CreateContainer: creating mount source {}: {e}",
                    host.display()
                ))
            })?;
        }
        let mode = if m.readonly { "ro" } else { "rw" };
        mounts.push(
            json!({"destination": m.container_path, "type": "bind", "source": m.host_path,
            "options": ["rbind", propagation(m.propagation), mode]}),
        );
    }

    let parent = inp
        .sandbox
        .config
        .linux
        .as_ref()
        .map(|l| l.cgroup_parent.trim_end_matches('/').to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/crius".into());
    let mut linux = json!({
        "namespaces": namespaces,
        "cgroupsPath": format!("{parent}/{}", inp.id),
        "resources": resources(c.linux.as_ref().and_then(|l| l.resources.as_ref())),
    });
    if !privileged {
        // kubelet sends the paths it wants (its defaults, or none for an unmasked /proc); without them,
        // the usual defaults.
        let given = |v: Option<&Vec<String>>| v.filter(|v| !v.is_empty()).cloned();
        let masked = given(sc.map(|s| &s.masked_paths));
        let readonly = given(sc.map(|s| &s.readonly_paths));
        linux["maskedPaths"] = masked.map(|m| json!(m)).unwrap_or_else(|| json!(MASKED));
        linux["readonlyPaths"] = readonly.map(|r| json!(r)).unwrap_or_else(|| json!(READONLY));
    }
    let sysctls = inp
        .sandbox
        .config
        .linux
        .as_ref()
        .map(|l| l.sysctls.clone())
        .unwrap_or_default();
    if !sysctls.is_empty() {
        linux["sysctl"] = json!(sysctls);
    }
    let mut annotations: BTreeMap<String, String> = c.annotations.clone().into_iter().collect();
    annotations.insert(SANDBOX_ID.into(), inp.sandbox.record.id.clone());
    annotations.insert("io.kubernetes.cri.container-type".into(), "container".into());
    let mut spec = json!({
        "ociVersion": "1.0.2",
        "process": process,
        "root": {"path": inp.rootfs, "readonly": ro},
        "mounts": mounts,
        "linux": linux,
        "annotations": annotations,
    });
    if pins.uts.is_some() {
        let h = std::fs::read_to_string(inp.sandbox_files.join("hostname")).unwrap_or_default();
        spec["hostname"] = json!(h.trim());
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image() -> Value {
        json!({"config": {"Entrypoint": ["/entry"], "Cmd": ["serve", "-v"], "Env": ["PATH=/bin", "A=image"],
            "WorkingDir": "/srv", "User": "app"}})
    }

    #[test]
    fn command_and_args_follow_kubelet_and_docker() {
        let mut c = cri::ContainerConfig::default();
        assert_eq!(args(&c, &image()).unwrap(), ["/entry", "serve", "-v"]);
        c.args = vec!["run".into()];
        assert_eq!(args(&c, &image()).unwrap(), ["/entry", "run"]);
        c.command = vec!["/bin/sh".into()];
        assert_eq!(args(&c, &image()).unwrap(), ["/bin/sh", "run"]);
        c.args.clear();
        assert_eq!(
            args(&c, &image()).unwrap(),
            ["/bin/sh"],
            "a command alone drops the image's Cmd"
        );
        let e = args(&cri::ContainerConfig::default(), &json!({})).unwrap_err();
        assert!(e.message().contains("no command"));
    }

    #[test]
    fn env_overrides_keep_the_image_order() {
        let c = cri::ContainerConfig {
            envs: vec![
                cri::KeyValue {
                    key: "A".into(),
                    value: "pod".into(),
                },
                cri::KeyValue {
                    key: "B".into(),
                    value: "x=y".into(),
                },
            ],
            ..Default::default()
        };
        assert_eq!(env(&c, &image()), ["PATH=/bin", "A=pod", "B=x=y"]);
    }

    #[test]
    fn users_resolve_in_the_rootfs() {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("etc")).unwrap();
        std::fs::write(
            root.path().join("etc/passwd"),
            "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/:/bin/sh\n",
        )
        .unwrap();
        std::fs::write(root.path().join("etc/group"), "root:x:0:\nstaff:x:50:\n").unwrap();
        let mut c = cri::ContainerConfig::default();
        assert_eq!(
            user(&c, &image(), root.path()).unwrap(),
            json!({"uid": 1000, "gid": 1001})
        );
        let named = json!({"config": {"User": "app:staff"}});
        assert_eq!(
            user(&c, &named, root.path()).unwrap(),
            json!({"uid": 1000, "gid": 50})
        );
        c.linux = Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                run_as_user: Some(cri::Int64Value { value: 0 }),
                run_as_group: Some(cri::Int64Value { value: 7 }),
                supplemental_groups: vec![8, 9],
                ..Default::default()
            }),
            ..Default::default()
        });
        assert_eq!(
            user(&c, &image(), root.path()).unwrap(),
            json!({"uid": 0, "gid": 7, "additionalGids": [8, 9]})
        );
        let ghost = json!({"config": {"User": "ghost"}});
        let e = user(&cri::ContainerConfig::default(), &ghost, root.path()).unwrap_err();
        assert!(e.message().contains("\"ghost\""), "{}", e.message());
    }

    #[test]
    fn capabilities_add_drop_and_all() {
        let sc = |add: &[&str], drop: &[&str]| cri::LinuxContainerSecurityContext {
            capabilities: Some(cri::Capability {
                add_capabilities: add.iter().map(|s| s.to_string()).collect(),
                drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let all: Vec<String> = ALL_CAPS.iter().map(|c| c.to_string()).collect();
        let caps = capabilities(Some(&sc(&["SYS_ADMIN"], &["NET_RAW"])), &all).unwrap();
        assert!(caps.contains(&"CAP_SYS_ADMIN".to_string()) && !caps.contains(&"CAP_NET_RAW".to_string()));
        let only = capabilities(Some(&sc(&["NET_BIND_SERVICE"], &["ALL"])), &all).unwrap();
        assert_eq!(only, ["CAP_NET_BIND_SERVICE"]);
        assert_eq!(
            capabilities(Some(&sc(&["ALL"], &[])), &all).unwrap().len(),
            ALL_CAPS.len()
        );
        assert_eq!(capabilities(None, &all).unwrap().len(), DEFAULT_CAPS.len());
        // Without CAP_SYS_RESOURCE in the bounding set (as on these machines): privileged gets the rest,
        // adding it is refused by name.
        let bounded: Vec<String> = all.iter().filter(|c| *c != "CAP_SYS_RESOURCE").cloned().collect();
        let privileged = cri::LinuxContainerSecurityContext {
            privileged: true,
            ..Default::default()
        };
        assert_eq!(capabilities(Some(&privileged), &bounded).unwrap(), bounded);
        let e = capabilities(Some(&sc(&["SYS_RESOURCE"], &[])), &bounded).unwrap_err();
        assert!(
            e.message().contains("CAP_SYS_RESOURCE") && e.message().contains("bounding set"),
            "{e:?}"
        );
        let e = capabilities(Some(&sc(&["NOPE"], &[])), &all).unwrap_err();
        assert!(e.message().contains("no such capability"));
        assert_eq!(ALL_CAPS[21], "CAP_SYS_ADMIN");
        assert_eq!(ALL_CAPS[40], "CAP_CHECKPOINT_RESTORE");
    }

    #[test]
    fn security_context_paths_replace_the_default_masks() {
        let files = tempfile::tempdir().unwrap();
        let rootfs = tempfile::tempdir().unwrap();
        let sandbox = Sandbox {
            record: Default::default(),
            config: Default::default(),
        };
        let spec_of = |config: &cri::ContainerConfig| {
            build(&Input {
                id: "c",
                config,
                sandbox: &sandbox,
                sandbox_files: files.path(),
                image_config: &json!({"config": {"Cmd": ["sh"]}}),
                rootfs: rootfs.path(),
            })
            .unwrap()
        };
        let plain = spec_of(&cri::ContainerConfig::default());
        assert_eq!(plain["linux"]["maskedPaths"], json!(MASKED));
        let sc = cri::LinuxContainerSecurityContext {
            masked_paths: vec!["/secret".into()],
            readonly_paths: vec!["/etc".into()],
            ..Default::default()
        };
        let config = cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(sc),
                ..Default::default()
            }),
            ..Default::default()
        };
        let given = spec_of(&config);
        assert_eq!(given["linux"]["maskedPaths"], json!(["/secret"]));
        assert_eq!(given["linux"]["readonlyPaths"], json!(["/etc"]));
        assert_eq!(given["process"]["args"], json!(["sh"]));
    }

    #[test]
    fn updates_merge_what_they_set() {
        let old = cri::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            cpu_shares: 512,
            memory_limit_in_bytes: 64 << 20,
            oom_score_adj: 100,
            unified: [("memory.oom.group".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let new = cri::LinuxContainerResources {
            cpu_quota: 150_000,
            memory_limit_in_bytes: 128 << 20,
            oom_score_adj: -5,
            unified: [("memory.high".to_string(), "100000000".to_string())].into(),
            ..Default::default()
        };
        let m = merge_resources(&old, &new);
        assert_eq!((m.cpu_period, m.cpu_quota, m.cpu_shares), (100_000, 150_000, 512));
        assert_eq!((m.memory_limit_in_bytes, m.oom_score_adj), (128 << 20, 100));
        assert_eq!(m.unified.len(), 2);
    }

    #[test]
    fn zero_resources_are_unset() {
        let r = cri::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 50_000,
            memory_limit_in_bytes: 64 << 20,
            unified: [("memory.oom.group".to_string(), "1".to_string())].into(),
            ..Default::default()
        };
        let v = resources(Some(&r));
        assert_eq!(v["cpu"], json!({"quota": 50_000, "period": 100_000}));
        assert_eq!(v["memory"], json!({"limit": 64 << 20}));
        assert_eq!(v["unified"]["memory.oom.group"], "1");
        assert!(
            resources(Some(&cri::LinuxContainerResources::default()))
                .get("cpu")
                .is_none()
        );
    }
}
