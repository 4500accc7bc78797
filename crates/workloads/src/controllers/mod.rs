//! The workload controllers of one node, one per kind (a `Controller`, over the shared store), each a
//! reconciliation of what its object asks with the pods it owns, run whenever a pod changes and every second:
//! - Job: pods until `completions` succeeded, at most `parallelism` at once; more than `backoffLimit`
//!   failures fail it (each new pod after a doubling back-off), as does running past
//!   `activeDeadlineSeconds`; `ttlSecondsAfterFinished` deletes it once finished;
//! - Deployment and ReplicaSet: `replicas` running pods of the current template, failed ones replaced; a
//!   Deployment's new template rolls out within `maxSurge` and `maxUnavailable` (or all at once for
//!   `Recreate`), a ReplicaSet's old pods go as the new ones become ready (the Deployment's ReplicaSet is not
//!   a separate object here); StatefulSet: `<name>-<ordinal>` in order, each once the one before is ready; DaemonSet:
//!   one pod on this one node;
//! - CronJob: a Job of its template at each time its schedule names, while criusd runs ([`crate::cron`]).
//!
//! [`Workloads`] is the workload kinds' part of the service: the controllers' shared context (the store, and
//! the pods' [`PodControl`], the only way they make and remove pods), and the verbs of those kinds and of
//! ConfigMaps and Secrets (`verbs`: apply, get, delete, scale).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::Resource;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use crate::object::{Kept, Object};
use crate::pods::PodControl;
use crate::store::Store;
use crate::{Kind, status};

mod job;
mod replicas;
mod verbs;

/// One kind's controller: from workload `w` as kept, it makes and removes the pods `w` asks for (through
/// `s`'s [`PodControl`]) and sets `w`'s status (`w` of another kind is left as it is).
trait Controller: Sync {
    fn reconcile(&self, s: &Workloads, w: &mut Kept);
}

/// The workloads' part; clones share it.
#[derive(Clone)]
pub(crate) struct Workloads {
    store: Arc<Store>,
    /// Makes and removes pods.
    pods: Arc<dyn PodControl>,
    /// The engine's restart back-off, which a Job's failed pods wait doubled.
    backoff: Duration,
}

/// The controller of workloads of `kind`.
fn controller(kind: Kind) -> Option<&'static dyn Controller> {
    Some(match kind {
        Kind::Job => &job::Jobs,
        Kind::CronJob => &job::CronJobs,
        Kind::Deployment | Kind::ReplicaSet => &replicas::Replicas,
        Kind::StatefulSet => &replicas::StatefulSets,
        Kind::DaemonSet => &replicas::DaemonSets,
        Kind::Pod | Kind::ConfigMap | Kind::Secret => return None,
    })
}

/// A pod's phase.
fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn finished_at(p: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    p.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| {
            c.state
                .as_ref()?
                .terminated
                .as_ref()?
                .finished_at
                .as_ref()
                .map(|t| t.0)
        })
        .max()
}

