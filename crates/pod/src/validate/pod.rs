//! The checks of a pod spec: containers (names unique across init and main containers, images, ports, env,
//! volume mounts of volumes that exist, probes and hooks, resize policies), volumes (`super::volumes`), restart
//! policies, and every quantity (resources, overhead).

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{Container, PodSpec, Probe, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{Found, names};
use crate::quantity::{self, BadQuantity};

/// Whose pod spec it is, for the restart policies allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Template {
    /// A Pod's: any of Always, OnFailure, Never.
    Pod,
    /// A Job's (or CronJob's): OnFailure or Never.
    Job,
    /// A Deployment's, ReplicaSet's, StatefulSet's or DaemonSet's: Always.
    Always,
}

/// Which list a container is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// A regular init container (runs to completion before the main ones).
    Init,
    /// An init container with `restartPolicy: Always`.
    Sidecar,
    /// A main container.
    Main,
}

pub(super) fn spec(spec: &PodSpec, at: &str, template: Template, found: &mut Found) {
    let policy = spec.restart_policy.as_deref();
    match (template, policy) {
        (Template::Pod, Some(p)) if !["Always", "OnFailure", "Never"].contains(&p) => found.unsupported(
            format!("{at}.restartPolicy"),
            p,
            &["Always", "OnFailure", "Never"],
        ),
        (Template::Job, p) if !matches!(p, Some("OnFailure" | "Never")) => found.unsupported(
            format!("{at}.restartPolicy"),
            p.unwrap_or("Always"),
            &["OnFailure", "Never"],
        ),
        (Template::Always, Some(p)) if p != "Always" => {
            found.unsupported(format!("{at}.restartPolicy"), p, &["Always"]);
        }
        _ => {}
    }
    let volumes = super::volumes::volumes(spec.volumes.as_deref().unwrap_or(&[]), at, found);
    if spec.containers.is_empty() {
        found.required(format!("{at}.containers"));
    }
    if spec.ephemeral_containers.as_ref().is_some_and(|e| !e.is_empty()) {
        found.forbidden(format!("{at}.ephemeralContainers"), "cannot be set on create");
    }
    let mut seen = HashSet::new();
    for (i, c) in spec.init_containers.iter().flatten().enumerate() {
        let part = if c.restart_policy.as_deref() == Some("Always") {
            Part::Sidecar
        } else {
            Part::Init
        };
        let at = format!("{at}.initContainers[{i}]");
        container(c, &at, part, &volumes, &mut seen, found);
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let at = format!("{at}.containers[{i}]");
        container(c, &at, Part::Main, &volumes, &mut seen, found);
    }
    amounts(spec.overhead.as_ref(), &format!("{at}.overhead"), found);
    if let Some(r) = &spec.resources {
        resources(r, &format!("{at}.resources"), found);
    }
}

fn container<'a>(
    c: &'a Container,
    at: &str,
    part: Part,
    volumes: &HashSet<&str>,
    seen: &mut HashSet<&'a str>,
    found: &mut Found,
) {
    found.name(format!("{at}.name"), &c.name, names::label);
    if !c.name.is_empty() && !seen.insert(c.name.as_str()) {
        found.duplicate(format!("{at}.name"), &c.name);
    }
    if c.image.as_deref().unwrap_or("").trim().is_empty() {
        found.required(format!("{at}.image"));
    }
    if let Some(p) = c.image_pull_policy.as_deref()
        && !["Always", "IfNotPresent", "Never"].contains(&p)
    {
        found.unsupported(
            format!("{at}.imagePullPolicy"),
            p,
            &["Always", "IfNotPresent", "Never"],
        );
    }
    match (part, c.restart_policy.as_deref()) {
        (Part::Init, Some(p)) => found.unsupported(format!("{at}.restartPolicy"), p, &["Always"]),
        (Part::Main, Some(_)) => found.forbidden(
            format!("{at}.restartPolicy"),
            "may not be set for non-init containers",
        ),
        _ => {}
    }
    ports(c, at, found);
    env(c, at, found);
    mounts(c, at, volumes, found);
    if let Some(r) = &c.resources {
        resources(r, &format!("{at}.resources"), found);
    }
    let mut resized = HashSet::new();
    for (i, r) in c.resize_policy.iter().flatten().enumerate() {
        let at = format!("{at}.resizePolicy[{i}]");
        let name = r.resource_name.as_str();
        if !["cpu", "memory"].contains(&name) {
            found.unsupported(format!("{at}.resourceName"), name, &["cpu", "memory"]);
        } else if !resized.insert(name) {
            found.duplicate(format!("{at}.resourceName"), name);
        }
        let policy = r.restart_policy.as_str();
        if !["NotRequired", "RestartContainer"].contains(&policy) {
            found.unsupported(
                format!("{at}.restartPolicy"),
                policy,
                &["NotRequired", "RestartContainer"],
            );
        }
    }
    let probes = [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ];
    for (field, p) in probes {
        let Some(p) = p else { continue };
        let at = format!("{at}.{field}");
        if part == Part::Init {
            found.forbidden(
                &at,
                "may not be set for init containers without restartPolicy=Always",
            );
            continue;
        }
        probe(p, &at, field != "readinessProbe", found);
    }
    let Some(hooks) = &c.lifecycle else { return };
    if part == Part::Init {
        return found.forbidden(
            format!("{at}.lifecycle"),
            "may not be set for init containers without restartPolicy=Always",
        );
    }
    for (field, h) in [("postStart", &hooks.post_start), ("preStop", &hooks.pre_stop)] {
        let Some(h) = h else { continue };
        let n = [
            h.exec.is_some(),
            h.http_get.is_some(),
            h.tcp_socket.is_some(),
            h.sleep.is_some(),
        ];
        handlers(
            n.iter().filter(|b| **b).count(),
            &format!("{at}.lifecycle.{field}"),
            found,
        );
    }
}

