//! `crius describe pod`, in kubectl describe's layout: the pod's header fields, its init containers and
//! containers (state, resources, probes, environment, mounts), conditions, volumes, QoS class, and the events at
//! the end. Sections are written with kubectl's indents and tabs and aligned by the tabwriter (2 spaces).
//!
//! One addition for in-place resize: where a container's status carries `allocatedResources`, it is shown as an
//! `Allocated Resources:` block after the container's Requests, in the same form.

use super::timefmt::{rfc1123z_of, since, until};
use super::{at, columns, int_at, list_at, str_at};
use serde_json::Value;
use std::fmt::Write as _;
use std::time::SystemTime;

mod containers;
mod qos;

/// kubectl's indents: sections, their items, an item's fields, and the fields' own items.
const L1: &str = "  ";
const L2: &str = "    ";
const L3: &str = "      ";

/// The text of `crius describe pod`, `events` being those about the pod (sorted here by last time seen).
pub fn describe_pod(pod: &Value, events: &[Value], now: SystemTime) -> String {
    let mut w = String::new();
    let s = |path: &[&str]| str_at(pod, path);
    line(&mut w, "", &format!("Name:\t{}", s(&["metadata", "name"])));
    line(
        &mut w,
        "",
        &format!("Namespace:\t{}", s(&["metadata", "namespace"])),
    );
    if let Some(p) = at(pod, &["spec", "priority"]).and_then(Value::as_i64) {
        line(&mut w, "", &format!("Priority:\t{p}"));
    }
    for (label, path) in [
        ("Priority Class Name", &["spec", "priorityClassName"]),
        ("Runtime Class Name", &["spec", "runtimeClassName"]),
        ("Service Account", &["spec", "serviceAccountName"]),
    ] {
        if !s(path).is_empty() {
            line(&mut w, "", &format!("{label}:\t{}", s(path)));
        }
    }
    match s(&["spec", "nodeName"]) {
        "" => line(&mut w, "", "Node:\t<none>"),
        node => line(&mut w, "", &format!("Node:\t{node}/{}", s(&["status", "hostIP"]))),
    }
    if let Some(start) = at(pod, &["status", "startTime"]).and_then(Value::as_str) {
        line(&mut w, "", &format!("Start Time:\t{}", rfc1123z_of(Some(start))));
    }
    multiline(&mut w, "Labels", &pairs(at(pod, &["metadata", "labels"]), "="));
    annotations(&mut w, at(pod, &["metadata", "annotations"]));
    let phase = s(&["status", "phase"]);
    let deletion = at(pod, &["metadata", "deletionTimestamp"]).and_then(Value::as_str);
    match deletion {
        Some(t) if phase != "Failed" && phase != "Succeeded" => {
            line(
                &mut w,
                "",
                &format!("Status:\tTerminating (lasts {})", until(now, Some(t))),
            );
            let grace = int_at(pod, &["metadata", "deletionGracePeriodSeconds"]);
            line(&mut w, "", &format!("Termination Grace Period:\t{grace}s"));
        }
        _ => line(&mut w, "", &format!("Status:\t{phase}")),
    }
    for (label, path) in [
        ("Reason", &["status", "reason"]),
        ("Message", &["status", "message"]),
    ] {
        if !s(path).is_empty() {
            line(&mut w, "", &format!("{label}:\t{}", s(path)));
        }
    }
    if let Some(sp) = at(pod, &["spec", "securityContext", "seccompProfile"]) {
        line(&mut w, "", &format!("SeccompProfile:\t{}", str_at(sp, &["type"])));
        if let Some(p) = sp["localhostProfile"].as_str() {
            line(&mut w, "", &format!("LocalhostProfile:\t{p}"));
        }
    }
    line(&mut w, "", &format!("IP:\t{}", s(&["status", "podIP"])));
    let ips = list_at(pod, &["status", "podIPs"]);
    if ips.is_empty() {
        line(&mut w, "", "IPs:\t<none>");
    } else {
        line(&mut w, "", "IPs:");
        for ip in ips {
            line(&mut w, L1, &format!("IP:\t{}", str_at(ip, &["ip"])));
        }
    }
    if let Some(owner) = list_at(pod, &["metadata", "ownerReferences"])
        .iter()
        .find(|o| o["controller"] == true)
    {
        line(
            &mut w,
            "",
            &format!(
                "Controlled By:\t{}/{}",
                str_at(owner, &["kind"]),
                str_at(owner, &["name"])
            ),
        );
    }
    if !s(&["status", "nominatedNodeName"]).is_empty() {
        line(
            &mut w,
            "",
            &format!("NominatedNodeName:\t{}", s(&["status", "nominatedNodeName"])),
        );
    }
    if !list_at(pod, &["spec", "initContainers"]).is_empty() {
        containers::section(
            &mut w,
            pod,
            "Init Containers",
            "initContainers",
            "initContainerStatuses",
        );
    }
    containers::section(&mut w, pod, "Containers", "containers", "containerStatuses");
    let gates = list_at(pod, &["spec", "readinessGates"]);
    let conditions = list_at(pod, &["status", "conditions"]);
    if !gates.is_empty() {
        line(&mut w, "", "Readiness Gates:");
        line(&mut w, L1, "Type\tStatus");
        for g in gates {
            let t = &g["conditionType"];
            let status = conditions
                .iter()
                .find(|c| &c["type"] == t)
                .map_or("<none>", |c| str_at(c, &["status"]));
            line(&mut w, L1, &format!("{} \t{status} ", t.as_str().unwrap_or("")));
        }
    }
    if !conditions.is_empty() {
        line(&mut w, "", "Conditions:");
        line(&mut w, L1, "Type\tStatus");
        for c in conditions {
            line(
                &mut w,
                L1,
                &format!("{} \t{} ", str_at(c, &["type"]), str_at(c, &["status"])),
            );
        }
    }
    volumes(&mut w, list_at(pod, &["spec", "volumes"]));
    let qos = match s(&["status", "qosClass"]) {
        "" => qos::class(pod),
        q => q,
    };
    line(&mut w, "", &format!("QoS Class:\t{qos}"));
    multiline(
        &mut w,
        "Node-Selectors",
        &pairs(at(pod, &["spec", "nodeSelector"]), "="),
    );
    multiline(
        &mut w,
        "Tolerations",
        &tolerations(list_at(pod, &["spec", "tolerations"])),
    );
    describe_events(&mut w, events, now);
    columns::align(&w, 0, 2)
}

