//! The verbs of the workload kinds, ConfigMaps and Secrets: apply, get, delete and scale, over the typed
//! objects of the store.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::Workloads;
use crate::object::{Kept, Object, object_key};
use crate::{Error, Kind, ns, status};

impl Workloads {
    /// A Job's pod template cannot change.
    pub(crate) fn check_update(&self, w: &Kept, at: &str) -> Result<(), Error> {
        let Object::Job(new) = &w.object else {
            return Ok(());
        };
        let (namespace, name) = w.names();
        let template = |j: &Job| j.spec.as_ref().map(|s| s.template.clone());
        let o = self.store.objects();
        if let Some(Object::Job(old)) = o
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

    /// Keeps object `w`: created, unchanged (what was applied and its labels are as kept), or configured (its
    /// uid, creation time and status stay, its generation goes up).
    pub(crate) fn apply(&self, mut w: Kept) -> Result<&'static str, Error> {
        let k = w.key();
        let old = self.store.objects().get(&k).cloned();
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
        self.store.records.save_object(&w)?;
        self.store.objects().insert(k, w);
        self.store.wake.notify_one();
        Ok(action)
    }

    /// The objects of `kind` whose metadata `wanted` takes, as Kubernetes' JSON.
    pub(crate) fn get(&self, kind: Kind, wanted: impl Fn(&ObjectMeta) -> bool) -> Vec<serde_json::Value> {
        self.store
            .objects()
            .values()
            .filter(|w| w.kind() == kind && wanted(w.object.meta()))
            .map(Kept::to_json)
            .collect()
    }

    /// Deletes object `kind namespace/name`, and begins the deletion of the pods it owns (within `grace_s`).
    pub(crate) fn delete(
        &self,
        kind: Kind,
        namespace: &str,
        name: &str,
        grace_s: Option<i64>,
    ) -> Result<(), Error> {
        let removed = self.store.objects().remove(&object_key(kind, namespace, name));
        if removed.is_none() {
            return Err(Error::NotFound {
                kind,
                name: name.into(),
            });
        }
        self.store.records.remove_object(kind.name(), namespace, name)?;
        for p in self.store.owned(kind.name(), namespace, name) {
            let _ = self.pods.remove(&p, grace_s);
        }
        Ok(())
    }

    /// Sets the replicas of workload `kind namespace/name` (a Job's parallelism).
    pub(crate) fn scale(&self, kind: Kind, namespace: &str, name: &str, replicas: i32) -> Result<(), Error> {
        let namespace = ns(namespace);
        let k = object_key(kind, namespace, name);
        let field = match kind {
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => "replicas",
            Kind::Job => "parallelism",
            _ => {
                return Err(Error::invalid(format!(
                    "{} cannot be scaled (deployments, replicasets, statefulsets and jobs can)",
                    kind.plural()
                )));
            }
        };
        if replicas < 0 {
            return Err(Error::invalid(format!("replicas {replicas} is negative")));
        }
        let w = self
            .store
            .objects()
            .get(&k)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                kind,
                name: name.into(),
            })?;
        if kind != Kind::Job && replicas as u64 > crius_pod::manifest::MAX_REPLICAS {
            return Err(Error::invalid(format!(
                "replicas {replicas} is more than the {} pods a node runs",
                crius_pod::manifest::MAX_REPLICAS
            )));
        }
        // A merge patch of what was applied, read again as its kind: the next apply of the manifest finds the
        // change, as the API server's last-applied comparison does.
        let mut v = w.to_json();
        crate::patch::merge(&mut v, &serde_json::json!({"spec": {field: replicas}}));
        self.save_workload(Kept::from_json(kind, v)?);
        self.store.wake.notify_one();
        Ok(())
    }
}
