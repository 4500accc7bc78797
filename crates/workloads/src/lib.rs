//! crius-workloads: the pod service, Kubernetes' API objects kept by criusd on one node (pods and their
//! workloads), their controllers, admission and status, and the `crius.pod.v1.PodService` gRPC adapter
//! ([`grpc`]); each pod is run by the pod engine of crius-pod ([`crius_pod::engine`]).
//!
//! The pod service: Kubernetes pods and their workloads on one node, kept by criusd. Each pod is a record
//! under criusd's root ([`record`]) and is led by the pod engine ([`crius_pod::engine::run_as`]) over criusd's own
//! CRI socket; its status is Kubernetes' PodStatus, moved by the engine's events ([`status`]). Workloads
//! (Job, Deployment, ReplicaSet, StatefulSet, DaemonSet) make and replace their pods (`controllers`);
//! resizes are admitted against the node's allocatable resources and actuated in place (`resize`); kubelet's
//! events of each pod are in `events`, where its logs are in `logs`. Every object is kept in one small shared
//! store (`store`: the objects behind one lock, their records, the watchers' channel, the controllers' wake-up).
//!
//! Pods outlive the service: when criusd stops or crashes, its shims keep the containers; at start-up the
//! records are read again and the engine takes each running pod back, its containers untouched
//! ([`crius_pod::engine::Given`]). Deleting a pod terminates it as kubelet does, then removes its record and logs.
//!
//! Objects are typed: pods as k8s-openapi's `Pod`, workloads, ConfigMaps and Secrets as their kinds' structs
//! (`object`), which the controllers and the API verbs read and change. JSON is left at the edges only:
//! - a manifest's documents are read as JSON, then typed (`apply`); the engine reads a pod, ConfigMap or Secret
//!   as a manifest's text (`apply::def_of`, `store::Store::kept_config`);
//! - what was applied is kept as JSON beside the typed object, and compared as such, so that a re-apply of the
//!   same manifest reads as unchanged and an older record writes back as it was (`object`'s doc says why);
//! - the template hash of a Deployment or ReplicaSet is that of the applied template's JSON (the names of the
//!   pods an older criusd made);
//! - patches are JSON by nature: the resize subresource's three patch types (`patch`), the strategic merge
//!   that applies a pod's new resources (`apply`), and `scale`'s merge patch of `spec.replicas` (each decoded,
//!   patched as JSON, decoded again);
//! - a ReplicaSet's `updatedReplicas`, which its typed status lacks, is kept as JSON (`object::Kept`);
//! - records on disk, the API's output, and events are Kubernetes' JSON.
//!
//! Crates: `json-patch` applies `kubectl patch`'s RFC 6902 and RFC 7386 patches (all six RFC 6902 operations,
//! where ours had four); the strategic merge stays ours (`patch`).

use std::path::PathBuf;
use std::sync::{Arc, MutexGuard};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{broadcast, mpsc};
use tonic::transport::Channel;

use crius_pod::engine::{Control, Given, Options};
pub use crius_pod::node::Allocatable;
use crius_pod::report::Event;
use events::{event, kube_event, push_event};

mod apply;
mod controllers;
mod cron;
mod error;
mod events;
pub mod grpc;
mod kinds;
mod logs;
mod object;
mod patch;
pub mod record;
mod resize;
pub mod status;
mod store;

pub use error::{Error, Result};
pub use kinds::Kind;
use object::Kept;
pub use store::Change;
use store::{Entry, Objects, Store};

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where its records go (`<criusd root>/pod-service`).
    pub dir: PathBuf,
    /// How the engine runs pods; its `allocatable` is what the node offers, which admission and resizes
    /// are measured against too.
    pub engine: Options,
}

struct Inner {
    settings: Settings,
    channel: Channel,
    store: Store,
    node: String,
    /// Set when criusd stops: what the engines see then (a runtime going away) is not the pods' news.
    closing: std::sync::atomic::AtomicBool,
}

