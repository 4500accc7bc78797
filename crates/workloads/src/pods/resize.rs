//! The resize subresource, as Kubernetes 1.36 has it (KEP-1287): a patch of a pod's containers' cpu and
//! memory, checked as the API server checks it (nothing else may change, nor the QoS class; regular init
//! containers are not resizable), then admitted by the node as kubelet admits it: a pod whose new requests
//! pass what the node offers at all is `PodResizePending`/`Infeasible`; one that would fit once other pods
//! free their share is `Deferred` and tried again, oldest first, when something changes; one that fits is
//! allocated (`allocatedResources`) and actuated by the engine in place or by a restart as its resizePolicy
//! says, `PodResizeInProgress` meanwhile; a refusal by the runtime keeps `PodResizeInProgress` with reason
//! `Error` and the runtime's message. `status.containerStatuses[].resources` is what was actuated.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, ResourceRequirements};
use serde_json::Value;

use super::Pods;
use crate::patch::{json_patch, merge, strategic};
use crate::store::PodMap;
use crate::{Allocatable, Error, Kind, key, status};
use crius_pod::engine::Control;
use crius_pod::report::Event;

const PENDING: &str = "PodResizePending";
const IN_PROGRESS: &str = "PodResizeInProgress";

/// The cpu (milli) and memory (bytes) that pod `pod` asks of the node: its containers' and sidecars'
/// requests (the allocated ones where `allocated`), or its largest regular init container's if more.
fn requests(pod: &Pod, allocated: bool) -> (u64, u64) {
    let spec = pod.spec.clone().unwrap_or_default();
    let alloc: BTreeMap<String, BTreeMap<String, _>> = pod
        .status
        .iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .filter_map(|c| c.allocated_resources.clone().map(|a| (c.name.clone(), a)))
        .collect();
    let of = |c: &k8s_openapi::api::core::v1::Container| {
        let r = match alloc.get(&c.name).filter(|_| allocated) {
            Some(a) => Some(a.clone()),
            None => c.resources.as_ref().and_then(|r| r.requests.clone()),
        }
        .unwrap_or_default();
        let cpu = r
            .get("cpu")
            .and_then(|q| crius_pod::quantity::milli_cpu(q).ok())
            .unwrap_or(0);
        let mem = r
            .get("memory")
            .and_then(|q| crius_pod::quantity::value(q).ok())
            .unwrap_or(0);
        (cpu, mem)
    };
    let (mut cpu, mut mem) = (0, 0);
    let (mut init_cpu, mut init_mem) = (0, 0);
    for c in spec.init_containers.iter().flatten() {
        let (a, b) = of(c);
        if c.restart_policy.as_deref() == Some("Always") {
            cpu += a;
            mem += b;
        } else {
            init_cpu = init_cpu.max(cpu + a);
            init_mem = init_mem.max(mem + b);
        }
    }
    for c in &spec.containers {
        let (a, b) = of(c);
        cpu += a;
        mem += b;
    }
    (cpu.max(init_cpu), mem.max(init_mem))
}

/// What the node's other live pods hold.
fn used(o: &PodMap, except: &str) -> (u64, u64) {
    o.iter()
        .filter(|(k, e)| {
            k.as_str() != except
                && !matches!(
                    e.record.pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                    Some("Succeeded" | "Failed")
                )
        })
        .map(|(_, e)| requests(&e.record.pod, true))
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

fn short_of(want: (u64, u64), used: (u64, u64), node: Allocatable) -> Option<(&'static str, u64, u64, u64)> {
    if used.0 + want.0 > node.milli_cpu {
        return Some(("cpu", want.0, used.0, node.milli_cpu));
    }
    if used.1 + want.1 > node.memory {
        return Some(("memory", want.1, used.1, node.memory));
    }
    None
}

/// kubelet's admission of a new pod: None when it fits, else the reason (`OutOfcpu`) and message.
pub(super) fn admit_new(o: &PodMap, pod: &Pod, node: Allocatable) -> Option<(String, String)> {
    let (namespace, name) = crate::record::names(&pod.metadata);
    let (res, want, used, cap) = short_of(requests(pod, false), used(o, &key(&namespace, &name)), node)?;
    Some((
        format!("Out{res}"),
        format!(
            "Pod was rejected: Node didn't have enough resource: {res}, requested: {want}, used: {used}, \
             capacity: {cap}"
        ),
    ))
}

fn condition(kind: &str, reason: &str, message: String) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: "True".into(),
        reason: (!reason.is_empty()).then(|| reason.into()),
        message: (!message.is_empty()).then_some(message),
        last_transition_time: Some(status::now()),
        last_probe_time: Some(status::now()),
        ..Default::default()
    }
}