fn probe(p: &Probe, at: &str, once: bool, found: &mut Found) {
    let n = [
        p.exec.is_some(),
        p.http_get.is_some(),
        p.tcp_socket.is_some(),
        p.grpc.is_some(),
    ];
    handlers(n.iter().filter(|b| **b).count(), at, found);
    if once && let Some(t) = p.success_threshold.filter(|t| *t != 1) {
        found.invalid(format!("{at}.successThreshold"), t, "must be 1");
    }
    let numbers = [
        ("initialDelaySeconds", p.initial_delay_seconds),
        ("periodSeconds", p.period_seconds),
        ("timeoutSeconds", p.timeout_seconds),
        ("failureThreshold", p.failure_threshold),
    ];
    for (field, n) in numbers {
        if let Some(n) = n.filter(|n| *n < 0) {
            found.invalid(format!("{at}.{field}"), n, "must be greater than or equal to 0");
        }
    }
}

/// A probe or hook has exactly one handler.
fn handlers(count: usize, at: &str, found: &mut Found) {
    match count {
        0 => found.add(at, "Required value: must specify a handler type"),
        1 => {}
        _ => found.forbidden(at, "may not specify more than 1 handler type"),
    }
}

fn ports(c: &Container, at: &str, found: &mut Found) {
    let mut named = HashSet::new();
    for (i, p) in c.ports.iter().flatten().enumerate() {
        let at = format!("{at}.ports[{i}]");
        match p.container_port {
            0 => found.required(format!("{at}.containerPort")),
            n if !(1..=65535).contains(&n) => found.invalid(
                format!("{at}.containerPort"),
                n,
                "must be between 1 and 65535, inclusive",
            ),
            _ => {}
        }
        if let Some(n) = p.host_port.filter(|n| !(0..=65535).contains(n)) {
            found.invalid(
                format!("{at}.hostPort"),
                n,
                "must be between 1 and 65535, inclusive",
            );
        }
        if let Some(proto) = p.protocol.as_deref()
            && !["TCP", "UDP", "SCTP"].contains(&proto)
        {
            found.unsupported(format!("{at}.protocol"), proto, &["SCTP", "TCP", "UDP"]);
        }
        if let Some(name) = &p.name {
            found.name(format!("{at}.name"), name, names::port);
            if !name.is_empty() && !named.insert(name.as_str()) {
                found.duplicate(format!("{at}.name"), name);
            }
        }
    }
}

fn env(c: &Container, at: &str, found: &mut Found) {
    for (i, e) in c.env.iter().flatten().enumerate() {
        let at = format!("{at}.env[{i}]");
        if e.name.is_empty() {
            found.required(format!("{at}.name"));
        }
        let Some(from) = &e.value_from else { continue };
        if e.value.as_deref().is_some_and(|v| !v.is_empty()) {
            found.invalid(
                format!("{at}.valueFrom"),
                "",
                "may not be specified when `value` is not empty",
            );
        }
        let sources = [
            from.config_map_key_ref.is_some(),
            from.field_ref.is_some(),
            from.file_key_ref.is_some(),
            from.resource_field_ref.is_some(),
            from.secret_key_ref.is_some(),
        ];
        match sources.iter().filter(|b| **b).count() {
            0 => found.add(format!("{at}.valueFrom"), "Required value: must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef`, `secretKeyRef` or `fileKeyRef`"),
            1 => {}
            _ => found.invalid(format!("{at}.valueFrom"), "", "may not have more than one field specified at a time"),
        }
        if let Some(f) = &from.field_ref
            && !f.field_path.is_empty()
            && !crate::downward::readable(&f.field_path, crate::downward::Reader::Env)
        {
            found.unsupported(
                format!("{at}.valueFrom.fieldRef.fieldPath"),
                &f.field_path,
                &crate::downward::ENV_FIELDS,
            );
        }
    }
}

