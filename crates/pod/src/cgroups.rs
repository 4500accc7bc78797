//! Pod-level cgroups as kubelet makes them with the cgroupfs driver: `<root>/pod<uid>` for a Guaranteed pod,
//! `<root>/burstable/pod<uid>` and `<root>/besteffort/pod<uid>` for the others (`root` is `/kubepods` by
//! default), passed to the runtime as the sandbox's `cgroup_parent`, so every container of the pod is charged
//! to it. With the systemd driver the root is a slice (`kubepods.slice`) and each pod gets a transient slice,
//! `kubepods-burstable-pod<uid>.slice`, its limits set as unit properties and in the files.
//!
//! The pod cgroup's limits are its containers', summed as kubelet sums them (`PodRequests`/`PodLimits`): the
//! main containers and sidecars together, or a regular init container with the sidecars started before it if
//! that is more. `cpu.weight` follows the cpu requests; `cpu.max` and `memory.max` are set only when every
//! container has that limit (otherwise `max`). A BestEffort pod gets the least weight and no limits.
//!
//! On a resize the pod cgroup is written in KEP-1287's order: before the containers for what grows, after them
//! for what shrinks ([`PodCgroup::grow`], then the containers, then [`PodCgroup::settle`]). The QoS cgroups
//! (`kubepods`, `burstable`, `besteffort`) stay when pods go, as kubelet's do; only the pod's own is removed.
//! A controller the cgroup tree lacks (the cpu controller on a hybrid host) is left out, never faked.

use k8s_openapi::api::core::v1::{Container, PodSpec};
use oci_spec::runtime::{LinuxCpuBuilder, LinuxMemoryBuilder, LinuxResources, LinuxResourcesBuilder};

use crate::Error;
use crate::convert::{self, CPU_PERIOD, Qos};
use crate::manifest::PodDef;
use crius_oci::cgroup::systemd;

/// What kubelet writes to a pod cgroup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodLimits {
    /// CFS shares from the summed cpu requests (2 without any).
    pub cpu_shares: u64,
    /// `cpu.max` quota per [`CPU_PERIOD`] µs from the summed cpu limits; None: `max`.
    pub cpu_quota: Option<i64>,
    /// `memory.max` from the summed memory limits; None: `max`.
    pub memory: Option<i64>,
}

/// One container's requests and limits, as milli-CPUs and bytes (None: unset).
#[derive(Debug, Clone, Copy, Default)]
struct Need {
    cpu_request: u64,
    cpu_limit: Option<u64>,
    memory_limit: Option<u64>,
}

impl Need {
    fn of(c: &Container) -> Result<Need, Error> {
        let a = convert::amounts_of(c)?;
        Ok(Need {
            cpu_request: a.cpu_request.unwrap_or(0),
            cpu_limit: a.cpu_limit,
            memory_limit: a.memory_limit,
        })
    }

    fn plus(self, o: Need) -> Need {
        let add = |a: Option<u64>, b: Option<u64>| Some(a?.saturating_add(b?));
        Need {
            cpu_request: self.cpu_request.saturating_add(o.cpu_request),
            cpu_limit: add(self.cpu_limit, o.cpu_limit),
            memory_limit: add(self.memory_limit, o.memory_limit),
        }
    }

    /// The larger of each amount; an unset limit (unlimited) wins.
    fn max(self, o: Need) -> Need {
        let most = |a: Option<u64>, b: Option<u64>| Some(a?.max(b?));
        Need {
            cpu_request: self.cpu_request.max(o.cpu_request),
            cpu_limit: most(self.cpu_limit, o.cpu_limit),
            memory_limit: most(self.memory_limit, o.memory_limit),
        }
    }
}

/// The pod cgroup's limits for `spec`.
pub fn limits(spec: &PodSpec, qos: Qos) -> Result<PodLimits, Error> {
    if qos == Qos::BestEffort {
        return Ok(PodLimits {
            cpu_shares: 2,
            cpu_quota: None,
            memory: None,
        });
    }
    let zero = Need {
        cpu_limit: Some(0),
        memory_limit: Some(0),
        ..Need::default()
    };
    // Sidecars run beside everything after them; a regular init container runs alone with the sidecars
    // started before it.
    let (mut sidecars, mut inits) = (zero, zero);
    for c in spec.init_containers.iter().flatten() {
        let need = Need::of(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.plus(need);
        } else {
            inits = inits.max(need.plus(sidecars));
        }
    }
    let mut main = sidecars;
    for c in &spec.containers {
        main = main.plus(Need::of(c)?);
    }
    let total = main.max(inits);
    Ok(PodLimits {
        cpu_shares: convert::shares(total.cpu_request) as u64,
        cpu_quota: total.cpu_limit.map(convert::quota),
        memory: total.memory_limit.map(|b| b as i64),
    })
}

