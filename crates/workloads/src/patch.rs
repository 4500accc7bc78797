//! The three patch types of `kubectl patch` (`--type strategic|merge|json`), applied to an object as JSON: a
//! strategic merge patch merges a pod's containers by name (the resize subresource's case), RFC 7386 merges
//! objects and replaces the rest, RFC 6902 applies its operations in order.

use serde_json::Value;

/// RFC 7386: `patch` merged into `target`; null removes, objects merge, anything else replaces.
pub(super) fn merge(target: &mut Value, patch: &Value) {
    match (target.as_object_mut(), patch.as_object()) {
        (Some(t), Some(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        _ => *target = patch.clone(),
    }
}

/// A strategic merge patch of a pod: as [`merge`], but containers (and init containers) merge by name.
pub(super) fn strategic(target: &mut Value, patch: &Value) -> Result<(), String> {
    let mut patch = patch.clone();
    for list in ["containers", "initContainers"] {
        let Some(items) = patch.pointer_mut(&format!("/spec/{list}")).map(Value::take) else {
            continue;
        };
        let Value::Array(items) = items else {
            return Err(format!("spec.{list} must be a list"));
        };
        for item in items {
            let name = item.get("name").and_then(Value::as_str).unwrap_or("").to_string();
            let have = target
                .pointer_mut(&format!("/spec/{list}"))
                .and_then(Value::as_array_mut)
                .and_then(|cs| {
                    cs.iter_mut()
                        .find(|c| c.get("name").and_then(Value::as_str) == Some(&name))
                })
                .ok_or_else(|| format!("spec.{list}: the pod has no container {name:?}"))?;
            merge(have, &item);
        }
        if let Some(spec) = patch.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove(list);
        }
    }
    merge(target, &patch);
    Ok(())
}

/// RFC 6902: `add`, `replace`, `remove` and `test` operations.
pub(super) fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    let ops = ops.as_array().ok_or("a JSON patch is a list of operations")?;
    for op in ops {
        let get = |k: &str| op.get(k).and_then(Value::as_str).unwrap_or("");
        let (kind, path) = (get("op"), get("path"));
        let (parent, last) = path
            .rsplit_once('/')
            .ok_or_else(|| format!("bad path {path:?}"))?;
        let last = last.replace("~1", "/").replace("~0", "~");
        match kind {
            "test" => {
                if target.pointer(path) != op.get("value") {
                    return Err(format!("test of {path} failed"));
                }
            }
            "add" | "replace" | "remove" => {
                let p = target
                    .pointer_mut(parent)
                    .ok_or_else(|| format!("{path}: no such path"))?;
                let value = op.get("value").cloned().unwrap_or(Value::Null);
                match p {
                    Value::Object(m) => {
                        if kind == "remove" {
                            m.remove(&last).ok_or_else(|| format!("{path}: no such path"))?;
                        } else if kind == "replace" && !m.contains_key(&last) {
                            return Err(format!("{path}: no such path"));
                        } else {
                            m.insert(last, value);
                        }
                    }
                    Value::Array(a) => {
                        let i = if last == "-" {
                            a.len()
                        } else {
                            last.parse().map_err(|_| format!("{path}: bad index"))?
                        };
                        match kind {
                            "add" if i <= a.len() => a.insert(i, value),
                            "replace" if i < a.len() => a[i] = value,
                            "remove" if i < a.len() => {
                                a.remove(i);
                            }
                            _ => return Err(format!("{path}: index out of range")),
                        }
                    }
                    _ => return Err(format!("{path}: no such path")),
                }
            }
            other => return Err(format!("operation {other:?} (add, replace, remove, test)")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::resize::tests::pod;

    #[test]
    fn the_seeds_strategic_patch_merges_by_container_name() {
        let mut v = pod("500m", "512Mi");
        let patch = json!({"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": "800m"}, "limits": {"cpu": "800m"}}}]}});
        strategic(&mut v, &patch).unwrap();
        assert_eq!(
            v.pointer("/spec/containers/0/resources/limits/cpu"),
            Some(&json!("800m"))
        );
        assert_eq!(
            v.pointer("/spec/containers/0/resources/limits/memory"),
            Some(&json!("512Mi"))
        );
        assert_eq!(v.pointer("/spec/containers/1/name"), Some(&json!("side")));
        let bad = json!({"spec": {"containers": [{"name": "nope"}]}});
        assert!(strategic(&mut v, &bad).unwrap_err().contains("\"nope\""));
    }

    #[test]
    fn merge_and_json_patches_follow_their_rfcs() {
        let mut v = json!({"a": {"b": 1, "c": 2}, "l": [1, 2]});
        merge(&mut v, &json!({"a": {"b": null, "d": 3}, "l": [9]}));
        assert_eq!(v, json!({"a": {"c": 2, "d": 3}, "l": [9]}));
        let mut v = pod("1", "1Gi");
        let ops = json!([
            {"op": "test", "path": "/spec/containers/0/name", "value": "app"},
            {"op": "replace", "path": "/spec/containers/0/resources/limits/cpu", "value": "2"},
            {"op": "add", "path": "/metadata/labels", "value": {"x": "y"}},
            {"op": "remove", "path": "/metadata/labels/x"}
        ]);
        json_patch(&mut v, &ops).unwrap();
        assert_eq!(
            v.pointer("/spec/containers/0/resources/limits/cpu"),
            Some(&json!("2"))
        );
        let e = json_patch(
            &mut v,
            &json!([{"op": "replace", "path": "/spec/nope/x", "value": 1}]),
        );
        assert!(e.unwrap_err().contains("/spec/nope/x"));
    }
}