fn mounts(c: &Container, at: &str, volumes: &HashSet<&str>, found: &mut Found) {
    let mut paths = HashSet::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let at = format!("{at}.volumeMounts[{i}]");
        if m.name.is_empty() {
            found.required(format!("{at}.name"));
        } else if !volumes.contains(m.name.as_str()) {
            found.not_found(format!("{at}.name"), &m.name);
        }
        if m.mount_path.is_empty() {
            found.required(format!("{at}.mountPath"));
        } else if !paths.insert(m.mount_path.as_str()) {
            found.invalid(format!("{at}.mountPath"), &m.mount_path, "must be unique");
        }
        if let Some(sub) = m.sub_path.as_deref() {
            if sub.starts_with('/') {
                found.invalid(format!("{at}.subPath"), sub, "must be a relative path");
            } else if sub.split('/').any(|part| part == "..") {
                found.invalid(format!("{at}.subPath"), sub, "must not contain '..'");
            }
        }
    }
}

/// A container's (or the pod's) requests and limits: known resource names, valid quantities, no request
/// above its limit.
fn resources(r: &ResourceRequirements, at: &str, found: &mut Found) {
    let limits = amounts(r.limits.as_ref(), &format!("{at}.limits"), found);
    let requests = amounts(r.requests.as_ref(), &format!("{at}.requests"), found);
    for (name, (request, text)) in &requests {
        if let Some((limit, limit_text)) = limits.get(name)
            && request > limit
        {
            found.invalid(
                format!("{at}.requests[{name}]"),
                text,
                &format!("must be less than or equal to {name} limit of {limit_text}"),
            );
        }
    }
}

/// A map of resource name to quantity: each name known, each quantity valid. The amounts read (milli-CPUs
/// for `cpu`, else the base unit) with their text, by name.
pub(super) fn amounts<'a>(
    map: Option<&'a BTreeMap<String, Quantity>>,
    at: &str,
    found: &mut Found,
) -> BTreeMap<&'a str, (u64, &'a str)> {
    let mut out = BTreeMap::new();
    for (name, q) in map.into_iter().flatten() {
        let at = format!("{at}[{name}]");
        if !resource_name(name) {
            found.invalid(
                &at,
                name,
                "must be a standard resource type (cpu, memory, ephemeral-storage, storage, hugepages-<size>) \
                 or fully qualified (example.com/gpu)",
            );
        } else if let Some(n) = amount(name, q, &at, found) {
            out.insert(name.as_str(), (n, q.0.as_str()));
        }
    }
    out
}

fn resource_name(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage" | "storage")
        || name
            .strip_prefix("hugepages-")
            .is_some_and(|size| quantity::value(&Quantity(size.into())).is_ok())
        || name.split_once('/').is_some_and(|(domain, n)| {
            names::subdomain(domain).is_none() && !n.is_empty() && names::label_key(n).is_none()
        })
}

/// One quantity, read as the engine will read it; None (the problem in `found`) when it cannot be.
pub(super) fn amount(name: &str, q: &Quantity, at: &str, found: &mut Found) -> Option<u64> {
    let read = if name == "cpu" {
        quantity::milli_cpu(q)
    } else {
        quantity::value(q)
    };
    let text = q.0.as_str();
    let why = match read {
        Ok(n) => return Some(n),
        Err(BadQuantity::Malformed(_))
            if quantity::value(&Quantity(text.trim_start_matches('-').into())).is_ok() =>
        {
            return {
                found.invalid(at, text, "must be greater than or equal to 0");
                None
            };
        }
        Err(BadQuantity::Malformed(_)) => "is not valid (examples: 500m, 1.5, 512Mi, 1G)",
        Err(BadQuantity::TooPrecise) => "has more decimal places than crius counts",
        Err(BadQuantity::TooLarge) => "is too large",
    };
    found.add(at, format!("quantity {text:?} {why}"));
    None
}
