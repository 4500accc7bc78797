//! Pod manifests: the YAML documents of a file, read as Kubernetes objects. A `Pod` runs as written; a workload
//! (`Job`, `CronJob`, `Deployment`, `StatefulSet`, `DaemonSet`, `ReplicaSet`) runs the pods of its template its
//! controller would make on one node (`replicas` of them for a Deployment, ReplicaSet or StatefulSet); `ConfigMap`s and `Secret`s in the same file feed volumes and env. Anything else
//! (a `Service`, a `VerticalPodAutoscaler`) is listed as skipped: there is no cluster to apply it to.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, PodTemplateSpec, Secret};
use serde::Deserialize;
use serde_yaml_ng::Value;

use crate::Error;
use crate::report::Role;

/// A restartPolicy: the pod's, which says which of its main containers run again when they exit (and
/// whether its regular init containers do), or an init container's, where only `Always` is allowed (it makes
/// the container a sidecar). Read once, when the manifest is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartPolicy {
    /// Restart on every exit: the pod runs until stopped.
    Always,
    /// Restart on a non-zero exit: the pod completes once its main containers have exited 0.
    OnFailure,
    /// Never restart: the pod completes when its main containers have exited.
    Never,
}

impl RestartPolicy {
    /// The policy a manifest names (`Always`, `OnFailure`, `Never`); None for any other word.
    pub fn from_name(name: &str) -> Option<RestartPolicy> {
        match name {
            "Always" => Some(RestartPolicy::Always),
            "OnFailure" => Some(RestartPolicy::OnFailure),
            "Never" => Some(RestartPolicy::Never),
            _ => None,
        }
    }
}

/// One pod to run.
#[derive(Debug, Clone)]
pub struct PodDef {
    /// The kind it came from (`Pod`, `Job`, …) and that object's name.
    pub owner: (String, String),
    /// The pod's name, or for a workload the prefix its controller gives its pods (`<name>-`).
    pub name: String,
    /// Whether `name` is a prefix that a random suffix completes (a workload's pod).
    pub generated: bool,
    /// The namespace (`default` when not given).
    pub namespace: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// The spec, with the restart policy defaulted as the API server does.
    pub spec: PodSpec,
    /// The spec's restart policy (`Always` when not given).
    pub restart_policy: RestartPolicy,
}

impl PodDef {
    /// The containers in start order, each with its part: the init containers in spec order (those with
    /// `restartPolicy: Always` are sidecars), then the main ones.
    pub fn containers(&self) -> impl Iterator<Item = (&Container, Role)> {
        let inits = self.spec.init_containers.iter().flatten().map(|c| {
            let policy = c.restart_policy.as_deref().and_then(RestartPolicy::from_name);
            let role = if policy == Some(RestartPolicy::Always) {
                Role::Sidecar
            } else {
                Role::Init
            };
            (c, role)
        });
        inits.chain(self.spec.containers.iter().map(|c| (c, Role::Main)))
    }
}

/// The objects of a manifest file.
#[derive(Debug, Default)]
pub struct Manifest {
    /// The pods, in file order.
    pub pods: Vec<PodDef>,
    /// ConfigMaps by `namespace/name`: key → bytes (`data` and `binaryData`).
    pub config_maps: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Secrets by `namespace/name`: key → bytes (`data` and `stringData`).
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// `Kind/name` of the objects that are not run.
    pub skipped: Vec<String>,
}

impl Manifest {
    /// Adds the objects of `other` (another file): its pods after these, its ConfigMaps and Secrets over these.
    pub fn merge(&mut self, other: Manifest) {
        self.pods.extend(other.pods);
        self.config_maps.extend(other.config_maps);
        self.secrets.extend(other.secrets);
        self.skipped.extend(other.skipped);
    }
}

const WORKLOADS: [&str; 6] = [
    "Job",
    "CronJob",
    "Deployment",
    "StatefulSet",
    "DaemonSet",
    "ReplicaSet",
];

/// The most pods one workload may ask for: kubelet's default `maxPods`, what one node runs. Without a bound,
/// `replicas: 100000000` made that many pod definitions before anything ran.
pub const MAX_REPLICAS: u64 = 110;

