//! Reading a document as its typed object, strictly: a value of the wrong type is an error with its path, and
//! so is a field the type does not have. k8s-openapi's types skip unknown fields when they deserialize, so the
//! object is serialized back and every key of the input that did not come back is one it does not know.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;
use serde_yaml_ng::Value;

use super::Found;

/// `value` as a `T`, every unknown field in it added to `found`; None (with the reason in `found`) when it
/// is not a `T` at all.
pub(super) fn decode<T: DeserializeOwned + Serialize>(value: &Value, found: &mut Found) -> Option<T> {
    // Through YAML text rather than `from_value`: the text deserializer keeps the path of what it reads, so a
    // wrong type is named where it is (`spec.containers[0].ports[0].containerPort: invalid type: ...`).
    let text = match serde_yaml_ng::to_string(value) {
        Ok(text) => text,
        Err(e) => {
            found.add("", e.to_string());
            return None;
        }
    };
    let object: T = match serde_yaml_ng::from_str(&text) {
        Ok(object) => object,
        Err(e) => {
            found.add("", without_location(&e));
            return None;
        }
    };
    match serde_json::to_value(&object) {
        Ok(back) => unknown(value, &back, "", found),
        Err(e) => found.add("", e.to_string()),
    }
    Some(object)
}

/// The error's text without " at line L column C": the lines are of the text written back, not the user's.
fn without_location(e: &serde_yaml_ng::Error) -> String {
    let text = e.to_string();
    match (e.location(), text.rfind(" at line ")) {
        (Some(_), Some(at)) => text[..at].to_string(),
        _ => text,
    }
}

/// Adds to `found` each key of `input` (at `path`) that `back`, the object read and written again, lacks.
/// A key whose value is null is let pass: it sets nothing, and the API server reads it as absent
/// (`creationTimestamp: null`, which kubectl writes). Values that are not objects or lists (quantities,
/// int-or-strings, times) are leaves.
fn unknown(input: &Value, back: &Json, path: &str, found: &mut Found) {
    match (input, back) {
        (Value::Mapping(map), Json::Object(fields)) => {
            for (key, value) in map {
                if value.is_null() {
                    continue;
                }
                let key = match key {
                    Value::String(s) => s.clone(),
                    other => serde_yaml_ng::to_string(other)
                        .unwrap_or_default()
                        .trim_end()
                        .to_string(),
                };
                let at = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                match fields.get(&key) {
                    Some(back) => unknown(value, back, &at, found),
                    None => found.add(at, format!("unknown field {key:?}")),
                }
            }
        }
        (Value::Sequence(items), Json::Array(back)) if items.len() == back.len() => {
            for (i, (item, back)) in items.iter().zip(back).enumerate() {
                unknown(item, back, &format!("{path}[{i}]"), found);
            }
        }
        (Value::Tagged(tagged), _) => unknown(&tagged.value, back, path, found),
        _ => {}
    }
}
