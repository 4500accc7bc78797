//! The three patch types of `kubectl patch` (`--type strategic|merge|json`), applied to an object as JSON: a
//! strategic merge patch merges a pod's containers by name (the resize subresource's case), RFC 7386 merges
//! objects and replaces the rest, RFC 6902 applies its operations in order.
//!
//! RFC 6902 and RFC 7386 are the `json-patch` crate's (all six operations, kept to the RFCs' tests); the
//! strategic merge is ours, as it needs Kubernetes' knowledge of which lists merge by which key.

use serde_json::Value;

/// RFC 7386: `patch` merged into `target`; null removes, objects merge, anything else replaces.
pub(crate) fn merge(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
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

/// RFC 6902: its six operations (`add`, `remove`, `replace`, `move`, `copy`, `test`) in order, all or none.
pub(crate) fn json_patch(target: &mut Value, ops: &Value) -> Result<(), String> {
    let ops: json_patch::Patch = serde_json::from_value(ops.clone())
        .map_err(|e| format!("a JSON patch is a list of operations: {e}"))?;
    json_patch::patch(target, &ops).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::pods::resize::tests::pod;

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

    #[test]
    fn json_patches_move_and_copy() {
        let mut v = json!({"metadata": {"labels": {"a": "1"}, "annotations": {}}});
        let ops = json!([
            {"op": "copy", "from": "/metadata/labels/a", "path": "/metadata/labels/b"},
            {"op": "move", "from": "/metadata/labels/a", "path": "/metadata/annotations/a"}
        ]);
        json_patch(&mut v, &ops).unwrap();
        assert_eq!(
            v,
            json!({"metadata": {"labels": {"b": "1"}, "annotations": {"a": "1"}}})
        );
        // A failed operation leaves the object as it was.
        let before = v.clone();
        let ops = json!([
            {"op": "copy", "from": "/metadata/labels/b", "path": "/metadata/labels/c"},
            {"op": "move", "from": "/metadata/nope", "path": "/metadata/x"}
        ]);
        let e = json_patch(&mut v, &ops).unwrap_err();
        assert!(e.contains("/metadata/nope") || e.contains("from"), "{e}");
        assert_eq!(v, before);
        let e = json_patch(&mut v, &json!({"op": "add"})).unwrap_err();
        assert!(e.starts_with("a JSON patch is a list of operations"), "{e}");
    }
}
