//! A container's environment as kubelet builds it: `envFrom` sources first, then `env` in order (a later name
//! wins), values from ConfigMaps, Secrets, the pod's fields and the container's resources; `$(VAR)` references
//! to variables defined earlier are expanded in values, command and args. The pod's fields and resources are
//! read by [`crate::downward`], as volume files read them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVarSource};

use crate::Error;
use crate::downward::{self, Reader};
use crate::manifest::{Manifest, PodDef};

pub use crate::downward::PodFields;

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
        return downward::field(def, fields, &f.field_path, Reader::Env)
            .map(Some)
            .ok_or_else(|| bad(&c.name, format!("fieldRef {:?} is not supported", f.field_path)));
    }
    if let Some(r) = &src.resource_field_ref {
        return downward::resource(
            def,
            Some(c),
            r.container_name.as_deref(),
            &r.resource,
            r.divisor.as_ref(),
            fields.allocatable,
        )
        .map(Some)
        .map_err(|e| bad(&c.name, e));
    }
    Err(bad(&c.name, "an env valueFrom of a kind crius does not read"))
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
