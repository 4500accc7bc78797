//! The objects the service keeps besides pods, typed: each workload, ConfigMap and Secret is k8s-openapi's
//! struct of its kind ([`Object`]), kept with what was applied ([`Kept`]).
//!
//! JSON is kept for one reason: what was applied is compared as applied. A typed round trip adds what a
//! manifest left out where k8s-openapi has a required field (a Deployment's `selector: {}`, a Job's
//! `template: {}`), so a re-apply of the same manifest would read as changed, and an older criusd's record
//! would change when written back. So a kept object is its typed value, which controllers and the API verbs
//! read and change, plus the document as applied without `metadata` and `status` (its spec, or data), from
//! which the record and the API's output are made with the typed metadata and status over it.

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::{Error, Kind};

/// A kept object of one of the kinds besides Pod, as k8s-openapi types it.
// The workloads are all some KiB, only ConfigMaps and Secrets small: boxing them would gain nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Object {
    Job(Job),
    CronJob(CronJob),
    Deployment(Deployment),
    ReplicaSet(ReplicaSet),
    StatefulSet(StatefulSet),
    DaemonSet(DaemonSet),
    ConfigMap(ConfigMap),
    Secret(Secret),
}

/// `$body` with `$o` bound to the typed object of whichever variant `$obj` is.
macro_rules! each {
    ($obj:expr, $o:ident => $body:expr) => {
        match $obj {
            Object::Job($o) => $body,
            Object::CronJob($o) => $body,
            Object::Deployment($o) => $body,
            Object::ReplicaSet($o) => $body,
            Object::StatefulSet($o) => $body,
            Object::DaemonSet($o) => $body,
            Object::ConfigMap($o) => $body,
            Object::Secret($o) => $body,
        }
    };
}

/// `$body` with `$s` bound to the typed status of a workload (ConfigMaps and Secrets have none: `$none`).
macro_rules! status {
    ($obj:expr, $s:ident => $body:expr, $none:expr) => {
        match $obj {
            Object::Job(o) => {
                let $s = &o.status;
                $body
            }
            Object::CronJob(o) => {
                let $s = &o.status;
                $body
            }
            Object::Deployment(o) => {
                let $s = &o.status;
                $body
            }
            Object::ReplicaSet(o) => {
                let $s = &o.status;
                $body
            }
            Object::StatefulSet(o) => {
                let $s = &o.status;
                $body
            }
            Object::DaemonSet(o) => {
                let $s = &o.status;
                $body
            }
            Object::ConfigMap(_) | Object::Secret(_) => $none,
        }
    };
}

impl Object {
    /// Object `v` of `kind` (its JSON), typed.
    pub(crate) fn decode(kind: Kind, v: Value) -> Result<Object, serde_json::Error> {
        use serde_json::from_value as de;
        Ok(match kind {
            Kind::Job => Object::Job(de(v)?),
            Kind::CronJob => Object::CronJob(de(v)?),
            Kind::Deployment => Object::Deployment(de(v)?),
            Kind::ReplicaSet => Object::ReplicaSet(de(v)?),
            Kind::StatefulSet => Object::StatefulSet(de(v)?),
            Kind::DaemonSet => Object::DaemonSet(de(v)?),
            Kind::ConfigMap => Object::ConfigMap(de(v)?),
            Kind::Secret => Object::Secret(de(v)?),
            Kind::Pod => {
                return Err(serde::de::Error::custom("a pod is kept as a pod, not an object"));
            }
        })
    }

    /// Its kind.
    pub(crate) fn kind(&self) -> Kind {
        match self {
            Object::Job(_) => Kind::Job,
            Object::CronJob(_) => Kind::CronJob,
            Object::Deployment(_) => Kind::Deployment,
            Object::ReplicaSet(_) => Kind::ReplicaSet,
            Object::StatefulSet(_) => Kind::StatefulSet,
            Object::DaemonSet(_) => Kind::DaemonSet,
            Object::ConfigMap(_) => Kind::ConfigMap,
            Object::Secret(_) => Kind::Secret,
        }
    }

    /// Its metadata.
    pub(crate) fn meta(&self) -> &ObjectMeta {
        each!(self, o => &o.metadata)
    }

    /// Its metadata, to change.
    pub(crate) fn meta_mut(&mut self) -> &mut ObjectMeta {
        each!(self, o => &mut o.metadata)
    }

    /// Its status as JSON (None: it has none yet, or its kind has none).
    fn status_json(&self) -> Option<Value> {
        status!(self, s => s.as_ref().and_then(|s| serde_json::to_value(s).ok()), None)
    }