/// The containers whose spec resources differ from what was actuated, with their new resources.
fn to_actuate(pod: &Pod) -> Vec<(String, ResourceRequirements)> {
    let spec = pod.spec.clone().unwrap_or_default();
    let actual: BTreeMap<String, Option<ResourceRequirements>> = pod
        .status
        .iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .map(|c| (c.name.clone(), c.resources.clone()))
        .collect();
    spec.init_containers
        .iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .chain(&spec.containers)
        .filter(|c| {
            let want = c.resources.clone().unwrap_or_default();
            actual.get(&c.name).cloned().flatten().unwrap_or_default() != want
        })
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// A resize event's effect on the pod's status.
pub(super) fn on_event(pod: &mut Pod, e: &Event) {
    let spec = pod.spec.clone().unwrap_or_default();
    let Some(st) = pod.status.as_mut() else { return };
    match e {
        Event::Resized { name, .. } => {
            let want = status::spec_of(&spec, name).and_then(|c| c.resources.clone());
            if let Some(c) = status::statuses(st, name) {
                c.resources = Some(want.clone().unwrap_or_default());
                c.allocated_resources = want.and_then(|r| r.requests);
            }
            if to_actuate(pod).is_empty()
                && let Some(st) = pod.status.as_mut()
            {
                status::clear_condition(st, IN_PROGRESS);
            }
        }
        Event::ResizeFailed { error, .. } => {
            status::set_condition(st, condition(IN_PROGRESS, "Error", error.clone()));
        }
        Event::Started { name, resources, .. } => {
            // A container runs with what the engine started it with (a resize allocated meanwhile is
            // actuated after).
            if let Some(c) = status::statuses(st, name) {
                c.resources = Some(resources.clone().unwrap_or_default());
            }
        }
        _ => {}
    }
}

impl Pods {
    /// The resize subresource: patches pod `namespace/name`'s containers' resources (`patch_type`
    /// `strategic`, `merge` or `json`), then admits and actuates it. Returns the pod.
    pub fn resize(&self, namespace: &str, name: &str, patch: &str, patch_type: &str) -> Result<Value, Error> {
        let namespace = crate::ns(namespace);
        let k = key(namespace, name);
        let body: Value = serde_yaml_ng::from_str(patch)
            .map_err(|e| Error::invalid(format!("the patch is not JSON or YAML: {e}")))?;
        let mut o = self.store().pods();
        let entry = o.get_mut(&k).ok_or_else(|| Error::NotFound {
            kind: Kind::Pod,
            name: name.into(),
        })?;
        let mut v = serde_json::to_value(&entry.record.pod).unwrap_or_default();
        // The kept pod as its JSON reads back, as the patched one is read (Kubernetes' times are written to the
        // second): what differs between the two is the patch.
        let old: Pod = serde_json::from_value(v.clone()).unwrap_or_else(|_| entry.record.pod.clone());
        let invalid = |m: String| Error::invalid(format!("Pod {name:?} is invalid: {m}"));
        match patch_type {
            "" | "strategic" => strategic(&mut v, &body).map_err(invalid)?,
            "merge" => merge(&mut v, &body),
            "json" => json_patch(&mut v, &body).map_err(invalid)?,
            other => {
                return Err(Error::invalid(format!(
                    "patch type {other:?} (strategic, merge or json)"
                )));
            }
        }
        let new: Pod = serde_json::from_value(v).map_err(|e| invalid(e.to_string()))?;
        check(&old, &new).map_err(invalid)?;
        if old
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Succeeded" || p == "Failed")
        {
            return Err(invalid(
                "spec: Forbidden: a pod that has completed cannot be resized".into(),
            ));
        }
        entry.record.pod.spec = new.spec;
        if let Ok(d) = super::def_of(&entry.record.pod) {
            entry.def = d;
        }
        if let Some(st) = entry.record.pod.status.as_mut() {
            status::clear_condition(st, PENDING);
            status::clear_condition(st, IN_PROGRESS);
        }
        let node = self.inner.engine.allocatable;
        decide(&mut o, &k, node);
        let entry = o.get(&k).ok_or_else(|| Error::NotFound {
            kind: Kind::Pod,
            name: name.into(),
        })?;
        self.persist(entry);
        let pod = entry.record.pod.clone();
        drop(o);
        self.changed("MODIFIED", &pod);
        Ok(crate::pod_json(&pod))
    }

    /// Tries the Deferred resizes again, oldest first.
    pub(crate) fn retry_deferred(&self) {
        let mut o = self.store().pods();
        let mut waiting: Vec<(String, Option<k8s_openapi::jiff::Timestamp>)> = o
            .iter()
            .filter_map(|(k, e)| {
                let c = e
                    .record
                    .pod
                    .status
                    .as_ref()?
                    .conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == PENDING && c.reason.as_deref() == Some("Deferred"))?;
                Some((k.clone(), c.last_transition_time.as_ref().map(|t| t.0)))
            })
            .collect();
        waiting.sort_by_key(|(_, t)| *t);
        let node = self.inner.engine.allocatable;
        let mut moved = Vec::new();
        for (k, _) in waiting {
            if decide(&mut o, &k, node)
                && let Some(e) = o.get(&k)
            {
                self.persist(e);
                moved.push(e.record.pod.clone());
            }
        }
        drop(o);
        for p in moved {
            self.changed("MODIFIED", &p);
        }
    }
}

