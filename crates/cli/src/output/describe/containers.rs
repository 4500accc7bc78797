//! The `Containers:` and `Init Containers:` sections of `describe pod`: one block per container of the spec,
//! with its status where the pod has one.

use super::qos::parse_quantity;
use super::{L1, L2, L3, line};
use crate::output::timefmt::rfc1123z_of;
use crate::output::{at, list_at, str_at};
use serde_json::Value;

/// `label:` and a block per container of `spec.<spec_field>`, with `status.<status_field>` matched by name.
pub(super) fn section(w: &mut String, pod: &Value, label: &str, spec_field: &str, status_field: &str) {
    let containers = list_at(pod, &["spec", spec_field]);
    let statuses = list_at(pod, &["status", status_field]);
    line(
        w,
        "",
        &format!("{label}:{}", if containers.is_empty() { " <none>" } else { "" }),
    );
    for c in containers {
        let name = str_at(c, &["name"]);
        let status = statuses.iter().find(|s| s["name"] == name);
        line(w, L1, &format!("{name}:"));
        if let Some(s) = status {
            line(w, L2, &format!("Container ID:\t{}", str_at(s, &["containerID"])));
        }
        line(w, L2, &format!("Image:\t{}", str_at(c, &["image"])));
        if let Some(s) = status {
            line(w, L2, &format!("Image ID:\t{}", str_at(s, &["imageID"])));
        }
        ports(w, list_at(c, &["ports"]));
        for (title, field) in [("Command", "command"), ("Args", "args")] {
            let items = list_at(c, &[field]);
            if !items.is_empty() {
                line(w, L2, &format!("{title}:"));
                for part in items.iter().filter_map(Value::as_str).flat_map(|s| s.split('\n')) {
                    line(w, L3, part);
                }
            }
        }
        if let Some(s) = status {
            state(w, "State", s.get("state"));
            if at(s, &["lastState", "terminated"]).is_some() {
                state(w, "Last State", s.get("lastState"));
            }
            let ready = if s["ready"] == true { "True" } else { "False" };
            line(w, L2, &format!("Ready:\t{ready}"));
            line(
                w,
                L2,
                &format!("Restart Count:\t{}", s["restartCount"].as_i64().unwrap_or(0)),
            );
        }
        resources(w, "Limits", at(c, &["resources", "limits"]));
        resources(w, "Requests", at(c, &["resources", "requests"]));
        resources(
            w,
            "Allocated Resources",
            status.and_then(|s| s.get("allocatedResources")),
        );
        for (title, field) in [
            ("Liveness", "livenessProbe"),
            ("Readiness", "readinessProbe"),
            ("Startup", "startupProbe"),
        ] {
            if let Some(p) = c.get(field).filter(|p| p.is_object()) {
                line(w, L2, &format!("{title}:\t{}", probe(p)));
            }
        }
        env_from(w, list_at(c, &["envFrom"]));
        env(w, pod, c);
        mounts(w, list_at(c, &["volumeMounts"]));
    }
}

