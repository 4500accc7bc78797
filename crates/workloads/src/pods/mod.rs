//! The Pod kind's part of the service: its verbs (create and apply, get, delete, resize, logs, events) and
//! the engine plumbing of each pod (its engine started, its events made status, its end, its removal). The
//! workload controllers make and remove pods only through [`PodControl`], which [`Pods`] implements.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodSpec};
use tokio::sync::mpsc;
use tonic::transport::Channel;

use crate::store::{Entry, Store};
use crate::{Error, Kind, key, record, status};
use crius_pod::engine::{Control, Given, Options};
use crius_pod::manifest::PodDef;
use crius_pod::report::Event;
use events::{event, kube_event, push_event};

mod checkpoint;
mod events;
mod logs;
pub(crate) mod resize;

/// What a workload controller may do with pods: make one, and begin one's deletion.
pub(crate) trait PodControl: Send + Sync {
    /// Makes pod `pod`, admits it to the node and starts it; its name.
    fn make(&self, pod: Pod) -> Result<String, Error>;
    /// Begins the deletion of pod `k` (`namespace/name`), within `grace_s` (its own grace period when None).
    fn remove(&self, k: &str, grace_s: Option<i64>) -> Result<(), Error>;
}

struct Inner {
    store: Arc<Store>,
    /// How the engine runs pods; its `allocatable` is what admission and resizes measure against too.
    engine: Options,
    /// The CRI runtime (criusd's own socket).
    channel: Channel,
    /// This node's name.
    node: String,
}

/// The pods' part; clones share it.
#[derive(Clone)]
pub(crate) struct Pods {
    inner: Arc<Inner>,
}

impl PodControl for Pods {
    fn make(&self, pod: Pod) -> Result<String, Error> {
        self.create(pod)
    }

    fn remove(&self, k: &str, grace_s: Option<i64>) -> Result<(), Error> {
        self.delete(k, grace_s)
    }
}

