//! Strict validation of manifests, for `crius apply`: every document of a file is checked before anything is
//! sent, as the API server checks an object under kubectl's strict field validation. An unknown field, a value
//! of the wrong type, a bad quantity, a duplicate or missing name, a volume mount of no volume, a kind crius does
//! not run: each is a [`Problem`] naming the file, the document (from 1), the object and the field path in the
//! API server's form (`spec.template.spec.containers[0].image`, map keys in brackets: `limits[memory]`).
//!
//! [`crate::parse`] stays as it is for `crius run`, which lists unknown kinds as skipped and runs the rest.

use std::fmt;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use serde::Deserialize;
use serde_yaml_ng::Value;

use crate::Error;
use fields::decode;

mod fields;
mod names;
mod objects;
mod pod;
#[cfg(test)]
mod tests;
mod volumes;

/// The kinds `crius apply` takes, each with the one apiVersion it is read as.
pub const KINDS: [(&str, &str); 9] = [
    ("Pod", "v1"),
    ("Job", "batch/v1"),
    ("CronJob", "batch/v1"),
    ("Deployment", "apps/v1"),
    ("ReplicaSet", "apps/v1"),
    ("StatefulSet", "apps/v1"),
    ("DaemonSet", "apps/v1"),
    ("ConfigMap", "v1"),
    ("Secret", "v1"),
];

/// One thing wrong in a manifest. Its text is
/// `FILE, document N (Kind "name"): FIELD: DETAIL`, the object left out when the document has no kind and
/// the field when the problem is the whole document's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file (or `-` for stdin), as the caller named it.
    pub source: String,
    /// The document's number in the file, from 1.
    pub document: usize,
    /// The object's kind and name, when the document has a kind (the name may be empty).
    pub object: Option<(String, String)>,
    /// The field path (`spec.containers[0].name`), empty when the problem is the document's.
    pub field: String,
    /// What is wrong, in the API server's words where it has them (`Required value`, `Duplicate value:
    /// "app"`, `unknown field "resourcs"`).
    pub detail: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}, document {}", self.source, self.document)?;
        match &self.object {
            Some((kind, name)) if name.is_empty() => write!(f, " ({kind})")?,
            Some((kind, name)) => write!(f, " ({kind} {name:?})")?,
            None => {}
        }
        if !self.field.is_empty() {
            write!(f, ": {}", self.field)?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// Checks every document of `text` (`source` names it); Ok when all are objects `crius apply` can take, else
/// [`Error::Invalid`] with every problem found, one a line.
pub fn strict(text: &str, source: &str) -> Result<(), Error> {
    let found = problems(text, source);
    if found.is_empty() {
        Ok(())
    } else {
        Err(Error::Invalid(found))
    }
}

/// Every problem in the documents of `text`, in file order; empty when there is none.
pub fn problems(text: &str, source: &str) -> Vec<Problem> {
    let mut out = Vec::new();
    for (n, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let mut found = Found::default();
        let object = document(doc, &mut found);
        let stop = found.1;
        out.extend(found.0.into_iter().map(|(field, detail)| Problem {
            source: source.to_string(),
            document: n + 1,
            object: object.clone(),
            field,
            detail,
        }));
        if stop {
            break;
        }
    }
    out
}

/// Checks one document into `found`; its kind and name, when it has a kind.
fn document(doc: serde_yaml_ng::Deserializer<'_>, found: &mut Found) -> Option<(String, String)> {
    // Reading it as a Value already refuses a key given twice in one map, with its path and line.
    let mut value = match Value::deserialize(doc) {
        Ok(value) => value,
        Err(e) => {
            found.add("", e.to_string());
            // The documents after a YAML error cannot be told apart: stop there, as `parse` does.
            found.1 = true;
            return None;
        }
    };
    if value.is_null() {
        return None;
    }
    crate::manifest::octal_modes(&mut value);
    if !value.is_mapping() {
        found.add(
            "",
            "not a Kubernetes object: a document is a mapping with apiVersion, kind and metadata",
        );
        return None;
    }
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
    let kind = text(value.get("kind"));
    let api = text(value.get("apiVersion"));
    let name = text(value.get("metadata").and_then(|m| m.get("name")));
    if kind.is_empty() {
        found.required("kind");
        return None;
    }
    let object = Some((kind.clone(), name));
    let Some(&(_, version)) = KINDS.iter().find(|(k, _)| *k == kind) else {
        let takes: Vec<&str> = KINDS.iter().map(|(k, _)| *k).collect();
        found.add(
            "",
            format!(
                "kind {kind} ({}) is not something crius runs: crius apply takes {}",
                if api.is_empty() { "no apiVersion" } else { &api },
                takes.join(", ")
            ),
        );
        return object;
    };
    if api.is_empty() {
        found.required("apiVersion");
        return object;
    }
    if api != version {
        found.add(
            "apiVersion",
            format!("Unsupported value: {api:?}: crius reads a {kind} as {version:?}"),
        );
        return object;
    }
    match kind.as_str() {
        "Pod" => decode::<Pod>(&value, found).map(|o| objects::pod(&o, found)),
        "Job" => decode::<Job>(&value, found).map(|o| objects::job(&o, found)),
        "CronJob" => decode::<CronJob>(&value, found).map(|o| objects::cron_job(&o, found)),
        "Deployment" => decode::<Deployment>(&value, found).map(|o| objects::deployment(&o, found)),
        "ReplicaSet" => decode::<ReplicaSet>(&value, found).map(|o| objects::replica_set(&o, found)),
        "StatefulSet" => decode::<StatefulSet>(&value, found).map(|o| objects::stateful_set(&o, found)),
        "DaemonSet" => decode::<DaemonSet>(&value, found).map(|o| objects::daemon_set(&o, found)),
        "ConfigMap" => decode::<ConfigMap>(&value, found).map(|o| objects::config_map(&o, found)),
        "Secret" => decode::<Secret>(&value, found).map(|o| objects::secret(&o, found)),
        _ => None,
    };
    object
}

/// The problems of one document, as (field path, detail); the helpers word them as the API server does.
#[derive(Debug, Default)]
pub(crate) struct Found(Vec<(String, String)>, bool);

impl Found {
    fn add(&mut self, field: impl Into<String>, detail: impl Into<String>) {
        self.0.push((field.into(), detail.into()));
    }

    fn required(&mut self, field: impl Into<String>) {
        self.add(field, "Required value");
    }

    fn invalid(&mut self, field: impl Into<String>, value: impl fmt::Debug, why: &str) {
        self.add(field, format!("Invalid value: {value:?}: {why}"));
    }

    fn duplicate(&mut self, field: impl Into<String>, value: &str) {
        self.add(field, format!("Duplicate value: {value:?}"));
    }

    fn not_found(&mut self, field: impl Into<String>, value: &str) {
        self.add(field, format!("Not found: {value:?}"));
    }

    fn unsupported(&mut self, field: impl Into<String>, value: &str, supported: &[&str]) {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        self.add(
            field,
            format!(
                "Unsupported value: {value:?}: supported values: {}",
                list.join(", ")
            ),
        );
    }

    fn forbidden(&mut self, field: impl Into<String>, why: &str) {
        self.add(field, format!("Forbidden: {why}"));
    }

    /// A name that must be given and follow `rule` (one of [`names`]' checks).
    fn name(&mut self, field: impl Into<String>, value: &str, rule: fn(&str) -> Option<&'static str>) {
        if value.is_empty() {
            self.required(field);
        } else if let Some(why) = rule(value) {
            self.invalid(field, value, why);
        }
    }
}
