//! Every field of every CRI request message, and what crius does with it: the table that keeps
//! [`super`]'s promise (a field crius does not carry out is refused, not dropped). The tests read the
//! messages from `proto/cri/runtime/v1/api.proto`, which the CRI code is generated from, so a field added
//! there fails them until it is put in the table; and every field the table says is refused is sent, and
//! refused by name.

use std::collections::BTreeSet;

use crius_api::cri;

use super::proto_walk::request_fields;

/// What crius does with a request field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Carried out (or read: an id, a filter, a flag).
    Acted,
    /// Refused with InvalidArgument naming it when set as crius cannot carry it out: any value, or the values
    /// outside what crius makes (`unsupported`'s list).
    Refused,
    /// Dropped, for the reason given: refusing it would fail requests that crius serves as kubelet means them.
    Ignored(&'static str),
    /// Its RPC answers UNIMPLEMENTED.
    Unserved,
}

use Fate::{Acted, Ignored, Refused, Unserved};

const WINDOWS: &str = "Windows only: kubelet sends it to Windows nodes";
const SELINUX: &str = "SELinux labels: crius has no SELinux support and, as containerd on a host without \
                       SELinux, applies none (refusing them would fail pods that run elsewhere)";
const NO_PAUSE: &str = "the pause container's: crius runs none; each container's own context is carried out";
const VERSION: &str = "the answer is the same whatever CRI version kubelet speaks";
const POD_RECORD: &str = "the pod's config is the one RunPodSandbox was given, kept in its record";
const NRI: &str = "for NRI plugins; crius runs none";
const ONE_STORE: &str = "one image store for the node and every handler: a pull is the same for any pod";
const HANDLER_IMAGES: &str = "accepted and logged once per handler at debug level (KEP-4216): one store, one \
                              snapshotter and one platform per node, so every handler shares every image";
const RESOLVED: &str = "kubelet's notes of what was asked and what it resolved to: crius resolves `image`";
const REGISTRY: &str = "the registry is the image reference's host";
const POD_CGROUP: &str = "the pod cgroup under cgroup_parent is kubelet's to size; UpdatePodSandboxResources \
                          carries sizes out";
const POD_CIDR: &str = "logged: addresses come from the CNI config (host-local ranges), which crius does not \
                        template";

