//! The pod service's small shared store: every object kept, by key (pods with their engines' control
//! channels; workloads, ConfigMaps and Secrets typed, as [`Kept`]), their records on disk ([`crate::record`]),
//! the watchers' channel of pod changes, the wake-up of the controllers, and whether criusd is closing. The
//! pods' part ([`crate::pods`]) and the workloads' ([`crate::controllers`]) read and change objects through it.
//!
//! Two locks, one per map: nothing needs pods and objects consistent with each other at one instant. What
//! must be atomic is within one map: a pod's admission counts every other pod under the lock it is added
//! under, and a controller's new status is not saved over a workload deleted meanwhile. No code holds both
//! locks at once (so there is no order to keep), nor either across an `.await`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{Notify, broadcast, mpsc};

use crate::Error;
use crate::object::{Kept, Object};
use crate::record::{PodRecord, Records};
use crius_pod::engine::Control;
use crius_pod::manifest::{Manifest, PodDef};

/// A change to a pod, for watchers.
#[derive(Debug, Clone)]
pub struct Change {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    pub kind: &'static str,
    /// The pod after it (shared: the channel keeps 1024 of them, and a pod is a few KiB).
    pub pod: Arc<Pod>,
}

/// A pod the service keeps.
pub(crate) struct Entry {
    pub(crate) record: PodRecord,
    pub(crate) def: PodDef,
    /// Its engine, while one leads it.
    pub(crate) controls: Option<mpsc::UnboundedSender<Control>>,
}

/// Pods by `namespace/name`.
pub(crate) type PodMap = BTreeMap<String, Entry>;

/// Workloads, ConfigMaps and Secrets by `Kind/namespace/name`, typed.
pub(crate) type ObjectMap = BTreeMap<String, Kept>;

/// The store.
pub(crate) struct Store {
    /// The records on disk.
    pub(crate) records: Records,
    pods: Mutex<PodMap>,
    objects: Mutex<ObjectMap>,
    changes: broadcast::Sender<Change>,
    /// Wakes the controllers.
    pub(crate) wake: Notify,
    /// Set when criusd stops: what the engines see then (a runtime going away) is not the pods' news.
    closing: AtomicBool,
}

impl Store {
    /// An empty store whose records are under `dir` (made if need be).
    pub(crate) fn open(dir: &Path) -> Result<Store, Error> {
        let (changes, _) = broadcast::channel(1024);
        Ok(Store {
            records: Records::open(dir)?,
            pods: Mutex::default(),
            objects: Mutex::default(),
            changes,
            wake: Notify::new(),
            closing: false.into(),
        })
    }

    /// The pods.
    pub(crate) fn pods(&self) -> MutexGuard<'_, PodMap> {
        self.pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The workloads, ConfigMaps and Secrets.
    pub(crate) fn objects(&self) -> MutexGuard<'_, ObjectMap> {
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on, criusd is going away.
    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    /// Whether criusd is going away.
    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }

    /// Pods' changes as they happen.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Tells watchers of pod `pod`'s change.
    pub(crate) fn changed(&self, kind: &'static str, pod: &Pod) {
        let _ = self.changes.send(Change {
            kind,
            pod: Arc::new(pod.clone()),
        });
    }

    /// Writes pod `entry`'s record (a failure is logged: the pod goes on).
    pub(crate) fn persist(&self, entry: &Entry) {
        if let Err(e) = self.records.save_pod(&entry.record) {
            tracing::warn!("pod service: {e}");
        }
    }

    /// Keeps workload `w`'s new state (its controller's), unless it was deleted meanwhile.
    pub(crate) fn save_workload(&self, w: Kept) {
        let k = w.key();
        let mut o = self.objects();
        // Deleted meanwhile: not brought back.
        if !o.contains_key(&k) {
            return;
        }
        if let Err(e) = self.records.save_object(&w) {
            tracing::warn!("pod service: {e}");
        }
        o.insert(k, w);
    }

    /// The pods whose owner has uid `uid`, by key.
    pub(crate) fn pods_of(&self, uid: &str) -> Vec<(String, Pod)> {
        self.pods()
            .iter()
            .filter(|(_, e)| {
                e.record
                    .pod
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.uid == uid)
            })
            .map(|(k, e)| (k.clone(), e.record.pod.clone()))
            .collect()
    }

    /// The pods that `kind namespace/name` owns, by key.
    pub(crate) fn owned(&self, kind: &str, namespace: &str, name: &str) -> Vec<String> {
        self.pods()
            .iter()
            .filter(|(_, e)| {
                let m = &e.record.pod.metadata;
                m.namespace.as_deref().unwrap_or("default") == namespace
                    && m.owner_references
                        .iter()
                        .flatten()
                        .any(|r| r.kind == kind && r.name == name)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The ConfigMaps and Secrets kept, as the engine reads them.
    pub(crate) fn kept_config(&self) -> Manifest {
        let others: Vec<String> = self
            .objects()
            .values()
            .filter(|w| matches!(w.object, Object::ConfigMap(_) | Object::Secret(_)))
            .map(|w| w.to_json().to_string())
            .collect();
        // The engine reads them as a manifest's documents.
        let mut m = Manifest::default();
        for text in others {
            if let Ok(one) = crius_pod::manifest::parse(&text, "a kept object") {
                m.merge(one);
            }
        }
        m
    }
}
