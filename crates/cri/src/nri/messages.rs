//! NRI's `PodSandbox` and `Container` messages made from criusd's records (and a container's OCI spec, where
//! it has one), and linux resources converted between NRI, the OCI spec and the CRI.
//!
//! A pod has no process of its own here (no pause container): its `pid` is 0, and its namespaces are the pins
//! RunPodSandbox made. A container's args, env, mounts, hooks, rlimits, devices, resources and cgroup path are
//! its spec's (`<bundle>/config.json`, or the spec being made at CreateContainer); a container whose bundle is
//! gone (removed) is described from its record alone.

use crius_api::cri;
use crius_nri::api;
use oci_spec::runtime::{self as oci, Spec};

use crate::store::container::{Container, State};
use crate::store::sandbox::Sandbox;

/// NRI's view of pod `s`.
pub(crate) fn pod(s: &Sandbox) -> api::PodSandbox {
    let meta = s.config.metadata.clone().unwrap_or_default();
    let pins = &s.record.namespaces;
    let namespaces = [
        ("network", &pins.net),
        ("ipc", &pins.ipc),
        ("uts", &pins.uts),
        ("pid", &pins.pid),
        ("user", &pins.user),
    ]
    .into_iter()
    .filter_map(|(kind, pin)| {
        pin.as_ref().map(|p| api::LinuxNamespace {
            r#type: kind.into(),
            path: p.display().to_string(),
        })
    })
    .collect();
    let linux = s.config.linux.as_ref();
    api::PodSandbox {
        id: s.record.id.clone(),
        name: meta.name,
        uid: meta.uid,
        namespace: meta.namespace,
        labels: s.config.labels.clone(),
        annotations: s.config.annotations.clone(),
        runtime_handler: s.record.runtime_handler.clone(),
        linux: Some(api::LinuxPodSandbox {
            pod_overhead: linux.and_then(|l| l.overhead.as_ref()).map(from_cri),
            pod_resources: linux.and_then(|l| l.resources.as_ref()).map(from_cri),
            cgroup_parent: s.cgroup_parent().to_string(),
            namespaces,
            ..Default::default()
        }),
        pid: 0,
        ips: s.record.ips.clone(),
    }
}

/// NRI's view of a container of pod `pod_id` with id `id`, made from `config`, whose spec is `spec` (None:
/// not known any more). Its state and times are the record's, when there is one.
pub(crate) fn container(
    id: &str,
    pod_id: &str,
    config: &cri::ContainerConfig,
    record: Option<&Container>,
    spec: Option<&Spec>,
) -> api::Container {
    let meta = config.metadata.clone().unwrap_or_default();
    let mut c = api::Container {
        id: id.to_string(),
        pod_sandbox_id: pod_id.to_string(),
        name: meta.name,
        state: api::ContainerState::ContainerCreated as i32,
        labels: config.labels.clone(),
        annotations: config.annotations.clone(),
        args: config.command.iter().chain(&config.args).cloned().collect(),
        env: config
            .envs
            .iter()
            .map(|kv| format!("{}={}", kv.key, String::from_utf8_lossy(&kv.value)))
            .collect(),
        cdi_devices: config
            .cdi_devices
            .iter()
            .map(|d| api::CdiDevice { name: d.name.clone() })
            .collect(),
        image: config.image.as_ref().map(|i| api::Image {
            name: i.image.clone(),
            ..Default::default()
        }),
        linux: Some(api::LinuxContainer {
            resources: config
                .linux
                .as_ref()
                .and_then(|l| l.resources.as_ref())
                .map(from_cri),
            ..Default::default()
        }),
        ..Default::default()
    };
    if let Some(r) = record {
        let r = &r.record;
        c.state = match r.state() {
            State::Created => api::ContainerState::ContainerCreated,
            State::Running => api::ContainerState::ContainerRunning,
            State::Exited => api::ContainerState::ContainerStopped,
            State::Unknown => api::ContainerState::ContainerUnknown,
        } as i32;
        c.pid = r.pid;
        c.created_at = r.created_at;
        c.started_at = r.started_at;
        c.finished_at = r.finished_at;
        c.exit_code = r.exit_code;
        if let Some(u) = &r.user {
            c.user = Some(api::User {
                uid: u.uid,
                gid: u.gid,
                additional_gids: u.groups.clone(),
            });
        }
        if let Some(i) = c.image.as_mut() {
            i.config_digest = r.image_id.clone();
        }
    }
    if let Some(spec) = spec {
        from_spec(&mut c, spec);
    }
    c
}

