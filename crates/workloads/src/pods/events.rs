//! kubelet's events of a pod, as `kubectl describe` shows them: made from the engine's events (Pulling,
//! Started, BackOff, Killing, Unhealthy, ResizeCompleted...), a repeat counted up as kubelet's recorder does,
//! kept with the pod's record, and listed for an object (a workload's are its pods').

use k8s_openapi::api::core::v1::{Event as KubeEvent, ObjectReference, Pod};

use super::Pods;
use crate::{Kind, ns, record, status};
use crius_pod::report::Event;

impl Pods {
    /// The events of object `kind namespace/name`, oldest first (a workload's are its pods').
    pub(crate) fn events(&self, kind: Kind, namespace: &str, name: &str) -> Vec<serde_json::Value> {
        let namespace = ns(namespace);
        let o = self.store().pods();
        let mut out: Vec<&KubeEvent> = Vec::new();
        for e in o.values() {
            let (n, nm) = record::names(&e.record.pod.metadata);
            let owned = e
                .record
                .pod
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.name == name && kind.name() == r.kind);
            if n == namespace && ((kind == Kind::Pod && nm == name) || owned) {
                out.extend(&e.record.events);
            }
        }
        out.sort_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0));
        out.into_iter()
            .map(|e| serde_json::to_value(e).unwrap_or_default())
            .collect()
    }
}

pub(super) fn push_event(events: &mut Vec<KubeEvent>, e: KubeEvent) {
    // A repeat of the last one of its reason and message counts up, as kubelet's recorder does.
    if let Some(last) = events
        .iter_mut()
        .rev()
        .find(|o| o.reason == e.reason && o.message == e.message)
    {
        last.count = Some(last.count.unwrap_or(1) + 1);
        last.last_timestamp = e.last_timestamp;
        return;
    }
    events.push(e);
    if events.len() > record::MAX_EVENTS {
        events.remove(0);
    }
}

pub(super) fn event(
    pod: &Pod,
    kind: &str,
    reason: &str,
    message: String,
    container: Option<&str>,
    node: &str,
) -> KubeEvent {
    let now = status::now();
    let m = &pod.metadata;
    KubeEvent {
        type_: Some(kind.into()),
        reason: Some(reason.into()),
        message: Some(message),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some("kubelet".into()),
            host: Some(node.into()),
        }),
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: m.name.clone(),
            namespace: m.namespace.clone(),
            uid: m.uid.clone(),
            field_path: container.map(|c| {
                let list = match status::role(pod, c) {
                    Some(crius_pod::Role::Main) => "containers",
                    _ => "initContainers",
                };
                format!("spec.{list}{{{c}}}")
            }),
            ..Default::default()
        },
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(format!(
                "{}.{}",
                m.name.clone().unwrap_or_default(),
                crius_pod::node::name_suffix()
            )),
            namespace: m.namespace.clone(),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The kubelet event of an engine event, if kubelet records one.
pub(super) fn kube_event(pod: &Pod, e: &Event, node: &str) -> Option<KubeEvent> {
    let ev =
        |kind, reason, message: String, c: Option<&str>| Some(event(pod, kind, reason, message, c, node));
    match e {
        Event::Pulling(image) => ev("Normal", "Pulling", format!("Pulling image {image:?}"), None),
        Event::Started { name, .. } => ev(
            "Normal",
            "Started",
            format!("Started container {name}"),
            Some(name),
        ),
        Event::Failed { name, error } => ev("Warning", "Failed", error.clone(), Some(name)),
        Event::Restarting { name, .. } => ev(
            "Warning",
            "BackOff",
            format!("Back-off restarting failed container {name}"),
            Some(name),
        ),
        Event::Stopping { name, .. } => ev(
            "Normal",
            "Killing",
            format!("Stopping container {name}"),
            Some(name),
        ),
        Event::Readiness { name, ready: false } => ev(
            "Warning",
            "Unhealthy",
            "Readiness probe failed".into(),
            Some(name),
        ),
        Event::Resized { name, applied, .. } => ev(
            "Normal",
            "ResizeCompleted",
            format!("Container {name} resized: {applied}"),
            Some(name),
        ),
        Event::ResizeFailed { name, error } => ev("Warning", "ResizeError", error.clone(), Some(name)),
        Event::Note(n) => ev("Normal", "Note", n.clone(), None),
        _ => None,
    }
}
