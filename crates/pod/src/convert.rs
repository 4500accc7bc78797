//! A pod spec in the CRI's terms, computed as kubelet computes it: the sandbox config (metadata, hostname, log
//! directory, DNS, host ports, namespaces, sysctls, labels), and each container's config (command and args with
//! `$(VAR)` expansion, env, mounts, resources from requests and limits, OOM score by QoS class, security
//! context with kubelet's masked and read-only paths (`proc_paths`), log path `<name>/<attempt>.log`,
//! kubelet's labels and annotations).

use std::collections::{BTreeMap, HashMap};

use crius_api::cri;
use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};

use crate::Error;
use crate::manifest::PodDef;
use crate::quantity::{self, BadQuantity};

/// kubelet's CFS period, in µs.
pub const CPU_PERIOD: i64 = 100_000;
const MIN_SHARES: i64 = 2;
/// kubelet's cap on shares (`MaxShares`, 256 CPUs' worth).
const MAX_SHARES: i64 = 262_144;
/// What the CRI's i64 fields hold: a cpu limit whose quota (µs per period) fits, and bytes.
const MAX_MILLI_CPU: u64 = (i64::MAX / CPU_PERIOD) as u64;
const MAX_BYTES: u64 = i64::MAX as u64;
const MIN_QUOTA: i64 = 1000;

/// A pod's QoS class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Qos {
    /// Every container has cpu and memory limits equal to its requests.
    Guaranteed,
    /// Some container asks for something.
    Burstable,
    /// Nobody asks for anything.
    BestEffort,
}

impl std::fmt::Display for Qos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self, f)
    }
}

/// A container's cpu (milli-CPUs) and memory (bytes) requests and limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Amounts {
    pub(crate) cpu_request: Option<u64>,
    pub(crate) cpu_limit: Option<u64>,
    pub(crate) memory_request: Option<u64>,
    pub(crate) memory_limit: Option<u64>,
}

fn amounts(r: &Option<ResourceRequirements>) -> Result<Amounts, BadQuantity> {
    let r = r.clone().unwrap_or_default();
    // A quantity past `max` is refused: it overflowed the CRI numbers made of it (found by the manifest
    // property test; a panic in debug builds, a negative limit in release ones).
    let get = |m: &Option<BTreeMap<String, _>>, k: &str, f: fn(&_) -> Result<u64, BadQuantity>, max: u64| {
        let v = m.as_ref().and_then(|m| m.get(k)).map(f).transpose()?;
        match v {
            Some(v) if v > max => Err(BadQuantity::TooLarge),
            v => Ok(v),
        }
    };
    let (cpu, memory) = (quantity::milli_cpu, quantity::value);
    let cpu_limit = get(&r.limits, "cpu", cpu, MAX_MILLI_CPU)?;
    let memory_limit = get(&r.limits, "memory", memory, MAX_BYTES)?;
    // The API server defaults a missing request to the limit.
    Ok(Amounts {
        cpu_request: get(&r.requests, "cpu", cpu, MAX_MILLI_CPU)?.or(cpu_limit),
        cpu_limit,
        memory_request: get(&r.requests, "memory", memory, MAX_BYTES)?.or(memory_limit),
        memory_limit,
    })
}

/// Container `c`'s requests and limits; an error names it.
pub(crate) fn amounts_of(c: &Container) -> Result<Amounts, Error> {
    amounts(&c.resources).map_err(|e| Error::manifest(format!("container {:?}", c.name), e))
}

/// The pod's QoS class.
pub fn qos(spec: &PodSpec) -> Result<Qos, Error> {
    let (mut any, mut all_equal) = (false, true);
    for c in spec.init_containers.iter().flatten().chain(&spec.containers) {
        let a = amounts_of(c)?;
        any |= a.cpu_request.is_some()
            || a.cpu_limit.is_some()
            || a.memory_request.is_some()
            || a.memory_limit.is_some();
        all_equal &= a.cpu_limit.is_some()
            && a.memory_limit.is_some()
            && a.cpu_request == a.cpu_limit
            && a.memory_request == a.memory_limit;
    }
    Ok(if !any {
        Qos::BestEffort
    } else if all_equal {
        Qos::Guaranteed
    } else {
        Qos::Burstable
    })
}

