//! Property test of the CRI-to-OCI conversion with its validation in front, as CreateContainer runs them:
//! random ContainerConfigs and PodSandboxConfigs (strings with NUL, `=`, `..`, unicode or 5000 bytes;
//! numbers negative, zero or huge; mounts, devices, env, sysctls, capabilities, security contexts, users),
//! random image configs and node facts. Validation refuses with InvalidArgument, or the builder gives a
//! spec that survives a JSON round trip through oci-spec and holds no NUL where the kernel will read a C
//! string, or refuses with InvalidArgument itself. Nothing panics.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crius_api::cri;
use oci_spec::runtime::Spec;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::{ALL_CAPS, Host, Input, spec};
use crate::store::sandbox::Sandbox;

/// Strings as kubelet should never send them, and some it does.
fn text() -> BoxedStrategy<String> {
    prop_oneof![
        4 => prop::sample::select(vec![
            "", "a", "/", "..", "../../etc", "/var/log/pods/x", "=", "A=B", "a\0b", "\0", "é日本", "root",
            "app", "0", "1000", "-1", "ALL", "SYS_ADMIN", "CAP_NET_RAW", "memory.max", "hugetlb.2MB.max",
            "cgroup.procs", "0-1", "2MB", "net.ipv4.ip_forward", "kernel.shm_rmid_forced",
        ])
        .prop_map(str::to_string),
        2 => "[a-zA-Z0-9=./\\-_]{0,12}",
        1 => ".{0,8}",
        1 => (1usize..5000).prop_map(|n| "x".repeat(n)),
    ]
    .boxed()
}

/// Mostly a plausible value (so that many requests pass validation and reach the builder), else any [`text`].
fn or_text(plausible: &'static str) -> BoxedStrategy<String> {
    prop_oneof![6 => plausible, 1 => text()].boxed()
}

fn list(plausible: &'static str, max: usize) -> BoxedStrategy<Vec<String>> {
    prop::collection::vec(or_text(plausible), 0..max).boxed()
}

fn map(key: &'static str, max: usize) -> BoxedStrategy<HashMap<String, String>> {
    prop::collection::hash_map(or_text(key), or_text("[ -~]{0,8}"), 0..max).boxed()
}

/// Mostly zero (CRI's unset) or within `plausible`, else anything.
fn number(plausible: std::ops::RangeInclusive<i64>) -> BoxedStrategy<i64> {
    prop_oneof![
        4 => Just(0i64),
        4 => plausible,
        1 => prop::sample::select(vec![-1, i64::MIN, i64::MAX, 1 << 40, (6 << 20) - 1, 999, 1_000_001]),
        1 => any::<i64>(),
    ]
    .boxed()
}

fn enum_value() -> BoxedStrategy<i32> {
    prop_oneof![6 => 0i32..4, 1 => any::<i32>()].boxed()
}

fn namespaces() -> BoxedStrategy<Option<cri::NamespaceOption>> {
    prop::option::of((enum_value(), enum_value(), enum_value(), or_text("")).prop_map(
        |(network, pid, ipc, target_id)| cri::NamespaceOption {
            network,
            pid,
            ipc,
            target_id,
            ..Default::default()
        },
    ))
    .boxed()
}

const UNIFIED_KEY: &str = "memory\\.(high|max|oom\\.group)|pids\\.max|hugetlb\\.(2MB|1GB)\\.max";

fn resources() -> BoxedStrategy<cri::LinuxContainerResources> {
    let huge = (or_text("2MB|1GB"), prop_oneof![0u64..1 << 40, any::<u64>()])
        .prop_map(|(page_size, limit)| cri::HugepageLimit { page_size, limit });
    (
        (
            number(1_000..=1_000_000),
            number(0..=2_000_000),
            number(2..=262_144),
            number(6 << 20..=1 << 40),
            number(-1000..=1000),
            number(6 << 20..=1 << 40),
        ),
        (or_text("[0-3](-[0-3])?|"), or_text("0?"), map(UNIFIED_KEY, 3)),
        prop::collection::vec(huge, 0..2),
    )
        .prop_map(
            |((period, quota, shares, memory, oom, swap), (cpus, mems, unified), huge)| {
                cri::LinuxContainerResources {
                    cpu_period: period,
                    cpu_quota: quota,
                    cpu_shares: shares,
                    memory_limit_in_bytes: memory,
                    oom_score_adj: oom,
                    memory_swap_limit_in_bytes: swap,
                    cpuset_cpus: cpus,
                    cpuset_mems: mems,
                    unified,
                    hugepage_limits: huge,
                }
            },
        )
        .boxed()
}

const CAP: &str = "ALL|(CAP_)?(SYS_ADMIN|NET_RAW|CHOWN|SYS_RESOURCE|NET_BIND_SERVICE|BPF)";
const PATH: &str = "(/[a-z]{1,6}){1,3}";