/// Reads every YAML document of `text`; `source` names it in errors (document numbers start at 1).
pub fn parse(text: &str, source: &str) -> Result<Manifest, Error> {
    let mut out = Manifest::default();
    for (n, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let at = format!("{source}, document {}", n + 1);
        let mut value = Value::deserialize(doc).map_err(|e| Error::manifest(&at, e))?;
        octal_modes(&mut value);
        if value.is_null() {
            continue;
        }
        let kind = value
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let name = value
            .get("metadata")
            .and_then(|m| m.get("name"))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let at = format!("{at} ({kind} {name:?})");
        match kind.as_str() {
            "" => return Err(Error::manifest(&at, "no `kind`")),
            "Pod" => {
                let pod: Pod = serde_yaml_ng::from_value(value).map_err(|e| Error::manifest(&at, e))?;
                let meta = pod.metadata;
                let spec = pod.spec.ok_or_else(|| Error::manifest(&at, "no spec"))?;
                if name.is_empty() {
                    return Err(Error::manifest(&at, "a Pod needs metadata.name"));
                }
                out.pods
                    .push(def(("Pod".into(), name.clone()), name, false, meta, spec, &at)?);
            }
            k if WORKLOADS.contains(&k) => {
                let template = if k == "CronJob" {
                    value
                        .get("spec")
                        .and_then(|s| s.get("jobTemplate"))
                        .and_then(|j| j.get("spec"))
                } else {
                    value.get("spec")
                }
                .and_then(|s| s.get("template"))
                .cloned()
                .ok_or_else(|| Error::manifest(&at, "no spec.template"))?;
                let t: PodTemplateSpec =
                    serde_yaml_ng::from_value(template).map_err(|e| Error::manifest(&at, e))?;
                let mut meta = t.metadata.unwrap_or_default();
                if meta.namespace.is_none() {
                    meta.namespace = value
                        .get("metadata")
                        .and_then(|m| m.get("namespace"))
                        .and_then(Value::as_str)
                        .map(str::to_string);
                }
                let mut spec = t
                    .spec
                    .ok_or_else(|| Error::manifest(&at, "no spec.template.spec"))?;
                if matches!(k, "Job" | "CronJob") {
                    let named = spec.restart_policy.as_deref();
                    if !matches!(
                        named.and_then(RestartPolicy::from_name),
                        Some(RestartPolicy::Never | RestartPolicy::OnFailure)
                    ) {
                        return Err(Error::manifest(
                            &at,
                            format!(
                                "a Job's pod template needs restartPolicy Never or OnFailure (has {})",
                                named.unwrap_or("none")
                            ),
                        ));
                    }
                }
                spec.restart_policy.get_or_insert_with(|| "Always".into());
                if name.is_empty() {
                    return Err(Error::manifest(&at, format!("a {k} needs metadata.name")));
                }
                // As many pods as the controller keeps: `replicas` (default 1) for a Deployment, ReplicaSet or
                // StatefulSet (whose pods are `<name>-<ordinal>`); one for a DaemonSet on this one node and
                // for a Job or CronJob run.
                let replicas = match k {
                    "Deployment" | "ReplicaSet" | "StatefulSet" => {
                        let r = value.get("spec").and_then(|s| s.get("replicas"));
                        match r {
                            None => 1,
                            Some(r) => r
                                .as_u64()
                                .ok_or_else(|| Error::manifest(&at, "spec.replicas must be a number"))?,
                        }
                    }
                    _ => 1,
                };
                if replicas > MAX_REPLICAS {
                    return Err(Error::manifest(
                        &at,
                        format!(
                            "spec.replicas {replicas} is more than the {MAX_REPLICAS} pods a node runs (kubelet's maxPods)"
                        ),
                    ));
                }
                for ordinal in 0..replicas {
                    let (pod_name, generated) = if k == "StatefulSet" {
                        (format!("{name}-{ordinal}"), false)
                    } else {
                        (format!("{name}-"), true)
                    };
                    out.pods.push(def(
                        (k.into(), name.clone()),
                        pod_name,
                        generated,
                        meta.clone(),
                        spec.clone(),
                        &at,
                    )?);
                }
            }
            "ConfigMap" => {
                let cm: ConfigMap = serde_yaml_ng::from_value(value).map_err(|e| Error::manifest(&at, e))?;
                let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
                for (k, v) in cm.data.unwrap_or_default() {
                    data.insert(k, v.into_bytes());
                }
                for (k, v) in cm.binary_data.unwrap_or_default() {
                    data.insert(k, v.0);
                }
                out.config_maps.insert(key(&cm.metadata.namespace, &name), data);
            }
            "Secret" => {
                let s: Secret = serde_yaml_ng::from_value(value).map_err(|e| Error::manifest(&at, e))?;
                let mut data: BTreeMap<String, Vec<u8>> = BTreeMap::new();
                for (k, v) in s.data.unwrap_or_default() {
                    data.insert(k, v.0);
                }
                for (k, v) in s.string_data.unwrap_or_default() {
                    data.insert(k, v.into_bytes());
                }
                out.secrets.insert(key(&s.metadata.namespace, &name), data);
            }
            other => out.skipped.push(format!("{other}/{name}")),
        }
    }
    Ok(out)
}