/// A container's resources: shares from the cpu request (2 without one, at most 262144), quota over kubelet's 100 ms period
/// from the cpu limit (at least 1 ms), the memory limit, and the OOM score of its QoS class.
pub fn resources(
    c: &Container,
    qos: Qos,
    memory_capacity: u64,
) -> Result<cri::LinuxContainerResources, Error> {
    let a = amounts_of(c)?;
    let mut r = cri::LinuxContainerResources {
        cpu_shares: shares(a.cpu_request.unwrap_or(0)),
        memory_limit_in_bytes: a.memory_limit.unwrap_or(0) as i64,
        oom_score_adj: oom_score_adj(qos, a.memory_request.unwrap_or(0), memory_capacity),
        ..Default::default()
    };
    if let Some(l) = a.cpu_limit {
        r.cpu_period = CPU_PERIOD;
        r.cpu_quota = quota(l);
    }
    Ok(r)
}

/// kubelet's CFS shares of `milli_cpu` requested (`MilliCPUToShares`): 2 for none, at most 262144.
pub(crate) fn shares(milli_cpu: u64) -> i64 {
    (milli_cpu as i64 * 1024 / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// kubelet's CFS quota over [`CPU_PERIOD`] of a `milli_cpu` limit (`MilliCPUToQuota`): at least 1 ms.
pub(crate) fn quota(milli_cpu: u64) -> i64 {
    ((milli_cpu as i64).saturating_mul(CPU_PERIOD) / 1000).max(MIN_QUOTA)
}

/// kubelet's OOM score policy: -997 Guaranteed, 1000 BestEffort, and for Burstable 1000 less the container's
/// memory request in thousandths of the node's memory, kept within 3..=999.
pub fn oom_score_adj(qos: Qos, memory_request: u64, capacity: u64) -> i64 {
    match qos {
        Qos::Guaranteed => -997,
        Qos::BestEffort => 1000,
        Qos::Burstable => {
            let adj = 1000 - (1000 * memory_request as i128 / capacity.max(1) as i128) as i64;
            adj.clamp(3, 999)
        }
    }
}

/// What the pod's containers share: the names and paths that make the sandbox and container configs.
#[derive(Debug, Clone)]
pub struct PodIdentity {
    /// The pod's name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// `/var/log/pods/<namespace>_<name>_<uid>`.
    pub log_directory: String,
}

fn pod_labels(def: &PodDef, id: &PodIdentity) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = def.labels.clone().into_iter().collect();
    l.insert("io.kubernetes.pod.name".into(), id.name.clone());
    l.insert("io.kubernetes.pod.namespace".into(), def.namespace.clone());
    l.insert("io.kubernetes.pod.uid".into(), id.uid.clone());
    l
}

fn namespace_options(spec: &PodSpec) -> cri::NamespaceOption {
    let mode = |host: Option<bool>, otherwise| {
        if host == Some(true) {
            cri::NamespaceMode::Node as i32
        } else {
            otherwise as i32
        }
    };
    cri::NamespaceOption {
        network: mode(spec.host_network, cri::NamespaceMode::Pod),
        ipc: mode(spec.host_ipc, cri::NamespaceMode::Pod),
        pid: mode(
            spec.host_pid,
            if spec.share_process_namespace == Some(true) {
                cri::NamespaceMode::Pod
            } else {
                cri::NamespaceMode::Container
            },
        ),
        ..Default::default()
    }
}

fn profile(p: Option<&k8s_openapi::api::core::v1::SeccompProfile>) -> Option<cri::SecurityProfile> {
    let p = p?;
    let t = match p.type_.as_str() {
        "RuntimeDefault" => cri::security_profile::ProfileType::RuntimeDefault,
        "Localhost" => cri::security_profile::ProfileType::Localhost,
        _ => cri::security_profile::ProfileType::Unconfined,
    };
    Some(cri::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: p.localhost_profile.clone().unwrap_or_default(),
    })
}