/// Appends `indent`, `text` and a newline.
fn line(w: &mut String, indent: &str, text: &str) {
    let _ = writeln!(w, "{indent}{text}");
}

/// `key=value` (or `key: value`) of a map, sorted by key.
fn pairs(map: Option<&Value>, sep: &str) -> Vec<String> {
    let Some(map) = map.and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    keys.into_iter()
        .map(|k| format!("{k}{sep}{}", map[k].as_str().unwrap_or("")))
        .collect()
}

/// `Title:\tfirst` then `\tnext` for each further item, or `Title:\t<none>`.
fn multiline(w: &mut String, title: &str, items: &[String]) {
    if items.is_empty() {
        line(w, "", &format!("{title}:\t<none>"));
    }
    for (i, item) in items.iter().enumerate() {
        let head = if i == 0 {
            format!("{title}:")
        } else {
            String::new()
        };
        line(w, "", &format!("{head}\t{item}"));
    }
}

/// kubectl's annotation block: sorted, the last-applied configuration left out, and a long or multi-line value
/// under its key, each line shortened to 140 characters.
fn annotations(w: &mut String, map: Option<&Value>) {
    const MAX: usize = 140;
    let map = map.and_then(Value::as_object);
    let mut keys: Vec<&String> = map
        .map(|m| {
            m.keys()
                .filter(|k| *k != "kubectl.kubernetes.io/last-applied-configuration")
                .collect()
        })
        .unwrap_or_default();
    keys.sort();
    let Some(map) = map.filter(|_| !keys.is_empty()) else {
        line(w, "", "Annotations:\t<none>");
        return;
    };
    for (i, k) in keys.into_iter().enumerate() {
        let head = if i == 0 { "Annotations:" } else { "" };
        let value = map[k].as_str().unwrap_or("").trim_end_matches('\n');
        if value.len() + k.len() + 2 > MAX || value.contains('\n') {
            line(w, "", &format!("{head}\t{k}:"));
            for part in value.split('\n') {
                let short: String = if part.chars().count() > MAX - 2 {
                    part.chars().take(MAX - 2).chain("...".chars()).collect()
                } else {
                    part.to_owned()
                };
                line(w, "", &format!("\t  {short}"));
            }
        } else {
            line(w, "", &format!("{head}\t{k}: {value}"));
        }
    }
}