fn security() -> BoxedStrategy<cri::LinuxContainerSecurityContext> {
    let id = || prop::option::of(number(0..=70_000).prop_map(|value| cri::Int64Value { value }));
    (
        (list(CAP, 3), list(CAP, 3), list(CAP, 2)),
        (
            any::<[bool; 4]>(),
            namespaces(),
            id(),
            id(),
            or_text("root|app|nobody"),
        ),
        (
            prop::collection::vec(number(0..=70_000), 0..3),
            list(PATH, 3),
            list(PATH, 3),
        ),
    )
        .prop_map(
            |((add, drop, ambient), (flags, ns, user, group, username), (groups, masked, readonly))| {
                cri::LinuxContainerSecurityContext {
                    capabilities: Some(cri::Capability {
                        add_capabilities: add,
                        drop_capabilities: drop,
                        add_ambient_capabilities: ambient,
                    }),
                    privileged: flags[0],
                    readonly_rootfs: flags[1],
                    no_new_privs: flags[2],
                    namespace_options: ns,
                    run_as_user: user,
                    run_as_group: group,
                    run_as_username: if flags[3] { username } else { String::new() },
                    supplemental_groups: groups,
                    masked_paths: masked,
                    readonly_paths: readonly,
                    ..Default::default()
                }
            },
        )
        .boxed()
}

fn container() -> BoxedStrategy<cri::ContainerConfig> {
    let mount = (or_text(PATH), or_text(PATH), any::<bool>(), enum_value()).prop_map(
        |(container_path, host_path, readonly, propagation)| cri::Mount {
            container_path,
            host_path,
            readonly,
            propagation,
            ..Default::default()
        },
    );
    let device = (or_text(PATH), or_text(PATH), or_text("r?w?m?")).prop_map(
        |(container_path, host_path, permissions)| cri::Device {
            container_path,
            host_path,
            permissions,
        },
    );
    let env = (or_text("[A-Z_]{1,6}"), or_text("[ -~]{0,8}")).prop_map(|(key, value)| cri::KeyValue {
        key,
        value: value.into(),
    });
    let linux = (prop::option::of(resources()), prop::option::of(security())).prop_map(
        |(resources, security_context)| cri::LinuxContainerConfig {
            resources,
            security_context,
        },
    );
    (
        (
            prop::option::weighted(0.95, or_text("[a-z]{1,8}")),
            list("/?[a-z]{1,6}", 3),
            list("-?[a-z]{1,6}", 3),
            or_text(PATH),
            or_text("([a-z]{1,5}/)?[a-z]{1,5}\\.log|"),
        ),
        (
            prop::collection::vec(env, 0..4),
            prop::collection::vec(mount, 0..3),
            prop::collection::vec(device, 0..2),
        ),
        (map("[a-z./]{1,10}", 2), any::<bool>(), prop::option::of(linux)),
    )
        .prop_map(
            |(
                (image, command, args, working_dir, log_path),
                (envs, mounts, devices),
                (annotations, tty, linux),
            )| {
                cri::ContainerConfig {
                    image: image.map(|image| cri::ImageSpec {
                        image,
                        ..Default::default()
                    }),
                    command,
                    args,
                    working_dir,
                    log_path,
                    envs,
                    mounts,
                    devices,
                    annotations,
                    tty,
                    linux,
                    ..Default::default()
                }
            },
        )
        .boxed()
}

fn pod() -> BoxedStrategy<cri::PodSandboxConfig> {
    let linux = (
        or_text("(/[a-z]{1,6}){0,2}/?"),
        map("(net|kernel)\\.[a-z_.]{1,10}", 3),
        namespaces(),
    )
        .prop_map(|(cgroup_parent, sysctls, ns)| cri::LinuxPodSandboxConfig {
            cgroup_parent,
            sysctls,
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: ns,
                ..Default::default()
            }),
            ..Default::default()
        });
    (
        or_text("[a-z0-9-]{0,20}"),
        or_text("(/[a-z]{1,6}){1,3}|"),
        prop::option::of(linux),
    )
        .prop_map(|(hostname, log_directory, linux)| cri::PodSandboxConfig {
            hostname,
            log_directory,
            linux,
            ..Default::default()
        })
        .boxed()
}

/// An image config: the usual keys, some missing, some of the wrong type.
fn image() -> BoxedStrategy<Value> {
    let list = |plausible| {
        prop_oneof![
            6 => list(plausible, 3).prop_map(|v| json!(v)),
            1 => Just(Value::Null),
            1 => Just(json!(7)),
            1 => Just(json!([1, null])),
        ]
    };
    let user = or_text("root|app|1000|app:staff|0:0|nobody:65534|");
    (list("/?[a-z]{1,6}"), list("-?[a-z]{1,6}"), list("[A-Z]{1,4}(=[a-z]{0,4})?"), or_text(PATH), prop::option::of(user))
        .prop_map(|(entry, cmd, env, dir, user)| {
            json!({"config": {"Entrypoint": entry, "Cmd": cmd, "Env": env, "WorkingDir": dir, "User": user}})
        })
        .boxed()
}

