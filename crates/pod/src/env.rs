//! A container's environment as kubelet builds it: `envFrom` sources first, then `env` in order (a later name
//! wins), values from ConfigMaps, Secrets, the pod's fields and the container's resources; `$(VAR)` references
//! to variables defined earlier are expanded in values, command and args.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVarSource};

use crate::Error;
use crate::manifest::{Manifest, PodDef};
use crate::quantity;

/// What `fieldRef`s resolve to.
#[derive(Debug, Clone, Default)]
pub struct PodFields {
    /// The pod's name.
    pub name: String,
    /// Its namespace.
    pub namespace: String,
    /// Its uid.
    pub uid: String,
    /// The pod's IP (empty without a network).
    pub pod_ip: String,
    /// The node: this machine's hostname.
    pub node_name: String,
    /// The node's IP (the pod's on a host-network pod, else empty).
    pub host_ip: String,
}

/// The ordered `NAME=value` pairs of container `c`.
pub fn build(
    def: &PodDef,
    manifest: &Manifest,
    c: &Container,
    fields: &PodFields,
) -> Result<Vec<(String, String)>, Error> {
    let mut out: Vec<(String, String)> = Vec::new();
    let set =
        |out: &mut Vec<(String, String)>, k: String, v: String| match out.iter_mut().find(|(n, _)| *n == k) {
            Some(slot) => slot.1 = v,
            None => out.push((k, v)),
        };
    let ns = Some(def.namespace.clone());
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (what, name, optional, map) = if let Some(r) = &from.config_map_ref {
            ("configMap", &r.name, r.optional, &manifest.config_maps)
        } else if let Some(r) = &from.secret_ref {
            ("secret", &r.name, r.optional, &manifest.secrets)
        } else {
            continue;
        };
        match map.get(&crate::manifest::key(&ns, name)) {
            Some(data) => {
                for (k, v) in data {
                    set(
                        &mut out,
                        format!("{prefix}{k}"),
                        String::from_utf8_lossy(v).into_owned(),
                    );
                }
            }
            None if optional == Some(true) => {}
            None => return Err(missing(&c.name, what, name, &def.namespace)),
        }
    }
    for e in c.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (Some(v), _) => expand(v, &out),
            (None, Some(src)) => match from_source(def, manifest, c, fields, src)? {
                Some(v) => v,
                None => continue,
            },
            (None, None) => String::new(),
        };
        set(&mut out, e.name.clone(), value);
    }
    Ok(out)
}

/// An error about container `name`'s environment.
fn bad(name: &str, reason: impl ToString) -> Error {
    Error::manifest(format!("container {name:?}"), reason)
}

fn missing(container: &str, what: &str, name: &str, ns: &str) -> Error {
    bad(
        container,
        format!(
            "{what} {ns}/{name} is not in the manifest (put it in the same file, or mark the reference optional)"
        ),
    )
}

fn from_source(
    def: &PodDef,
    manifest: &Manifest,
    c: &Container,
    fields: &PodFields,
    src: &EnvVarSource,
) -> Result<Option<String>, Error> {
    let ns = Some(def.namespace.clone());
    let keyed =
        |what: &str, map: &BTreeMap<String, BTreeMap<String, Vec<u8>>>, name: &str, key: &str, optional| {
            match map.get(&crate::manifest::key(&ns, name)).map(|d| d.get(key)) {
                Some(Some(v)) => Ok(Some(String::from_utf8_lossy(v).into_owned())),
                _ if optional == Some(true) => Ok(None),
                Some(None) => Err(bad(
                    &c.name,
                    format!("{what} {}/{name} has no key {key:?}", def.namespace),
                )),
                None => Err(missing(&c.name, what, name, &def.namespace)),
            }
        };
    if let Some(r) = &src.config_map_key_ref {
        return keyed("configMap", &manifest.config_maps, &r.name, &r.key, r.optional);
    }
    if let Some(r) = &src.secret_key_ref {
        return keyed("secret", &manifest.secrets, &r.name, &r.key, r.optional);
    }
    if let Some(f) = &src.field_ref {
        return field(def, fields, &f.field_path)
            .map(Some)
            .ok_or_else(|| bad(&c.name, format!("fieldRef {:?} is not supported", f.field_path)));
    }
    if let Some(r) = &src.resource_field_ref {
        return resource(def, c, &r.container_name, &r.resource, r.divisor.as_ref()).map(Some);
    }
    Err(bad(&c.name, "an env valueFrom of a kind crius does not read"))
}

/// A downward-API field of the pod.
pub fn field(def: &PodDef, f: &PodFields, path: &str) -> Option<String> {
    let quoted = |p: &str, prefix: &str| p.strip_prefix(prefix)?.strip_suffix("']").map(str::to_string);
    Some(match path {
        "metadata.name" => f.name.clone(),
        "metadata.namespace" => f.namespace.clone(),
        "metadata.uid" => f.uid.clone(),
        "spec.nodeName" => f.node_name.clone(),
        "spec.serviceAccountName" => def
            .spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into()),
        "status.podIP" | "status.podIPs" => f.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => f.host_ip.clone(),
        p => {
            if let Some(k) = quoted(p, "metadata.labels['") {
                def.labels.get(&k).cloned().unwrap_or_default()
            } else if let Some(k) = quoted(p, "metadata.annotations['") {
                def.annotations.get(&k).cloned().unwrap_or_default()
            } else {
                return None;
            }
        }
    })
}