/// The pod cgroup's path below the cgroup root, as the sandbox's `cgroup_parent`. A root that is a slice
/// (`kubepods.slice`, the systemd cgroup driver's) gives the pod's slice as kubelet names it then:
/// `kubepods-burstable-pod<uid>.slice`, the uid's dashes made underscores.
pub fn path(root: &str, qos: Qos, uid: &str) -> String {
    if let Some(stem) = root.strip_suffix(".slice") {
        let uid = uid.replace('-', "_");
        return match qos {
            Qos::Guaranteed => format!("{stem}-pod{uid}.slice"),
            Qos::Burstable => format!("{stem}-burstable-pod{uid}.slice"),
            Qos::BestEffort => format!("{stem}-besteffort-pod{uid}.slice"),
        };
    }
    let root = root.trim_end_matches('/');
    match qos {
        Qos::Guaranteed => format!("{root}/pod{uid}"),
        Qos::Burstable => format!("{root}/burstable/pod{uid}"),
        Qos::BestEffort => format!("{root}/besteffort/pod{uid}"),
    }
}

/// A pod's cgroup on this machine.
#[derive(Debug)]
pub struct PodCgroup {
    cg: crius_oci::cgroup::Cgroup,
    /// The path the runtime is given (`/kubepods/burstable/pod<uid>`).
    pub path: String,
    /// What it holds now.
    pub limits: PodLimits,
    cpu: bool,
    memory: bool,
    /// Its systemd slice, under the systemd driver (the path is then that slice's name).
    unit: Option<String>,
}

fn failed(path: &str) -> impl FnOnce(crius_oci::Error) -> Error {
    let path = path.to_string();
    move |e| Error::Cgroup(format!("pod cgroup {path}: {e}"))
}

impl PodCgroup {
    /// Makes (or, for a pod taken back, finds) pod `def`'s cgroup under `root` and gives it its limits.
    pub fn create(root: &str, def: &PodDef, qos: Qos, uid: &str) -> Result<PodCgroup, Error> {
        let path = path(root, qos, uid);
        let limits = limits(&def.spec, qos)?;
        let unit = path.ends_with(".slice").then(|| path.clone());
        let cg = match &unit {
            Some(slice) => {
                let dir = systemd::expand_slice(slice).map_err(failed(&path))?;
                let mount = crius_oci::cgroup::mount_point().map_err(failed(&path))?;
                let sd = systemd::dbus::Systemd::connect().map_err(failed(&path))?;
                // A pod taken back after a crash has its slice still.
                if sd.active_state(slice).map_err(failed(&path))?.as_deref() != Some("active") {
                    let props = systemd::props::slice(format!("crius pod {uid}"));
                    sd.start(slice, &props).map_err(failed(&path))?;
                }
                crius_oci::cgroup::Cgroup::at(&mount.join(dir)).map_err(failed(&path))?
            }
            None => {
                let cg = crius_oci::cgroup::Cgroup::resolve(Some(std::path::Path::new(&path)), uid)
                    .map_err(failed(&path))?;
                cg.create().map_err(failed(&path))?;
                cg
            }
        };
        // systemd enables a slice's controllers when a property needs them (in `write`), so what the tree offers
        // is read at its root then.
        let offered = match &unit {
            Some(_) => std::fs::read_to_string(cg.mount.join("cgroup.controllers")).unwrap_or_default(),
            None => cg.read("cgroup.controllers").unwrap_or_default(),
        };
        let has = |c: &str| offered.split_whitespace().any(|w| w == c);
        let mut pod = PodCgroup {
            cpu: has("cpu"),
            memory: has("memory"),
            cg,
            path,
            limits,
            unit,
        };
        pod.write(limits, limits)?;
        Ok(pod)
    }

    /// Writes what of `new` the tree has a controller for: cpu when `cpu_of` says, memory when `memory_of`.
    fn write(&mut self, cpu_of: PodLimits, memory_of: PodLimits) -> Result<(), Error> {
        let mut res = LinuxResourcesBuilder::default();
        if self.cpu {
            res = res.cpu(
                LinuxCpuBuilder::default()
                    .shares(cpu_of.cpu_shares)
                    .quota(cpu_of.cpu_quota.unwrap_or(-1))
                    .period(CPU_PERIOD as u64)
                    .build()
                    .map_err(|e| Error::Cgroup(e.to_string()))?,
            );
        }
        if self.memory {
            res = res.memory(
                LinuxMemoryBuilder::default()
                    .limit(memory_of.memory.unwrap_or(-1))
                    .build()
                    .map_err(|e| Error::Cgroup(e.to_string()))?,
            );
        }
        let res: LinuxResources = res.build().map_err(|e| Error::Cgroup(e.to_string()))?;
        if let Some(slice) = &self.unit {
            // The slice's properties first: systemd writes them again on a daemon-reload.
            let props = systemd::props::of_resources(&res).map_err(failed(&self.path))?;
            systemd::dbus::Systemd::connect()
                .and_then(|sd| sd.set(slice, &props))
                .map_err(failed(&self.path))?;
        }
        self.cg.apply(&res).map_err(failed(&self.path))
    }

