//! Each kind of adjustment, read back through oci-spec's getters.

use std::collections::HashMap;

use oci_spec::runtime::{LinuxDeviceType, PosixRlimitType, Spec};

use super::*;
use crate::api::*;

fn spec() -> Spec {
    let mut s = Spec::default();
    let mut p = s.process().clone().unwrap();
    p.set_env(Some(vec!["PATH=/bin".into(), "KEEP=1".into(), "DROP=1".into()]));
    s.set_process(Some(p));
    s
}

fn linux(l: LinuxContainerAdjustment) -> ContainerAdjustment {
    ContainerAdjustment {
        linux: Some(l),
        ..Default::default()
    }
}

fn resources(r: LinuxResources) -> ContainerAdjustment {
    linux(LinuxContainerAdjustment {
        resources: Some(r),
        ..Default::default()
    })
}

/// As NRI does, a variable that is set again keeps its place (only new ones go at the end).
#[test]
fn a_replaced_env_var_keeps_its_place() {
    let mut s = spec();
    let kv = |k: &str, v: &str| KeyValue {
        key: k.into(),
        value: v.into(),
    };
    let a = ContainerAdjustment {
        env: vec![kv("PATH", "/usr/bin"), kv("NEW", "1")],
        ..Default::default()
    };
    apply(&a, &mut s).unwrap();
    let p = s.process().as_ref().unwrap();
    assert_eq!(
        p.env().as_ref().unwrap(),
        &["PATH=/usr/bin", "KEEP=1", "DROP=1", "NEW=1"]
    );
}

#[test]
fn annotations_env_args_and_removals() {
    let mut s = spec();
    let mut a = ContainerAdjustment {
        env: vec![
            KeyValue {
                key: "-DROP".into(),
                value: String::new(),
            },
            KeyValue {
                key: "KEEP".into(),
                value: "2".into(),
            },
            KeyValue {
                key: "NEW".into(),
                value: "x=y".into(),
            },
        ],
        args: vec!["/bin/true".into()],
        ..Default::default()
    };
    a.annotations.insert("nri.example/a".into(), "1".into());
    let mut base = HashMap::new();
    base.insert("gone".to_string(), "1".to_string());
    s.set_annotations(Some(base));
    a.annotations.insert("-gone".into(), String::new());
    assert_eq!(apply(&a, &mut s).unwrap(), Vec::<String>::new());
    let p = s.process().as_ref().unwrap();
    assert_eq!(p.env().as_ref().unwrap(), &["PATH=/bin", "KEEP=2", "NEW=x=y"]);
    assert_eq!(p.args().as_ref().unwrap(), &["/bin/true"]);
    let ann = s.annotations().as_ref().unwrap();
    assert_eq!(
        (
            ann.get("nri.example/a").map(String::as_str),
            ann.contains_key("gone")
        ),
        (Some("1"), false)
    );
}

#[test]
fn mounts_are_added_replaced_and_removed_by_destination() {
    let mut s = spec();
    let before = s.mounts().as_ref().unwrap().len();
    let a = ContainerAdjustment {
        mounts: vec![
            Mount {
                destination: "-/dev/shm".into(),
                ..Default::default()
            },
            Mount {
                destination: "/data".into(),
                r#type: "bind".into(),
                source: "/srv/data".into(),
                options: vec!["rbind".into(), "ro".into()],
            },
        ],
        ..Default::default()
    };
    apply(&a, &mut s).unwrap();
    let mounts = s.mounts().as_ref().unwrap();
    assert_eq!(mounts.len(), before, "one removed, one added");
    assert!(
        !mounts
            .iter()
            .any(|m| m.destination().to_str() == Some("/dev/shm"))
    );
    let data = mounts
        .iter()
        .find(|m| m.destination().to_str() == Some("/data"))
        .unwrap();
    assert_eq!(
        (data.source().as_ref().unwrap().to_str(), data.typ().as_deref()),
        (Some("/srv/data"), Some("bind"))
    );
}