/// A `resourceFieldRef`: the container's limit or request, divided by `divisor` and rounded up; a limit that
/// is not set is the node's capacity.
fn resource(
    def: &PodDef,
    c: &Container,
    container: &Option<String>,
    what: &str,
    divisor: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Result<String, Error> {
    let target = match container.as_deref().filter(|n| !n.is_empty()) {
        None => c,
        Some(n) => def
            .spec
            .containers
            .iter()
            .chain(def.spec.init_containers.iter().flatten())
            .find(|x| x.name == n)
            .ok_or_else(|| bad(&c.name, format!("resourceFieldRef names no container {n:?}")))?,
    };
    let r = target.resources.clone().unwrap_or_default();
    let (kind, res) = what
        .split_once('.')
        .ok_or_else(|| bad(&c.name, format!("resourceFieldRef {what:?}")))?;
    let get = |m: &Option<BTreeMap<_, _>>| m.as_ref().and_then(|m: &BTreeMap<String, _>| m.get(res).cloned());
    let q = match kind {
        "limits" => get(&r.limits),
        "requests" => get(&r.requests).or_else(|| get(&r.limits)),
        _ => return Err(bad(&c.name, format!("resourceFieldRef {what:?}"))),
    };
    let bad_amount = |e: quantity::BadQuantity| bad(&c.name, format!("{what}: {e}"));
    match res {
        "cpu" => {
            let milli = match q {
                Some(q) => quantity::milli_cpu(&q).map_err(bad_amount)?,
                None if kind == "limits" => crate::node::cpus() * 1000,
                None => 0,
            };
            let div = divisor
                .map(quantity::milli_cpu)
                .transpose()
                .map_err(bad_amount)?
                .unwrap_or(1000)
                .max(1);
            Ok(milli.div_ceil(div).to_string())
        }
        "memory" | "ephemeral-storage" => {
            let v = match q {
                Some(q) => quantity::value(&q).map_err(bad_amount)?,
                None if kind == "limits" && res == "memory" => crate::node::memory_bytes(),
                None => 0,
            };
            let div = divisor
                .map(quantity::value)
                .transpose()
                .map_err(bad_amount)?
                .unwrap_or(1)
                .max(1);
            Ok(v.div_ceil(div).to_string())
        }
        _ => Err(bad(
            &c.name,
            format!("resourceFieldRef {what:?} is not supported"),
        )),
    }
}

/// Expands `$(NAME)` from `vars` (kubelet's rules: `$$` is a literal `$`; an unknown or unclosed reference
/// stays as written).
pub fn expand(s: &str, vars: &[(String, String)]) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(body) = after.strip_prefix('(') {
            match body.find(')') {
                Some(end) => {
                    let name = &body[..end];
                    match vars.iter().rev().find(|(k, _)| k == name) {
                        Some((_, v)) => out.push_str(v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &body[end + 1..];
                }
                None => {
                    out.push_str("$(");
                    rest = body;
                }
            }
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<(String, String)> {
        vec![("A".into(), "1".into()), ("B".into(), "two".into())]
    }

    #[test]
    fn expansion_follows_kubelet() {
        assert_eq!(expand("x$(A)y$(B)", &vars()), "x1ytwo");
        assert_eq!(expand("$(C) $$(A) $$ $", &vars()), "$(C) $(A) $ $");
        assert_eq!(expand("$(A", &vars()), "$(A");
    }

    #[test]
    fn env_from_configmaps_fields_and_resources() {
        let m = crate::manifest::parse(
            r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: cm}
data: {MODE: fast, PORT: "80"}
---
apiVersion: v1
kind: Pod
metadata: {name: p, labels: {app: web}}
spec:
  containers:
  - name: c
    image: busybox
    resources: {limits: {memory: 64Mi, cpu: 1500m}}
    envFrom: [{configMapRef: {name: cm}, prefix: CM_}]
    env:
    - {name: MODE, valueFrom: {configMapKeyRef: {name: cm, key: MODE}}}
    - {name: URL, value: "http://$(POD):$(CM_PORT)/$(NOPE)"}
    - {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    - {name: MEM, valueFrom: {resourceFieldRef: {resource: limits.memory, divisor: 1Mi}}}
    - {name: CPU, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
    - {name: GONE, valueFrom: {configMapKeyRef: {name: other, key: k, optional: true}}}
"#,
            "t",
        )
        .unwrap();
        let def = &m.pods[0];
        let f = PodFields {
            name: "p".into(),
            namespace: "default".into(),
            ..Default::default()
        };
        let env = build(def, &m, &def.spec.containers[0], &f).unwrap();
        let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("CM_MODE"), Some("fast"));
        assert_eq!(get("MODE"), Some("fast"));
        assert_eq!(
            get("URL"),
            Some("http://$(POD):80/$(NOPE)"),
            "POD is defined after URL"
        );
        assert_eq!((get("POD"), get("APP")), (Some("p"), Some("web")));
        assert_eq!((get("MEM"), get("CPU")), (Some("64"), Some("2")));
        assert_eq!(get("GONE"), None);

        let mut bad = m.pods[0].clone();
        bad.spec.containers[0].env_from = None;
        bad.spec.containers[0].env.as_mut().unwrap()[0]
            .value_from
            .as_mut()
            .unwrap()
            .config_map_key_ref
            .as_mut()
            .unwrap()
            .name = "missing".into();
        let e = build(&bad, &m, &bad.spec.containers[0], &f)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("configMap default/missing is not in the manifest"),
            "{e}"
        );
    }
}