/// What `spec` says of the container, over what its config said.
fn from_spec(c: &mut api::Container, spec: &Spec) {
    if let Some(p) = spec.process() {
        c.args = p.args().clone().unwrap_or_default();
        c.env = p.env().clone().unwrap_or_default();
        c.rlimits = p
            .rlimits()
            .iter()
            .flatten()
            .map(|r| api::PosixRlimit {
                r#type: serde_json::to_value(r.typ())
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                hard: r.hard(),
                soft: r.soft(),
            })
            .collect();
        let u = p.user();
        c.user = Some(api::User {
            uid: u.uid(),
            gid: u.gid(),
            additional_gids: u.additional_gids().clone().unwrap_or_default(),
        });
    }
    c.mounts = spec
        .mounts()
        .iter()
        .flatten()
        .map(|m| api::Mount {
            destination: m.destination().display().to_string(),
            r#type: m.typ().clone().unwrap_or_default(),
            source: m
                .source()
                .as_ref()
                .map(|s| s.display().to_string())
                .unwrap_or_default(),
            options: m.options().clone().unwrap_or_default(),
        })
        .collect();
    if let Some(h) = spec.hooks() {
        let hooks = |l: &Option<Vec<oci::Hook>>| -> Vec<api::Hook> {
            l.iter()
                .flatten()
                .map(|h| api::Hook {
                    path: h.path().display().to_string(),
                    args: h.args().clone().unwrap_or_default(),
                    env: h.env().clone().unwrap_or_default(),
                    timeout: h.timeout().map(|t| api::OptionalInt { value: t }),
                })
                .collect()
        };
        #[allow(deprecated)]
        let prestart = hooks(h.prestart());
        c.hooks = Some(api::Hooks {
            prestart,
            create_runtime: hooks(h.create_runtime()),
            create_container: hooks(h.create_container()),
            start_container: hooks(h.start_container()),
            poststart: hooks(h.poststart()),
            poststop: hooks(h.poststop()),
        });
    }
    if let Some(l) = spec.linux() {
        let linux = c.linux.get_or_insert_with(Default::default);
        linux.namespaces = l
            .namespaces()
            .iter()
            .flatten()
            .map(|n| api::LinuxNamespace {
                r#type: serde_json::to_value(n.typ())
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
                    .unwrap_or_default(),
                path: n
                    .path()
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
            })
            .collect();
        linux.devices = l
            .devices()
            .iter()
            .flatten()
            .map(|d| api::LinuxDevice {
                path: d.path().display().to_string(),
                r#type: d.typ().as_str().to_string(),
                major: d.major(),
                minor: d.minor(),
                file_mode: d.file_mode().map(|v| api::OptionalFileMode { value: v }),
                uid: d.uid().map(|v| api::OptionalUInt32 { value: v }),
                gid: d.gid().map(|v| api::OptionalUInt32 { value: v }),
            })
            .collect();
        if let Some(r) = l.resources() {
            linux.resources = Some(from_oci(r));
        }
        linux.cgroups_path = l
            .cgroups_path()
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        linux.sysctl = l.sysctl().clone().unwrap_or_default().into_iter().collect();
    }
    if let Some(adj) = spec.process().as_ref().and_then(|p| p.oom_score_adj()) {
        c.linux.get_or_insert_with(Default::default).oom_score_adj =
            Some(api::OptionalInt { value: adj as i64 });
    }
}