/// As in NRI: mounts end up parents first (a plugin's `/data` before the volume at `/data/sub` it would
/// otherwise hide), and `rshared`/`rslave` mounts set the root's propagation, `rshared` winning.
#[test]
fn mounts_are_ordered_parents_first_and_set_the_root_propagation() {
    let mut s = spec();
    let volume = oci_spec::runtime::MountBuilder::default()
        .destination("/data/sub")
        .source("/srv/sub")
        .typ("bind")
        .build()
        .unwrap();
    let mut mounts = s.mounts().clone().unwrap();
    mounts.push(volume);
    s.set_mounts(Some(mounts));
    let mount = |dest: &str, prop: &str| Mount {
        destination: dest.into(),
        r#type: "bind".into(),
        source: "/srv".into(),
        options: vec!["rbind".into(), prop.into()],
    };
    let a = ContainerAdjustment {
        mounts: vec![mount("/data", "rshared")],
        ..Default::default()
    };
    apply(&a, &mut s).unwrap();
    let dests: Vec<String> = s
        .mounts()
        .as_ref()
        .unwrap()
        .iter()
        .map(|m| m.destination().display().to_string())
        .collect();
    let at = |d: &str| dests.iter().position(|x| x == d).unwrap();
    assert!(at("/data") < at("/data/sub"), "{dests:?}");
    assert!(
        at("/dev") < at("/dev/pts") && at("/proc") < at("/dev/pts"),
        "{dests:?}"
    );
    let prop = |s: &Spec| s.linux().as_ref().unwrap().rootfs_propagation().clone();
    assert_eq!(prop(&s).as_deref(), Some("rshared"));

    let a = ContainerAdjustment {
        mounts: vec![mount("/other", "rslave")],
        ..Default::default()
    };
    apply(&a, &mut s).unwrap();
    assert_eq!(
        prop(&s).as_deref(),
        Some("rshared"),
        "rslave does not undo rshared"
    );
    let mut fresh = spec();
    apply(&a, &mut fresh).unwrap();
    assert_eq!(prop(&fresh).as_deref(), Some("rslave"));
}

#[test]
fn hooks_are_appended_by_phase() {
    let mut s = spec();
    let hook = |p: &str| Hook {
        path: p.into(),
        args: vec![p.into(), "x".into()],
        timeout: Some(OptionalInt { value: 5 }),
        ..Default::default()
    };
    let a = ContainerAdjustment {
        hooks: Some(Hooks {
            create_runtime: vec![hook("/bin/a")],
            poststop: vec![hook("/bin/b")],
            ..Default::default()
        }),
        ..Default::default()
    };
    apply(&a, &mut s).unwrap();
    let h = s.hooks().as_ref().unwrap();
    assert_eq!(
        h.create_runtime().as_ref().unwrap()[0].path().to_str(),
        Some("/bin/a")
    );
    assert_eq!(h.create_runtime().as_ref().unwrap()[0].timeout(), Some(5));
    assert_eq!(h.poststop().as_ref().unwrap().len(), 1);
}

#[test]
fn devices_get_a_node_and_a_cgroup_rule_and_removal_takes_both() {
    // The rule grants what NRI's does: read and write, and mknod for block devices only.
    let mut s = spec();
    let dev = |p: &str, t: &str, minor| LinuxDevice {
        path: p.into(),
        r#type: t.into(),
        major: 1,
        minor,
        file_mode: Some(OptionalFileMode { value: 0o666 }),
        ..Default::default()
    };
    apply(
        &linux(LinuxContainerAdjustment {
            devices: vec![dev("/dev/x", "c", 3), dev("/dev/y", "b", 5)],
            ..Default::default()
        }),
        &mut s,
    )
    .unwrap();
    let l = s.linux().as_ref().unwrap();
    let devs = l.devices().as_ref().unwrap();
    assert_eq!(
        (devs.len(), devs[0].typ(), devs[0].minor(), devs[0].file_mode()),
        (2, LinuxDeviceType::C, 3, Some(0o666))
    );
    let rules = l.resources().as_ref().unwrap().devices().as_ref().unwrap();
    let allowed: Vec<_> = rules
        .iter()
        .filter(|r| r.allow())
        .map(|r| (r.minor(), r.access().clone()))
        .collect();
    assert!(allowed.contains(&(Some(3), Some("rw".into()))), "{allowed:?}");
    assert!(allowed.contains(&(Some(5), Some("rwm".into()))), "{allowed:?}");

    apply(
        &linux(LinuxContainerAdjustment {
            devices: vec![dev("-/dev/x", "", 0)],
            ..Default::default()
        }),
        &mut s,
    )
    .unwrap();
    let l = s.linux().as_ref().unwrap();
    assert_eq!(l.devices().as_ref().unwrap().len(), 1);
    let rules = l.resources().as_ref().unwrap().devices().as_ref().unwrap();
    assert!(
        !rules.iter().any(|r| r.allow() && r.minor() == Some(3)),
        "the removed device's rule is gone"
    );

    let err = apply(
        &linux(LinuxContainerAdjustment {
            devices: vec![dev("/dev/z", "q", 1)],
            ..Default::default()
        }),
        &mut s,
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::Invalid { field, .. } if field == "device /dev/z"),
        "{err}"
    );
}

