//! crius-workloads: the pod service, Kubernetes' API objects kept by criusd on one node (pods and their
//! workloads), their controllers, admission and status, and the `crius.pod.v1.PodService` gRPC adapter
//! ([`grpc`]); each pod is run by the pod engine of crius-pod ([`crius_pod::engine`]).
//!
//! The pod service: Kubernetes pods and their workloads on one node, kept by criusd. Each pod is a record
//! under criusd's root ([`record`]) and is led by the pod engine ([`crius_pod::engine::run_as`]) over criusd's own
//! CRI socket; its status is Kubernetes' PodStatus, moved by the engine's events ([`status`]). Workloads
//! (Job, Deployment, ReplicaSet, StatefulSet, DaemonSet) make and replace their pods (`controllers`);
//! resizes are admitted against the node's allocatable resources and actuated in place (`pods::resize`);
//! kubelet's events of each pod are in `pods::events`, where its logs are in `pods::logs`.
//!
//! Each kind's verbs live with the kind: a pod's in `pods` (with its engine's plumbing), a workload's,
//! ConfigMap's or Secret's in `controllers` (with the per-kind controllers, which make and remove pods only
//! through `pods::PodControl`). Both work over one small shared store (`store`: the objects, their records,
//! the watchers' channel, the controllers' wake-up). The [`Service`] routes each call to its kind's part, and
//! `apply` checks a whole manifest before either part makes anything.
//!
//! Pods outlive the service: when criusd stops or crashes, its shims keep the containers; at start-up the
//! records are read again and the engine takes each running pod back, its containers untouched
//! ([`crius_pod::engine::Given`]). Deleting a pod terminates it as kubelet does, then removes its record and logs.
//!
//! Objects are typed: pods as k8s-openapi's `Pod`, workloads, ConfigMaps and Secrets as their kinds' structs
//! (`object`), which the controllers and the API verbs read and change. JSON is left at the edges only:
//! - a manifest's documents are read as JSON, then typed (`apply`); the engine reads a pod, ConfigMap or Secret
//!   as a manifest's text (`pods::def_of`, `store::Store::kept_config`);
//! - what was applied is kept as JSON beside the typed object, and compared as such, so that a re-apply of the
//!   same manifest reads as unchanged and an older record writes back as it was (`object`'s doc says why);
//! - the template hash of a Deployment or ReplicaSet is that of the applied template's JSON (the names of the
//!   pods an older criusd made);
//! - patches are JSON by nature: the resize subresource's three patch types (`patch`), the strategic merge
//!   that applies a pod's new resources (`pods`), and `scale`'s merge patch of `spec.replicas` (each decoded,
//!   patched as JSON, decoded again);
//! - a ReplicaSet's `updatedReplicas`, which its typed status lacks, is kept as JSON (`object::Kept`);
//! - records on disk, the API's output, and events are Kubernetes' JSON.
//!
//! Crates: `json-patch` applies `kubectl patch`'s RFC 6902 and RFC 7386 patches (all six RFC 6902 operations,
//! where ours had four); the strategic merge stays ours (`patch`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tokio::sync::broadcast;
use tonic::transport::Channel;

use crius_pod::engine::Options;
pub use crius_pod::node::Allocatable;

mod apply;
mod controllers;
mod cron;
mod error;
pub mod grpc;
mod kinds;
mod object;
mod patch;
mod pods;
pub mod record;
pub mod status;
mod store;

pub use apply::Applied;
pub use error::{Error, Result};
pub use kinds::Kind;
pub use store::Change;
use store::Store;

/// How the service runs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where its records go (`<criusd root>/pod-service`).
    pub dir: PathBuf,
    /// How the engine runs pods; its `allocatable` is what the node offers, which admission and resizes
    /// are measured against too.
    pub engine: Options,
}

