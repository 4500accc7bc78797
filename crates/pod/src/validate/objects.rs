//! The checks of each kind `crius apply` takes: its metadata, the fields of its own spec, and the pod spec it
//! holds, at the path the API server gives it (`spec`, `spec.template.spec`,
//! `spec.jobTemplate.spec.template.spec`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::{CronJob, Job, JobSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::pod::{self, Template};
use super::{Found, names};
use crate::manifest::MAX_REPLICAS;

pub(super) fn pod(o: &Pod, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    match &o.spec {
        Some(spec) => pod::spec(spec, "spec", Template::Pod, found),
        None => found.required("spec"),
    }
}

pub(super) fn job(o: &Job, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    match &o.spec {
        Some(spec) => job_spec(spec, "spec", found),
        None => found.required("spec"),
    }
}

pub(super) fn cron_job(o: &CronJob, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    let Some(spec) = &o.spec else {
        return found.required("spec");
    };
    if spec.schedule.trim().is_empty() {
        found.required("spec.schedule");
    }
    match &spec.job_template.spec {
        Some(job) => job_spec(job, "spec.jobTemplate.spec", found),
        None => found.required("spec.jobTemplate.spec"),
    }
}

fn job_spec(spec: &JobSpec, at: &str, found: &mut Found) {
    template(&spec.template, &format!("{at}.template"), Template::Job, found);
}

pub(super) fn deployment(o: &Deployment, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    let Some(spec) = &o.spec else {
        return found.required("spec");
    };
    replicas(spec.replicas, found);
    selected(&spec.selector, &spec.template, found);
    template(&spec.template, "spec.template", Template::Always, found);
}

pub(super) fn replica_set(o: &ReplicaSet, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    let Some(spec) = &o.spec else {
        return found.required("spec");
    };
    replicas(spec.replicas, found);
    match &spec.template {
        Some(t) => {
            selected(&spec.selector, t, found);
            template(t, "spec.template", Template::Always, found);
        }
        None => found.required("spec.template"),
    }
}

pub(super) fn stateful_set(o: &StatefulSet, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    let Some(spec) = &o.spec else {
        return found.required("spec");
    };
    replicas(spec.replicas, found);
    selected(&spec.selector, &spec.template, found);
    template(&spec.template, "spec.template", Template::Always, found);
    for (i, claim) in spec.volume_claim_templates.iter().flatten().enumerate() {
        let at = format!("spec.volumeClaimTemplates[{i}]");
        found.name(
            format!("{at}.metadata.name"),
            claim.metadata.name.as_deref().unwrap_or(""),
            names::subdomain,
        );
        if let Some(r) = claim.spec.as_ref().and_then(|s| s.resources.as_ref()) {
            let at = format!("{at}.spec.resources");
            pod::amounts(r.requests.as_ref(), &format!("{at}.requests"), found);
            pod::amounts(r.limits.as_ref(), &format!("{at}.limits"), found);
        }
    }
}

pub(super) fn daemon_set(o: &DaemonSet, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    let Some(spec) = &o.spec else {
        return found.required("spec");
    };
    selected(&spec.selector, &spec.template, found);
    template(&spec.template, "spec.template", Template::Always, found);
}

pub(super) fn config_map(o: &ConfigMap, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    let data = o.data.as_ref().map(BTreeMap::keys).into_iter().flatten();
    let binary = o.binary_data.as_ref().map(BTreeMap::keys).into_iter().flatten();
    keys(data, binary, ("data", "binaryData"), found);
}

pub(super) fn secret(o: &Secret, found: &mut Found) {
    metadata(&o.metadata, "metadata", found);
    let data = o.data.as_ref().map(BTreeMap::keys).into_iter().flatten();
    let strings = o.string_data.as_ref().map(BTreeMap::keys).into_iter().flatten();
    // A key in both is allowed: stringData's value wins, as the API server merges them.
    keys(data, strings, ("data", "stringData"), found);
}

/// The keys of a ConfigMap's or Secret's two maps: valid keys, and (for a ConfigMap) none in both.
fn keys<'a>(
    first: impl Iterator<Item = &'a String>,
    second: impl Iterator<Item = &'a String>,
    (a, b): (&str, &str),
    found: &mut Found,
) {
    let first: Vec<&String> = first.collect();
    for key in &first {
        if let Some(why) = names::config_key(key) {
            found.invalid(format!("{a}[{key}]"), key, why);
        }
    }
    for key in second {
        if let Some(why) = names::config_key(key) {
            found.invalid(format!("{b}[{key}]"), key, why);
        } else if b == "binaryData" && first.contains(&key) {
            found.invalid(format!("{b}[{key}]"), key, "duplicate of key present in data");
        }
    }
}

/// An object's own metadata: a name (apply needs one; a subdomain), a namespace (a label), labels.
fn metadata(meta: &ObjectMeta, at: &str, found: &mut Found) {
    found.name(
        format!("{at}.name"),
        meta.name.as_deref().unwrap_or(""),
        names::subdomain,
    );
    if let Some(ns) = &meta.namespace {
        found.name(format!("{at}.namespace"), ns, names::label);
    }
    labels(meta, at, found);
}

/// Labels' keys and values, and annotations' keys.
fn labels(meta: &ObjectMeta, at: &str, found: &mut Found) {
    for (key, value) in meta.labels.iter().flatten() {
        if let Some(why) = names::label_key(key) {
            found.invalid(format!("{at}.labels"), key, why);
        } else if let Some(why) = names::label_value(value) {
            found.invalid(format!("{at}.labels"), value, why);
        }
    }
    for key in meta.annotations.iter().flat_map(BTreeMap::keys) {
        if let Some(why) = names::label_key(key) {
            found.invalid(format!("{at}.annotations"), key, why);
        }
    }
}

/// A pod template: its labels, and its spec (which it must have).
fn template(t: &PodTemplateSpec, at: &str, kind: Template, found: &mut Found) {
    if let Some(meta) = &t.metadata {
        labels(meta, &format!("{at}.metadata"), found);
    }
    match &t.spec {
        Some(spec) => pod::spec(spec, &format!("{at}.spec"), kind, found),
        None => found.required(format!("{at}.spec")),
    }
}

/// `spec.replicas`: not negative, and no more than the pods one node runs.
fn replicas(replicas: Option<i32>, found: &mut Found) {
    match replicas {
        Some(n) if n < 0 => found.invalid("spec.replicas", n, "must be greater than or equal to 0"),
        Some(n) if n as u64 > MAX_REPLICAS => found.invalid(
            "spec.replicas",
            n,
            &format!("more than the {MAX_REPLICAS} pods a node runs (kubelet's maxPods)"),
        ),
        _ => {}
    }
}

/// A workload's selector, when it has one, must select its template's pods. (One with no selector is let
/// pass, though the API server requires it: the seed Deployment has none, and crius has no controller that
/// selects.)
fn selected(selector: &LabelSelector, t: &PodTemplateSpec, found: &mut Found) {
    let labels = t.metadata.as_ref().and_then(|m| m.labels.as_ref());
    let matches = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v));
    if !matches {
        let shown: Vec<String> = labels
            .iter()
            .flat_map(|l| l.iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        found.invalid(
            "spec.template.metadata.labels",
            shown.join(","),
            "`selector` does not match template `labels`",
        );
    }
}
