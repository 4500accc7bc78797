//! In-place resize of a running pod's container (KEP-1287), as kubelet does it: the QoS class may not change;
//! regular init containers are not resizable; each changed resource (cpu, memory) follows the container's
//! `resizePolicy` (NotRequired by default): with NotRequired for all that changed, the whole resource set goes to
//! UpdateContainerResources and the runtime applies it to the running process (a memory limit below current
//! usage is refused by the runtime and nothing changes); with RestartContainer for one of them, the container
//! is stopped and started again with the new resources. The values the runtime reports back are in the event.
//! The pod's cgroup, where there is one, follows in the KEP's order: what grows before the container, what
//! shrinks after it, and back as it was when the runtime refuses.

use crius_api::cri;
use k8s_openapi::api::core::v1::ResourceRequirements;

use super::slot::State;
use super::{MIN_GRACE_S, Run};
use crate::Error;
use crate::cgroups::{self, PodLimits};
use crate::convert;
use crate::manifest::RestartPolicy;
use crate::report::{Event, Role};

/// Whether `resource` (`cpu`, `memory`) differs between two requirement sets, in requests or limits.
fn changed(a: &ResourceRequirements, b: &ResourceRequirements, resource: &str) -> bool {
    let get = |r: &ResourceRequirements, limits: bool| {
        let m = if limits { &r.limits } else { &r.requests };
        m.as_ref().and_then(|m| m.get(resource)).map(|q| q.0.clone())
    };
    get(a, true) != get(b, true) || get(a, false) != get(b, false)
}

/// `cpu.max`-like text of the runtime's applied resources.
fn applied(r: &cri::LinuxContainerResources) -> String {
    let quota = if r.cpu_quota > 0 {
        r.cpu_quota.to_string()
    } else {
        "max".into()
    };
    let memory = if r.memory_limit_in_bytes > 0 {
        r.memory_limit_in_bytes.to_string()
    } else {
        "max".into()
    };
    format!(
        "cpu quota {quota}/{} shares {}, memory limit {memory}",
        r.cpu_period, r.cpu_shares
    )
}