/// `(message, field as the proto names it, fate)`, in the order the tests walk the messages.
const FIELDS: &[(&str, &str, Fate)] = &[
    ("VersionRequest", "version", Ignored(VERSION)),
    ("RunPodSandboxRequest", "config", Acted),
    ("RunPodSandboxRequest", "runtime_handler", Acted),
    ("StopPodSandboxRequest", "pod_sandbox_id", Acted),
    ("RemovePodSandboxRequest", "pod_sandbox_id", Acted),
    ("PodSandboxStatusRequest", "pod_sandbox_id", Acted),
    ("PodSandboxStatusRequest", "verbose", Acted),
    ("ListPodSandboxRequest", "filter", Acted),
    ("StreamPodSandboxesRequest", "filter", Acted),
    ("CreateContainerRequest", "pod_sandbox_id", Acted),
    ("CreateContainerRequest", "config", Acted),
    ("CreateContainerRequest", "sandbox_config", Ignored(POD_RECORD)),
    ("StartContainerRequest", "container_id", Acted),
    ("StopContainerRequest", "container_id", Acted),
    ("StopContainerRequest", "timeout", Acted),
    ("RemoveContainerRequest", "container_id", Acted),
    ("ListContainersRequest", "filter", Acted),
    ("StreamContainersRequest", "filter", Acted),
    ("ContainerStatusRequest", "container_id", Acted),
    ("ContainerStatusRequest", "verbose", Acted),
    ("UpdateContainerResourcesRequest", "container_id", Acted),
    ("UpdateContainerResourcesRequest", "linux", Acted),
    ("UpdateContainerResourcesRequest", "windows", Ignored(WINDOWS)),
    ("UpdateContainerResourcesRequest", "annotations", Ignored(NRI)),
    ("ReopenContainerLogRequest", "container_id", Acted),
    ("ExecSyncRequest", "container_id", Acted),
    ("ExecSyncRequest", "cmd", Acted),
    ("ExecSyncRequest", "timeout", Acted),
    ("ExecRequest", "container_id", Acted),
    ("ExecRequest", "cmd", Acted),
    ("ExecRequest", "tty", Acted),
    ("ExecRequest", "stdin", Acted),
    ("ExecRequest", "stdout", Acted),
    ("ExecRequest", "stderr", Acted),
    ("AttachRequest", "container_id", Acted),
    ("AttachRequest", "stdin", Acted),
    ("AttachRequest", "tty", Acted),
    ("AttachRequest", "stdout", Acted),
    ("AttachRequest", "stderr", Acted),
    ("PortForwardRequest", "pod_sandbox_id", Acted),
    ("PortForwardRequest", "port", Acted),
    ("ContainerStatsRequest", "container_id", Acted),
    ("ListContainerStatsRequest", "filter", Acted),
    ("StreamContainerStatsRequest", "filter", Acted),
    ("PodSandboxStatsRequest", "pod_sandbox_id", Acted),
    ("ListPodSandboxStatsRequest", "filter", Acted),
    ("StreamPodSandboxStatsRequest", "filter", Acted),
    ("UpdateRuntimeConfigRequest", "runtime_config", Acted),
    ("StatusRequest", "verbose", Acted),
    ("CheckpointContainerRequest", "container_id", Acted),
    ("CheckpointContainerRequest", "location", Acted),
    ("CheckpointContainerRequest", "timeout", Acted),
    ("UpdatePodSandboxResourcesRequest", "pod_sandbox_id", Acted),
    ("UpdatePodSandboxResourcesRequest", "overhead", Acted),
    ("UpdatePodSandboxResourcesRequest", "resources", Acted),
    ("ListImagesRequest", "filter", Acted),
    ("StreamImagesRequest", "filter", Acted),
    ("ImageStatusRequest", "image", Acted),
    ("ImageStatusRequest", "verbose", Acted),
    ("PullImageRequest", "image", Acted),
    ("PullImageRequest", "auth", Acted),
    ("PullImageRequest", "sandbox_config", Ignored(ONE_STORE)),
    ("RemoveImageRequest", "image", Acted),
    ("PodSandboxConfig", "metadata", Acted),
    ("PodSandboxConfig", "hostname", Acted),
    ("PodSandboxConfig", "log_directory", Acted),
    ("PodSandboxConfig", "dns_config", Acted),
    ("PodSandboxConfig", "port_mappings", Acted),
    ("PodSandboxConfig", "labels", Acted),
    ("PodSandboxConfig", "annotations", Acted),
    ("PodSandboxConfig", "linux", Acted),
    ("PodSandboxConfig", "windows", Ignored(WINDOWS)),
    ("PodSandboxFilter", "id", Acted),
    ("PodSandboxFilter", "state", Acted),
    ("PodSandboxFilter", "label_selector", Acted),
    ("ContainerConfig", "metadata", Acted),
    ("ContainerConfig", "image", Acted),
    ("ContainerConfig", "command", Acted),
    ("ContainerConfig", "args", Acted),
    ("ContainerConfig", "working_dir", Acted),
    ("ContainerConfig", "envs", Acted),
    ("ContainerConfig", "mounts", Acted),
    ("ContainerConfig", "devices", Acted),
    ("ContainerConfig", "labels", Acted),
    ("ContainerConfig", "annotations", Acted),
    ("ContainerConfig", "log_path", Acted),
    ("ContainerConfig", "stdin", Acted),
    ("ContainerConfig", "stdin_once", Acted),
    ("ContainerConfig", "tty", Acted),
    ("ContainerConfig", "linux", Acted),
    ("ContainerConfig", "windows", Ignored(WINDOWS)),
    ("ContainerConfig", "CDI_devices", Acted),
    ("ContainerConfig", "stop_signal", Refused),
    ("ContainerFilter", "id", Acted),
    ("ContainerFilter", "state", Acted),
    ("ContainerFilter", "pod_sandbox_id", Acted),
    ("ContainerFilter", "label_selector", Acted),
    ("LinuxContainerResources", "cpu_period", Acted),
    ("LinuxContainerResources", "cpu_quota", Acted),
    ("LinuxContainerResources", "cpu_shares", Acted),
    ("LinuxContainerResources", "memory_limit_in_bytes", Acted),
    ("LinuxContainerResources", "oom_score_adj", Acted),
    ("LinuxContainerResources", "cpuset_cpus", Acted),
    ("LinuxContainerResources", "cpuset_mems", Acted),
    ("LinuxContainerResources", "hugepage_limits", Acted),
    ("LinuxContainerResources", "unified", Acted),
    ("LinuxContainerResources", "memory_swap_limit_in_bytes", Acted),
    ("WindowsContainerResources", "cpu_shares", Ignored(WINDOWS)),
    ("WindowsContainerResources", "cpu_count", Ignored(WINDOWS)),
    ("WindowsContainerResources", "cpu_maximum", Ignored(WINDOWS)),
    (
        "WindowsContainerResources",
        "memory_limit_in_bytes",
        Ignored(WINDOWS),
    ),
    (
        "WindowsContainerResources",
        "rootfs_size_in_bytes",
        Ignored(WINDOWS),
    ),
    ("WindowsContainerResources", "affinity_cpus", Ignored(WINDOWS)),
    ("ContainerStatsFilter", "id", Acted),
    ("ContainerStatsFilter", "pod_sandbox_id", Acted),
    ("ContainerStatsFilter", "label_selector", Acted),
    ("PodSandboxStatsFilter", "id", Acted),
    ("PodSandboxStatsFilter", "label_selector", Acted),
    ("RuntimeConfig", "network_config", Acted),
    ("ImageFilter", "image", Acted),
    ("ImageSpec", "image", Acted),
    ("ImageSpec", "annotations", Ignored(ONE_STORE)),
    ("ImageSpec", "user_specified_image", Ignored(RESOLVED)),
    ("ImageSpec", "runtime_handler", Ignored(HANDLER_IMAGES)),
    ("ImageSpec", "image_ref", Ignored(RESOLVED)),
    ("AuthConfig", "username", Acted),
    ("AuthConfig", "password", Acted),
    ("AuthConfig", "auth", Acted),
    ("AuthConfig", "server_address", Ignored(REGISTRY)),
    ("AuthConfig", "identity_token", Acted),
    ("AuthConfig", "registry_token", Acted),
    ("PodSandboxMetadata", "name", Acted),
    ("PodSandboxMetadata", "uid", Acted),
    ("PodSandboxMetadata", "namespace", Acted),
    ("PodSandboxMetadata", "attempt", Acted),
    ("DNSConfig", "servers", Acted),
    ("DNSConfig", "searches", Acted),
    ("DNSConfig", "options", Acted),
    ("PortMapping", "protocol", Acted),
    ("PortMapping", "container_port", Acted),
    ("PortMapping", "host_port", Acted),
    ("PortMapping", "host_ip", Acted),
    ("LinuxPodSandboxConfig", "cgroup_parent", Acted),
    ("LinuxPodSandboxConfig", "security_context", Acted),
    ("LinuxPodSandboxConfig", "sysctls", Acted),
    ("LinuxPodSandboxConfig", "overhead", Ignored(POD_CGROUP)),
    ("LinuxPodSandboxConfig", "resources", Ignored(POD_CGROUP)),
    ("WindowsPodSandboxConfig", "security_context", Ignored(WINDOWS)),
    ("PodSandboxStateValue", "state", Acted),
    ("ContainerMetadata", "name", Acted),
    ("ContainerMetadata", "attempt", Acted),
    ("KeyValue", "key", Acted),
    ("KeyValue", "value", Acted),
    ("Mount", "container_path", Acted),
    ("Mount", "host_path", Acted),
    ("Mount", "readonly", Acted),
    ("Mount", "selinux_relabel", Ignored(SELINUX)),
    ("Mount", "propagation", Acted),
    ("Mount", "uidMappings", Refused),
    ("Mount", "gidMappings", Refused),
    ("Mount", "recursive_read_only", Refused),
    ("Mount", "image", Acted),
    ("Mount", "image_sub_path", Refused),
    ("Device", "container_path", Acted),
    ("Device", "host_path", Acted),
    ("Device", "permissions", Acted),
    ("LinuxContainerConfig", "resources", Acted),
    ("LinuxContainerConfig", "security_context", Acted),
    ("WindowsContainerConfig", "resources", Ignored(WINDOWS)),
    ("WindowsContainerConfig", "security_context", Ignored(WINDOWS)),
    ("CDIDevice", "name", Acted),
    ("ContainerStateValue", "state", Acted),
    ("HugepageLimit", "page_size", Acted),
    ("HugepageLimit", "limit", Acted),
    ("WindowsCpuGroupAffinity", "cpu_mask", Ignored(WINDOWS)),
    ("WindowsCpuGroupAffinity", "cpu_group", Ignored(WINDOWS)),
    ("NetworkConfig", "pod_cidr", Ignored(POD_CIDR)),
    ("LinuxSandboxSecurityContext", "namespace_options", Acted),
    ("LinuxSandboxSecurityContext", "selinux_options", Ignored(SELINUX)),
    ("LinuxSandboxSecurityContext", "run_as_user", Ignored(NO_PAUSE)),
    ("LinuxSandboxSecurityContext", "run_as_group", Ignored(NO_PAUSE)),
    (
        "LinuxSandboxSecurityContext",
        "readonly_rootfs",
        Ignored(NO_PAUSE),
    ),
    (
        "LinuxSandboxSecurityContext",
        "supplemental_groups",
        Ignored(NO_PAUSE),
    ),
    (
        "LinuxSandboxSecurityContext",
        "supplemental_groups_policy",
        Refused,
    ),
    ("LinuxSandboxSecurityContext", "privileged", Ignored(NO_PAUSE)),
    ("LinuxSandboxSecurityContext", "seccomp", Ignored(NO_PAUSE)),
    ("LinuxSandboxSecurityContext", "apparmor", Ignored(NO_PAUSE)),
    (
        "LinuxSandboxSecurityContext",
        "seccomp_profile_path",
        Ignored(NO_PAUSE),
    ),
    (
        "WindowsSandboxSecurityContext",
        "run_as_username",
        Ignored(WINDOWS),
    ),
    (
        "WindowsSandboxSecurityContext",
        "credential_spec",
        Ignored(WINDOWS),
    ),
    ("WindowsSandboxSecurityContext", "host_process", Ignored(WINDOWS)),
    (
        "WindowsSandboxSecurityContext",
        "namespace_options",
        Ignored(WINDOWS),
    ),
    ("IDMapping", "host_id", Acted),
    ("IDMapping", "container_id", Acted),
    ("IDMapping", "length", Acted),
    ("LinuxContainerSecurityContext", "capabilities", Acted),
    ("LinuxContainerSecurityContext", "privileged", Acted),
    ("LinuxContainerSecurityContext", "namespace_options", Acted),
    (
        "LinuxContainerSecurityContext",
        "selinux_options",
        Ignored(SELINUX),
    ),
    ("LinuxContainerSecurityContext", "run_as_user", Acted),
    ("LinuxContainerSecurityContext", "run_as_group", Acted),
    ("LinuxContainerSecurityContext", "run_as_username", Acted),
    ("LinuxContainerSecurityContext", "readonly_rootfs", Acted),
    ("LinuxContainerSecurityContext", "supplemental_groups", Acted),
    (
        "LinuxContainerSecurityContext",
        "supplemental_groups_policy",
        Refused,
    ),
    ("LinuxContainerSecurityContext", "no_new_privs", Acted),
    ("LinuxContainerSecurityContext", "masked_paths", Acted),
    ("LinuxContainerSecurityContext", "readonly_paths", Acted),
    ("LinuxContainerSecurityContext", "seccomp", Acted),
    ("LinuxContainerSecurityContext", "apparmor", Acted),
    ("LinuxContainerSecurityContext", "apparmor_profile", Acted),
    ("LinuxContainerSecurityContext", "seccomp_profile_path", Acted),
    (
        "WindowsContainerSecurityContext",
        "run_as_username",
        Ignored(WINDOWS),
    ),
    (
        "WindowsContainerSecurityContext",
        "credential_spec",
        Ignored(WINDOWS),
    ),
    (
        "WindowsContainerSecurityContext",
        "host_process",
        Ignored(WINDOWS),
    ),
    ("NamespaceOption", "network", Acted),
    ("NamespaceOption", "pid", Acted),
    ("NamespaceOption", "ipc", Acted),
    ("NamespaceOption", "target_id", Acted),
    ("NamespaceOption", "userns_options", Refused),
    ("SELinuxOption", "user", Ignored(SELINUX)),
    ("SELinuxOption", "role", Ignored(SELINUX)),
    ("SELinuxOption", "type", Ignored(SELINUX)),
    ("SELinuxOption", "level", Ignored(SELINUX)),
    ("Int64Value", "value", Acted),
    ("SecurityProfile", "profile_type", Acted),
    ("SecurityProfile", "localhost_ref", Acted),
    ("WindowsNamespaceOption", "network", Ignored(WINDOWS)),
    ("Capability", "add_capabilities", Acted),
    ("Capability", "drop_capabilities", Acted),
    ("Capability", "add_ambient_capabilities", Refused),
    ("UserNamespace", "mode", Acted),
    ("UserNamespace", "uids", Acted),
    ("UserNamespace", "gids", Acted),
];

