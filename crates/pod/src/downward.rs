//! The downward API: a pod's own fields and its containers' resources, as kubelet hands them to a container,
//! in env vars (`env[].valueFrom`, [`crate::env`]) and in files (`downwardAPI` volumes and projections,
//! [`crate::volumes`]). One reading for both, so an env var and a file of the same field always agree; each
//! reader takes only the field paths the API server lets it name ([`ENV_FIELDS`], [`FILE_FIELDS`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Container;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::manifest::PodDef;
use crate::node::Allocatable;
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
    /// What the node offers pods ([`crate::Options::allocatable`]): a limit that is not set reads as it.
    pub allocatable: Allocatable,
}

/// Who reads a field: they may name different ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reader {
    /// An env var's `valueFrom.fieldRef`.
    Env,
    /// A file of a `downwardAPI` volume or projection.
    File,
}

/// The field paths an env var may name, besides `metadata.labels['KEY']` and `metadata.annotations['KEY']`.
pub const ENV_FIELDS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

/// The field paths a file may name, besides `metadata.labels['KEY']` and `metadata.annotations['KEY']`.
pub const FILE_FIELDS: [&str; 5] = [
    "metadata.annotations",
    "metadata.labels",
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
];

/// The resources a `resourceFieldRef` may name.
pub const RESOURCES: [&str; 6] = [
    "limits.cpu",
    "limits.ephemeral-storage",
    "limits.memory",
    "requests.cpu",
    "requests.ephemeral-storage",
    "requests.memory",
];

/// `metadata.labels['KEY']` or `metadata.annotations['KEY']` as (`labels` or `annotations`, KEY).
pub fn subscript(path: &str) -> Option<(&'static str, &str)> {
    let key = |map: &str| {
        path.strip_prefix("metadata.")?
            .strip_prefix(map)?
            .strip_prefix("['")?
            .strip_suffix("']")
    };
    key("labels")
        .map(|k| ("labels", k))
        .or_else(|| key("annotations").map(|k| ("annotations", k)))
}

/// Whether `reader` may name field `path`.
pub fn readable(path: &str, reader: Reader) -> bool {
    let fields: &[&str] = match reader {
        Reader::Env => &ENV_FIELDS,
        Reader::File => &FILE_FIELDS,
    };
    fields.contains(&path) || subscript(path).is_some()
}

/// Field `path` of the pod, as `reader` sees it; None when `reader` may not name it. Whole label and
/// annotation maps are kubelet's `key="value"` lines ([`format_map`]); a missing key is empty.
pub fn field(def: &PodDef, f: &PodFields, path: &str, reader: Reader) -> Option<String> {
    if !readable(path, reader) {
        return None;
    }
    Some(match path {
        "metadata.name" => f.name.clone(),
        "metadata.namespace" => f.namespace.clone(),
        "metadata.uid" => f.uid.clone(),
        "metadata.labels" => format_map(&def.labels),
        "metadata.annotations" => format_map(&def.annotations),
        "spec.nodeName" => f.node_name.clone(),
        "spec.serviceAccountName" => def
            .spec
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".into()),
        "status.podIP" | "status.podIPs" => f.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => f.host_ip.clone(),
        p => {
            let (map, key) = subscript(p)?;
            let map = if map == "labels" {
                &def.labels
            } else {
                &def.annotations
            };
            map.get(key).cloned().unwrap_or_default()
        }
    })
}