#[test]
fn cdi_devices_are_returned_for_the_caller() {
    let a = ContainerAdjustment {
        cdi_devices: vec![
            CdiDevice {
                name: "vendor.com/gpu=0".into(),
            },
            CdiDevice {
                name: "vendor.com/gpu=1".into(),
            },
        ],
        ..Default::default()
    };
    assert_eq!(
        apply(&a, &mut spec()).unwrap(),
        ["vendor.com/gpu=0", "vendor.com/gpu=1"]
    );
}

#[test]
fn resources_cpu_memory_hugepages_unified_pids_and_rdt_class() {
    let mut s = spec();
    let mut r = LinuxResources {
        memory: Some(LinuxMemory {
            limit: Some(OptionalInt64 { value: 1 << 30 }),
            swap: Some(OptionalInt64 { value: 2 << 30 }),
            disable_oom_killer: Some(OptionalBool { value: true }),
            ..Default::default()
        }),
        cpu: Some(LinuxCpu {
            shares: Some(OptionalUInt64 { value: 512 }),
            quota: Some(OptionalInt64 { value: 50_000 }),
            period: Some(OptionalUInt64 { value: 100_000 }),
            cpus: "0-1".into(),
            mems: "0".into(),
            ..Default::default()
        }),
        hugepage_limits: vec![HugepageLimit {
            page_size: "2MB".into(),
            limit: 4 << 20,
        }],
        rdt_class: Some(OptionalString { value: "gold".into() }),
        blockio_class: Some(OptionalString { value: "slow".into() }),
        pids: Some(LinuxPids { limit: 100 }),
        ..Default::default()
    };
    r.unified.insert("memory.high".into(), "900M".into());
    apply(&resources(r), &mut s).unwrap();
    let l = s.linux().as_ref().unwrap();
    let res = l.resources().as_ref().unwrap();
    let cpu = res.cpu().as_ref().unwrap();
    assert_eq!(
        (cpu.shares(), cpu.quota(), cpu.period()),
        (Some(512), Some(50_000), Some(100_000))
    );
    assert_eq!(
        (cpu.cpus().as_deref(), cpu.mems().as_deref()),
        (Some("0-1"), Some("0"))
    );
    let mem = res.memory().as_ref().unwrap();
    assert_eq!(
        (mem.limit(), mem.swap(), mem.disable_oom_killer()),
        (Some(1 << 30), Some(2 << 30), Some(true))
    );
    assert_eq!(res.hugepage_limits().as_ref().unwrap()[0].limit(), 4 << 20);
    assert_eq!(res.unified().as_ref().unwrap()["memory.high"], "900M");
    assert_eq!(res.pids().as_ref().unwrap().limit(), 100);
    assert_eq!(l.intel_rdt().as_ref().unwrap().clos_id().as_deref(), Some("gold"));
}