fn host() -> BoxedStrategy<Host> {
    let line = || {
        (
            or_text("root|app|staff|nobody"),
            or_text("[0-9]{1,5}"),
            or_text("[0-9]{1,5}"),
        )
            .prop_map(|(n, a, b)| format!("{n}:x:{a}:{b}::/:/bin/sh"))
    };
    (
        prop::sample::subsequence(ALL_CAPS.to_vec(), 0..=ALL_CAPS.len()),
        any::<bool>(),
        // The pod's hostname file, which criusd wrote from a validated hostname.
        "[a-z0-9.-]{0,64}\n?",
        prop::collection::vec(line(), 0..3),
        prop::collection::vec(line(), 0..3),
        // Both cgroup drivers, in one process: nothing reads the driver from a global.
        any::<bool>(),
    )
        .prop_map(
            |(bounding, cpu_controller, hostname, passwd, group, systemd)| Host {
                bounding: bounding.into_iter().map(str::to_string).collect(),
                cpu_controller,
                hostname,
                passwd: passwd.join("\n"),
                group: group.join("\n"),
                seccomp_file: None,
                apparmor: None,
                kernel: (6, 1),
                cgroup_driver: if systemd {
                    crate::cgroup_driver::Driver::Systemd
                } else {
                    crate::cgroup_driver::Driver::Cgroupfs
                },
                // No device facts: a config's devices are refused as unread (`devices.rs` maps them).
                devices: Vec::new(),
                host_devices: Vec::new(),
            },
        )
        .boxed()
}

/// Pinned namespace paths of the pod, each present or not: criusd's own paths, not the request's.
fn pins() -> BoxedStrategy<[Option<PathBuf>; 4]> {
    prop::array::uniform4(prop::option::of(
        "/run/crius/ns/[a-z0-9]{1,8}".prop_map(PathBuf::from),
    ))
    .boxed()
}

/// Where the runtime hands the spec's strings to the kernel as C strings: a NUL there fails the container
/// late, at create, as an internal error; it must be refused up front.
fn c_strings(s: &Spec) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(p) = s.process() {
        out.extend(p.args().iter().flatten().cloned());
        out.extend(p.env().iter().flatten().cloned());
        out.push(p.cwd().display().to_string());
    }
    for m in s.mounts().iter().flatten() {
        out.push(m.destination().display().to_string());
        out.extend(m.source().iter().map(|p| p.display().to_string()));
        out.extend(m.options().iter().flatten().cloned());
    }
    out.extend(s.hostname().iter().cloned());
    if let Some(l) = s.linux() {
        out.extend(l.masked_paths().iter().flatten().cloned());
        out.extend(l.readonly_paths().iter().flatten().cloned());
        for (k, v) in l.sysctl().iter().flatten() {
            out.extend([k.clone(), v.clone()]);
        }
        out.extend(l.cgroups_path().iter().map(|p| p.display().to_string()));
        for ns in l.namespaces().iter().flatten() {
            out.extend(ns.path().iter().map(|p| p.display().to_string()));
        }
    }
    out
}

fn check(
    config: &cri::ContainerConfig,
    pod_config: cri::PodSandboxConfig,
    pins: [Option<PathBuf>; 4],
    image: &Value,
    host: &Host,
) -> Result<(), TestCaseError> {
    // CreateContainer's order: the pod was validated at RunPodSandbox, the container now, and only what both
    // accept reaches the builder.
    let validated = crate::validate::sandbox_config(&pod_config, host.cgroup_driver)
        .and(crate::validate::container_config(config));
    if let Err(e) = validated {
        prop_assert_eq!(e.code(), tonic::Code::InvalidArgument, "{}", e);
        return Ok(());
    }
    let mut sandbox = Sandbox {
        record: Default::default(),
        config: pod_config,
    };
    let [net, ipc, uts, shm] = pins;
    let ns = &mut sandbox.record.namespaces;
    (ns.net, ns.ipc, ns.uts, ns.shm) = (net, ipc, uts, shm);
    let inp = Input {
        id: "c",
        config,
        sandbox: &sandbox,
        sandbox_files: Path::new("/run/crius/pods/p"),
        image_config: image,
        rootfs: Path::new("/rootfs"),
        pid_target: None,
    };
    match spec(&inp, host) {
        Err(e) => prop_assert_eq!(e.code(), tonic::Code::InvalidArgument, "{}", e),
        Ok(s) => {
            let json = serde_json::to_string(&s).unwrap();
            let back: Spec =
                serde_json::from_str(&json).map_err(|e| TestCaseError::fail(format!("{e}: {json}")))?;
            // Compared as specs: the capability sets are hash sets, in any order in the JSON.
            prop_assert_eq!(&back, &s);
            let nul = c_strings(&s).into_iter().find(|s| s.contains('\0'));
            prop_assert!(nul.is_none(), "a NUL reached the spec: {:?}", nul);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 3000,
        max_shrink_iters: 500,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn specs_are_valid_or_refused_as_invalid_arguments(
        config in container(),
        pod_config in pod(),
        pins in pins(),
        image in image(),
        host in host(),
    ) {
        check(&config, pod_config, pins, &image, &host)?;
    }
}