    /// The first half of a resize to `new`: each resource that grows is written now, before the containers.
    pub fn grow(&mut self, new: PodLimits) -> Result<(), Error> {
        let old = self.limits;
        let more = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (_, None) => true,
            (None, Some(_)) => false,
            (Some(a), Some(b)) => b >= a,
        };
        let cpu = if more(old.cpu_quota, new.cpu_quota) {
            new
        } else {
            old
        };
        let memory = if more(old.memory, new.memory) { new } else { old };
        self.write(cpu, memory)
    }

    /// The second half: everything of `new`, now that the containers have theirs.
    pub fn settle(&mut self, new: PodLimits) -> Result<(), Error> {
        self.write(new, new)?;
        self.limits = new;
        Ok(())
    }

    /// Puts back what it held before a resize that failed half-way.
    pub fn restore(&mut self) -> Result<(), Error> {
        self.write(self.limits, self.limits)
    }

    /// Removes the pod's cgroup (once the runtime has removed its containers); QoS cgroups stay.
    pub fn remove(&self) -> Result<(), Error> {
        if let Some(slice) = &self.unit {
            systemd::dbus::Systemd::connect()
                .and_then(|sd| sd.stop(slice))
                .map_err(failed(&self.path))?;
        }
        self.cg.remove().map_err(failed(&self.path))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> PodSpec {
        let m = crate::manifest::parse(
            &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{yaml}"),
            "t.yaml",
        )
        .unwrap();
        m.pods[0].spec.clone()
    }

    #[test]
    fn paths_follow_the_qos_class() {
        assert_eq!(path("/kubepods", Qos::Guaranteed, "u"), "/kubepods/podu");
        assert_eq!(
            path("/kubepods/", Qos::Burstable, "u"),
            "/kubepods/burstable/podu"
        );
        assert_eq!(path("kubepods", Qos::BestEffort, "u"), "kubepods/besteffort/podu");
        assert_eq!(
            path("kubepods.slice", Qos::Guaranteed, "a-b"),
            "kubepods-poda_b.slice"
        );
        assert_eq!(
            path("kubepods.slice", Qos::Burstable, "a-b"),
            "kubepods-burstable-poda_b.slice"
        );
        assert_eq!(
            path("kubepods.slice", Qos::BestEffort, "u"),
            "kubepods-besteffort-podu.slice"
        );
    }

    #[test]
    fn limits_sum_main_containers_and_sidecars_and_take_the_larger_init() {
        let s = spec(
            "  initContainers:
  - {name: side, image: i, restartPolicy: Always, resources: {limits: {cpu: 100m, memory: 64Mi}}}
  - {name: init, image: i, resources: {limits: {cpu: '2', memory: 32Mi}}}
  containers:
  - {name: a, image: i, resources: {limits: {cpu: 500m, memory: 128Mi}}}
  - {name: b, image: i, resources: {requests: {cpu: 250m}, limits: {cpu: 250m, memory: 64Mi}}}
",
        );
        let l = limits(&s, Qos::Burstable).unwrap();
        // cpu: max(0.1 + 0.5 + 0.25, 2 + 0.1) = 2.1 CPUs; memory: max(64 + 128 + 64, 32 + 64) MiB.
        assert_eq!(l.cpu_quota, Some(210_000));
        assert_eq!(l.memory, Some(256 << 20));
        assert_eq!(l.cpu_shares, 2100 * 1024 / 1000);
    }

    #[test]
    fn a_container_without_a_limit_leaves_the_pod_unlimited_in_it() {
        let s = spec(
            "  containers:
  - {name: a, image: i, resources: {limits: {cpu: 500m, memory: 128Mi}}}
  - {name: b, image: i, resources: {requests: {cpu: 250m, memory: 10Mi}}}
",
        );
        let l = limits(&s, Qos::Burstable).unwrap();
        assert_eq!((l.cpu_quota, l.memory), (None, None));
        assert_eq!(l.cpu_shares, 750 * 1024 / 1000);
        let be = limits(&spec("  containers: [{name: a, image: i}]\n"), Qos::BestEffort).unwrap();
        assert_eq!((be.cpu_shares, be.cpu_quota, be.memory), (2, None, None));
    }
}