/// A `resourceFieldRef`: the limit or request `what` (`limits.cpu`) of container `container` (else `own`,
/// the container whose env it is), divided by `divisor` and rounded up, as kubelet does. A limit that is not
/// set is the node's allocatable amount (`node`, the figure admission uses too); a request that is not set is the limit (the API server's default),
/// else 0. Err is why not, for the caller to say whose field it is.
pub fn resource(
    def: &PodDef,
    own: Option<&Container>,
    container: Option<&str>,
    what: &str,
    divisor: Option<&Quantity>,
    node: Allocatable,
) -> Result<String, String> {
    let target = match container.filter(|n| !n.is_empty()) {
        None => own.ok_or("resourceFieldRef needs containerName")?,
        Some(n) => def
            .spec
            .containers
            .iter()
            .chain(def.spec.init_containers.iter().flatten())
            .find(|x| x.name == n)
            .ok_or_else(|| format!("resourceFieldRef names no container {n:?}"))?,
    };
    let r = target.resources.clone().unwrap_or_default();
    let (kind, res) = what
        .split_once('.')
        .ok_or_else(|| format!("resourceFieldRef {what:?}"))?;
    let get = |m: &Option<BTreeMap<_, _>>| m.as_ref().and_then(|m: &BTreeMap<String, _>| m.get(res).cloned());
    let q = match kind {
        "limits" => get(&r.limits),
        "requests" => get(&r.requests).or_else(|| get(&r.limits)),
        _ => return Err(format!("resourceFieldRef {what:?}")),
    };
    let bad_amount = |e: quantity::BadQuantity| format!("{what}: {e}");
    match res {
        "cpu" => {
            let milli = match q {
                Some(q) => quantity::milli_cpu(&q).map_err(bad_amount)?,
                None if kind == "limits" => node.milli_cpu,
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
                None if kind == "limits" && res == "memory" => node.memory,
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
        _ => Err(format!("resourceFieldRef {what:?} is not supported")),
    }
}

/// A label or annotation map as kubelet writes it in a file: a `key="value"` line per key, sorted by key,
/// each value quoted as Go's `%q` does ([`go_quote`]), no newline after the last.
pub fn format_map(m: &BTreeMap<String, String>) -> String {
    let lines: Vec<String> = m.iter().map(|(k, v)| format!("{k}={}", go_quote(v))).collect();
    lines.join("\n")
}

/// `s` in double quotes as Go's `%q` (strconv.Quote) gives it: `"` and `\` escaped, `\a \b \f \n \r \t \v`
/// for those, `\xNN` for other ASCII controls and DEL, `\uNNNN` / `\UNNNNNNNN` (lower-case hex) for other
/// characters Go does not print; the rest as it is.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        let n = c as u32;
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            _ if go_prints(c) => out.push(c),
            _ if n < 0x20 || n == 0x7f => {
                let _ = write!(out, "\\x{n:02x}");
            }
            _ if n < 0x10000 => {
                let _ = write!(out, "\\u{n:04x}");
            }
            _ => {
                let _ = write!(out, "\\U{n:08x}");
            }
        }
    }
    out.push('"');
    out
}

/// Go's `unicode.IsPrint` (letters, marks, numbers, punctuation, symbols and the ASCII space), without
/// Unicode's tables: controls, spaces other than U+0020, the format characters, private use and
/// noncharacters are not printed. Code points Unicode has not assigned are printed (Go escapes them).
fn go_prints(c: char) -> bool {
    let n = c as u32;
    if (0x20..0x7f).contains(&n) {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    let format = matches!(n,
        0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x890..=0x891 | 0x8e2 | 0x180e
        | 0x200b..=0x200f | 0x202a..=0x202e | 0x2060..=0x2064 | 0x2066..=0x206f | 0xfeff
        | 0xfff9..=0xfffb | 0x110bd | 0x110cd | 0x13430..=0x1343f | 0x1bca0..=0x1bca3
        | 0x1d173..=0x1d17a | 0xe0001 | 0xe0020..=0xe007f);
    let private = matches!(n, 0xe000..=0xf8ff | 0xf0000..=0xffffd | 0x100000..=0x10fffd);
    let nonchar = n & 0xfffe == 0xfffe || (0xfdd0..=0xfdef).contains(&n);
    !(format || private || nonchar)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_quoted_as_go_quotes_them() {
        assert_eq!(go_quote("plain"), r#""plain""#);
        assert_eq!(go_quote(r#"a "b" \c"#), r#""a \"b\" \\c""#);
        assert_eq!(go_quote("l1\nl2\t\r\x07\x08\x0c\x0b"), r#""l1\nl2\t\r\a\b\f\v""#);
        assert_eq!(go_quote("\x00\x1b\x7f"), r#""\x00\x1b\x7f""#);
        assert_eq!(go_quote("é 日本 🚀"), "\"é 日本 🚀\"", "printable: as it is");
        assert_eq!(
            go_quote("\u{85}\u{a0}\u{200b}\u{feff}"),
            r#""\u0085\u00a0\u200b\ufeff""#
        );
        assert_eq!(go_quote("\u{e0001}\u{f0000}"), r#""\U000e0001\U000f0000""#);
    }

    #[test]
    fn maps_are_sorted_key_value_lines() {
        let m: BTreeMap<String, String> = [("b", "2"), ("a", "x\"y"), ("app.kubernetes.io/name", "")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(
            format_map(&m),
            "a=\"x\\\"y\"\napp.kubernetes.io/name=\"\"\nb=\"2\""
        );
        assert_eq!(format_map(&BTreeMap::new()), "");
    }

    #[test]
    fn each_reader_names_its_own_fields() {
        assert!(readable("metadata.labels", Reader::File));
        assert!(!readable("metadata.labels", Reader::Env));
        assert!(readable("status.podIP", Reader::Env));
        assert!(!readable("status.podIP", Reader::File));
        assert!(readable("metadata.annotations['a/b']", Reader::File));
        assert_eq!(subscript("metadata.labels['app']"), Some(("labels", "app")));
        assert_eq!(subscript("metadata.labels[app]"), None);
    }
}
