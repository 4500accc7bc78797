//! The conversion's parts, one rule at a time (the whole specs are in `golden.rs`), and the two steps
//! around it that touch the node: [`Host::probe`] and [`create_mount_sources`].

use serde_json::{Value, json};

use super::caps::{capabilities, names_of, set};
use super::*;

fn image() -> Value {
    json!({"config": {"Entrypoint": ["/entry"], "Cmd": ["serve", "-v"], "Env": ["PATH=/bin", "A=image"],
        "WorkingDir": "/srv", "User": "app"}})
}

fn every_cap() -> Vec<String> {
    ALL_CAPS.iter().map(|c| c.to_string()).collect()
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
    assert!(e.to_string().contains("no command"), "{e}");
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
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
    let host = Host {
        passwd: "root:x:0:0::/root:/bin/sh\napp:x:1000:1001::/:/bin/sh\n".into(),
        group: "root:x:0:\nstaff:x:50:\n".into(),
        ..Default::default()
    };
    let user_of = |c: &cri::ContainerConfig, image: &Value| {
        user(c, image, &host).map(|u| serde_json::to_value(u).unwrap())
    };
    let mut c = cri::ContainerConfig::default();
    assert_eq!(
        user_of(&c, &image()).unwrap(),
        json!({"uid": 1000, "gid": 1001, "additionalGids": [1001]})
    );
    let named = json!({"config": {"User": "app:staff"}});
    assert_eq!(
        user_of(&c, &named).unwrap(),
        json!({"uid": 1000, "gid": 50, "additionalGids": [50]})
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
        user_of(&c, &image()).unwrap(),
        json!({"uid": 0, "gid": 7, "additionalGids": [7, 8, 9]})
    );
    let ghost = json!({"config": {"User": "ghost"}});
    let e = user_of(&cri::ContainerConfig::default(), &ghost).unwrap_err();
    assert!(e.to_string().contains("\"ghost\""), "{e}");
}