/// What the API server refuses in a resize.
fn check(old: &Pod, new: &Pod) -> Result<(), String> {
    let strip = |p: &Pod| {
        let mut s = p.spec.clone();
        if let Some(s) = s.as_mut() {
            for c in s
                .containers
                .iter_mut()
                .chain(s.init_containers.iter_mut().flatten())
            {
                c.resources = None;
                c.resize_policy = None;
            }
        }
        (s, p.metadata.clone())
    };
    if strip(old) != strip(new) {
        return Err("spec: Forbidden: only cpu and memory resources are mutable".into());
    }
    let (os, ns) = (
        old.spec.clone().unwrap_or_default(),
        new.spec.clone().unwrap_or_default(),
    );
    for (i, (a, b)) in os
        .init_containers
        .iter()
        .flatten()
        .zip(ns.init_containers.iter().flatten())
        .enumerate()
    {
        if a.resources != b.resources && a.restart_policy.as_deref() != Some("Always") {
            return Err(format!(
                "spec.initContainers[{i}].resources: Forbidden: resize of non-restartable init container {:?} is \
                 not supported",
                a.name
            ));
        }
    }
    for (i, c) in ns
        .init_containers
        .iter()
        .flatten()
        .chain(&ns.containers)
        .enumerate()
    {
        for m in c
            .resources
            .iter()
            .flat_map(|r| r.requests.iter().chain(r.limits.iter()))
        {
            for (res, q) in m {
                if res != "cpu" && res != "memory" {
                    let before = os
                        .init_containers
                        .iter()
                        .flatten()
                        .chain(&os.containers)
                        .find(|o| o.name == c.name)
                        .and_then(|o| o.resources.clone());
                    if before != c.resources {
                        return Err(format!(
                            "containers[{i}].resources: Forbidden: only cpu and memory resources are mutable ({res})"
                        ));
                    }
                }
                let ok = if res == "cpu" {
                    crius_pod::quantity::milli_cpu(q).is_ok()
                } else {
                    crius_pod::quantity::value(q).is_ok()
                };
                if !ok {
                    return Err(format!("{:?}: quantity {:?} of {res} is not valid", c.name, q.0));
                }
            }
        }
    }
    let (a, b) = (crius_pod::convert::qos(&os), crius_pod::convert::qos(&ns));
    match (a, b) {
        (Ok(a), Ok(b)) if a != b => Err(format!(
            "spec: Invalid value: {:?}: Pod QoS is immutable",
            b.to_string()
        )),
        (_, Err(e)) => Err(e.to_string()),
        _ => Ok(()),
    }
}

