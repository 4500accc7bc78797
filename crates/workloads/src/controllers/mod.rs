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

use std::time::Duration;

use k8s_openapi::Resource;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use serde_json::Value;

use crate::object::{Kept, Object, object_key};
use crate::{Kind, Service, status};

mod job;
mod replicas;

/// One kind's controller: from workload `w` as kept, it makes and removes the pods `w` asks for (through
/// the service, which runs them) and sets `w`'s status (`w` of another kind is left as it is).
trait Controller: Sync {
    fn reconcile(&self, s: &Service, w: &mut Kept);
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

/// Runs the controllers until criusd stops.
pub(super) async fn run(s: Service) {
    loop {
        tokio::select! {
            () = s.inner.store.wake.notified() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if s.closing() {
            continue;
        }
        s.reconcile();
        s.retry_deferred();
    }
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

impl Service {
    fn reconcile(&self) {
        let workloads: Vec<Kept> = self
            .lock()
            .others
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
        self.inner.store.save_workload(w);
    }

    /// The pods workload `w` owns, by key.
    fn pods_of(&self, w: &ObjectMeta) -> Vec<(String, Pod)> {
        self.inner.store.pods_of(w.uid.as_deref().unwrap_or(""))
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
        if let Err(e) = self.create_pod(pod) {
            tracing::warn!("pod service: {kind} pod {name}: {e}");
        }
    }

    fn remove_pods(&self, keys: impl IntoIterator<Item = String>) {
        for k in keys {
            let _ = self.delete_pod(&k, None);
        }
    }

    /// Sets the replicas of workload `kind namespace/name` (a Job's parallelism).
    pub fn scale(&self, kind: Kind, namespace: &str, name: &str, replicas: i32) -> Result<(), crate::Error> {
        let namespace = crate::ns(namespace);
        let k = object_key(kind, namespace, name);
        let field = match kind {
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => "replicas",
            Kind::Job => "parallelism",
            _ => {
                return Err(crate::Error::invalid(format!(
                    "{} cannot be scaled (deployments, replicasets, statefulsets and jobs can)",
                    kind.plural()
                )));
            }
        };
        if replicas < 0 {
            return Err(crate::Error::invalid(format!("replicas {replicas} is negative")));
        }
        let w = self
            .lock()
            .others
            .get(&k)
            .cloned()
            .ok_or_else(|| crate::Error::NotFound {
                kind,
                name: name.into(),
            })?;
        if kind != Kind::Job && replicas as u64 > crius_pod::manifest::MAX_REPLICAS {
            return Err(crate::Error::invalid(format!(
                "replicas {replicas} is more than the {} pods a node runs",
                crius_pod::manifest::MAX_REPLICAS
            )));
        }
        // A merge patch of what was applied, read again as its kind: the next apply of the manifest finds the
        // change, as the API server's last-applied comparison does.
        let mut v = w.to_json();
        crate::patch::merge(&mut v, &serde_json::json!({"spec": {field: replicas}}));
        self.save_workload(Kept::from_json(kind, v)?);
        self.inner.store.wake.notify_one();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
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
}