/// NRI's linux resources from an OCI spec's.
pub(crate) fn from_oci(r: &oci::LinuxResources) -> api::LinuxResources {
    let cpu = r.cpu().as_ref().map(|c| api::LinuxCpu {
        shares: c.shares().map(|v| api::OptionalUInt64 { value: v }),
        quota: c.quota().map(|v| api::OptionalInt64 { value: v }),
        period: c.period().map(|v| api::OptionalUInt64 { value: v }),
        realtime_runtime: c.realtime_runtime().map(|v| api::OptionalInt64 { value: v }),
        realtime_period: c.realtime_period().map(|v| api::OptionalUInt64 { value: v }),
        cpus: c.cpus().clone().unwrap_or_default(),
        mems: c.mems().clone().unwrap_or_default(),
    });
    let memory = r.memory().as_ref().map(|m| api::LinuxMemory {
        limit: m.limit().map(|v| api::OptionalInt64 { value: v }),
        reservation: m.reservation().map(|v| api::OptionalInt64 { value: v }),
        swap: m.swap().map(|v| api::OptionalInt64 { value: v }),
        kernel: m.kernel().map(|v| api::OptionalInt64 { value: v }),
        kernel_tcp: m.kernel_tcp().map(|v| api::OptionalInt64 { value: v }),
        swappiness: m.swappiness().map(|v| api::OptionalUInt64 { value: v }),
        disable_oom_killer: m.disable_oom_killer().map(|v| api::OptionalBool { value: v }),
        use_hierarchy: m.use_hierarchy().map(|v| api::OptionalBool { value: v }),
    });
    api::LinuxResources {
        memory,
        cpu,
        hugepage_limits: r
            .hugepage_limits()
            .iter()
            .flatten()
            .map(|h| api::HugepageLimit {
                page_size: h.page_size().clone(),
                limit: h.limit().max(0) as u64,
            })
            .collect(),
        unified: r.unified().clone().unwrap_or_default().into_iter().collect(),
        pids: r.pids().as_ref().map(|p| api::LinuxPids { limit: p.limit() }),
        ..Default::default()
    }
}

/// NRI's linux resources from a CRI request's.
pub(crate) fn from_cri(r: &cri::LinuxContainerResources) -> api::LinuxResources {
    let set_i = |v: i64| (v != 0).then_some(api::OptionalInt64 { value: v });
    let set_u = |v: i64| (v > 0).then_some(api::OptionalUInt64 { value: v as u64 });
    api::LinuxResources {
        memory: Some(api::LinuxMemory {
            limit: set_i(r.memory_limit_in_bytes),
            swap: set_i(r.memory_swap_limit_in_bytes),
            ..Default::default()
        }),
        cpu: Some(api::LinuxCpu {
            shares: set_u(r.cpu_shares),
            quota: set_i(r.cpu_quota),
            period: set_u(r.cpu_period),
            cpus: r.cpuset_cpus.clone(),
            mems: r.cpuset_mems.clone(),
            ..Default::default()
        }),
        hugepage_limits: r
            .hugepage_limits
            .iter()
            .map(|h| api::HugepageLimit {
                page_size: h.page_size.clone(),
                limit: h.limit,
            })
            .collect(),
        unified: r.unified.clone(),
        ..Default::default()
    }
}