    /// Takes `other`'s status, if it has one (an update keeps what the controller found).
    pub(crate) fn take_status(&mut self, other: Object) {
        if other.status_json().is_none() {
            return;
        }
        match (self, other) {
            (Object::Job(a), Object::Job(b)) => a.status = b.status,
            (Object::CronJob(a), Object::CronJob(b)) => a.status = b.status,
            (Object::Deployment(a), Object::Deployment(b)) => a.status = b.status,
            (Object::ReplicaSet(a), Object::ReplicaSet(b)) => a.status = b.status,
            (Object::StatefulSet(a), Object::StatefulSet(b)) => a.status = b.status,
            (Object::DaemonSet(a), Object::DaemonSet(b)) => a.status = b.status,
            _ => {}
        }
    }
}

/// `kind` of a document, as a manifest or record names it.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    kind: String,
}

/// The `kind` a document names (empty when it names none).
pub(crate) fn kind_named(v: &Value) -> String {
    Head::deserialize(v).map(|h| h.kind).unwrap_or_default()
}

/// An object as the store keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Kept {
    /// The object, typed: what controllers and the API verbs read and change.
    pub(crate) object: Object,
    /// The document as applied, without `metadata` and `status` (see the module's doc).
    pub(crate) applied: Map<String, Value>,
    /// Fields of its status that its typed status lacks, as criusd has always shown them (a ReplicaSet's
    /// `updatedReplicas`), or as an older record had them.
    pub(crate) status_extra: Map<String, Value>,
}

impl Kept {
    /// Document `v` (a manifest's, or a record's) of `kind`, typed.
    pub(crate) fn from_json(kind: Kind, v: Value) -> Result<Kept, Error> {
        let Value::Object(mut applied) = v.clone() else {
            return Err(Error::invalid(format!("a {} is an object", kind.name())));
        };
        let object = Object::decode(kind, v).map_err(|e| Error::invalid(e.to_string()))?;
        applied.remove("metadata");
        let status = applied.remove("status");
        let mut status_extra = match status {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        if let Some(Value::Object(typed)) = object.status_json() {
            status_extra.retain(|k, _| !typed.contains_key(k));
        }
        Ok(Kept {
            object,
            applied,
            status_extra,
        })
    }

    /// The document a record holds and the API gives: as applied, with the typed metadata and status over it.
    pub(crate) fn to_json(&self) -> Value {
        let mut out = self.applied.clone();
        out.insert(
            "metadata".into(),
            serde_json::to_value(self.object.meta()).unwrap_or_default(),
        );
        let mut status = match self.object.status_json() {
            Some(Value::Object(m)) => Some(m),
            _ => None,
        };
        if !self.status_extra.is_empty() {
            status
                .get_or_insert_with(Map::new)
                .extend(self.status_extra.clone());
        }
        if let Some(s) = status {
            out.insert("status".into(), Value::Object(s));
        }
        Value::Object(out)
    }

    /// Its kind.
    pub(crate) fn kind(&self) -> Kind {
        self.object.kind()
    }

    /// `(namespace, name)`, the namespace defaulting to `default`.
    pub(crate) fn names(&self) -> (String, String) {
        crate::record::names(self.object.meta())
    }

    /// The store's key of it, `Kind/namespace/name`.
    pub(crate) fn key(&self) -> String {
        let (namespace, name) = self.names();
        object_key(self.kind(), &namespace, &name)
    }

    /// What an apply compares: the document as applied, and the labels.
    pub(crate) fn content(
        &self,
    ) -> (
        &Map<String, Value>,
        Option<&std::collections::BTreeMap<String, String>>,
    ) {
        (&self.applied, self.object.meta().labels.as_ref())
    }
}

/// The store's key of object `kind namespace/name`.
pub(crate) fn object_key(kind: Kind, namespace: &str, name: &str) -> String {
    format!("{}/{namespace}/{name}", kind.name())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Deployment without a selector (as the seed manifests have it) is kept as applied: its record and output
    /// do not gain the `selector: {}` a typed round trip would add, and a status field the typed status lacks is
    /// kept.
    #[test]
    fn a_kept_object_writes_back_what_was_applied() {
        let v = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default", "uid": "u"},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
            "status": {"replicas": 2, "somethingOld": 1}});
        let k = Kept::from_json(Kind::Deployment, v.clone()).unwrap();
        assert_eq!(k.to_json(), v);
        assert_eq!(k.key(), "Deployment/default/web");
        assert_eq!(k.status_extra.get("somethingOld"), Some(&json!(1)));
        let Object::Deployment(d) = &k.object else {
            panic!("not a Deployment")
        };
        assert_eq!(d.spec.as_ref().and_then(|s| s.replicas), Some(2));
        assert_eq!(kind_named(&v), "Deployment");
        assert!(Kept::from_json(Kind::Pod, v).is_err());
    }
}