/// The host's resolv.conf as (servers, searches, options).
fn host_dns() -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for line in std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
    {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("nameserver") => out.0.extend(w.map(str::to_string)),
            Some("search") => out.1 = w.map(str::to_string).collect(),
            Some("options") => out.2.extend(w.map(str::to_string)),
            _ => {}
        }
    }
    out
}

/// The DNS config: none (the runtime copies the host's file) unless the pod has a `dnsConfig`, which is merged
/// over the host's (`dnsPolicy: None` uses the `dnsConfig` alone). There is no cluster DNS: `ClusterFirst`
/// falls back to the host's, as kubelet does without one.
fn dns(spec: &PodSpec) -> Option<cri::DnsConfig> {
    let cfg = spec.dns_config.as_ref()?;
    let (mut servers, mut searches, mut options) = if spec.dns_policy.as_deref() == Some("None") {
        Default::default()
    } else {
        host_dns()
    };
    servers.extend(cfg.nameservers.iter().flatten().cloned());
    searches.extend(cfg.searches.iter().flatten().cloned());
    for o in cfg.options.iter().flatten() {
        let name = o.name.clone().unwrap_or_default();
        options.retain(|x| x.split(':').next() != Some(name.as_str()));
        options.push(match &o.value {
            Some(v) => format!("{name}:{v}"),
            None => name,
        });
    }
    Some(cri::DnsConfig {
        servers,
        searches,
        options,
    })
}

/// The sandbox config of pod `def`.
pub fn sandbox_config(def: &PodDef, id: &PodIdentity) -> Result<cri::PodSandboxConfig, Error> {
    let spec = &def.spec;
    let mut ports = Vec::new();
    for c in &spec.containers {
        for p in c.ports.iter().flatten().filter(|p| p.host_port.unwrap_or(0) > 0) {
            let protocol = match p.protocol.as_deref().unwrap_or("TCP") {
                "TCP" => cri::Protocol::Tcp,
                "UDP" => cri::Protocol::Udp,
                "SCTP" => cri::Protocol::Sctp,
                other => {
                    return Err(Error::manifest(
                        format!("container {:?}", c.name),
                        format!("port protocol {other:?}"),
                    ));
                }
            };
            ports.push(cri::PortMapping {
                protocol: protocol as i32,
                container_port: p.container_port,
                host_port: p.host_port.unwrap_or(0),
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    let psc = spec.security_context.clone().unwrap_or_default();
    let privileged = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .any(|c| c.security_context.as_ref().and_then(|s| s.privileged) == Some(true));
    let mut hostname = spec.hostname.clone().unwrap_or_else(|| id.name.clone());
    hostname.truncate(63);
    Ok(cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: id.name.clone(),
            uid: id.uid.clone(),
            namespace: def.namespace.clone(),
            attempt: 0,
        }),
        hostname: hostname.trim_end_matches(['-', '.']).to_string(),
        log_directory: id.log_directory.clone(),
        dns_config: dns(spec),
        port_mappings: ports,
        labels: pod_labels(def, id),
        annotations: def.annotations.clone().into_iter().collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(spec)),
                run_as_user: psc.run_as_user.map(|value| cri::Int64Value { value }),
                run_as_group: psc.run_as_group.map(|value| cri::Int64Value { value }),
                supplemental_groups: psc.supplemental_groups.clone().unwrap_or_default(),
                privileged,
                seccomp: profile(psc.seccomp_profile.as_ref()),
                ..Default::default()
            }),
            sysctls: psc
                .sysctls
                .iter()
                .flatten()
                .map(|s| (s.name.clone(), s.value.clone()))
                .collect(),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// Inputs of one container's config besides its spec.
pub struct ContainerInputs<'a> {
    /// The image, resolved (an image id).
    pub image_ref: &'a str,
    /// The image as the manifest names it.
    pub image_name: &'a str,
    /// Restart count: the CRI attempt.
    pub attempt: u32,
    /// Its environment (from [`crate::env::build`]).
    pub env: &'a [(String, String)],
    /// Its mounts (from the pod's volumes).
    pub mounts: Vec<cri::Mount>,
    /// Its resources (from [`resources`]).
    pub resources: cri::LinuxContainerResources,
}

