//! `apply`: a manifest's documents, validated whole before anything is made ([`crius_pod::validate::strict`]),
//! then each created, left unchanged, or updated as the API server allows: a pod's containers' resources
//! only (through a resize), a workload's spec (its controller follows), a ConfigMap's or Secret's data. Each
//! document goes to its kind's part (`pods`, `controllers`); this is the one verb that spans kinds.

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use crate::object::{Kept, kind_named};
use crate::{Error, Kind, Service, record};

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
                crate::pods::def_of(&pod).map_err(|e| invalid(&e))?;
                self.pods.check_update(&pod, &at)?;
                Doc::Pod(Box::new(pod))
            } else {
                crius_pod::manifest::parse(&v.to_string(), &at).map_err(Error::invalid)?;
                let w = Kept::from_json(kind, v).map_err(|e| invalid(&e))?;
                self.workloads.check_update(&w, &at)?;
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
                Doc::Pod(pod) => self.pods.apply(*pod)?,
                Doc::Object(w) => self.workloads.apply(*w)?,
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
}