/// The pod service; clones share it.
#[derive(Clone)]
pub struct Service {
    inner: Arc<Inner>,
}

/// `namespace/name`.
fn key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

fn ns(namespace: &str) -> &str {
    if namespace.is_empty() {
        "default"
    } else {
        namespace
    }
}

impl Service {
    fn lock(&self) -> MutexGuard<'_, Objects> {
        self.inner.store.lock()
    }

    /// Pods' changes as they happen.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.inner.store.subscribe()
    }

    fn changed(&self, kind: &'static str, pod: &Pod) {
        self.inner.store.changed(kind, pod);
    }

    fn persist(&self, entry: &Entry) {
        self.inner.store.persist(entry);
    }

    /// The pods that `kind namespace/name` owns.
    fn owned(&self, kind: &str, namespace: &str, name: &str) -> Vec<String> {
        self.inner.store.owned(kind, namespace, name)
    }

    /// Opens the records under `settings.dir`, takes back every pod they hold (running ones are adopted by
    /// the engine), and starts the controllers. `channel` reaches the CRI runtime (criusd's own socket).
    pub fn start(settings: Settings, channel: Channel) -> Result<Service, Error> {
        let store = Store::open(&settings.dir)?;
        let inner = Arc::new(Inner {
            settings,
            channel,
            store,
            node: crius_pod::node::hostname(),
            closing: false.into(),
        });
        let service = Service { inner };
        let (pods, others, bad) = service.inner.store.records.load();
        for b in bad {
            tracing::warn!("pod service: a record that does not parse was left alone: {b}");
        }
        {
            let mut o = service.lock();
            for w in others {
                o.others.insert(w.key(), w);
            }
        }
        for r in pods {
            let (namespace, name) = record::names(&r.pod.metadata);
            let def = match apply::def_of(&r.pod) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("pod service: pod {namespace}/{name}: {e}");
                    continue;
                }
            };
            let phase = r.pod.status.as_ref().and_then(|s| s.phase.clone());
            let deleting = r.pod.metadata.deletion_timestamp.is_some();
            let k = key(&namespace, &name);
            service.lock().pods.insert(
                k.clone(),
                Entry {
                    record: r,
                    def,
                    controls: None,
                },
            );
            let finished = matches!(phase.as_deref(), Some("Succeeded" | "Failed"));
            if finished && deleting {
                service.forget(&k);
            } else if !finished {
                service.spawn(&k);
                if deleting {
                    service.stop(&k, None);
                }
            }
        }
        tokio::spawn(controllers::run(service.clone()));
        Ok(service)
    }

    /// Stops listening to the engines: criusd is going away, and its pods stay as they are.
    pub fn close(&self) {
        self.inner
            .closing
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    fn closing(&self) -> bool {
        self.inner.closing.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Starts the engine on pod `k`.
    fn spawn(&self, k: &str) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (def, given) = {
            let mut o = self.lock();
            let Some(e) = o.pods.get_mut(k) else { return };
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
            let manifest = me.inner.store.kept_config();
            let on = {
                let (me, k) = (me.clone(), k.clone());
                move |e: Event| me.on_event(&k, &e)
            };
            let result = crius_pod::engine::run_as(
                me.inner.channel.clone(),
                &me.inner.settings.engine,
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
        if self.closing() {
            return;
        }
        let mut o = self.lock();
        let Some(entry) = o.pods.get_mut(k) else { return };
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
            self.inner.store.wake.notify_one();
        }
    }

    /// Pod `k`'s engine returned.
    fn finished(&self, k: &str, result: Result<crius_pod::Report, crius_pod::Error>) {
        if self.closing() {
            return;
        }
        let mut o = self.lock();
        let Some(entry) = o.pods.get_mut(k) else { return };
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
        self.inner.store.wake.notify_one();
    }

    /// Removes pod `k` for good: its record and its log directory.
    fn forget(&self, k: &str) {
        let Some(entry) = self.lock().pods.remove(k) else {
            return;
        };
        let pod = entry.record.pod;
        let (namespace, name) = record::names(&pod.metadata);
        if let Err(e) = self.inner.store.records.remove_pod(&namespace, &name) {
            tracing::warn!("pod service: {e}");
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let logs = self
            .inner
            .settings
            .engine
            .log_root
            .join(format!("{namespace}_{name}_{uid}"));
        let _ = std::fs::remove_dir_all(logs);
        self.changed("DELETED", &pod);
        self.inner.store.wake.notify_one();
    }

    /// Asks pod `k`'s engine to terminate it (within `grace_s`, else its own grace period).
    fn stop(&self, k: &str, grace_s: Option<i64>) {
        let o = self.lock();
        if let Some(tx) = o.pods.get(k).and_then(|e| e.controls.as_ref()) {
            let _ = tx.send(match grace_s {
                Some(grace_s) => Control::StopWithin { grace_s },
                None => Control::Stop,
            });
        }
    }

    /// The objects of `kind` in `namespace` (all namespaces with `all`), or the one named `name`, as
    /// Kubernetes' JSON; `selector` is a label selector.
    pub fn get(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        all: bool,
        selector: &str,
    ) -> Result<Vec<serde_json::Value>, Error> {
        let namespace = ns(namespace);
        let selector = kinds::Selector::parse(selector)?;
        let o = self.lock();
        let wanted = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            let (n, nm) = record::names(m);
            (all || n == namespace) && (name.is_empty() || nm == name) && selector.matches(m.labels.as_ref())
        };
        let out: Vec<serde_json::Value> = if kind == Kind::Pod {
            o.pods
                .values()
                .filter(|e| wanted(&e.record.pod.metadata))
                .map(|e| pod_json(&e.record.pod))
                .collect()
        } else {
            o.others
                .values()
                .filter(|w| w.kind() == kind && wanted(w.object.meta()))
                .map(Kept::to_json)
                .collect()
        };
        if !name.is_empty() && out.is_empty() {
            return Err(Error::NotFound {
                kind,
                name: name.into(),
            });
        }
        Ok(out)
    }

    /// Deletes object `kind namespace/name`; a pod terminates within `grace_s` (its own grace period when
    /// None; 0 or less: at once, kubectl's `--now` being 1 s). With `wait`, returns once it is gone.
    pub async fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        grace_s: Option<i64>,
        wait: bool,
    ) -> Result<(), Error> {
        let namespace = ns(namespace).to_string();
        if kind == Kind::Pod {
            self.delete_pod(&key(&namespace, name), grace_s)?;
        } else {
            let k = object::object_key(kind, &namespace, name);
            let removed = self.lock().others.remove(&k);
            if removed.is_none() {
                return Err(Error::NotFound {
                    kind,
                    name: name.into(),
                });
            }
            self.inner
                .store
                .records
                .remove_object(kind.name(), &namespace, name)?;
            for p in self.owned(kind.name(), &namespace, name) {
                let _ = self.delete_pod(&p, grace_s);
            }
        }
        if wait {
            let pods = if kind == Kind::Pod {
                vec![key(&namespace, name)]
            } else {
                self.owned(kind.name(), &namespace, name)
            };
            while pods.iter().any(|p| self.lock().pods.contains_key(p)) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// Begins pod `k`'s deletion.
    fn delete_pod(&self, k: &str, grace_s: Option<i64>) -> Result<(), Error> {
        let running = {
            let mut o = self.lock();
            let Some(e) = o.pods.get_mut(k) else {
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
}

/// A pod as the API gives it (k8s-openapi writes its `apiVersion` and `kind`).
fn pod_json(p: &Pod) -> serde_json::Value {
    serde_json::to_value(p).unwrap_or_default()
}

#[cfg(test)]
mod tests;