impl<E: FnMut(Event)> Run<'_, E> {
    /// Resizes container `name` to `new`; what happened (or why not) goes to the events.
    pub(super) async fn resize(&mut self, name: &str, new: ResourceRequirements) {
        if let Err(e) = self.try_resize(name, new).await {
            (self.on)(Event::ResizeFailed {
                name: name.into(),
                error: e.to_string(),
            });
        }
    }

    async fn try_resize(&mut self, name: &str, new: ResourceRequirements) -> Result<(), Error> {
        let i = self
            .slots
            .iter()
            .position(|s| s.spec.name == name)
            .ok_or_else(|| Error::NoSuchContainer(name.into()))?;
        let s = &self.slots[i];
        let old = s.spec.resources.clone().unwrap_or_default();
        if old == new {
            return Ok(());
        }
        if s.role == Role::Init {
            return Err(Error::NotResizable("regular init containers cannot be resized"));
        }
        let mut spec = self.def.spec.clone();
        let slots = &self.slots;
        let current = |c: &mut k8s_openapi::api::core::v1::Container| {
            if let Some(s) = slots.iter().find(|s| s.spec.name == c.name) {
                c.resources = if s.spec.name == name {
                    Some(new.clone())
                } else {
                    s.spec.resources.clone()
                };
            }
        };
        spec.containers.iter_mut().for_each(current);
        spec.init_containers.iter_mut().flatten().for_each(current);
        let qos = convert::qos(&spec)?;
        if qos != self.qos {
            return Err(Error::QosChange {
                from: self.qos,
                to: qos,
            });
        }
        let policy = |res: &str| {
            s.spec
                .resize_policy
                .iter()
                .flatten()
                .find(|p| p.resource_name == res)
                .map(|p| p.restart_policy.as_str())
                .unwrap_or("NotRequired")
        };
        let restart = ["cpu", "memory"]
            .into_iter()
            .any(|r| changed(&old, &new, r) && policy(r) == "RestartContainer");
        if restart && self.def.restart_policy == RestartPolicy::Never {
            return Err(Error::NotResizable(
                "resizePolicy RestartContainer in a pod whose restartPolicy is Never",
            ));
        }
        let pod_limits = cgroups::limits(&spec, qos)?;
        let mut c = s.spec.clone();
        c.resources = Some(new);
        let resources = self.cri_resources(s.role, &c)?;
        let role = s.role;
        let Some(id) = s.state.running_id().map(str::to_string) else {
            self.pod_cgroup_grow(pod_limits)?;
            self.pod_cgroup_settle(pod_limits)?;
            self.slots[i].spec = c;
            (self.on)(Event::Resized {
                name: name.into(),
                restarted: false,
                applied: "at its next start".into(),
            });
            return Ok(());
        };
        self.pod_cgroup_grow(pod_limits)?;
        if restart {
            self.slots[i].spec = c;
            let grace = self
                .def
                .spec
                .termination_grace_period_seconds
                .unwrap_or(30)
                .max(MIN_GRACE_S);
            (self.on)(Event::Stopping {
                name: name.into(),
                role,
                grace_s: grace,
            });
            self.rt
                .stop_container(cri::StopContainerRequest {
                    container_id: id.clone(),
                    timeout: grace,
                })
                .await
                .map_err(Error::cri("stopping it"))
                .inspect_err(|_| self.pod_cgroup_restore())?;
            let _ = self
                .rt
                .remove_container(cri::RemoveContainerRequest { container_id: id })
                .await;
            let s = &mut self.slots[i];
            s.state = State::NotStarted;
            s.attempt += 1;
            self.start(i).await;
            self.pod_cgroup_settle(pod_limits)?;
            let applied = match self.slots[i].state.container().map(str::to_string) {
                Some(id) => self.applied(&id).await,
                None => "not started".into(),
            };
            (self.on)(Event::Resized {
                name: name.into(),
                restarted: true,
                applied,
            });
            return Ok(());
        }
        self.rt
            .update_container_resources(cri::UpdateContainerResourcesRequest {
                container_id: id.clone(),
                linux: Some(resources),
                ..Default::default()
            })
            .await
            .map_err(Error::cri("UpdateContainerResources"))
            .inspect_err(|_| self.pod_cgroup_restore())?;
        self.pod_cgroup_settle(pod_limits)?;
        self.slots[i].spec = c;
        let applied = self.applied(&id).await;
        (self.on)(Event::Resized {
            name: name.into(),
            restarted: false,
            applied,
        });
        Ok(())
    }

    /// A resize's first write to the pod cgroup: what grows.
    fn pod_cgroup_grow(&mut self, new: PodLimits) -> Result<(), Error> {
        self.pod_cgroup.as_mut().map_or(Ok(()), |c| c.grow(new))
    }

    /// Its last: everything, once the container has its resources.
    fn pod_cgroup_settle(&mut self, new: PodLimits) -> Result<(), Error> {
        self.pod_cgroup.as_mut().map_or(Ok(()), |c| c.settle(new))
    }

    /// The pod cgroup as it was, after the runtime refused the container's part.
    fn pod_cgroup_restore(&mut self) {
        if let Some(Err(e)) = self.pod_cgroup.as_mut().map(|c| c.restore()) {
            (self.on)(Event::Note(e.to_string()));
        }
    }

    /// The resources the runtime reports for container `id`.
    async fn applied(&mut self, id: &str) -> String {
        let status = self
            .rt
            .container_status(cri::ContainerStatusRequest {
                container_id: id.into(),
                verbose: false,
            })
            .await;
        match status
            .ok()
            .and_then(|s| s.into_inner().status)
            .and_then(|s| s.resources)
            .and_then(|r| r.linux)
        {
            Some(r) => applied(&r),
            None => "(the runtime reports no resources)".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn req(cpu: &str, mem: &str) -> ResourceRequirements {
        ResourceRequirements {
            limits: Some(
                [
                    ("cpu".into(), Quantity(cpu.into())),
                    ("memory".into(), Quantity(mem.into())),
                ]
                .into(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn what_changed() {
        assert!(changed(&req("1", "1Gi"), &req("2", "1Gi"), "cpu"));
        assert!(!changed(&req("1", "1Gi"), &req("2", "1Gi"), "memory"));
        let r = cri::LinuxContainerResources {
            cpu_period: 100_000,
            cpu_quota: 150_000,
            cpu_shares: 512,
            ..Default::default()
        };
        assert_eq!(
            applied(&r),
            "cpu quota 150000/100000 shares 512, memory limit max"
        );
    }
}