#[test]
fn merge_adds_the_image_s_groups_of_the_user_and_strict_does_not() {
    // As critest's image: default-user (1000) is a member of group-defined-in-image (50000).
    let host = Host {
        passwd: "root:x:0:0::/root:/bin/sh\ndefault-user:x:1000:1000::/home:/bin/sh\n".into(),
        group: "root:x:0:\ndefault-user:x:1000:\ngroup-defined-in-image:x:50000:default-user\n\
                other:x:60000:root,nobody\n"
            .into(),
        ..Default::default()
    };
    let gids = |policy: cri::SupplementalGroupsPolicy, who: Option<i64>| {
        let c = cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(cri::LinuxContainerSecurityContext {
                    run_as_user: who.map(|value| cri::Int64Value { value }),
                    supplemental_groups: vec![1234, 1000],
                    supplemental_groups_policy: policy as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let u = user(&c, &json!({"config": {"User": "1000"}}), &host).unwrap();
        (u.uid(), u.gid(), u.additional_gids().clone().unwrap())
    };
    use cri::SupplementalGroupsPolicy::{Merge, Strict};
    // The primary gid first, then the image's memberships (Merge only), then supplemental_groups; each once.
    assert_eq!(gids(Merge, Some(1000)), (1000, 1000, vec![1000, 50000, 1234]));
    assert_eq!(gids(Strict, Some(1000)), (1000, 1000, vec![1000, 1234]));
    // The image's User, numeric; root is a member of `other`.
    assert_eq!(gids(Merge, None), (1000, 1000, vec![1000, 50000, 1234]));
    assert_eq!(gids(Merge, Some(0)), (0, 0, vec![0, 60000, 1234, 1000]));
    assert_eq!(gids(Strict, Some(0)), (0, 0, vec![0, 1234, 1000]));
    // A uid the image's passwd does not know has no name to be a member by.
    assert_eq!(gids(Merge, Some(4242)), (4242, 0, vec![0, 1234, 1000]));
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
    let all = every_cap();
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
        e.to_string().contains("CAP_SYS_RESOURCE") && e.to_string().contains("bounding set"),
        "{e:?}"
    );
    let e = capabilities(Some(&sc(&["NOPE"], &[])), &all).unwrap_err();
    assert!(e.to_string().contains("no such capability"));
    assert_eq!(ALL_CAPS[21], "CAP_SYS_ADMIN");
    assert_eq!(ALL_CAPS[40], "CAP_CHECKPOINT_RESTORE");
}

#[test]
fn every_capability_has_its_oci_name() {
    let caps = set(&every_cap()).unwrap();
    assert_eq!(caps.len(), ALL_CAPS.len());
    let mut names: Vec<String> = caps
        .iter()
        .map(|c| serde_json::to_value(c).unwrap().as_str().unwrap().to_string())
        .collect();
    names.sort();
    let mut want = every_cap();
    want.sort();
    assert_eq!(names, want);
    assert!(set(&["CAP_NOPE".into()]).is_err());
}

#[test]
fn a_bounding_mask_names_its_capabilities() {
    // These machines' CapBnd: every capability but CAP_SYS_RESOURCE (bit 24).
    let names = names_of(0x1fffeffffff);
    assert_eq!(names.len(), ALL_CAPS.len() - 1);
    assert!(!names.contains(&"CAP_SYS_RESOURCE".to_string()));
    assert_eq!(names_of(u64::MAX), every_cap());
    assert_eq!(names_of(1 << 21), ["CAP_SYS_ADMIN"]);
}

/// The spec of `config` in `sandbox` with an image that says `Cmd: ["sh"]`.
pub(super) fn spec_of(config: &cri::ContainerConfig, sandbox: &Sandbox, host: &Host) -> Result<Spec> {
    spec(
        &Input {
            id: "c",
            config,
            sandbox,
            sandbox_files: Path::new("/pod"),
            image_config: &json!({"config": {"Cmd": ["sh"]}}),
            rootfs: Path::new("/rootfs"),
            pid_target: None,
        },
        host,
    )
}

pub(super) fn a_pod() -> Sandbox {
    Sandbox {
        record: Default::default(),
        config: Default::default(),
    }
}

/// The driver is a fact passed in, not a process global: one process converts under both.
#[test]
fn one_request_under_each_cgroup_driver() {
    use crate::cgroup_driver::Driver;
    let mut sandbox = a_pod();
    sandbox.config.linux = Some(cri::LinuxPodSandboxConfig {
        cgroup_parent: "kubepods-besteffort-pod1.slice".into(),
        ..Default::default()
    });
    let config = cri::ContainerConfig::default();
    let path_under = |driver: Driver| {
        let s = spec_of(
            &config,
            &sandbox,
            &Host {
                cgroup_driver: driver,
                ..Default::default()
            },
        )
        .unwrap();
        s.linux().as_ref().unwrap().cgroups_path().clone().unwrap()
    };
    assert_eq!(
        path_under(Driver::Systemd),
        Path::new("kubepods-besteffort-pod1.slice:crius:c")
    );
    assert_eq!(
        path_under(Driver::Cgroupfs),
        Path::new("kubepods-besteffort-pod1.slice/c")
    );
    assert_eq!(
        path_under(Driver::Systemd),
        Path::new("kubepods-besteffort-pod1.slice:crius:c"),
        "and back"
    );
}

#[test]
fn masked_and_readonly_paths_are_kubelet_s_as_given() {
    let sandbox = a_pod();
    let spec_of = |sc: cri::LinuxContainerSecurityContext| {
        let config = cri::ContainerConfig {
            linux: Some(cri::LinuxContainerConfig {
                security_context: Some(sc),
                ..Default::default()
            }),
            ..Default::default()
        };
        let host = Host {
            bounding: every_cap(),
            ..Default::default()
        };
        serde_json::to_value(spec_of(&config, &sandbox, &host).unwrap()).unwrap()
    };
    let paths = |masked: &[&str], readonly: &[&str]| cri::LinuxContainerSecurityContext {
        masked_paths: masked.iter().map(|p| p.to_string()).collect(),
        readonly_paths: readonly.iter().map(|p| p.to_string()).collect(),
        ..Default::default()
    };
    // procMount Default: kubelet sends its lists, and they are the spec's, nothing added.
    let default = spec_of(paths(&["/proc/kcore", "/secret"], &["/proc/sys"]));
    assert_eq!(default["linux"]["maskedPaths"], json!(["/proc/kcore", "/secret"]));
    assert_eq!(default["linux"]["readonlyPaths"], json!(["/proc/sys"]));
    assert_eq!(default["process"]["args"], json!(["sh"]));
    // procMount Unmasked (KEP-4265): kubelet sends none, and /proc is left whole (containerd 2.x, CRI-O).
    let unmasked = spec_of(paths(&[], &[]));
    assert_eq!(unmasked["linux"].get("maskedPaths"), None, "{unmasked}");
    assert_eq!(unmasked["linux"].get("readonlyPaths"), None, "{unmasked}");
    // A privileged container has none, whatever is sent.
    let mut privileged = paths(&["/proc/kcore"], &["/proc/sys"]);
    privileged.privileged = true;
    let privileged = spec_of(privileged);
    assert_eq!(privileged["linux"].get("maskedPaths"), None);
    assert_eq!(privileged["linux"].get("readonlyPaths"), None);
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
    let v = serde_json::to_value(resources(Some(&r), true).unwrap()).unwrap();
    assert_eq!(v["cpu"], json!({"quota": 50_000, "period": 100_000}));
    assert_eq!(v["memory"], json!({"limit": 64 << 20}));
    assert_eq!(v["unified"]["memory.oom.group"], "1");
    let none = resources(Some(&cri::LinuxContainerResources::default()), true).unwrap();
    assert!(none.cpu().is_none() && none.memory().is_none());
}

#[test]
fn cpu_shares_need_the_cpu_controller() {
    let r = cri::LinuxContainerResources {
        cpu_shares: 2,
        ..Default::default()
    };
    let with = resources(Some(&r), true).unwrap();
    assert_eq!(with.cpu().as_ref().and_then(|c| c.shares()), Some(2));
    assert!(resources(Some(&r), false).unwrap().cpu().is_none());
}

/// What the OCI fields cannot hold is refused as the request's fault, naming the field (the json! spec
/// wrote them, and the runtime failed to read config.json).
#[test]
fn numbers_the_oci_spec_cannot_hold_are_refused() {
    let bad = |r: cri::LinuxContainerResources| resources(Some(&r), true).unwrap_err().to_string();
    assert!(
        bad(cri::LinuxContainerResources {
            cpu_shares: -1,
            ..Default::default()
        })
        .contains("cpu_shares -1 is out of range")
    );
    assert!(
        bad(cri::LinuxContainerResources {
            cpu_period: -1,
            ..Default::default()
        })
        .contains("cpu_period")
    );
    assert!(
        bad(cri::LinuxContainerResources {
            hugepage_limits: vec![cri::HugepageLimit {
                page_size: "2MB".into(),
                limit: u64::MAX,
            }],
            ..Default::default()
        })
        .contains("hugepage_limits")
    );
    let sandbox = a_pod();
    let refusal = |linux: cri::LinuxContainerConfig| {
        let config = cri::ContainerConfig {
            linux: Some(linux),
            ..Default::default()
        };
        let inp = Input {
            id: "c",
            config: &config,
            sandbox: &sandbox,
            sandbox_files: Path::new("/pod"),
            image_config: &json!({"config": {"Cmd": ["sh"]}}),
            rootfs: Path::new("/rootfs"),
            pid_target: None,
        };
        let host = Host {
            bounding: every_cap(),
            ..Default::default()
        };
        let e = spec(&inp, &host).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        e.to_string()
    };
    let groups = refusal(cri::LinuxContainerConfig {
        security_context: Some(cri::LinuxContainerSecurityContext {
            supplemental_groups: vec![-1],
            ..Default::default()
        }),
        ..Default::default()
    });
    assert!(groups.contains("supplemental_groups"), "{groups}");
    let oom = refusal(cri::LinuxContainerConfig {
        resources: Some(cri::LinuxContainerResources {
            oom_score_adj: 1 << 40,
            ..Default::default()
        }),
        ..Default::default()
    });
    assert!(oom.contains("oom_score_adj"), "{oom}");
}

/// Found by proptests.rs: the image's own strings are not validated with the request's, so a NUL there
/// reached config.json.
#[test]
fn a_nul_byte_from_the_image_config_is_refused() {
    let sandbox = a_pod();
    let host = Host {
        bounding: every_cap(),
        ..Default::default()
    };
    for (image, field) in [
        (json!({"config": {"Cmd": ["sh", "-c\0"]}}), "args"),
        (json!({"config": {"Cmd": ["sh"], "Env": ["A=\0"]}}), "env"),
        (json!({"config": {"Cmd": ["sh"], "WorkingDir": "/srv\0"}}), "cwd"),
    ] {
        let inp = Input {
            id: "c",
            config: &cri::ContainerConfig::default(),
            sandbox: &sandbox,
            sandbox_files: Path::new("/pod"),
            image_config: &image,
            rootfs: Path::new("/rootfs"),
            pid_target: None,
        };
        let e = spec(&inp, &host).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(
            e.to_string().starts_with(&format!("CreateContainer: {field} ")),
            "{e}"
        );
        assert!(e.to_string().contains("has a NUL byte"), "{e}");
    }
}

#[test]
fn the_host_is_read_before_the_conversion() {
    let dir = tempfile::tempdir().unwrap();
    let (files, rootfs) = (dir.path().join("pod"), dir.path().join("rootfs"));
    std::fs::create_dir_all(&files).unwrap();
    std::fs::create_dir_all(rootfs.join("etc")).unwrap();
    std::fs::write(files.join("hostname"), "web-0\n").unwrap();
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0::/:/bin/sh\n").unwrap();
    let config = cri::ContainerConfig::default();
    let mut sandbox = a_pod();
    let probe = |sandbox: &Sandbox| {
        Host::probe(
            &Input {
                id: "c",
                config: &config,
                sandbox,
                sandbox_files: &files,
                image_config: &Value::Null,
                rootfs: &rootfs,
                pid_target: None,
            },
            crate::cgroup_driver::Driver::Systemd,
        )
        .unwrap()
    };
    let host = probe(&sandbox);
    assert_eq!(
        host.cgroup_driver,
        crate::cgroup_driver::Driver::Systemd,
        "passed on"
    );
    assert_eq!(
        host.hostname, "",
        "a pod without a UTS namespace names no hostname"
    );
    assert_eq!(
        (host.passwd.as_str(), host.group.as_str()),
        ("root:x:0:0::/:/bin/sh\n", "")
    );
    assert!(!host.bounding.is_empty());
    sandbox.record.namespaces.uts = Some("/run/ns/uts".into());
    assert_eq!(probe(&sandbox).hostname, "web-0\n");
}

#[test]
fn missing_mount_sources_become_directories() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("hosts");
    std::fs::write(&file, "127.0.0.1 localhost\n").unwrap();
    let missing = dir.path().join("volumes/data");
    let bind = |host: &Path| cri::Mount {
        container_path: "/x".into(),
        host_path: host.display().to_string(),
        ..Default::default()
    };
    let config = cri::ContainerConfig {
        mounts: vec![bind(&file), bind(&missing), bind(Path::new(""))],
        ..Default::default()
    };
    create_mount_sources(&config).unwrap();
    assert!(missing.is_dir());
    assert!(file.is_file(), "an existing source is left as it is");

    let blocked = cri::ContainerConfig {
        mounts: vec![bind(&file.join("below-a-file"))],
        ..Default::default()
    };
    let e = create_mount_sources(&blocked).unwrap_err();
    assert_eq!(e.code(), tonic::Code::Internal);
    assert!(e.to_string().contains("creating mount source"), "{e}");
}