/// File modes written the YAML 1.1 way kubectl reads them (`defaultMode: 0644` is octal there, a string to a
/// YAML 1.2 parser) become their numbers.
pub fn octal_modes(v: &mut Value) {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m.iter_mut() {
                if matches!(k.as_str(), Some("mode" | "defaultMode"))
                    && let Some(n) = v
                        .as_str()
                        .filter(|s| s.len() > 1 && s.starts_with('0'))
                        .and_then(|s| i64::from_str_radix(s, 8).ok())
                {
                    *v = Value::Number(n.into());
                } else {
                    octal_modes(v);
                }
            }
        }
        Value::Sequence(s) => s.iter_mut().for_each(octal_modes),
        Value::Tagged(t) => octal_modes(&mut t.value),
        _ => {}
    }
}

/// `namespace/name`, the namespace defaulting to `default`.
pub fn key(namespace: &Option<String>, name: &str) -> String {
    format!("{}/{name}", namespace.as_deref().unwrap_or("default"))
}

fn def(
    owner: (String, String),
    name: String,
    generated: bool,
    meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    mut spec: PodSpec,
    at: &str,
) -> Result<PodDef, Error> {
    let named = spec.restart_policy.get_or_insert_with(|| "Always".into());
    let restart_policy = RestartPolicy::from_name(named).ok_or_else(|| {
        Error::manifest(
            at,
            format!("restartPolicy {named:?} (Always, OnFailure or Never)"),
        )
    })?;
    if spec.containers.is_empty() {
        return Err(Error::manifest(at, "no containers"));
    }
    let mut seen = std::collections::HashSet::new();
    let init = spec.init_containers.iter().flatten();
    for c in init.clone().chain(&spec.containers) {
        if !seen.insert(c.name.as_str()) {
            return Err(Error::manifest(
                at,
                format!("two containers are named {:?}", c.name),
            ));
        }
        if c.image.as_deref().unwrap_or("").is_empty() {
            return Err(Error::manifest(
                at,
                format!("container {:?} has no image", c.name),
            ));
        }
    }
    for c in init {
        match c.restart_policy.as_deref() {
            None => {}
            Some(p) if RestartPolicy::from_name(p) == Some(RestartPolicy::Always) => {}
            Some(p) => {
                return Err(Error::manifest(
                    at,
                    format!(
                        "init container {:?}: restartPolicy {p:?} (only Always, which makes it a sidecar)",
                        c.name
                    ),
                ));
            }
        }
    }
    Ok(PodDef {
        owner,
        name,
        generated,
        namespace: meta.namespace.unwrap_or_else(|| "default".into()),
        labels: meta.labels.unwrap_or_default(),
        annotations: meta.annotations.unwrap_or_default(),
        spec,
        restart_policy,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: data-processing-job
spec:
  template:
    spec:
      restartPolicy: Never
      initContainers:
      - name: log-agent
        image: fluent/fluent-bit:3.2
        restartPolicy: Always
      - name: db-migration
        image: flyway:latest
        command: ["flyway", "migrate"]
      containers:
      - name: worker
        image: data-worker:latest
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg}
data: {a.conf: "x=1"}
---
apiVersion: autoscaling.k8s.io/v1
kind: VerticalPodAutoscaler
metadata: {name: vpa}
"#;

    #[test]
    fn a_job_its_configmap_and_what_is_skipped() {
        let m = parse(JOB, "job.yaml").unwrap();
        assert_eq!(m.pods.len(), 1);
        let p = &m.pods[0];
        assert_eq!(
            (p.name.as_str(), p.generated, p.namespace.as_str()),
            ("data-processing-job-", true, "default")
        );
        assert_eq!(p.restart_policy, RestartPolicy::Never);
        let init = p.spec.init_containers.as_ref().unwrap();
        assert_eq!(init[0].restart_policy.as_deref(), Some("Always"));
        assert_eq!(init[1].command.as_ref().unwrap(), &["flyway", "migrate"]);
        assert_eq!(m.config_maps["default/cfg"]["a.conf"], b"x=1");
        assert_eq!(m.skipped, ["VerticalPodAutoscaler/vpa"]);
    }

    #[test]
    fn replicas_make_as_many_pods() {
        let sts = "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  replicas: 2\n  template:\n    spec:\n      containers: [{name: a, image: x}]\n";
        let m = parse(sts, "s.yaml").unwrap();
        let names: Vec<_> = m.pods.iter().map(|p| (p.name.as_str(), p.generated)).collect();
        assert_eq!(names, [("db-0", false), ("db-1", false)]);
        let dep = sts
            .replace("StatefulSet", "Deployment")
            .replace("replicas: 2", "replicas: 3");
        let m = parse(&dep, "d.yaml").unwrap();
        assert_eq!(m.pods.len(), 3);
        assert!(m.pods.iter().all(|p| p.name == "db-" && p.generated));
        let m = parse(&dep.replace("  replicas: 3\n", ""), "d.yaml").unwrap();
        assert_eq!(m.pods.len(), 1, "one by default");
        let e = parse(&dep.replace("replicas: 3", "replicas: many"), "d.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec.replicas must be a number"), "{e}");
        // Found by tests/manifest_props.rs: a huge count was a hang (and all of memory) before any pod ran.
        assert_eq!(
            parse(&dep.replace("replicas: 3", "replicas: 110"), "d.yaml")
                .unwrap()
                .pods
                .len(),
            110
        );
        let e = parse(&dep.replace("replicas: 3", "replicas: 100000000"), "d.yaml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("spec.replicas 100000000 is more than the 110 pods"),
            "{e}"
        );
    }

    #[test]
    fn pods_default_to_always_and_bad_manifests_are_named() {
        let m = parse("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: busybox}]\n", "p.yaml").unwrap();
        assert_eq!(
            (m.pods[0].name.as_str(), m.pods[0].restart_policy),
            ("p", RestartPolicy::Always)
        );

        let e = parse(
            &JOB.replace("restartPolicy: Never", "restartPolicy: Always"),
            "j.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("j.yaml, document 1 (Job \"data-processing-job\")")
                && e.contains("Never or OnFailure"),
            "{e}"
        );
        let e = parse(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a}]\n",
            "p.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("container \"a\" has no image"), "{e}");
        let e = parse("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: x}, {name: a, image: y}]\n", "p.yaml").unwrap_err().to_string();
        assert!(e.contains("two containers are named \"a\""), "{e}");
        let e = parse("kind: Pod\nmetadata: {name: p}\nspec: [1\n", "p.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.yaml, document 1"), "{e}");
        let e = parse("metadata: {name: p}\n", "p.yaml").unwrap_err().to_string();
        assert!(e.contains("no `kind`"), "{e}");
    }

    #[test]
    fn restart_policies_are_read_with_the_manifest() {
        let m = parse(JOB, "job.yaml").unwrap();
        let roles: Vec<_> = m.pods[0]
            .containers()
            .map(|(c, r)| (c.name.as_str(), r))
            .collect();
        assert_eq!(
            roles,
            [
                ("log-agent", Role::Sidecar),
                ("db-migration", Role::Init),
                ("worker", Role::Main)
            ]
        );
        let pod = |policy: &str| {
            parse(
                &format!(
                    "kind: Pod\nmetadata: {{name: p}}\nspec:\n  restartPolicy: {policy}\n  containers: [{{name: a, image: x}}]\n"
                ),
                "p.yaml",
            )
        };
        assert_eq!(
            pod("OnFailure").unwrap().pods[0].restart_policy,
            RestartPolicy::OnFailure
        );
        let e = pod("Sometimes").unwrap_err().to_string();
        assert!(
            e.contains("(Pod \"p\"): restartPolicy \"Sometimes\" (Always, OnFailure or Never)"),
            "{e}"
        );
    }
}
