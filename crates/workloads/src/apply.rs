//! `apply`: a manifest's documents, validated whole before anything is made ([`crius_pod::validate::strict`]),
//! then each created, left unchanged, or updated as the API server allows: a pod's containers' resources
//! only (through a resize), a workload's spec (its controller follows), a ConfigMap's or Secret's data.

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use crate::{Entry, Error, Kind, Service, key, record, status};
use crius_pod::manifest::PodDef;

/// What apply did with one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// kubectl's `kind.group` (`pod`, `job.batch`).
    pub kind: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// `created`, `configured` or `unchanged`.
    pub action: &'static str,
}

/// The engine's definition of a kept pod.
pub(super) fn def_of(pod: &Pod) -> Result<PodDef, crius_pod::Error> {
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": pod.metadata,
        "spec": pod.spec,
    });
    let mut m = crius_pod::manifest::parse(&doc.to_string(), "the pod's record")?;
    m.pods
        .pop()
        .ok_or_else(|| crius_pod::Error::manifest("the pod's record", "no pod"))
}

/// The documents of `text`, as JSON.
fn documents(text: &str, source: &str) -> Result<Vec<serde_json::Value>, Error> {
    let mut out = Vec::new();
    for (n, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let bad = |e: String| Error::invalid(format!("{source}, document {}: {e}", n + 1));
        let mut v = serde_yaml_ng::Value::deserialize(doc).map_err(|e| bad(e.to_string()))?;
        crius_pod::manifest::octal_modes(&mut v);
        if v.is_null() {
            continue;
        }
        out.push(serde_json::to_value(&v).map_err(|e| bad(e.to_string()))?);
    }
    Ok(out)
}

/// A pod's spec as applied, without what the node set (`nodeName`).
fn applied_spec(pod: &Pod) -> serde_json::Value {
    let mut spec = pod.spec.clone().unwrap_or_default();
    spec.node_name = None;
    serde_json::to_value(spec).unwrap_or_default()
}

/// `spec` without its containers' resources.
fn without_resources(mut spec: serde_json::Value) -> serde_json::Value {
    for list in ["containers", "initContainers"] {
        if let Some(cs) = spec.get_mut(list).and_then(|c| c.as_array_mut()) {
            for c in cs {
                if let Some(c) = c.as_object_mut() {
                    c.remove("resources");
                }
            }
        }
    }
    spec
}

impl Service {
    /// Applies the documents of `text` (`source` names it in errors); with `dry_run`, only validates.
    pub fn apply(&self, text: &str, source: &str, dry_run: bool) -> Result<Vec<Applied>, Error> {
        crius_pod::validate::strict(text, source).map_err(Error::invalid)?;
        let docs = documents(text, source)?;
        // Everything is checked before anything is made.
        let mut plan = Vec::new();
        for (n, v) in docs.into_iter().enumerate() {
            let at = format!("{source}, document {}", n + 1);
            let kind = v.get("kind").and_then(|k| k.as_str()).unwrap_or("");
            let kind = Kind::of_object(kind)
                .ok_or_else(|| Error::invalid(format!("{at}: kind {kind:?} is not kept by crius")))?;
            if kind == Kind::Pod {
                let pod: Pod =
                    serde_json::from_value(v.clone()).map_err(|e| Error::invalid(format!("{at}: {e}")))?;
                def_of(&pod).map_err(|e| Error::invalid(format!("{at}: {e}")))?;
                self.check_pod_update(&pod, &at)?;
            } else {
                crius_pod::manifest::parse(&v.to_string(), &at).map_err(Error::invalid)?;
                self.check_object_update(kind, &v, &at)?;
            }
            plan.push((kind, v));
        }
        let mut out = Vec::new();
        for (kind, v) in plan {
            let (_, namespace, name) = record::object_names(&v);
            let action = if dry_run {
                "unchanged"
            } else if kind == Kind::Pod {
                let pod: Pod = serde_json::from_value(v).map_err(Error::invalid)?;
                self.apply_pod(pod)?
            } else {
                self.apply_object(kind, v)?
            };
            out.push(Applied {
                kind: kind.qualified(),
                namespace,
                name,
                action,
            });
        }
        Ok(out)
    }

    /// An update of a kept pod may change its containers' resources only.
    fn check_pod_update(&self, pod: &Pod, at: &str) -> Result<(), Error> {
        let (namespace, name) = record::names(&pod.metadata);
        let o = self.lock();
        let Some(e) = o.pods.get(&key(&namespace, &name)) else {
            return Ok(());
        };
        let (old, new) = (applied_spec(&e.record.pod), applied_spec(pod));
        if old != new && without_resources(old) != without_resources(new) {
            return Err(Error::invalid(format!(
                "{at}: The Pod {name:?} is invalid: spec: Forbidden: pod updates may not change fields other \
                 than the containers' resources (through the resize subresource); delete the pod and apply it \
                 again"
            )));
        }
        Ok(())
    }