#[test]
fn oom_score_adj_rlimits_cgroups_path_and_sysctl() {
    let mut s = spec();
    let mut l = LinuxContainerAdjustment {
        oom_score_adj: Some(OptionalInt { value: -500 }),
        cgroups_path: "/nri/test".into(),
        ..Default::default()
    };
    l.sysctl.insert("net.core.somaxconn".into(), "1024".into());
    let mut a = linux(l);
    a.rlimits = vec![
        PosixRlimit {
            r#type: "RLIMIT_NOFILE".into(),
            hard: 2048,
            soft: 1024,
        },
        PosixRlimit {
            r#type: "RLIMIT_NPROC".into(),
            hard: 10,
            soft: 10,
        },
    ];
    apply(&a, &mut s).unwrap();
    let p = s.process().as_ref().unwrap();
    assert_eq!(p.oom_score_adj(), Some(-500));
    let nofile: Vec<_> = p
        .rlimits()
        .as_ref()
        .unwrap()
        .iter()
        .filter(|r| r.typ() == PosixRlimitType::RlimitNofile)
        .collect();
    assert_eq!(
        (nofile.len(), nofile[0].hard(), nofile[0].soft()),
        (1, 2048, 1024),
        "replaces the default NOFILE"
    );
    let l = s.linux().as_ref().unwrap();
    assert_eq!(l.cgroups_path().as_ref().unwrap().to_str(), Some("/nri/test"));
    assert_eq!(l.sysctl().as_ref().unwrap()["net.core.somaxconn"], "1024");

    a.rlimits = vec![PosixRlimit {
        r#type: "RLIMIT_BOGUS".into(),
        hard: 1,
        soft: 1,
    }];
    assert!(matches!(apply(&a, &mut s), Err(Error::Invalid { .. })));
}

#[test]
fn seccomp_policy_replaces_the_profile() {
    let mut s = spec();
    let policy = LinuxSeccomp {
        default_action: "SCMP_ACT_ERRNO".into(),
        default_errno: Some(OptionalUInt32 { value: 1 }),
        architectures: vec!["SCMP_ARCH_X86_64".into()],
        syscalls: vec![LinuxSyscall {
            names: vec!["read".into(), "write".into()],
            action: "SCMP_ACT_ALLOW".into(),
            args: vec![LinuxSeccompArg {
                index: 0,
                value: 1,
                value_two: 0,
                op: "SCMP_CMP_EQ".into(),
            }],
            ..Default::default()
        }],
        ..Default::default()
    };
    apply(
        &linux(LinuxContainerAdjustment {
            seccomp_policy: Some(policy),
            ..Default::default()
        }),
        &mut s,
    )
    .unwrap();
    let sc = s.linux().as_ref().unwrap().seccomp().as_ref().unwrap();
    assert_eq!(sc.default_errno_ret(), Some(1));
    assert_eq!(sc.syscalls().as_ref().unwrap()[0].names(), &["read", "write"]);
}

#[test]
fn namespaces_rdt_removal_memory_policy_and_scheduler() {
    let mut s = spec();
    let l = LinuxContainerAdjustment {
        namespaces: vec![
            LinuxNamespace {
                r#type: "network".into(),
                path: "/var/run/netns/x".into(),
            },
            LinuxNamespace {
                r#type: "-ipc".into(),
                path: String::new(),
            },
        ],
        rdt: Some(LinuxRdt {
            remove: true,
            ..Default::default()
        }),
        memory_policy: Some(LinuxMemoryPolicy {
            mode: MpolMode::MpolBind as i32,
            nodes: "0".into(),
            flags: vec![],
        }),
        scheduler: Some(LinuxScheduler {
            policy: LinuxSchedulerPolicy::SchedBatch as i32,
            nice: 5,
            ..Default::default()
        }),
        io_priority: Some(LinuxIoPriority {
            class: IoPrioClass::IoprioClassBe as i32,
            priority: 4,
        }),
        ..Default::default()
    };
    apply(&linux(l), &mut s).unwrap();
    let lx = s.linux().as_ref().unwrap();
    let ns: Vec<_> = lx
        .namespaces()
        .as_ref()
        .unwrap()
        .iter()
        .map(|n| format!("{:?}", n.typ()))
        .collect();
    assert!(
        ns.contains(&"Network".to_string()) && !ns.contains(&"Ipc".to_string()),
        "{ns:?}"
    );
    assert!(lx.intel_rdt().is_none());
    assert_eq!(lx.memory_policy().as_ref().unwrap().nodes().as_deref(), Some("0"));
    let p = s.process().as_ref().unwrap();
    assert_eq!(*p.scheduler().as_ref().unwrap().nice(), Some(5));
    assert_eq!(p.io_priority().as_ref().unwrap().priority(), 4);
}