/// Admits pod `k`'s resize: Infeasible, Deferred, or allocated and sent to its engine. Whether it moved
/// past Deferred.
fn decide(o: &mut PodMap, k: &str, node: Allocatable) -> bool {
    let used = used(o, k);
    let Some(e) = o.get_mut(k) else { return false };
    let pod = &mut e.record.pod;
    let actuate = to_actuate(pod);
    if actuate.is_empty() {
        return false;
    }
    let want = requests(pod, false);
    let Some(st) = pod.status.as_mut() else {
        return false;
    };
    let (cpu, mem) = (node.milli_cpu, node.memory);
    if want.0 > cpu || want.1 > mem {
        let (res, w, c) = if want.0 > cpu {
            ("cpu", want.0, cpu)
        } else {
            ("memory", want.1, mem)
        };
        let m = format!("Node didn't have enough capacity: {res}, requested: {w}, capacity: {c}");
        status::set_condition(st, condition(PENDING, "Infeasible", m));
        return false;
    }
    if let Some((res, w, u, c)) = short_of(want, used, node) {
        let m = format!("Node didn't have enough resource: {res}, requested: {w}, used: {u}, capacity: {c}");
        status::set_condition(st, condition(PENDING, "Deferred", m));
        return false;
    }
    status::clear_condition(st, PENDING);
    for c in st
        .container_statuses
        .iter_mut()
        .flatten()
        .chain(st.init_container_statuses.iter_mut().flatten())
    {
        if let Some((_, r)) = actuate.iter().find(|(n, _)| n == &c.name) {
            c.allocated_resources = r.requests.clone();
        }
    }
    // Not running: it starts with its new resources.
    if let Some(tx) = &e.controls {
        status::set_condition(st, condition(IN_PROGRESS, "", String::new()));
        for (container, resources) in actuate {
            let _ = tx.send(Control::Resize { container, resources });
        }
    }
    true
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A pod of two containers, `app` with `cpu` and `mem` as requests and limits (Guaranteed), and `side`.
    pub(crate) fn pod(cpu: &str, mem: &str) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [
            {"name": "app", "image": "i", "resources": {
                "requests": {"cpu": cpu, "memory": mem}, "limits": {"cpu": cpu, "memory": mem}}},
            {"name": "side", "image": "i"}
        ]}})
    }

    /// A kept pod's times are finer than their JSON (to the second): a resize still finds nothing but the
    /// resources changed.
    #[tokio::test]
    async fn a_resize_of_a_kept_pod_with_fine_times_is_allowed() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(crate::store::Store::open(dir.path()).unwrap());
        let channel = tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy();
        let pods = Pods::new(store.clone(), Default::default(), channel);
        let mut p: Pod = serde_json::from_value(pod("500m", "512Mi")).unwrap();
        p.metadata.namespace = Some("default".into());
        p.metadata.creation_timestamp = Some(status::now());
        status::initial(&mut p, "node");
        let entry = crate::store::Entry {
            def: super::super::def_of(&p).unwrap(),
            record: crate::record::PodRecord {
                pod: p,
                events: Vec::new(),
            },
            controls: None,
        };
        store.pods().insert("default/p".into(), entry);
        let patch = r#"{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"800m"},"limits":{"cpu":"800m"}}}]}}"#;
        let got = pods.resize("default", "p", patch, "strategic").unwrap();
        assert_eq!(
            got["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "800m"
        );
    }

    #[test]
    fn only_cpu_and_memory_change_and_the_qos_class_stays() {
        let old: Pod = serde_json::from_value(pod("500m", "512Mi")).unwrap();
        let ok: Pod = serde_json::from_value(pod("800m", "512Mi")).unwrap();
        check(&old, &ok).unwrap();
        let mut image = pod("500m", "512Mi");
        image["spec"]["containers"][0]["image"] = "other".into();
        let e = check(&old, &serde_json::from_value(image).unwrap()).unwrap_err();
        assert!(e.contains("only cpu and memory"), "{e}");
        // Burstable to BestEffort: nobody asks for anything any more.
        let mut qos = pod("500m", "512Mi");
        qos["spec"]["containers"][0]["resources"] = json!({});
        let e = check(&old, &serde_json::from_value(qos).unwrap()).unwrap_err();
        assert!(e.contains("Pod QoS is immutable"), "{e}");
        let mut bad = pod("500m", "512Mi");
        bad["spec"]["containers"][0]["resources"]["limits"]["memory"] = "12xb".into();
        bad["spec"]["containers"][0]["resources"]["requests"]["memory"] = "12xb".into();
        assert!(
            check(&old, &serde_json::from_value(bad).unwrap())
                .unwrap_err()
                .contains("12xb")
        );
    }

    #[test]
    fn a_pod_asks_for_its_containers_and_sidecars_or_its_largest_init() {
        let p: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [
                {"name": "s", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "100m"}}},
                {"name": "big", "image": "i", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}}
            ],
            "containers": [{"name": "a", "image": "i", "resources": {"requests": {"cpu": "300m", "memory": "64Mi"}}}]
        }}))
        .unwrap();
        assert_eq!(requests(&p, false), (2100, 1 << 30));
        let node = Allocatable {
            milli_cpu: 3000,
            memory: 2 << 30,
        };
        assert_eq!(short_of((2100, 0), (0, 0), node), None);
        assert_eq!(
            short_of((2100, 0), (1000, 0), node),
            Some(("cpu", 2100, 1000, 3000))
        );
    }

    /// One configured figure, not the machine's, is both the downward API's "no limit" and admission's
    /// capacity: criusd puts `[pods]`'s allocatable in the engine's options, and the service admits by the same.
    #[test]
    fn the_downward_api_and_admission_use_the_configured_allocatable() {
        let machine = Allocatable::of_machine();
        let configured = Allocatable {
            milli_cpu: machine.milli_cpu + 1000,
            memory: machine.memory / 2 + 1,
        };
        let settings = crate::Settings {
            dir: "/nonexistent".into(),
            engine: crius_pod::Options {
                allocatable: configured,
                ..Default::default()
            },
        };
        let m = crius_pod::parse(
            r#"
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: c
    image: i
    env:
    - {name: CPU, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}
    - {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory}}}
"#,
            "t",
        )
        .unwrap();
        let def = &m.pods[0];
        let fields = crius_pod::env::PodFields {
            allocatable: settings.engine.allocatable,
            ..Default::default()
        };
        let env = crius_pod::env::build(def, &m, &def.spec.containers[0], &fields).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("CPU"), Some(configured.milli_cpu.to_string()));
        assert_eq!(get("MEM"), Some(configured.memory.to_string()));
        // A pod asking for more cpu than the machine has, but within the configured figure, is admitted; one
        // asking for more memory than configured (though the machine has it) is not.
        let asks = |cpu: u64, mem: u64| -> Pod {
            serde_json::from_value(pod(&format!("{cpu}m"), &mem.to_string())).unwrap()
        };
        let o = PodMap::default();
        let node = settings.engine.allocatable;
        assert_eq!(admit_new(&o, &asks(machine.milli_cpu + 500, 1), node), None);
        let (reason, message) = admit_new(&o, &asks(100, configured.memory + 1), node).unwrap();
        assert_eq!(reason, "Outmemory");
        assert!(
            message.contains(&format!("capacity: {}", configured.memory)),
            "{message}"
        );
    }
}