#[test]
fn the_table_has_every_field_of_every_request_message_once() {
    let proto = request_fields();
    assert!(proto.len() > 200, "{} fields read", proto.len());
    let mut table = BTreeSet::new();
    for (m, f, _) in FIELDS {
        assert!(
            table.insert((m.to_string(), f.to_string())),
            "{m}.{f} is in the table twice"
        );
    }
    let missing: Vec<_> = proto
        .difference(&table)
        .map(|(m, f)| format!("{m}.{f}"))
        .collect();
    let stale: Vec<_> = table
        .difference(&proto)
        .map(|(m, f)| format!("{m}.{f}"))
        .collect();
    assert!(
        missing.is_empty(),
        "fields of the CRI requests the table does not say the fate of (act on them, refuse them in \
         validate/unsupported.rs, or say why they are ignored): {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "the table names fields the proto does not have: {stale:?}"
    );
}

/// A request that sets `message.field` as crius cannot carry it out, and the name its refusal must give.
enum Case {
    Container(cri::ContainerConfig, &'static str),
    Sandbox(cri::PodSandboxConfig, &'static str),
}

fn container_sc(sc: cri::LinuxContainerSecurityContext) -> cri::ContainerConfig {
    cri::ContainerConfig {
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(sc),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn sandbox_sc(sc: cri::LinuxSandboxSecurityContext) -> cri::PodSandboxConfig {
    cri::PodSandboxConfig {
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(sc),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn mount(m: cri::Mount) -> cri::ContainerConfig {
    cri::ContainerConfig {
        mounts: vec![m],
        ..Default::default()
    }
}

fn refusal(message: &str, field: &str) -> Option<Case> {
    let ids = || vec![cri::IdMapping::default()];
    Some(match (message, field) {
        ("ContainerConfig", "stop_signal") => Case::Container(
            cri::ContainerConfig {
                stop_signal: 1000,
                ..Default::default()
            },
            "stop_signal",
        ),
        ("Mount", "uidMappings") => Case::Container(
            mount(cri::Mount {
                uid_mappings: ids(),
                ..Default::default()
            }),
            "mounts[0].uidMappings",
        ),
        ("Mount", "gidMappings") => Case::Container(
            mount(cri::Mount {
                gid_mappings: ids(),
                ..Default::default()
            }),
            "mounts[0].gidMappings",
        ),
        ("Mount", "recursive_read_only") => Case::Container(
            mount(cri::Mount {
                recursive_read_only: true,
                ..Default::default()
            }),
            "mounts[0].recursive_read_only",
        ),
        ("Mount", "image_sub_path") => Case::Container(
            mount(cri::Mount {
                image_sub_path: "etc".into(),
                ..Default::default()
            }),
            "mounts[0].image_sub_path",
        ),
        ("LinuxContainerSecurityContext", "supplemental_groups_policy") => Case::Container(
            container_sc(cri::LinuxContainerSecurityContext {
                supplemental_groups_policy: 7,
                ..Default::default()
            }),
            "linux.security_context.supplemental_groups_policy",
        ),
        ("LinuxSandboxSecurityContext", "supplemental_groups_policy") => Case::Sandbox(
            sandbox_sc(cri::LinuxSandboxSecurityContext {
                supplemental_groups_policy: 7,
                ..Default::default()
            }),
            "linux.security_context.supplemental_groups_policy",
        ),
        ("NamespaceOption", "userns_options") => Case::Sandbox(
            sandbox_sc(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(cri::NamespaceOption {
                    userns_options: Some(cri::UserNamespace {
                        mode: cri::NamespaceMode::Container as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            "userns_options",
        ),
        ("Capability", "add_ambient_capabilities") => Case::Container(
            container_sc(cri::LinuxContainerSecurityContext {
                capabilities: Some(cri::Capability {
                    add_ambient_capabilities: vec!["CAP_NET_RAW".into()],
                    ..Default::default()
                }),
                ..Default::default()
            }),
            "linux.security_context.capabilities.add_ambient_capabilities",
        ),
        _ => return None,
    })
}

#[test]
fn every_refused_field_is_refused_by_name() {
    for (message, field, fate) in FIELDS {
        let case = refusal(message, field);
        if *fate != Refused {
            assert!(
                case.is_none(),
                "{message}.{field} has a refusal case but the table says {fate:?}"
            );
            continue;
        }
        let (result, name) = match case {
            Some(Case::Container(c, name)) => (super::container_config(&c), name),
            Some(Case::Sandbox(c, name)) => (super::sandbox_config(&c), name),
            None => panic!("{message}.{field} is refused by the table, with no case that sends it"),
        };
        let e = result.expect_err(&format!("{message}.{field} was not refused"));
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{message}.{field}: {e}");
        assert!(
            e.to_string().contains(name),
            "{message}.{field}: {e:?} does not name {name}"
        );
    }
    // What refuses them lets the defaults through.
    assert!(super::container_config(&cri::ContainerConfig::default()).is_ok());
    assert!(super::sandbox_config(&cri::PodSandboxConfig::default()).is_ok());
}

#[test]
fn ignored_fields_say_why() {
    for (message, field, fate) in FIELDS {
        if let Ignored(why) = fate {
            assert!(why.len() > 20, "{message}.{field}: {why:?} is no reason");
        }
    }
    let unserved: Vec<_> = FIELDS.iter().filter(|f| f.2 == Unserved).map(|f| f.0).collect();
    assert!(unserved.is_empty(), "every RPC is served: {unserved:?}");
    assert!(FIELDS.iter().filter(|f| f.2 == Acted).count() > 150);
}