/// The pod service: a router to each kind's part; clones share it.
#[derive(Clone)]
pub struct Service {
    store: Arc<Store>,
    pods: pods::Pods,
    workloads: controllers::Workloads,
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
    /// Pods' changes as they happen.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.store.subscribe()
    }

    /// Opens the records under `settings.dir`, takes back every pod they hold (running ones are adopted by
    /// the engine), and starts the controllers. `channel` reaches the CRI runtime (criusd's own socket).
    pub fn start(settings: Settings, channel: Channel) -> Result<Service, Error> {
        let store = Arc::new(Store::open(&settings.dir)?);
        let backoff = settings.engine.backoff;
        let pods = pods::Pods::new(store.clone(), settings.engine, channel);
        let workloads = controllers::Workloads::new(store.clone(), Arc::new(pods.clone()), backoff);
        let service = Service {
            store,
            pods,
            workloads,
        };
        let (pods, others, bad) = service.store.records.load();
        for b in bad {
            tracing::warn!("pod service: a record that does not parse was left alone: {b}");
        }
        {
            let mut o = service.store.objects();
            for w in others {
                o.insert(w.key(), w);
            }
        }
        service.pods.take_back(pods);
        tokio::spawn(service.clone().run());
        Ok(service)
    }

    /// Runs the controllers, and the Deferred resizes' retries, whenever a pod changes and every second.
    async fn run(self) {
        loop {
            tokio::select! {
                () = self.store.wake.notified() => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            if self.store.closing() {
                continue;
            }
            self.workloads.reconcile();
            self.pods.retry_deferred();
        }
    }

    /// Stops listening to the engines: criusd is going away, and its pods stay as they are.
    pub fn close(&self) {
        self.store.close();
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
        let wanted = |m: &ObjectMeta| {
            let (n, nm) = record::names(m);
            (all || n == namespace) && (name.is_empty() || nm == name) && selector.matches(m.labels.as_ref())
        };
        let out: Vec<serde_json::Value> = if kind == Kind::Pod {
            let pods = self.pods.list(|p| wanted(&p.metadata));
            pods.iter().map(pod_json).collect()
        } else {
            self.workloads.get(kind, wanted)
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
            self.pods.delete(&key(&namespace, name), grace_s)?;
        } else {
            self.workloads.delete(kind, &namespace, name, grace_s)?;
        }
        if wait {
            let pods = if kind == Kind::Pod {
                vec![key(&namespace, name)]
            } else {
                self.store.owned(kind.name(), &namespace, name)
            };
            while pods.iter().any(|p| self.pods.has(p)) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    /// The resize subresource of pod `namespace/name` (see `pods::resize`); the pod after it.
    pub fn resize(
        &self,
        namespace: &str,
        name: &str,
        patch: &str,
        patch_type: &str,
    ) -> Result<serde_json::Value, Error> {
        self.pods.resize(namespace, name, patch, patch_type)
    }

    /// Sets the replicas of workload `kind namespace/name` (a Job's parallelism).
    pub fn scale(&self, kind: Kind, namespace: &str, name: &str, replicas: i32) -> Result<(), Error> {
        self.workloads.scale(kind, namespace, name, replicas)
    }

    /// Checkpoints a running container of pod `namespace/pod` to the archive `location` on this node (see
    /// `pods::checkpoint`); returns the container's CRI id.
    pub async fn checkpoint(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        location: &str,
        timeout_s: i64,
    ) -> Result<String, Error> {
        self.pods
            .checkpoint(namespace, pod, container, location, timeout_s)
            .await
    }

    /// The log file of a container of pod `namespace/pod` (see `pods::logs`), and whether its run goes on.
    pub fn log_file(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        previous: bool,
    ) -> Result<(PathBuf, tokio::sync::watch::Receiver<bool>), Error> {
        self.pods.log_file(namespace, pod, container, previous)
    }

    /// The events of object `kind namespace/name`, oldest first (a workload's are its pods').
    pub fn events(&self, kind: Kind, namespace: &str, name: &str) -> Vec<serde_json::Value> {
        self.pods.events(kind, namespace, name)
    }

    /// The pods kept that `wanted` takes.
    pub fn pods(&self, wanted: impl Fn(&Pod) -> bool) -> Vec<Pod> {
        self.pods.list(wanted)
    }
}

/// A pod as the API gives it (k8s-openapi writes its `apiVersion` and `kind`).
fn pod_json(p: &Pod) -> serde_json::Value {
    serde_json::to_value(p).unwrap_or_default()
}

#[cfg(test)]
mod tests;
