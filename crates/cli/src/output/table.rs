//! `crius get`'s default tables, with kubectl's columns and its rules for each cell (the printers of
//! `kubernetes/pkg/printers/internalversion`): a pod's READY, STATUS and RESTARTS, a Job's STATUS, COMPLETIONS and
//! DURATION, a Deployment's READY, UP-TO-DATE and AVAILABLE, ages in the short human form. Cells are aligned as
//! kubectl's tabwriter does (3 spaces between columns, each at least 6 wide).

use super::timefmt::{between, parse_rfc3339, since};
use super::{Kind, at, columns, int_at, list_at, str_at};
use serde_json::Value;
use std::time::SystemTime;

/// The table of `objects` (all of `kind`), with its header; `""` when there are none.
pub fn render_table(
    kind: &str,
    objects: &[Value],
    wide: bool,
    all_namespaces: bool,
    now: SystemTime,
) -> String {
    if objects.is_empty() {
        return String::new();
    }
    let kind = Kind::of(kind);
    let mut header: Vec<&str> = match kind {
        Kind::Pod => vec!["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        Kind::Job => vec!["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        Kind::Deployment => vec!["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        Kind::Other => vec!["NAME", "AGE"],
    };
    if wide {
        match kind {
            Kind::Pod => header.extend(["IP", "NODE", "NOMINATED NODE", "READINESS GATES"]),
            Kind::Job | Kind::Deployment => header.extend(["CONTAINERS", "IMAGES", "SELECTOR"]),
            Kind::Other => {}
        }
    }
    if all_namespaces {
        header.insert(0, "NAMESPACE");
    }
    let mut text = header.join("\t");
    text.push('\n');
    for obj in objects {
        let mut cells = match kind {
            Kind::Pod => pod_cells(obj, wide, now),
            Kind::Job => job_cells(obj, wide, now),
            Kind::Deployment => deployment_cells(obj, wide, now),
            Kind::Other => vec![name(obj).to_owned(), age(obj, now)],
        };
        if all_namespaces {
            cells.insert(0, str_at(obj, &["metadata", "namespace"]).to_owned());
        }
        text.push_str(&cells.join("\t"));
        text.push('\n');
    }
    columns::align(&text, 6, 3)
}

fn name(obj: &Value) -> &str {
    str_at(obj, &["metadata", "name"])
}

fn age(obj: &Value, now: SystemTime) -> String {
    since(
        now,
        at(obj, &["metadata", "creationTimestamp"]).and_then(Value::as_str),
    )
}

fn condition_true(conditions: &[Value], kind: &str) -> bool {
    conditions
        .iter()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

fn is_sidecar(pod: &Value, container: &str) -> bool {
    list_at(pod, &["spec", "initContainers"])
        .iter()
        .any(|c| c["name"] == container && c["restartPolicy"] == "Always")
}

/// The latest `lastState.terminated.finishedAt` of `statuses`, folded into `latest`.
fn last_finished(latest: Option<SystemTime>, status: &Value) -> Option<SystemTime> {
    let t = at(status, &["lastState", "terminated", "finishedAt"])
        .and_then(Value::as_str)
        .and_then(parse_rfc3339);
    latest.max(t)
}

/// A pod's NAME, READY, STATUS, RESTARTS, AGE (and with `wide` IP, NODE, NOMINATED NODE, READINESS GATES).
pub fn pod_cells(pod: &Value, wide: bool, now: SystemTime) -> Vec<String> {
    let spec_init = list_at(pod, &["spec", "initContainers"]);
    let conditions = list_at(pod, &["status", "conditions"]);
    let sidecars = spec_init
        .iter()
        .filter(|c| c["restartPolicy"] == "Always")
        .count();
    let total = list_at(pod, &["spec", "containers"]).len() + sidecars;
    let mut ready = 0;
    let mut restarts = 0;
    let mut last_restart = None;
    let mut sidecar_restarts = 0;
    let mut last_sidecar_restart = None;

    let phase = str_at(pod, &["status", "phase"]);
    let mut reason = match str_at(pod, &["status", "reason"]) {
        "" => phase.to_owned(),
        r => r.to_owned(),
    };
    if conditions
        .iter()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated")
    {
        reason = "SchedulingGated".to_owned();
    }

    let mut initializing = false;
    for (i, cs) in list_at(pod, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        let cname = cs["name"].as_str().unwrap_or("");
        let sidecar = is_sidecar(pod, cname);
        restarts += cs["restartCount"].as_i64().unwrap_or(0);
        last_restart = last_finished(last_restart, cs);
        if sidecar {
            sidecar_restarts += cs["restartCount"].as_i64().unwrap_or(0);
            last_sidecar_restart = last_finished(last_sidecar_restart, cs);
        }
        let terminated = at(cs, &["state", "terminated"]);
        let waiting_reason = str_at(cs, &["state", "waiting", "reason"]);
        if terminated.is_some_and(|t| t["exitCode"].as_i64().unwrap_or(0) == 0) {
            continue;
        }
        if sidecar && cs["started"] == true {
            if cs["ready"] == true {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = terminated {
            reason = match (str_at(t, &["reason"]), t["signal"].as_i64().unwrap_or(0)) {
                ("", 0) => format!("Init:ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
                ("", sig) => format!("Init:Signal:{sig}"),
                (r, _) => format!("Init:{r}"),
            };
        } else if !waiting_reason.is_empty() && waiting_reason != "PodInitializing" {
            reason = format!("Init:{waiting_reason}");
        } else {
            reason = format!("Init:{i}/{}", spec_init.len());
        }
        initializing = true;
        break;
    }

    if !initializing || condition_true(conditions, "Initialized") {
        restarts = sidecar_restarts;
        last_restart = last_sidecar_restart;
        let mut has_running = false;
        for cs in list_at(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += cs["restartCount"].as_i64().unwrap_or(0);
            last_restart = last_finished(last_restart, cs);
            let waiting = str_at(cs, &["state", "waiting", "reason"]);
            let terminated = at(cs, &["state", "terminated"]);
            if !waiting.is_empty() {
                reason = waiting.to_owned();
            } else if let Some(t) = terminated {
                reason = match (str_at(t, &["reason"]), t["signal"].as_i64().unwrap_or(0)) {
                    ("", 0) => format!("ExitCode:{}", t["exitCode"].as_i64().unwrap_or(0)),
                    ("", sig) => format!("Signal:{sig}"),
                    (r, _) => r.to_owned(),
                };
            } else if cs["ready"] == true && at(cs, &["state", "running"]).is_some() {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            reason = if condition_true(conditions, "Ready") {
                "Running"
            } else {
                "NotReady"
            }
            .to_owned();
        }
    }

    if at(pod, &["metadata", "deletionTimestamp"]).is_some_and(|d| !d.is_null()) {
        if str_at(pod, &["status", "reason"]) == "NodeLost" {
            reason = "Unknown".to_owned();
        } else if phase != "Succeeded" && phase != "Failed" {
            reason = "Terminating".to_owned();
        }
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", between(t, now)),
        _ => restarts.to_string(),
    };
    let mut cells = vec![
        name(pod).to_owned(),
        format!("{ready}/{total}"),
        reason,
        restarts_cell,
        age(pod, now),
    ];
    if wide {
        let ip = list_at(pod, &["status", "podIPs"])
            .first()
            .map_or_else(|| str_at(pod, &["status", "podIP"]), |p| str_at(p, &["ip"]));
        let gates = list_at(pod, &["spec", "readinessGates"]);
        let gates_cell = if gates.is_empty() {
            "<none>".to_owned()
        } else {
            let true_ones = gates
                .iter()
                .filter(|g| {
                    let t = &g["conditionType"];
                    conditions
                        .iter()
                        .find(|c| &c["type"] == t)
                        .is_some_and(|c| c["status"] == "True")
                })
                .count();
            format!("{true_ones}/{}", gates.len())
        };
        cells.extend([
            or_none(ip),
            or_none(str_at(pod, &["spec", "nodeName"])),
            or_none(str_at(pod, &["status", "nominatedNodeName"])),
            gates_cell,
        ]);
    }
    cells
}

fn or_none(s: &str) -> String {
    if s.is_empty() {
        "<none>".to_owned()
    } else {
        s.to_owned()
    }
}

/// A Job's NAME, STATUS, COMPLETIONS, DURATION, AGE (and with `wide` CONTAINERS, IMAGES, SELECTOR).
pub fn job_cells(job: &Value, wide: bool, now: SystemTime) -> Vec<String> {
    let succeeded = int_at(job, &["status", "succeeded"]);
    let completions = match at(job, &["spec", "completions"]).and_then(Value::as_i64) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int_at(job, &["spec", "parallelism"]) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let time = |f: &str| {
        at(job, &["status", f])
            .and_then(Value::as_str)
            .and_then(parse_rfc3339)
    };
    let duration = match (time("startTime"), time("completionTime")) {
        (None, _) => String::new(),
        (Some(start), None) => between(start, now),
        (Some(start), Some(done)) => between(start, done),
    };
    let conditions = list_at(job, &["status", "conditions"]);
    let deleting = at(job, &["metadata", "deletionTimestamp"]).is_some_and(|d| !d.is_null());
    let status = if condition_true(conditions, "Complete") {
        "Complete"
    } else if condition_true(conditions, "Failed") {
        "Failed"
    } else if deleting {
        "Terminating"
    } else if condition_true(conditions, "Suspended") {
        "Suspended"
    } else if condition_true(conditions, "FailureTarget") {
        "FailureTarget"
    } else if condition_true(conditions, "SuccessCriteriaMet") {
        "SuccessCriteriaMet"
    } else {
        "Running"
    };
    let mut cells = vec![
        name(job).to_owned(),
        status.to_owned(),
        completions,
        duration,
        age(job, now),
    ];
    if wide {
        cells.extend(template_cells(job));
    }
    cells
}

/// A Deployment's NAME, READY, UP-TO-DATE, AVAILABLE, AGE (and with `wide` CONTAINERS, IMAGES, SELECTOR).
pub fn deployment_cells(deploy: &Value, wide: bool, now: SystemTime) -> Vec<String> {
    // The API server defaults spec.replicas to 1.
    let desired = at(deploy, &["spec", "replicas"])
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let mut cells = vec![
        name(deploy).to_owned(),
        format!("{}/{desired}", int_at(deploy, &["status", "readyReplicas"])),
        int_at(deploy, &["status", "updatedReplicas"]).to_string(),
        int_at(deploy, &["status", "availableReplicas"]).to_string(),
        age(deploy, now),
    ];
    if wide {
        cells.extend(template_cells(deploy));
    }
    cells
}

/// CONTAINERS, IMAGES and SELECTOR of a workload's pod template.
fn template_cells(obj: &Value) -> [String; 3] {
    let containers = list_at(obj, &["spec", "template", "spec", "containers"]);
    let join = |field: &str| {
        containers
            .iter()
            .map(|c| c[field].as_str().unwrap_or(""))
            .collect::<Vec<_>>()
            .join(",")
    };
    [
        join("name"),
        join("image"),
        selector(at(obj, &["spec", "selector"])),
    ]
}

/// A label selector as `metav1.FormatLabelSelector` writes it: requirements sorted by key (`app=web,tier in
/// (a,b)`), `<none>` without a selector.
pub fn selector(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| s.is_object()) else {
        return "<none>".to_owned();
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(labels) = sel["matchLabels"].as_object() {
        for (k, v) in labels {
            reqs.push((k.clone(), format!("{k}={}", v.as_str().unwrap_or(""))));
        }
    }
    for e in sel["matchExpressions"].as_array().map_or(&[][..], Vec::as_slice) {
        let key = e["key"].as_str().unwrap_or("");
        let mut values: Vec<&str> = e["values"]
            .as_array()
            .map_or(Vec::new(), |v| v.iter().filter_map(Value::as_str).collect());
        values.sort_unstable();
        let text = match e["operator"].as_str().unwrap_or("") {
            "In" => format!("{key} in ({})", values.join(",")),
            "NotIn" => format!("{key} notin ({})", values.join(",")),
            "Exists" => key.to_owned(),
            "DoesNotExist" => format!("!{key}"),
            op => format!("{key} {op} ({})", values.join(",")),
        };
        reqs.push((key.to_owned(), text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    reqs.into_iter().map(|(_, t)| t).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