/// The container config of `c` in pod `def`.
pub fn container_config(
    def: &PodDef,
    id: &PodIdentity,
    c: &Container,
    inp: ContainerInputs<'_>,
) -> cri::ContainerConfig {
    let spec = &def.spec;
    let psc = spec.security_context.clone().unwrap_or_default();
    let sc = c.security_context.clone().unwrap_or_default();
    let proc_paths = crate::proc_paths::paths(sc.proc_mount.as_deref());
    let mut labels = pod_labels(def, id);
    labels.retain(|k, _| k.starts_with("io.kubernetes."));
    labels.insert("io.kubernetes.container.name".into(), c.name.clone());
    let mut annotations = HashMap::new();
    annotations.insert(
        "io.kubernetes.container.restartCount".into(),
        inp.attempt.to_string(),
    );
    annotations.insert(
        "io.kubernetes.pod.terminationGracePeriod".into(),
        spec.termination_grace_period_seconds.unwrap_or(30).to_string(),
    );
    let expand = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter()
            .flatten()
            .map(|s| crate::env::expand(s, inp.env))
            .collect()
    };
    let mut groups = psc.supplemental_groups.clone().unwrap_or_default();
    groups.extend(psc.fs_group);
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: inp.attempt,
        }),
        image: Some(cri::ImageSpec {
            image: inp.image_ref.to_string(),
            user_specified_image: inp.image_name.to_string(),
            ..Default::default()
        }),
        command: expand(&c.command),
        args: expand(&c.args),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: inp
            .env
            .iter()
            .map(|(key, value)| cri::KeyValue {
                key: key.clone(),
                value: value.clone().into(),
            })
            .collect(),
        mounts: inp.mounts,
        labels,
        annotations,
        log_path: format!("{}/{}.log", c.name, inp.attempt),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(cri::LinuxContainerConfig {
            resources: Some(inp.resources),
            security_context: Some(cri::LinuxContainerSecurityContext {
                capabilities: sc.capabilities.as_ref().map(|caps| cri::Capability {
                    add_capabilities: caps.add.clone().unwrap_or_default(),
                    drop_capabilities: caps.drop.clone().unwrap_or_default(),
                    ..Default::default()
                }),
                privileged: sc.privileged.unwrap_or(false),
                namespace_options: Some(namespace_options(spec)),
                run_as_user: sc
                    .run_as_user
                    .or(psc.run_as_user)
                    .map(|value| cri::Int64Value { value }),
                run_as_group: sc
                    .run_as_group
                    .or(psc.run_as_group)
                    .map(|value| cri::Int64Value { value }),
                readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
                supplemental_groups: groups,
                no_new_privs: sc.allow_privilege_escalation == Some(false),
                seccomp: profile(sc.seccomp_profile.as_ref().or(psc.seccomp_profile.as_ref())),
                masked_paths: proc_paths.0,
                readonly_paths: proc_paths.1,
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(yaml: &str) -> PodDef {
        crate::manifest::parse(yaml, "t").unwrap().pods.remove(0)
    }

    const SEED: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: myapp, labels: {app: myapp}}
spec:
  containers:
  - name: app
    image: myapp:latest
    command: [sh, -c, "echo $(GREETING)"]
    env: [{name: GREETING, value: hi}]
    ports: [{containerPort: 80, hostPort: 8080}]
    resources:
      requests: {cpu: "500m", memory: "512Mi"}
      limits: {cpu: "1000m", memory: "1Gi"}
    securityContext: {allowPrivilegeEscalation: false, runAsUser: 1337, capabilities: {add: [NET_ADMIN]}}
"#;

    #[test]
    fn resources_follow_kubelet() {
        let def = pod(SEED);
        let c = &def.spec.containers[0];
        assert_eq!(qos(&def.spec).unwrap(), Qos::Burstable);
        let r = resources(c, Qos::Burstable, 4 << 30).unwrap();
        assert_eq!((r.cpu_shares, r.cpu_quota, r.cpu_period), (512, 100_000, 100_000));
        assert_eq!((r.memory_limit_in_bytes, r.oom_score_adj), (1 << 30, 875));
        // Requests default to limits: equal everywhere is Guaranteed.
        let g = pod(&SEED.replace("requests: {cpu: \"500m\", memory: \"512Mi\"}", "requests: {}"));
        assert_eq!(qos(&g.spec).unwrap(), Qos::Guaranteed);
        assert_eq!(
            resources(&g.spec.containers[0], Qos::Guaranteed, 1 << 30)
                .unwrap()
                .cpu_shares,
            1024
        );
        let b = pod(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: x}]\n",
        );
        assert_eq!(qos(&b.spec).unwrap(), Qos::BestEffort);
        let r = resources(&b.spec.containers[0], Qos::BestEffort, 1 << 30).unwrap();
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.memory_limit_in_bytes,
                r.oom_score_adj
            ),
            (2, 0, 0, 1000)
        );
        let tiny = pod(&SEED.replace("cpu: \"1000m\"", "cpu: 5m"));
        assert_eq!(
            resources(&tiny.spec.containers[0], Qos::Burstable, 1 << 40)
                .unwrap()
                .cpu_quota,
            1000
        );
        assert_eq!(oom_score_adj(Qos::Burstable, 1 << 40, 1 << 30), 3);
        assert_eq!(oom_score_adj(Qos::Burstable, 0, 1 << 30), 999);
    }

    /// Found by tests/manifest_props.rs: these overflowed the i64 arithmetic (a panic in debug builds).
    #[test]
    fn quantities_past_the_cri_numbers_are_refused() {
        let with = |limits: &str| {
            pod(&format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers: [{{name: a, image: x, resources: {{limits: {limits}}}}}]\n"
            ))
        };
        for limits in ["{cpu: 1e15}", "{memory: 9Ei}", "{cpu: \"100000000000000\"}"] {
            let def = with(limits);
            let e = resources(&def.spec.containers[0], Qos::Burstable, 1 << 30).unwrap_err();
            assert!(e.to_string().contains("quantity too large"), "{limits}: {e}");
            assert!(qos(&def.spec).is_err(), "{limits}");
        }
        let big = with("{cpu: \"9e10\", memory: 7Ei}");
        let r = resources(&big.spec.containers[0], Qos::Guaranteed, 1 << 30).unwrap();
        assert_eq!(r.cpu_shares, 262_144, "kubelet's MaxShares");
        assert_eq!(r.cpu_quota, 9_000_000_000_000_000);
        assert_eq!(r.memory_limit_in_bytes, 7 << 60);
    }

    #[test]
    fn sandbox_and_container_configs() {
        let def = pod(SEED);
        let id = PodIdentity {
            name: "myapp".into(),
            uid: "u1".into(),
            log_directory: "/var/log/pods/default_myapp_u1".into(),
        };
        let s = sandbox_config(&def, &id).unwrap();
        assert_eq!(s.hostname, "myapp");
        assert_eq!(s.labels["io.kubernetes.pod.uid"], "u1");
        assert_eq!(s.labels["app"], "myapp");
        assert_eq!(
            (s.port_mappings[0].host_port, s.port_mappings[0].container_port),
            (8080, 80)
        );
        let ns = s
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(
            (ns.network, ns.pid),
            (
                cri::NamespaceMode::Pod as i32,
                cri::NamespaceMode::Container as i32
            )
        );

        let c = &def.spec.containers[0];
        let env = vec![("GREETING".to_string(), "hi".to_string())];
        let cc = container_config(
            &def,
            &id,
            c,
            ContainerInputs {
                image_ref: "sha256:abc",
                image_name: "myapp:latest",
                attempt: 2,
                env: &env,
                mounts: vec![],
                resources: Default::default(),
            },
        );
        assert_eq!(cc.command, ["sh", "-c", "echo hi"]);
        assert_eq!(cc.log_path, "app/2.log");
        assert_eq!(cc.labels["io.kubernetes.container.name"], "app");
        assert!(!cc.labels.contains_key("app"), "pod labels stay on the sandbox");
        let sc = cc.linux.unwrap().security_context.unwrap();
        assert!(sc.no_new_privs);
        assert_eq!(sc.run_as_user.unwrap().value, 1337);
        assert_eq!(sc.capabilities.unwrap().add_capabilities, ["NET_ADMIN"]);
    }
}
