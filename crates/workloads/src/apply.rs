//! `apply`: a manifest's documents, validated whole before anything is made ([`crius_pod::validate::strict`]),
//! then each created, left unchanged, or updated as the API server allows: a pod's containers' resources
//! only (through a resize), a workload's spec (its controller follows), a ConfigMap's or Secret's data.

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use serde::Deserialize;

use k8s_openapi::api::batch::v1::Job;

use crate::object::{Kept, Object, kind_named, object_key};
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

/// The engine's definition of a kept pod (its record's metadata and spec, read as a manifest's pod).
pub(super) fn def_of(pod: &Pod) -> Result<PodDef, crius_pod::Error> {
    let doc = Pod {
        metadata: pod.metadata.clone(),
        spec: pod.spec.clone(),
        status: None,
    };
    let text = serde_json::to_string(&doc).unwrap_or_default();
    let mut m = crius_pod::manifest::parse(&text, "the pod's record")?;
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
fn applied_spec(pod: &Pod) -> PodSpec {
    let mut spec = pod.spec.clone().unwrap_or_default();
    spec.node_name = None;
    spec
}

/// `spec` without its containers' resources.
fn without_resources(mut spec: PodSpec) -> PodSpec {
    for c in spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten())
    {
        c.resources = None;
    }
    spec
}

/// One document of a manifest, typed.
enum Doc {
    Pod(Box<Pod>),
    Object(Box<Kept>),
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
            let kind = kind_named(&v);
            let kind = Kind::of_object(&kind)
                .ok_or_else(|| Error::invalid(format!("{at}: kind {kind:?} is not kept by crius")))?;
            let invalid = |e: &dyn std::fmt::Display| Error::invalid(format!("{at}: {e}"));
            let doc = if kind == Kind::Pod {
                let pod: Pod = serde_json::from_value(v).map_err(|e| invalid(&e))?;
                def_of(&pod).map_err(|e| invalid(&e))?;
                self.check_pod_update(&pod, &at)?;
                Doc::Pod(Box::new(pod))
            } else {
                crius_pod::manifest::parse(&v.to_string(), &at).map_err(Error::invalid)?;
                let w = Kept::from_json(kind, v).map_err(|e| invalid(&e))?;
                self.check_object_update(&w, &at)?;
                Doc::Object(Box::new(w))
            };
            plan.push((kind, doc));
        }
        let mut out = Vec::new();
        for (kind, doc) in plan {
            let (namespace, name) = match &doc {
                Doc::Pod(pod) => record::names(&pod.metadata),
                Doc::Object(w) => w.names(),
            };
            let action = match doc {
                _ if dry_run => "unchanged",
                Doc::Pod(pod) => self.apply_pod(*pod)?,
                Doc::Object(w) => self.apply_object(*w)?,
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
    fn check_object_update(&self, w: &Kept, at: &str) -> Result<(), Error> {
        let Object::Job(new) = &w.object else {
            return Ok(());
        };
        let (namespace, name) = w.names();
        let template = |j: &Job| j.spec.as_ref().map(|s| s.template.clone());
        let o = self.lock();
        if let Some(Object::Job(old)) = o
            .others
            .get(&object_key(Kind::Job, &namespace, &name))
            .map(|k| &k.object)
            && template(old) != template(new)
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

    /// Keeps object `w`: created, unchanged (what was applied and its labels are as kept), or configured (its
    /// uid, creation time and status stay, its generation goes up).
    pub(super) fn apply_object(&self, mut w: Kept) -> Result<&'static str, Error> {
        let k = w.key();
        let old = self.lock().others.get(&k).cloned();
        let (namespace, _) = w.names();
        let action = match old {
            Some(old) if old.content() == w.content() => return Ok("unchanged"),
            Some(old) => {
                let (was, m) = (old.object.meta(), w.object.meta_mut());
                m.uid.clone_from(&was.uid);
                m.creation_timestamp.clone_from(&was.creation_timestamp);
                m.generation = Some(was.generation.unwrap_or(1) + 1);
                w.object.take_status(old.object);
                if !old.status_extra.is_empty() {
                    w.status_extra = old.status_extra;
                }
                "configured"
            }
            None => {
                let m = w.object.meta_mut();
                m.uid = Some(crius_pod::node::uuid());
                m.creation_timestamp = Some(status::now());
                m.generation = Some(1);
                "created"
            }
        };
        w.object.meta_mut().namespace = Some(namespace);
        self.inner.store.records.save_object(&w)?;
        self.lock().others.insert(k, w);
        self.inner.store.wake.notify_one();
        Ok(action)
    }
}