fn ports(w: &mut String, ports: &[Value]) {
    let each = |field: &str| -> String {
        ports
            .iter()
            .map(|p| {
                let proto = p["protocol"].as_str().unwrap_or("TCP");
                let port = p[field].as_i64().unwrap_or(0);
                match p["name"].as_str() {
                    Some(n) if field == "containerPort" && !n.is_empty() => format!("{port}/{proto} ({n})"),
                    _ => format!("{port}/{proto}"),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (one, many, field) in [
        ("Port", "Ports", "containerPort"),
        ("Host Port", "Host Ports", "hostPort"),
    ] {
        let text = each(field);
        if text.contains(',') {
            line(w, L2, &format!("{many}:\t{text}"));
        } else {
            line(
                w,
                L2,
                &format!("{one}:\t{}", if text.is_empty() { "<none>" } else { &text }),
            );
        }
    }
}

/// `State:\tRunning` and its details (kubectl's `describeStatus`).
fn state(w: &mut String, title: &str, state: Option<&Value>) {
    let state = state.unwrap_or(&Value::Null);
    if let Some(r) = state.get("running").filter(|r| r.is_object()) {
        line(w, L2, &format!("{title}:\tRunning"));
        line(
            w,
            L3,
            &format!("Started:\t{}", rfc1123z_of(r["startedAt"].as_str())),
        );
    } else if let Some(wt) = state.get("waiting").filter(|r| r.is_object()) {
        line(w, L2, &format!("{title}:\tWaiting"));
        if !str_at(wt, &["reason"]).is_empty() {
            line(w, L3, &format!("Reason:\t{}", str_at(wt, &["reason"])));
        }
    } else if let Some(t) = state.get("terminated").filter(|r| r.is_object()) {
        line(w, L2, &format!("{title}:\tTerminated"));
        for (label, field) in [("Reason", "reason"), ("Message", "message")] {
            if !str_at(t, &[field]).is_empty() {
                line(w, L3, &format!("{label}:\t{}", str_at(t, &[field])));
            }
        }
        line(
            w,
            L3,
            &format!("Exit Code:\t{}", t["exitCode"].as_i64().unwrap_or(0)),
        );
        if let Some(sig) = t["signal"].as_i64().filter(|s| *s > 0) {
            line(w, L3, &format!("Signal:\t{sig}"));
        }
        line(
            w,
            L3,
            &format!("Started:\t{}", rfc1123z_of(t["startedAt"].as_str())),
        );
        line(
            w,
            L3,
            &format!("Finished:\t{}", rfc1123z_of(t["finishedAt"].as_str())),
        );
    } else {
        line(w, L2, &format!("{title}:\tWaiting"));
    }
}

/// `Limits:` and each resource sorted by name, if there are any.
fn resources(w: &mut String, title: &str, map: Option<&Value>) {
    let Some(map) = map.and_then(Value::as_object).filter(|m| !m.is_empty()) else {
        return;
    };
    line(w, L2, &format!("{title}:"));
    let mut names: Vec<&String> = map.keys().collect();
    names.sort();
    for n in names {
        let q = match &map[n] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        line(w, L3, &format!("{n}:\t{q}"));
    }
}

/// A probe as kubectl describes it: `http-get http://:8080/healthz delay=0s timeout=1s period=10s #success=1
/// #failure=3` (the API server's defaults where a field is absent).
fn probe(p: &Value) -> String {
    let n = |f: &str, default: i64| p[f].as_i64().unwrap_or(default);
    let attrs = format!(
        "delay={}s timeout={}s period={}s #success={} #failure={}",
        n("initialDelaySeconds", 0),
        n("timeoutSeconds", 1),
        n("periodSeconds", 10),
        n("successThreshold", 1),
        n("failureThreshold", 3)
    );
    let port = |v: &Value| match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    };
    if let Some(e) = p.get("exec") {
        let cmd: Vec<&str> = list_at(e, &["command"])
            .iter()
            .filter_map(Value::as_str)
            .collect();
        format!("exec [{}] {attrs}", cmd.join(" "))
    } else if let Some(h) = p.get("httpGet") {
        let scheme = h["scheme"].as_str().unwrap_or("HTTP").to_lowercase();
        let host = str_at(h, &["host"]);
        let port = port(&h["port"]);
        let host = match (host.contains(':'), port.is_empty()) {
            (_, true) => host.to_owned(),
            (true, false) => format!("[{host}]:{port}"),
            (false, false) => format!("{host}:{port}"),
        };
        format!("http-get {scheme}://{host}{} {attrs}", str_at(h, &["path"]))
    } else if let Some(t) = p.get("tcpSocket") {
        format!("tcp-socket {}:{} {attrs}", str_at(t, &["host"]), port(&t["port"]))
    } else if let Some(g) = p.get("grpc") {
        format!(
            "grpc <pod>:{} {} {attrs}",
            g["port"].as_i64().unwrap_or(0),
            str_at(g, &["service"])
        )
    } else {
        format!("unknown {attrs}")
    }
}

fn env_from(w: &mut String, list: &[Value]) {
    if list.is_empty() {
        return;
    }
    line(w, L2, "Environment Variables from:");
    for e in list {
        let (from, r) = match (e.get("configMapRef"), e.get("secretRef")) {
            (Some(r), _) => ("ConfigMap", r),
            (None, Some(r)) => ("Secret", r),
            (None, None) => ("", &Value::Null),
        };
        let optional = r["optional"] == true;
        let name = str_at(r, &["name"]);
        match str_at(e, &["prefix"]) {
            "" => line(w, L3, &format!("{name}\t{from}\tOptional: {optional}")),
            p => line(
                w,
                L3,
                &format!("{name}\t{from} with prefix '{p}'\tOptional: {optional}"),
            ),
        }
    }
}

fn env(w: &mut String, pod: &Value, c: &Value) {
    let list = list_at(c, &["env"]);
    line(
        w,
        L2,
        &format!("Environment:{}", if list.is_empty() { "\t<none>" } else { "" }),
    );
    for e in list {
        let name = str_at(e, &["name"]);
        let Some(from) = e.get("valueFrom").filter(|v| v.is_object()) else {
            for (i, part) in str_at(e, &["value"]).split('\n').enumerate() {
                let head = if i == 0 { format!("{name}:") } else { String::new() };
                line(w, L3, &format!("{head}\t{part}"));
            }
            continue;
        };
        if let Some(f) = from.get("fieldRef") {
            let path = str_at(f, &["fieldPath"]);
            let api = f["apiVersion"].as_str().unwrap_or("v1");
            line(
                w,
                L3,
                &format!("{name}:\t{} ({api}:{path})", field_value(pod, path)),
            );
        } else if let Some(r) = from.get("resourceFieldRef") {
            let resource = str_at(r, &["resource"]);
            line(w, L3, &format!("{name}:\t{} ({resource})", resource_value(c, r)));
        } else if let Some(k) = from.get("secretKeyRef") {
            let (key, secret, opt) = (str_at(k, &["key"]), str_at(k, &["name"]), k["optional"] == true);
            line(
                w,
                L3,
                &format!("{name}:\t<set to the key '{key}' in secret '{secret}'>\tOptional: {opt}"),
            );
        } else if let Some(k) = from.get("configMapKeyRef") {
            let (key, cm, opt) = (str_at(k, &["key"]), str_at(k, &["name"]), k["optional"] == true);
            line(
                w,
                L3,
                &format!("{name}:\t<set to the key '{key}' of config map '{cm}'>\tOptional: {opt}"),
            );
        }
    }
}

/// What a downward-API field path gives for this pod (`""` for one this does not know).
fn field_value(pod: &Value, path: &str) -> String {
    let keyed = |prefix: &str, map: &str| {
        let key = path.strip_prefix(prefix)?.strip_suffix("']")?;
        Some(str_at(pod, &["metadata", map, key]).to_owned())
    };
    if let Some(v) =
        keyed("metadata.labels['", "labels").or_else(|| keyed("metadata.annotations['", "annotations"))
    {
        return v;
    }
    let p: &[&str] = match path {
        "metadata.name" => &["metadata", "name"],
        "metadata.namespace" => &["metadata", "namespace"],
        "metadata.uid" => &["metadata", "uid"],
        "spec.nodeName" => &["spec", "nodeName"],
        "spec.serviceAccountName" => &["spec", "serviceAccountName"],
        "status.hostIP" => &["status", "hostIP"],
        "status.podIP" => &["status", "podIP"],
        "status.podIPs" => {
            let ips: Vec<&str> = list_at(pod, &["status", "podIPs"])
                .iter()
                .map(|i| str_at(i, &["ip"]))
                .collect();
            return ips.join(",");
        }
        _ => return String::new(),
    };
    str_at(pod, p).to_owned()
}

/// A `resourceFieldRef`'s value as the kubelet computes it: the quantity divided by the divisor, rounded up;
/// `node allocatable` for a cpu or memory limit the container does not set.
fn resource_value(c: &Value, r: &Value) -> String {
    let resource = str_at(r, &["resource"]);
    let Some((kind, name)) = resource.split_once('.') else {
        return String::new();
    };
    let q = at(c, &["resources", kind, name])
        .and_then(Value::as_str)
        .and_then(parse_quantity)
        .unwrap_or(0.0);
    let divisor = r["divisor"]
        .as_str()
        .and_then(parse_quantity)
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    let v = (q / divisor).ceil();
    if v == 0.0 && matches!(resource, "limits.cpu" | "limits.memory") {
        return "node allocatable".to_owned();
    }
    format!("{v}")
}

fn mounts(w: &mut String, list: &[Value]) {
    line(
        w,
        L2,
        &format!("Mounts:{}", if list.is_empty() { "\t<none>" } else { "" }),
    );
    let mut sorted: Vec<&Value> = list.iter().collect();
    sorted.sort_by_key(|m| str_at(m, &["mountPath"]));
    for m in sorted {
        let mut flags = vec![if m["readOnly"] == true {
            "ro".to_owned()
        } else {
            "rw".to_owned()
        }];
        if !str_at(m, &["subPath"]).is_empty() {
            flags.push(format!("path={:?}", str_at(m, &["subPath"])));
        }
        let (path, name) = (str_at(m, &["mountPath"]), str_at(m, &["name"]));
        line(w, L3, &format!("{path} from {name} ({})", flags.join(",")));
    }
}