/// Kubernetes' short hash of a pod template (`pod-template-hash`).
fn template_hash(template: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in template.to_string().bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

impl Workloads {
    /// The workloads' part over `store`, making pods through `pods`; `backoff` is the engine's.
    pub(crate) fn new(store: Arc<Store>, pods: Arc<dyn PodControl>, backoff: Duration) -> Workloads {
        Workloads { store, pods, backoff }
    }

    /// Each workload's controller once.
    pub(crate) fn reconcile(&self) {
        let workloads: Vec<Kept> = self
            .store
            .objects()
            .values()
            .filter(|w| !matches!(w.object, Object::ConfigMap(_) | Object::Secret(_)))
            .cloned()
            .collect();
        for w in workloads {
            let Some(c) = controller(w.kind()) else {
                continue;
            };
            let mut next = w.clone();
            c.reconcile(self, &mut next);
            if next != w {
                self.save_workload(next);
            }
        }
    }

    fn save_workload(&self, w: Kept) {
        self.store.save_workload(w);
    }

    /// The pods workload `w` owns, by key.
    fn pods_of(&self, w: &ObjectMeta) -> Vec<(String, Pod)> {
        self.store.pods_of(w.uid.as_deref().unwrap_or(""))
    }

    /// Makes a pod of `w`'s template (`template` under it) named `name`, with `labels` added.
    fn make_pod<W: Resource>(
        &self,
        owner: &ObjectMeta,
        template: &PodTemplateSpec,
        name: String,
        labels: &[(&str, String)],
    ) {
        let kind = W::KIND;
        let mut meta = template.metadata.clone().unwrap_or_default();
        if !labels.is_empty() {
            let l = meta.labels.get_or_insert_with(Default::default);
            for (k, v) in labels {
                l.insert((*k).into(), v.clone());
            }
        }
        meta.name = Some(name.clone());
        meta.namespace = Some(owner.namespace.clone().unwrap_or_else(|| "default".into()));
        meta.owner_references = Some(vec![OwnerReference {
            api_version: W::API_VERSION.into(),
            kind: kind.into(),
            name: owner.name.clone().unwrap_or_default(),
            uid: owner.uid.clone().unwrap_or_default(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        let pod = Pod {
            metadata: meta,
            spec: template.spec.clone(),
            status: None,
        };
        if let Err(e) = self.pods.make(pod) {
            tracing::warn!("pod service: {kind} pod {name}: {e}");
        }
    }

    fn remove_pods(&self, keys: impl IntoIterator<Item = String>) {
        for k in keys {
            let _ = self.pods.remove(&k, None);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_template_hash_is_stable_and_follows_the_template() {
        let a = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}]}});
        let b = json!({"spec": {"containers": [{"name": "a", "image": "x:2"}]}});
        assert_eq!(template_hash(&a), template_hash(&a));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
    }

    /// A pod maker that makes nothing, but remembers what it was asked.
    #[derive(Default)]
    pub(super) struct Asked {
        pub(super) made: std::sync::Mutex<Vec<Pod>>,
        pub(super) removed: std::sync::Mutex<Vec<String>>,
    }

    impl PodControl for Asked {
        fn make(&self, pod: Pod) -> Result<String, crate::Error> {
            let name = pod.metadata.name.clone().unwrap_or_default();
            self.made.lock().unwrap().push(pod);
            Ok(name)
        }

        fn remove(&self, k: &str, _: Option<i64>) -> Result<(), crate::Error> {
            self.removed.lock().unwrap().push(k.into());
            Ok(())
        }
    }

    /// The controllers are given their pods' maker, and nothing else of the service: a Deployment asks it for
    /// its replicas, owned and labelled with its template's hash, and its status is saved in the store.
    #[test]
    fn a_controller_makes_its_pods_through_the_pod_control_it_is_given() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let asked = Arc::new(Asked::default());
        let workloads = Workloads::new(store.clone(), asked.clone(), Duration::from_secs(1));
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u-1", "generation": 1},
            "spec": {"replicas": 2, "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
        let w = Kept::from_json(Kind::Deployment, deploy.clone()).unwrap();
        store.objects().insert(w.key(), w);
        workloads.reconcile();
        let made = asked.made.lock().unwrap().clone();
        assert_eq!(made.len(), 2);
        let hash = template_hash(&deploy["spec"]["template"]);
        for p in &made {
            let owner = &p.metadata.owner_references.as_ref().unwrap()[0];
            assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("Deployment", "u-1"));
            let labels = p.metadata.labels.as_ref().unwrap();
            assert_eq!(labels.get("pod-template-hash"), Some(&hash));
            assert_eq!(labels.get("app").map(String::as_str), Some("web"));
            assert!(
                p.metadata
                    .name
                    .as_ref()
                    .unwrap()
                    .starts_with(&format!("web-{hash}-"))
            );
        }
        assert!(asked.removed.lock().unwrap().is_empty());
        let kept = store.objects().get("Deployment/default/web").cloned().unwrap();
        let Object::Deployment(d) = kept.object else {
            panic!("not a Deployment")
        };
        let status = d.status.unwrap();
        assert_eq!((status.replicas, status.observed_generation), (Some(0), Some(1)));
    }
}