/// The engine's definition of a kept pod (its record's metadata and spec, read as a manifest's pod).
pub(crate) fn def_of(pod: &Pod) -> Result<PodDef, crius_pod::Error> {
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

impl Pods {
    /// The pods' part over `store`, whose engines run as `engine` says over `channel`.
    pub(crate) fn new(store: Arc<Store>, engine: Options, channel: Channel) -> Pods {
        Pods {
            inner: Arc::new(Inner {
                store,
                engine,
                channel,
                node: crius_pod::node::hostname(),
            }),
        }
    }

    fn store(&self) -> &Store {
        &self.inner.store
    }

    fn persist(&self, entry: &Entry) {
        self.store().persist(entry);
    }

    fn changed(&self, kind: &'static str, pod: &Pod) {
        self.store().changed(kind, pod);
    }

    /// Takes back the pods of the records: a running one is adopted by its engine, a finished one being
    /// deleted is removed, a live one being deleted is stopped.
    pub(crate) fn take_back(&self, pods: Vec<record::PodRecord>) {
        for r in pods {
            let (namespace, name) = record::names(&r.pod.metadata);
            let def = match def_of(&r.pod) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("pod service: pod {namespace}/{name}: {e}");
                    continue;
                }
            };
            let phase = r.pod.status.as_ref().and_then(|s| s.phase.clone());
            let deleting = r.pod.metadata.deletion_timestamp.is_some();
            let k = key(&namespace, &name);
            self.store().pods().insert(
                k.clone(),
                Entry {
                    record: r,
                    def,
                    controls: None,
                },
            );
            let finished = matches!(phase.as_deref(), Some("Succeeded" | "Failed"));
            if finished && deleting {
                self.forget(&k);
            } else if !finished {
                self.spawn(&k);
                if deleting {
                    self.stop(&k, None);
                }
            }
        }
    }

    /// The pods kept, as the API gives them, that `wanted` takes.
    pub(crate) fn list(&self, wanted: impl Fn(&Pod) -> bool) -> Vec<Pod> {
        self.store()
            .pods()
            .values()
            .map(|e| &e.record.pod)
            .filter(|p| wanted(p))
            .cloned()
            .collect()
    }

    /// Whether pod `k` is kept.
    pub(crate) fn has(&self, k: &str) -> bool {
        self.store().pods().contains_key(k)
    }

    /// Starts the engine on pod `k`.
    fn spawn(&self, k: &str) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (def, given) = {
            let mut o = self.store().pods();
            let Some(e) = o.get_mut(k) else { return };
            e.controls = Some(tx);
            let m = &e.record.pod.metadata;
            (
                e.def.clone(),
                Given {
                    uid: m.uid.clone().unwrap_or_default(),
                    name: m.name.clone().unwrap_or_default(),
                },
            )
        };
        let (me, k) = (self.clone(), k.to_string());
        tokio::spawn(async move {
            let manifest = me.store().kept_config();
            let on = {
                let (me, k) = (me.clone(), k.clone());
                move |e: Event| me.on_event(&k, &e)
            };
            let result = crius_pod::engine::run_as(
                me.inner.channel.clone(),
                &me.inner.engine,
                &def,
                &manifest,
                given,
                rx,
                on,
            )
            .await;
            me.finished(&k, result);
        });
    }

    /// What the engine of pod `k` said.
    fn on_event(&self, k: &str, e: &Event) {
        if self.store().closing() {
            return;
        }
        let mut o = self.store().pods();
        let Some(entry) = o.get_mut(k) else { return };
        status::on_event(&mut entry.record.pod, e);
        resize::on_event(&mut entry.record.pod, e);
        if let Some(ev) = kube_event(&entry.record.pod, e, &self.inner.node) {
            push_event(&mut entry.record.events, ev);
        }
        self.persist(entry);
        let pod = entry.record.pod.clone();
        drop(o);
        self.changed("MODIFIED", &pod);
        if matches!(
            e,
            Event::Exited { .. } | Event::Ready { .. } | Event::Readiness { .. }
        ) {
            self.store().wake.notify_one();
        }
    }

    /// Pod `k`'s engine returned.
    fn finished(&self, k: &str, result: Result<crius_pod::Report, crius_pod::Error>) {
        if self.store().closing() {
            return;
        }
        let mut o = self.store().pods();
        let Some(entry) = o.get_mut(k) else { return };
        entry.controls = None;
        let deleting = entry.record.pod.metadata.deletion_timestamp.is_some();
        match &result {
            Ok(report) => status::finished(&mut entry.record.pod, report),
            Err(e) => {
                if let Some(s) = entry.record.pod.status.as_mut() {
                    s.phase = Some("Failed".into());
                    s.reason = Some("Error".into());
                    s.message = Some(e.to_string());
                }
                let ev = event(
                    &entry.record.pod,
                    "Warning",
                    "Failed",
                    e.to_string(),
                    None,
                    &self.inner.node,
                );
                push_event(&mut entry.record.events, ev);
                status::refresh(&mut entry.record.pod);
            }
        }
        if deleting {
            drop(o);
            self.forget(k);
        } else {
            self.persist(entry);
            let pod = entry.record.pod.clone();
            drop(o);
            self.changed("MODIFIED", &pod);
        }
        self.store().wake.notify_one();
    }

    /// Removes pod `k` for good: its record and its log directory.
    fn forget(&self, k: &str) {
        let Some(entry) = self.store().pods().remove(k) else {
            return;
        };
        let pod = entry.record.pod;
        let (namespace, name) = record::names(&pod.metadata);
        if let Err(e) = self.store().records.remove_pod(&namespace, &name) {
            tracing::warn!("pod service: {e}");
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let logs = self
            .inner
            .engine
            .log_root
            .join(format!("{namespace}_{name}_{uid}"));
        let _ = std::fs::remove_dir_all(logs);
        self.changed("DELETED", &pod);
        self.store().wake.notify_one();
    }

    /// Asks pod `k`'s engine to terminate it (within `grace_s`, else its own grace period).
    fn stop(&self, k: &str, grace_s: Option<i64>) {
        let o = self.store().pods();
        if let Some(tx) = o.get(k).and_then(|e| e.controls.as_ref()) {
            let _ = tx.send(match grace_s {
                Some(grace_s) => Control::StopWithin { grace_s },
                None => Control::Stop,
            });
        }
    }

    /// Begins pod `k`'s deletion.
    pub(crate) fn delete(&self, k: &str, grace_s: Option<i64>) -> Result<(), Error> {
        let running = {
            let mut o = self.store().pods();
            let Some(e) = o.get_mut(k) else {
                let name = k.split_once('/').map_or(k, |(_, n)| n);
                return Err(Error::NotFound {
                    kind: Kind::Pod,
                    name: name.into(),
                });
            };
            let m = &mut e.record.pod.metadata;
            if m.deletion_timestamp.is_none() {
                m.deletion_timestamp = Some(status::now());
                let grace = grace_s
                    .or(e.def.spec.termination_grace_period_seconds)
                    .unwrap_or(30);
                m.deletion_grace_period_seconds = Some(grace);
                self.persist(e);
            }
            let pod = e.record.pod.clone();
            let running = e.controls.is_some();
            drop(o);
            self.changed("MODIFIED", &pod);
            running
        };
        if running {
            self.stop(k, grace_s.map(|g| g.max(0)));
        } else {
            self.forget(k);
        }
        Ok(())
    }

    /// An update of a kept pod may change its containers' resources only.
    pub(crate) fn check_update(&self, pod: &Pod, at: &str) -> Result<(), Error> {
        let (namespace, name) = record::names(&pod.metadata);
        let o = self.store().pods();
        let Some(e) = o.get(&key(&namespace, &name)) else {
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

    /// Applies pod `pod`: created, unchanged, or its containers' resources resized.
    pub(crate) fn apply(&self, pod: Pod) -> Result<&'static str, Error> {
        let (namespace, name) = record::names(&pod.metadata);
        let k = key(&namespace, &name);
        let old = self.store().pods().get(&k).map(|e| applied_spec(&e.record.pod));
        match old {
            None => {
                self.create(pod)?;
                Ok("created")
            }
            Some(old) if old == applied_spec(&pod) => Ok("unchanged"),
            Some(_) => {
                // A strategic merge of the new containers (merged by name) into the kept ones.
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
    pub(crate) fn create(&self, mut pod: Pod) -> Result<String, Error> {
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
            let mut o = self.store().pods();
            if o.contains_key(&k) {
                return Err(Error::AlreadyExists {
                    kind: Kind::Pod,
                    name,
                });
            }
            let rejected = resize::admit_new(&o, &pod, self.inner.engine.allocatable);
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
            o.insert(k.clone(), entry);
            rejected.is_some()
        };
        self.changed("ADDED", &pod);
        if !rejected {
            self.spawn(&k);
        }
        Ok(name)
    }
}