/// Tolerations as `key=value:Effect op=Exists for 300s`.
fn tolerations(list: &[Value]) -> Vec<String> {
    list.iter()
        .map(|t| {
            let mut s = str_at(t, &["key"]).to_owned();
            for (field, prefix) in [("value", "="), ("effect", ":")] {
                if !str_at(t, &[field]).is_empty() {
                    let _ = write!(s, "{prefix}{}", str_at(t, &[field]));
                }
            }
            // An Exists without a value tolerates every value of the key (or everything, without a key).
            if str_at(t, &["operator"]) == "Exists" && str_at(t, &["value"]).is_empty() {
                s.push_str(if s.is_empty() { "op=Exists" } else { " op=Exists" });
            }
            if let Some(secs) = t["tolerationSeconds"].as_i64() {
                let _ = write!(s, " for {secs}s");
            }
            s
        })
        .collect()
}

fn volumes(w: &mut String, volumes: &[Value]) {
    if volumes.is_empty() {
        line(w, "", "Volumes:\t<none>");
        return;
    }
    line(w, "", "Volumes:");
    for v in volumes {
        line(w, L1, &format!("{}:", str_at(v, &["name"])));
        let field = |src: &str, f: &str| str_at(v, &[src, f]).to_owned();
        let optional = |src: &str| {
            at(v, &[src, "optional"])
                .and_then(Value::as_bool)
                .unwrap_or(false)
        };
        let go_ptr = |b: Option<&Value>| {
            b.and_then(Value::as_bool)
                .map_or("<nil>".to_owned(), |b| b.to_string())
        };
        if v.get("hostPath").is_some() {
            line(w, L2, "Type:\tHostPath (bare host directory volume)");
            line(w, L2, &format!("Path:\t{}", field("hostPath", "path")));
            let t = field("hostPath", "type");
            line(
                w,
                L2,
                &format!("HostPathType:\t{}", if t.is_empty() { "<none>" } else { &t }),
            );
        } else if v.get("emptyDir").is_some() {
            line(
                w,
                L2,
                "Type:\tEmptyDir (a temporary directory that shares a pod's lifetime)",
            );
            line(w, L2, &format!("Medium:\t{}", field("emptyDir", "medium")));
            let limit = field("emptyDir", "sizeLimit");
            line(
                w,
                L2,
                &format!(
                    "SizeLimit:\t{}",
                    if limit.is_empty() { "<unset>" } else { &limit }
                ),
            );
        } else if v.get("configMap").is_some() {
            line(w, L2, "Type:\tConfigMap (a volume populated by a ConfigMap)");
            line(w, L2, &format!("Name:\t{}", field("configMap", "name")));
            line(w, L2, &format!("Optional:\t{}", optional("configMap")));
        } else if v.get("secret").is_some() {
            line(w, L2, "Type:\tSecret (a volume populated by a Secret)");
            line(w, L2, &format!("SecretName:\t{}", field("secret", "secretName")));
            line(w, L2, &format!("Optional:\t{}", optional("secret")));
        } else if v.get("downwardAPI").is_some() {
            line(
                w,
                L2,
                "Type:\tDownwardAPI (a volume populated by information about the pod)",
            );
            line(w, L2, "Items:");
            for item in list_at(v, &["downwardAPI", "items"]) {
                let from = match str_at(item, &["fieldRef", "fieldPath"]) {
                    "" => str_at(item, &["resourceFieldRef", "resource"]),
                    f => f,
                };
                line(w, L3, &format!("{from} -> {}", str_at(item, &["path"])));
            }
        } else if v.get("projected").is_some() {
            line(
                w,
                L2,
                "Type:\tProjected (a volume that contains injected data from multiple sources)",
            );
            for src in list_at(v, &["projected", "sources"]) {
                if let Some(s) = src.get("secret") {
                    line(w, L2, &format!("SecretName:\t{}", str_at(s, &["name"])));
                    line(
                        w,
                        L2,
                        &format!("SecretOptionalName:\t{}", go_ptr(s.get("optional"))),
                    );
                } else if src.get("downwardAPI").is_some() {
                    line(w, L2, "DownwardAPI:\ttrue");
                } else if let Some(c) = src.get("configMap") {
                    line(w, L2, &format!("ConfigMapName:\t{}", str_at(c, &["name"])));
                    line(
                        w,
                        L2,
                        &format!("ConfigMapOptional:\t{}", go_ptr(c.get("optional"))),
                    );
                } else if let Some(t) = src.get("serviceAccountToken") {
                    let secs = t["expirationSeconds"].as_i64().unwrap_or(3607);
                    line(w, L2, &format!("TokenExpirationSeconds:\t{secs}"));
                }
            }
        } else if v.get("image").is_some() {
            line(w, L2, "Type:\tImage (a container image or OCI artifact)");
            line(w, L2, &format!("Reference:\t{}", field("image", "reference")));
            line(w, L2, &format!("PullPolicy:\t{}", field("image", "pullPolicy")));
        } else if v.get("persistentVolumeClaim").is_some() {
            line(
                w,
                L2,
                "Type:\tPersistentVolumeClaim (a reference to a PersistentVolumeClaim in the same namespace)",
            );
            line(
                w,
                L2,
                &format!("ClaimName:\t{}", field("persistentVolumeClaim", "claimName")),
            );
            let ro = at(v, &["persistentVolumeClaim", "readOnly"])
                .and_then(Value::as_bool)
                .unwrap_or(false);
            line(w, L2, &format!("ReadOnly:\t{ro}"));
        } else {
            line(w, L1, "<unknown>");
        }
    }
}