/// A CRI update of what NRI's `r` sets, and the names of what it sets that the CRI cannot carry (pids,
/// block I/O and RDT classes, device rules, the other memory and realtime cpu knobs).
pub(crate) fn to_cri(r: &api::LinuxResources) -> (cri::LinuxContainerResources, Vec<&'static str>) {
    let mut out = cri::LinuxContainerResources::default();
    let mut dropped = Vec::new();
    if let Some(c) = &r.cpu {
        out.cpu_shares = c.shares.map_or(0, |v| v.value as i64);
        out.cpu_quota = c.quota.map_or(0, |v| v.value);
        out.cpu_period = c.period.map_or(0, |v| v.value as i64);
        out.cpuset_cpus = c.cpus.clone();
        out.cpuset_mems = c.mems.clone();
        if c.realtime_runtime.is_some() || c.realtime_period.is_some() {
            dropped.push("cpu realtime");
        }
    }
    if let Some(m) = &r.memory {
        out.memory_limit_in_bytes = m.limit.map_or(0, |v| v.value);
        out.memory_swap_limit_in_bytes = m.swap.map_or(0, |v| v.value);
        if m.reservation.is_some() || m.kernel.is_some() || m.kernel_tcp.is_some() || m.swappiness.is_some() {
            dropped.push("memory reservation, kernel or swappiness");
        }
    }
    out.hugepage_limits = r
        .hugepage_limits
        .iter()
        .map(|h| cri::HugepageLimit {
            page_size: h.page_size.clone(),
            limit: h.limit,
        })
        .collect();
    out.unified = r.unified.clone();
    if r.pids.is_some() {
        dropped.push("pids");
    }
    if r.blockio_class.is_some() || r.rdt_class.is_some() {
        dropped.push("block I/O or RDT class");
    }
    if !r.devices.is_empty() {
        dropped.push("device rules");
    }
    (out, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_go_from_cri_to_nri_and_back() {
        let r = cri::LinuxContainerResources {
            cpu_shares: 512,
            cpu_quota: 50_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 64 << 20,
            cpuset_cpus: "0-1".into(),
            unified: [("memory.high".to_string(), "1000000".to_string())].into(),
            ..Default::default()
        };
        let nri = from_cri(&r);
        assert_eq!(nri.cpu.as_ref().unwrap().shares.unwrap().value, 512);
        assert_eq!(nri.memory.as_ref().unwrap().limit.unwrap().value, 64 << 20);
        assert_eq!(nri.memory.as_ref().unwrap().swap, None, "unset stays unset");
        let (back, dropped) = to_cri(&nri);
        assert_eq!(back, r);
        assert!(dropped.is_empty());
        let pids = api::LinuxResources {
            pids: Some(api::LinuxPids { limit: 10 }),
            ..Default::default()
        };
        assert_eq!(to_cri(&pids).1, ["pids"]);
    }

    #[test]
    fn a_container_is_described_from_its_config_then_its_spec() {
        let config = cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: "web".into(),
                attempt: 0,
            }),
            args: vec!["sh".into()],
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        };
        let c = container("c1", "p1", &config, None, None);
        assert_eq!(
            (c.id.as_str(), c.pod_sandbox_id.as_str(), c.name.as_str()),
            ("c1", "p1", "web")
        );
        assert_eq!(c.state, api::ContainerState::ContainerCreated as i32);
        assert_eq!(c.args, ["sh"]);
        assert_eq!(c.labels["app"], "web");
        let spec: Spec = serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"args": ["/bin/app"], "env": ["A=1"], "cwd": "/", "user": {"uid": 5, "gid": 6},
                        "oomScoreAdj": 100},
            "root": {"path": "rootfs"},
            "mounts": [{"destination": "/data", "type": "bind", "source": "/srv", "options": ["rbind"]}],
            "linux": {"cgroupsPath": "/kubepods/c1", "resources": {"cpu": {"shares": 256}},
                      "namespaces": [{"type": "network", "path": "/run/ns/net"}]}
        }))
        .unwrap();
        let c = container("c1", "p1", &config, None, Some(&spec));
        assert_eq!(c.args, ["/bin/app"]);
        assert_eq!(c.env, ["A=1"]);
        assert_eq!(c.mounts[0].destination, "/data");
        assert_eq!(c.user.as_ref().unwrap().uid, 5);
        let l = c.linux.unwrap();
        assert_eq!(l.cgroups_path, "/kubepods/c1");
        assert_eq!(l.resources.unwrap().cpu.unwrap().shares.unwrap().value, 256);
        assert_eq!(l.namespaces[0].r#type, "network");
        assert_eq!(l.oom_score_adj.unwrap().value, 100);
    }
}