    /// A Job's pod template cannot change.
    fn check_object_update(&self, kind: Kind, v: &serde_json::Value, at: &str) -> Result<(), Error> {
        if kind != Kind::Job {
            return Ok(());
        }
        let (_, namespace, name) = record::object_names(v);
        let o = self.lock();
        if let Some(old) = o.others.get(&format!("Job/{namespace}/{name}"))
            && old.pointer("/spec/template") != v.pointer("/spec/template")
        {
            return Err(Error::invalid(format!(
                "{at}: The Job {name:?} is invalid: spec.template: Invalid value: field is immutable"
            )));
        }
        Ok(())
    }

    fn apply_pod(&self, pod: Pod) -> Result<&'static str, Error> {
        let (namespace, name) = record::names(&pod.metadata);
        let k = key(&namespace, &name);
        let old = self.lock().pods.get(&k).map(|e| applied_spec(&e.record.pod));
        match old {
            None => {
                self.create_pod(pod)?;
                Ok("created")
            }
            Some(old) if old == applied_spec(&pod) => Ok("unchanged"),
            Some(_) => {
                let patch = serde_json::json!({"spec": {
                    "containers": pod.spec.as_ref().map(|s| &s.containers),
                    "initContainers": pod.spec.as_ref().and_then(|s| s.init_containers.as_ref()),
                }});
                self.resize(&namespace, &name, &patch.to_string(), "strategic")?;
                Ok("configured")
            }
        }
    }

    /// Makes pod `pod` (from a manifest or a controller), admits it to the node and starts it.
    pub(super) fn create_pod(&self, mut pod: Pod) -> Result<String, Error> {
        let m = &mut pod.metadata;
        m.namespace.get_or_insert_with(|| "default".into());
        m.uid = Some(crius_pod::node::uuid());
        m.creation_timestamp = Some(status::now());
        m.resource_version = Some("1".into());
        pod.status = None;
        let def = def_of(&pod).map_err(Error::invalid)?;
        status::initial(&mut pod, &self.inner.node);
        let (namespace, name) = record::names(&pod.metadata);
        let k = key(&namespace, &name);
        let rejected = {
            let mut o = self.lock();
            if o.pods.contains_key(&k) {
                return Err(Error::AlreadyExists {
                    kind: Kind::Pod,
                    name,
                });
            }
            let rejected = crate::resize::admit_new(&o, &pod, self.inner.settings.engine.allocatable);
            if let Some((reason, message)) = &rejected
                && let Some(s) = pod.status.as_mut()
            {
                s.phase = Some("Failed".into());
                s.reason = Some(reason.clone());
                s.message = Some(message.clone());
                status::refresh(&mut pod);
            }
            let entry = Entry {
                record: record::PodRecord {
                    pod: pod.clone(),
                    events: Vec::new(),
                },
                def,
                controls: None,
            };
            self.persist(&entry);
            o.pods.insert(k.clone(), entry);
            rejected.is_some()
        };
        self.changed("ADDED", &pod);
        if !rejected {
            self.spawn(&k);
        }
        Ok(name)
    }

    pub(super) fn apply_object(&self, kind: Kind, mut v: serde_json::Value) -> Result<&'static str, Error> {
        let (_, namespace, name) = record::object_names(&v);
        let k = format!("{}/{namespace}/{name}", kind.name());
        let old = self.lock().others.get(&k).cloned();
        let content = |v: &serde_json::Value| {
            let mut c = v.clone();
            if let Some(o) = c.as_object_mut() {
                o.remove("metadata");
                o.remove("status");
            }
            (c, v.pointer("/metadata/labels").cloned())
        };
        let action = match &old {
            Some(old) if content(old) == content(&v) => return Ok("unchanged"),
            Some(old) => {
                v["metadata"]["uid"] = old["metadata"]["uid"].clone();
                v["metadata"]["creationTimestamp"] = old["metadata"]["creationTimestamp"].clone();
                let generation = old
                    .pointer("/metadata/generation")
                    .and_then(|g| g.as_i64())
                    .unwrap_or(1);
                v["metadata"]["generation"] = (generation + 1).into();
                if let Some(s) = old.get("status") {
                    v["status"] = s.clone();
                }
                "configured"
            }
            None => {
                v["metadata"]["uid"] = crius_pod::node::uuid().into();
                v["metadata"]["creationTimestamp"] = serde_json::to_value(status::now()).unwrap_or_default();
                v["metadata"]["generation"] = 1.into();
                "created"
            }
        };
        v["metadata"]["namespace"] = namespace.into();
        self.inner.store.records.save_object(&v)?;
        self.lock().others.insert(k, v);
        self.inner.store.wake.notify_one();
        Ok(action)
    }
}