#[test]
fn an_update_sends_the_merged_limits_without_device_rules() {
    let old = cri::LinuxContainerResources {
        cpu_shares: 512,
        memory_limit_in_bytes: 64 << 20,
        ..Default::default()
    };
    let new = cri::LinuxContainerResources {
        memory_limit_in_bytes: 128 << 20,
        ..Default::default()
    };
    let (merged, oci) = update_resources(&old, &new, true).unwrap();
    assert_eq!(merged, merge_resources(&old, &new));
    assert_eq!(
        serde_json::to_value(&oci).unwrap(),
        json!({"cpu": {"shares": 512}, "memory": {"limit": 128 << 20}})
    );
    let bad = cri::LinuxContainerResources {
        cpu_period: -1,
        ..Default::default()
    };
    let e = update_resources(&old, &bad, true).unwrap_err();
    assert!(
        e.to_string().starts_with("UpdateContainerResources: cpu_period"),
        "{e}"
    );
}

#[test]
fn a_recursive_read_only_mount_asks_the_runtime_for_rro() {
    let sandbox = a_pod();
    let bind = |readonly: bool, recursive_read_only: bool| cri::Mount {
        host_path: "/var/lib/data".into(),
        container_path: "/data".into(),
        readonly,
        recursive_read_only,
        ..Default::default()
    };
    let config = cri::ContainerConfig {
        mounts: vec![bind(true, true), bind(true, false), bind(false, false)],
        ..Default::default()
    };
    let s = spec_of(&config, &sandbox, &Host::default()).unwrap();
    let s = serde_json::to_value(s).unwrap();
    let options: Vec<&Value> = s["mounts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["destination"] == "/data")
        .map(|m| &m["options"])
        .collect();
    assert_eq!(
        options,
        [
            &json!(["rbind", "rprivate", "ro", "rro"]),
            &json!(["rbind", "rprivate", "ro"]),
            &json!(["rbind", "rprivate", "rw"]),
        ]
    );
}