/// The events table, oldest last-seen first; `Events:\t<none>` when there are none.
fn describe_events(w: &mut String, events: &[Value], now: SystemTime) {
    if events.is_empty() {
        line(w, "", "Events:\t<none>");
        return;
    }
    let last_seen = |e: &Value| super::timefmt::parse_rfc3339(str_at(e, &["lastTimestamp"]));
    let mut sorted: Vec<&Value> = events.iter().collect();
    sorted.sort_by_key(|e| last_seen(e));
    line(w, "", "Events:");
    line(w, L1, "Type\tReason\tAge\tFrom\tMessage");
    line(w, L1, "----\t------\t----\t----\t-------");
    for e in sorted {
        let ts = |f: &str| at(e, &[f]).and_then(Value::as_str);
        let first = match ts("eventTime") {
            Some(t) => since(now, Some(t)),
            None => since(now, ts("firstTimestamp")),
        };
        let count = int_at(e, &["count"]);
        let age = if let Some(series) = e.get("series").filter(|s| s.is_object()) {
            let last = since(now, series["lastObservedTime"].as_str());
            format!("{last} (x{} over {first})", int_at(series, &["count"]))
        } else if count > 1 {
            format!("{} (x{count} over {first})", since(now, ts("lastTimestamp")))
        } else {
            first
        };
        let from = match str_at(e, &["source", "component"]) {
            "" => str_at(e, &["reportingComponent"]),
            c => c,
        };
        let (kind, reason, message) = (
            str_at(e, &["type"]),
            str_at(e, &["reason"]),
            str_at(e, &["message"]).trim(),
        );
        line(w, L1, &format!("{kind}\t{reason}\t{age}\t{from}\t{message}"));
    }
}

#[cfg(test)]
mod tests;
