//! A reader of just enough of `proto/cri/runtime/v1/api.proto` (the file the CRI code is generated from) to
//! list every field of every request message and of the messages they hold: the other half of the test in
//! `fields.rs`. It takes the file's own layout (no nested messages, enums skipped), not proto in general.

use std::collections::{BTreeMap, BTreeSet};

/// The proto's text, split into words and single punctuation characters (comments and strings dropped).
fn tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split("//").next().unwrap_or_default();
        let mut word = String::new();
        let mut in_string = false;
        for c in line.chars() {
            if in_string {
                in_string = c != '"';
                continue;
            }
            if c.is_alphanumeric() || c == '_' || c == '.' {
                word.push(c);
                continue;
            }
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            if c == '"' {
                in_string = true;
            } else if !c.is_whitespace() {
                out.push(c.to_string());
            }
        }
        if !word.is_empty() {
            out.push(word);
        }
    }
    out
}

/// Skips a `{ ... }` block whose `{` is at `i`; returns the index after its `}`.
fn skip_block(t: &[String], mut i: usize) -> usize {
    let mut depth = 0;
    loop {
        match t[i].as_str() {
            "{" => depth += 1,
            "}" => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
        i += 1;
    }
}

/// Messages by name, each with its fields as `(name, type)`.
type Messages = BTreeMap<String, Vec<(String, String)>>;

/// The proto's messages and the request type of every rpc.
fn read_proto(text: &str) -> (Messages, Vec<String>) {
    let t = tokens(text);
    let (mut messages, mut requests) = (BTreeMap::new(), Vec::new());
    let mut i = 0;
    while i < t.len() {
        match t[i].as_str() {
            "message" => {
                let name = t[i + 1].clone();
                let mut fields = Vec::new();
                i += 3;
                while t[i] != "}" {
                    match t[i].as_str() {
                        "enum" | "oneof" | "message" => i = skip_block(&t, i + 2),
                        "option" | "reserved" => {
                            while t[i] != ";" {
                                i += 1;
                            }
                            i += 1;
                        }
                        _ => {
                            if t[i] == "repeated" || t[i] == "optional" {
                                i += 1;
                            }
                            // `map < key , value > name` holds values; any other `type name`.
                            let (ty, name) = if t[i] == "map" { (i + 4, i + 6) } else { (i, i + 1) };
                            fields.push((t[name].clone(), t[ty].clone()));
                            i = name;
                            while t[i] != ";" {
                                i += 1;
                            }
                            i += 1;
                        }
                    }
                }
                messages.insert(name, fields);
                i += 1;
            }
            "rpc" => {
                let at = if t[i + 3] == "stream" { i + 4 } else { i + 3 };
                requests.push(t[at].clone());
                i = at;
            }
            _ => i += 1,
        }
    }
    (messages, requests)
}

/// Every field of the request messages and of the messages they hold, as `(message, field)`.
pub(super) fn request_fields() -> BTreeSet<(String, String)> {
    let (messages, requests) = read_proto(include_str!("../../../../../proto/cri/runtime/v1/api.proto"));
    assert!(
        requests.len() > 30,
        "the proto's rpcs were not read: {requests:?}"
    );
    let (mut out, mut seen, mut todo) = (BTreeSet::new(), BTreeSet::new(), requests);
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let fields = messages
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is not a message of the proto"));
        for (field, ty) in fields {
            out.insert((name.clone(), field.clone()));
            let ty = ty.rsplit('.').next().unwrap_or(ty);
            if messages.contains_key(ty) {
                todo.push(ty.to_string());
            }
        }
    }
    out
}
