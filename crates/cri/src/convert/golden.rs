//! Golden OCI specs: the CRI requests (and host facts) a container's spec is made from, and the config.json
//! each must give, kept as `golden/<case>.json` (a refusal as `{"error": {"code", "message"}}`). The files
//! were recorded from the json!-built `spec::build` that the typed conversion replaced (commit "golden OCI
//! specs recorded from spec::build"), so they pin its specs field for field.
//! `CRIUS_BLESS=1 cargo test -p crius-cri --lib golden` rewrites them from the conversion.
//!
//! Paths in a case are the node's (`/var/lib/kubelet/...`): the conversion reads no file, and the old code,
//! which did, was run in a temporary directory standing in for `/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crius_api::cri;
use serde_json::{Value, json};

use crate::network::Pinned;
use crate::store::sandbox::{Record, Sandbox};

/// The container's id in every case.
pub const ID: &str = "3f1c9d0e6b2a4f5e8d7c6b5a49382716f0e1d2c3b4a5968778695a4b3c2d1e0f";
/// The pod's id in every case.
pub const POD: &str = "9a8b7c6d5e4f30211203f4e5d6c7b8a99a8b7c6d5e4f30211203f4e5d6c7b8a9";
/// kubelet's pod uid in every case.
const UID: &str = "6c1f2e3d-4b5a-4968-8776-5a4b3c2d1e0f";

/// The container's root filesystem.
pub fn rootfs() -> PathBuf {
    PathBuf::from(format!("/var/lib/crius/snapshots/{ID}/rootfs"))
}

/// Where the pod's hostname, hosts and resolv.conf files are.
pub fn sandbox_files() -> PathBuf {
    PathBuf::from(format!("/var/lib/crius/sandboxes/{POD}"))
}

/// The kernel the golden specs are made for (a node's, past every `minKernel` of the default profile).
const GOLDEN_KERNEL: (u32, u32) = (6, 1);

/// What a spec is made from besides the request: what the node and the image's files say.
#[derive(Clone)]
pub struct Facts {
    /// criusd's capability bounding set.
    pub bounding: Vec<String>,
    /// Whether the cgroup2 tree has the cpu controller.
    pub cpu_controller: bool,
    /// The pod's hostname file (None: absent).
    pub hostname: Option<String>,
    /// The image's /etc/passwd (None: absent).
    pub passwd: Option<String>,
    /// The image's /etc/group (None: absent).
    pub group: Option<String>,
}

/// One golden spec: its name (the file's), the request and the facts.
pub struct Case {
    /// `golden/<name>.json`.
    pub name: &'static str,
    /// kubelet's ContainerConfig.
    pub config: cri::ContainerConfig,
    /// The pod.
    pub sandbox: Sandbox,
    /// The image's config JSON.
    pub image: Value,
    /// The host's and image's facts.
    pub facts: Facts,
}

fn all_caps() -> Vec<String> {
    super::ALL_CAPS.iter().map(|c| c.to_string()).collect()
}

/// The bounding set of the machines this project is built on: all but CAP_SYS_RESOURCE.
fn all_but_sys_resource() -> Vec<String> {
    all_caps()
        .into_iter()
        .filter(|c| c != "CAP_SYS_RESOURCE")
        .collect()
}

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
    daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
    app:x:101:101:app:/srv:/bin/sh\n\
    web:x:1000:1000::/home/web:/bin/sh\n";
const GROUP: &str = "root:x:0:\ndaemon:x:1:\napp:x:101:\nstaff:x:50:app\nweb:x:1000:\n";

fn ns_dir() -> String {
    format!("/run/crius/ns/{POD}")
}

/// A pod of its own network, IPC and UTS namespaces and /dev/shm, as RunPodSandbox pins them.
fn pod() -> Sandbox {
    let dir = ns_dir();
    Sandbox {
        record: Record {
            id: POD.into(),
            ready: true,
            created_at: 1_764_547_200_000_000_000,
            namespaces: Pinned {
                net: Some(format!("{dir}/net").into()),
                ipc: Some(format!("{dir}/ipc").into()),
                uts: Some(format!("{dir}/uts").into()),
                shm: Some(format!("{dir}/shm").into()),
                pid: None,
                user: None,
            },
            ips: vec!["10.88.0.7".into()],
            ..Default::default()
        },
        config: cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: "pod".into(),
                uid: UID.into(),
                namespace: "default".into(),
                attempt: 0,
            }),
            hostname: "pod".into(),
            ..Default::default()
        },
    }
}

fn metadata(name: &str) -> Option<cri::ContainerMetadata> {
    Some(cri::ContainerMetadata {
        name: name.into(),
        attempt: 0,
    })
}

/// A container with nothing but a name and an image whose Cmd is `sh`, in [`pod`], on a node of every
/// capability with a cpu controller.
fn plain(name: &'static str) -> Case {
    Case {
        name,
        config: cri::ContainerConfig {
            metadata: metadata("c"),
            image: Some(cri::ImageSpec {
                image: "docker.io/library/busybox:1.36".into(),
                ..Default::default()
            }),
            ..Default::default()
        },
        sandbox: pod(),
        image: json!({"config": {"Cmd": ["sh"], "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]}}),
        facts: Facts {
            bounding: all_caps(),
            cpu_controller: true,
            hostname: Some("pod\n".into()),
            passwd: Some(PASSWD.into()),
            group: Some(GROUP.into()),
        },
    }
}

fn security(case: &mut Case) -> &mut cri::LinuxContainerSecurityContext {
    case.config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

fn resources(case: &mut Case) -> &mut cri::LinuxContainerResources {
    case.config
        .linux
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default)
}

fn caps(name: &'static str, add: &[&str], drop: &[&str]) -> Case {
    let mut case = plain(name);
    security(&mut case).capabilities = Some(cri::Capability {
        add_capabilities: add.iter().map(|s| s.to_string()).collect(),
        drop_capabilities: drop.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    });
    case
}

fn map(pairs: &[(&str, &str)]) -> std::collections::HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn env(k: &str, v: &str) -> cri::KeyValue {
    cri::KeyValue {
        key: k.into(),
        value: v.into(),
    }
}

fn bind(container: &str, host: &str, readonly: bool, propagation: cri::MountPropagation) -> cri::Mount {
    cri::Mount {
        container_path: container.into(),
        host_path: host.into(),
        readonly,
        propagation: propagation as i32,
        ..Default::default()
    }
}

/// kubelet's default masked paths (k8s.io/kubernetes securitycontext, DefaultProcMount).
const KUBELET_MASKED: &[&str] = &[
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
const KUBELET_READONLY: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// A Burstable nginx-like container as kubelet sends it: its labels and annotations, the service account's
/// projected volume, kubelet's own /etc/hosts and termination log, a log path, resources with `unified`,
/// a run_as_user, and kubelet's masked and read-only paths.
fn kubelet() -> Case {
    let mut case = plain("kubelet");
    let kubelet_pod = format!("/var/lib/kubelet/pods/{UID}");
    let s = &mut case.sandbox.config;
    s.metadata = Some(cri::PodSandboxMetadata {
        name: "web-0".into(),
        uid: UID.into(),
        namespace: "shop".into(),
        attempt: 0,
    });
    s.hostname = "web-0".into();
    s.log_directory = format!("/var/log/pods/shop_web-0_{UID}");
    s.labels = map(&[
        ("io.kubernetes.pod.name", "web-0"),
        ("io.kubernetes.pod.namespace", "shop"),
        ("io.kubernetes.pod.uid", UID),
    ]);
    s.linux = Some(cri::LinuxPodSandboxConfig {
        cgroup_parent: format!("/kubepods/burstable/pod{UID}"),
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(cri::NamespaceOption {
                pid: cri::NamespaceMode::Container as i32,
                ..Default::default()
            }),
            ..Default::default()
        }),
        sysctls: map(&[("net.ipv4.ip_unprivileged_port_start", "0")]),
        ..Default::default()
    });
    case.image = json!({"config": {
        "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "NGINX_VERSION=1.27.3", "LANG=C"],
        "Entrypoint": ["/docker-entrypoint.sh"],
        "Cmd": ["nginx", "-g", "daemon off;"],
        "WorkingDir": "/usr/share/nginx",
        "User": "app",
    }});
    case.facts.hostname = Some("web-0\n".into());
    let c = &mut case.config;
    c.metadata = metadata("web");
    c.image = Some(cri::ImageSpec {
        image: "sha256:4cf2a1a55b5a1b6c7d8e9f00112233445566778899aabbccddeeff0011223344".into(),
        user_specified_image: "nginx:1.27".into(),
        ..Default::default()
    });
    c.args = vec!["-c".into(), "/etc/nginx/nginx.conf".into()];
    c.envs = vec![
        env("LANG", "C.UTF-8"),
        env("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
        env("KUBERNETES_SERVICE_PORT", "443"),
        env("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
    ];
    c.mounts = vec![
        bind(
            "/var/run/secrets/kubernetes.io/serviceaccount",
            &format!("{kubelet_pod}/volumes/kubernetes.io~projected/kube-api-access-7xk2p"),
            true,
            cri::MountPropagation::PropagationPrivate,
        ),
        bind(
            "/etc/hosts",
            &format!("{kubelet_pod}/etc-hosts"),
            false,
            cri::MountPropagation::PropagationPrivate,
        ),
        bind(
            "/dev/termination-log",
            &format!("{kubelet_pod}/containers/web/5d41402a"),
            false,
            cri::MountPropagation::PropagationPrivate,
        ),
    ];
    c.labels = map(&[
        ("io.kubernetes.container.name", "web"),
        ("io.kubernetes.pod.name", "web-0"),
        ("io.kubernetes.pod.namespace", "shop"),
        ("io.kubernetes.pod.uid", UID),
    ]);
    c.annotations = map(&[
        ("io.kubernetes.container.hash", "9d2b5c1e"),
        ("io.kubernetes.container.restartCount", "0"),
        (
            "io.kubernetes.container.terminationMessagePath",
            "/dev/termination-log",
        ),
        ("io.kubernetes.container.terminationMessagePolicy", "File"),
        (
            "io.kubernetes.container.ports",
            r#"[{"name":"http","containerPort":8080,"protocol":"TCP"}]"#,
        ),
        ("io.kubernetes.pod.terminationGracePeriod", "30"),
    ]);
    c.log_path = "web/0.log".into();
    let r = resources(&mut case);
    *r = cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 256,
        memory_limit_in_bytes: 128 << 20,
        memory_swap_limit_in_bytes: 128 << 20,
        oom_score_adj: 968,
        hugepage_limits: vec![
            cri::HugepageLimit {
                page_size: "2MB".into(),
                limit: 0,
            },
            cri::HugepageLimit {
                page_size: "1GB".into(),
                limit: 0,
            },
        ],
        unified: map(&[("memory.oom.group", "1")]),
        ..Default::default()
    };
    let sc = security(&mut case);
    *sc = cri::LinuxContainerSecurityContext {
        capabilities: Some(cri::Capability::default()),
        namespace_options: Some(cri::NamespaceOption {
            pid: cri::NamespaceMode::Container as i32,
            ..Default::default()
        }),
        run_as_user: Some(cri::Int64Value { value: 1000 }),
        run_as_group: Some(cri::Int64Value { value: 3000 }),
        supplemental_groups: vec![2000],
        no_new_privs: true,
        masked_paths: KUBELET_MASKED.iter().map(|s| s.to_string()).collect(),
        readonly_paths: KUBELET_READONLY.iter().map(|s| s.to_string()).collect(),
        seccomp: Some(cri::SecurityProfile {
            profile_type: cri::security_profile::ProfileType::RuntimeDefault as i32,
            ..Default::default()
        }),
        ..Default::default()
    };
    case
}

/// A pod on the node's network, PID and IPC namespaces: RunPodSandbox pins nothing then.
fn host_namespaces() -> Case {
    let mut case = plain("host_namespaces");
    let node = cri::NamespaceOption {
        network: cri::NamespaceMode::Node as i32,
        pid: cri::NamespaceMode::Node as i32,
        ipc: cri::NamespaceMode::Node as i32,
        ..Default::default()
    };
    case.sandbox.record.namespaces = Pinned::default();
    case.sandbox.config.linux = Some(cri::LinuxPodSandboxConfig {
        security_context: Some(cri::LinuxSandboxSecurityContext {
            namespace_options: Some(node.clone()),
            ..Default::default()
        }),
        ..Default::default()
    });
    security(&mut case).namespace_options = Some(node);
    case
}

/// Every golden case.
pub fn cases() -> Vec<Case> {
    let mut out = vec![plain("plain"), kubelet(), host_namespaces()];

    let mut privileged = plain("privileged");
    security(&mut privileged).privileged = true;
    out.push(privileged);
    let mut bounded = plain("privileged_without_sys_resource");
    security(&mut bounded).privileged = true;
    bounded.facts.bounding = all_but_sys_resource();
    out.push(bounded);

    // The container joins the pod's namespaces, though its own options say NODE: only its PID option
    // and the IPC one (for /dev/shm) are its own.
    let mut ctr_ns = plain("container_namespace_options");
    security(&mut ctr_ns).namespace_options = Some(cri::NamespaceOption {
        pid: cri::NamespaceMode::Node as i32,
        ipc: cri::NamespaceMode::Container as i32,
        ..Default::default()
    });
    out.push(ctr_ns);

    let mut ro = plain("readonly_rootfs");
    security(&mut ro).readonly_rootfs = true;
    out.push(ro);

    out.push(caps(
        "caps_add",
        &["SYS_ADMIN", "cap_net_admin", "CAP_CHOWN"],
        &[],
    ));
    out.push(caps("caps_drop", &["NET_RAW"], &["NET_RAW", "cap_mknod", "KILL"]));
    out.push(caps("caps_drop_all_add_one", &["NET_BIND_SERVICE"], &["ALL"]));
    out.push(caps("caps_add_all", &["ALL"], &[]));
    out.push(caps("caps_add_all_drop_one", &["ALL"], &["SYS_ADMIN"]));
    let mut default_bounded = plain("caps_default_outside_bounding");
    default_bounded
        .facts
        .bounding
        .retain(|c| c != "CAP_NET_RAW" && c != "CAP_MKNOD");
    out.push(default_bounded);
    let mut add_all_bounded = caps("caps_add_all_without_sys_resource", &["ALL"], &[]);
    add_all_bounded.facts.bounding = all_but_sys_resource();
    out.push(add_all_bounded);
    out.push(caps("caps_unknown_refused", &["NOPE"], &[]));
    let mut outside = caps("caps_outside_bounding_refused", &["SYS_RESOURCE"], &[]);
    outside.facts.bounding = all_but_sys_resource();
    out.push(outside);

    let mut zero = plain("resources_zero_unset");
    *resources(&mut zero) = cri::LinuxContainerResources::default();
    out.push(zero);
    let mut full = plain("resources");
    *resources(&mut full) = cri::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 250_000,
        cpu_shares: 2560,
        memory_limit_in_bytes: 1 << 30,
        memory_swap_limit_in_bytes: 2 << 30,
        oom_score_adj: -997,
        cpuset_cpus: "0-3".into(),
        cpuset_mems: "0".into(),
        hugepage_limits: vec![cri::HugepageLimit {
            page_size: "2MB".into(),
            limit: 64 << 20,
        }],
        unified: map(&[("memory.high", "805306368"), ("pids.max", "512")]),
    };
    out.push(full);
    let mut no_cpu = plain("resources_without_cpu_controller");
    no_cpu.facts.cpu_controller = false;
    *resources(&mut no_cpu) = cri::LinuxContainerResources {
        cpu_shares: 2,
        cpu_quota: 20_000,
        memory_swap_limit_in_bytes: 1 << 20,
        ..Default::default()
    };
    out.push(no_cpu);

    let mut mounts = plain("mounts_propagation");
    let data = format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~empty-dir");
    use cri::MountPropagation as P;
    mounts.config.mounts = vec![
        bind(
            "/private",
            &format!("{data}/private"),
            false,
            P::PropagationPrivate,
        ),
        bind(
            "/rslave",
            &format!("{data}/rslave"),
            false,
            P::PropagationHostToContainer,
        ),
        bind(
            "/rshared",
            &format!("{data}/rshared"),
            false,
            P::PropagationBidirectional,
        ),
        bind("/ro", &format!("{data}/ro"), true, P::PropagationPrivate),
        bind(
            "/ro-rslave",
            &format!("{data}/ro-rslave"),
            true,
            P::PropagationHostToContainer,
        ),
        bind(
            "/etc/resolv.conf",
            &format!("{data}/resolv.conf"),
            true,
            P::PropagationPrivate,
        ),
    ];
    out.push(mounts);
    let mut half = plain("mount_without_host_path_refused");
    half.config.mounts = vec![bind("/data", "", false, P::PropagationPrivate)];
    out.push(half);

    let mut run = plain("command_args_workdir_tty");
    run.image = json!({"config": {"Entrypoint": ["/entry"], "Cmd": ["serve"], "WorkingDir": "/srv"}});
    run.config.command = vec!["/bin/sh".into()];
    run.config.args = vec!["-c".into(), "exec serve --port 80".into()];
    run.config.working_dir = "/work".into();
    run.config.tty = true;
    run.config.envs = vec![env("A", "1"), env("PATH", "/bin")];
    out.push(run);

    let mut named = plain("image_user_and_group_by_name");
    named.image["config"]["User"] = json!("app:staff");
    out.push(named);
    let mut username = plain("run_as_username");
    security(&mut username).run_as_username = "web".into();
    security(&mut username).supplemental_groups = vec![50, 101];
    out.push(username);
    let mut no_passwd = plain("numeric_user_without_passwd");
    no_passwd.image["config"]["User"] = json!("4242");
    no_passwd.facts.passwd = None;
    no_passwd.facts.group = None;
    out.push(no_passwd);
    let mut ghost = plain("unknown_user_refused");
    ghost.image["config"]["User"] = json!("ghost");
    out.push(ghost);
    let mut group_only = plain("run_as_group_alone_refused");
    security(&mut group_only).run_as_group = Some(cri::Int64Value { value: 5 });
    out.push(group_only);

    let mut no_uts = plain("pod_without_uts_pin");
    no_uts.sandbox.record.namespaces.uts = None;
    no_uts.sandbox.config.linux = Some(cri::LinuxPodSandboxConfig {
        cgroup_parent: "/kubepods/besteffort/".into(),
        ..Default::default()
    });
    out.push(no_uts);
    out
}

/// A spec, or the refusal's gRPC code and message, as a golden file holds it.
pub fn outcome(r: Result<Value, (tonic::Code, String)>) -> Value {
    match r {
        Ok(spec) => spec,
        Err((code, message)) => json!({"error": {"code": format!("{code:?}"), "message": message}}),
    }
}

/// Capability sets are sets: the typed spec keeps them in a HashSet, so their order is not compared.
fn normalized(mut v: Value) -> Value {
    if let Some(caps) = v
        .pointer_mut("/process/capabilities")
        .and_then(Value::as_object_mut)
    {
        for set in caps.values_mut() {
            if let Some(list) = set.as_array_mut() {
                list.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
            }
        }
    }
    v
}

fn file(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/convert/golden")
        .join(format!("{name}.json"))
}

/// The golden file of case `name`, parsed.
pub fn golden(name: &str) -> std::io::Result<Value> {
    let b = std::fs::read(file(name))?;
    Ok(serde_json::from_slice(&b).expect("a golden file is JSON"))
}

/// Compares each case's outcome with its golden file (or, with `CRIUS_BLESS=1`, rewrites the files), and
/// fails naming every case that differs.
pub fn check(outcomes: Vec<(&'static str, Value)>) {
    let bless = std::env::var_os("CRIUS_BLESS").is_some();
    let mut wrong = BTreeMap::new();
    for (name, got) in outcomes {
        let path = file(name);
        if bless {
            let text = serde_json::to_string_pretty(&got).unwrap() + "\n";
            std::fs::write(&path, text).unwrap();
            continue;
        }
        let want = match golden(name) {
            Ok(v) => v,
            Err(e) => {
                wrong.insert(name, format!("{}: {e}", path.display()));
                continue;
            }
        };
        if normalized(got.clone()) != normalized(want.clone()) {
            wrong.insert(
                name,
                format!(
                    "got\n{}\nwant\n{}",
                    serde_json::to_string_pretty(&got).unwrap(),
                    serde_json::to_string_pretty(&want).unwrap()
                ),
            );
        }
    }
    assert!(
        wrong.is_empty(),
        "{} golden specs differ ({:?}):\n{}",
        wrong.len(),
        wrong.keys().collect::<Vec<_>>(),
        wrong.values().cloned().collect::<Vec<_>>().join("\n\n")
    );
}

impl Facts {
    /// The [`super::Host`] of these facts (an absent file reads as empty, as [`super::Host::probe`] has it).
    pub fn host(&self) -> super::Host {
        super::Host {
            bounding: self.bounding.clone(),
            cpu_controller: self.cpu_controller,
            hostname: self.hostname.clone().unwrap_or_default(),
            passwd: self.passwd.clone().unwrap_or_default(),
            group: self.group.clone().unwrap_or_default(),
            seccomp_file: None,
            apparmor: None,
            kernel: GOLDEN_KERNEL,
            cgroup_driver: Default::default(),
            devices: Vec::new(),
            // The host's /dev as a privileged case sees it (the others ignore it): a char and a block node.
            host_devices: vec![
                super::HostDevice {
                    path: "/dev/kmsg".into(),
                    block: false,
                    major: 1,
                    minor: 11,
                    mode: 0o644,
                    uid: 0,
                    gid: 0,
                },
                super::HostDevice {
                    path: "/dev/loop0".into(),
                    block: true,
                    major: 7,
                    minor: 0,
                    mode: 0o660,
                    uid: 0,
                    gid: 6,
                },
            ],
        }
    }
}

/// The typed conversion, a pure function of the case: its JSON is the golden file's, and the golden file
/// read as a [`Spec`], as crius-runc reads config.json, is the very spec it made.
///
/// [`Spec`]: oci_spec::runtime::Spec
#[test]
fn convert_gives_the_golden_specs() {
    let mut outcomes = Vec::new();
    for case in cases() {
        let spec = super::spec(
            &super::Input {
                id: ID,
                config: &case.config,
                sandbox: &case.sandbox,
                sandbox_files: &sandbox_files(),
                image_config: &case.image,
                rootfs: &rootfs(),
                pid_target: None,
            },
            &case.facts.host(),
        );
        // (Blessing rewrites the files first: the check of the old ones would stop it.)
        if let (Ok(spec), Ok(want), None) = (&spec, golden(case.name), std::env::var_os("CRIUS_BLESS")) {
            let read: oci_spec::runtime::Spec = serde_json::from_value(want).unwrap();
            assert_eq!(&read, spec, "{}: the golden file read as a Spec", case.name);
        }
        let spec = spec.map(|s| serde_json::to_value(s).unwrap());
        outcomes.push((case.name, outcome(spec.map_err(|e| (e.code(), e.to_string())))));
    }
    check(outcomes);
}
