//! A pod's Kubernetes status, kept as kubelet keeps it: each engine event moves a container's state (waiting,
//! running, terminated, with the last one kept as `lastState`), its restart count and readiness; then the
//! phase and the conditions (PodScheduled, PodReadyToStartContainers, Initialized, ContainersReady, Ready)
//! follow from the containers, each condition's `lastTransitionTime` moving only when its status does.

use k8s_openapi::api::core::v1::{
    Container, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, Pod, PodCondition, PodIP, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crius_pod::report::{Event, Phase, Report, Role};

/// Now, as the API's time.
pub fn now() -> Time {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128);
    Time(
        k8s_openapi::jiff::Timestamp::from_nanosecond(ns).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// A time in ns since the epoch, as the API's (None for 0: not known).
fn at_ns(ns: i64) -> Option<Time> {
    (ns > 0)
        .then(|| k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(ns)).ok())
        .flatten()
        .map(Time)
}

/// The status of a pod just accepted: Pending, scheduled on this node, every container waiting.
pub fn initial(pod: &mut Pod, node: &str) {
    let spec = pod.spec.clone().unwrap_or_default();
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
    let waiting = |c: &Container, reason: &str| ContainerStatus {
        name: c.name.clone(),
        image: c.image.clone().unwrap_or_default(),
        image_id: String::new(),
        ready: false,
        restart_count: 0,
        started: Some(false),
        state: Some(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.into()),
                message: None,
            }),
            ..Default::default()
        }),
        allocated_resources: c.resources.as_ref().and_then(|r| r.requests.clone()),
        resources: None,
        ..Default::default()
    };
    let inits: Vec<_> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| waiting(c, "PodInitializing"))
        .collect();
    let first_reason = if inits.is_empty() {
        "ContainerCreating"
    } else {
        "PodInitializing"
    };
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        qos_class: crius_pod::convert::qos(&spec).ok().map(|q| q.to_string()),
        init_container_statuses: (!inits.is_empty()).then_some(inits),
        container_statuses: Some(spec.containers.iter().map(|c| waiting(c, first_reason)).collect()),
        conditions: Some(vec![condition("PodScheduled", true, None, None)]),
        ..Default::default()
    });
    refresh(pod);
}

fn condition(kind: &str, ok: bool, reason: Option<&str>, message: Option<String>) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.map(str::to_string),
        message,
        last_transition_time: Some(now()),
        ..Default::default()
    }
}

/// Sets condition `c`, keeping the old transition time when its status did not change.
pub fn set_condition(status: &mut PodStatus, c: PodCondition) {
    let list = status.conditions.get_or_insert_with(Vec::new);
    match list.iter_mut().find(|o| o.type_ == c.type_) {
        Some(o) if o.status == c.status => {
            o.reason = c.reason;
            o.message = c.message;
        }
        Some(o) => *o = c,
        None => list.push(c),
    }
}

/// Removes condition `kind`.
pub fn clear_condition(status: &mut PodStatus, kind: &str) {
    if let Some(list) = &mut status.conditions {
        list.retain(|c| c.type_ != kind);
    }
}

/// Container `name`'s status, init or not.
pub(super) fn statuses<'a>(status: &'a mut PodStatus, name: &str) -> Option<&'a mut ContainerStatus> {
    status
        .init_container_statuses
        .iter_mut()
        .flatten()
        .chain(status.container_statuses.iter_mut().flatten())
        .find(|c| c.name == name)
}

/// Container `name`'s status, to read.
pub(super) fn status_of<'a>(status: &'a PodStatus, name: &str) -> Option<&'a ContainerStatus> {
    status
        .init_container_statuses
        .iter()
        .flatten()
        .chain(status.container_statuses.iter().flatten())
        .find(|c| c.name == name)
}

/// Container `name` of `spec`, init or not.
pub(super) fn spec_of<'a>(spec: &'a PodSpec, name: &str) -> Option<&'a Container> {
    spec.init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == name)
}

/// What an engine event changes in `pod`'s status.
pub fn on_event(pod: &mut Pod, e: &Event) {
    let probed: Vec<String> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .filter(|c| c.readiness_probe.is_some())
        .map(|c| c.name.clone())
        .collect();
    let Some(status) = pod.status.as_mut() else {
        return;
    };
    match e {
        Event::Sandbox { ip, .. } => {
            if !ip.is_empty() {
                status.pod_ip = Some(ip.clone());
                status.pod_ips = Some(vec![PodIP { ip: ip.clone() }]);
            }
            let host = crius_pod::node::host_ip();
            status.host_ip = Some(host.clone());
            status.host_ips = Some(vec![k8s_openapi::api::core::v1::HostIP { ip: host }]);
            if ip.is_empty() {
                status.pod_ip = status.host_ip.clone();
                status.pod_ips = status.host_ip.clone().map(|ip| vec![PodIP { ip }]);
            }
            status.start_time.get_or_insert_with(now);
            set_condition(status, condition("PodReadyToStartContainers", true, None, None));
        }
        Event::Started {
            name, attempt, id, ..
        }
        | Event::Adopted {
            name, attempt, id, ..
        } => {
            let adopted = matches!(e, Event::Adopted { .. });
            let Some(c) = statuses(status, name) else {
                return;
            };
            let was = c.state.take().unwrap_or_default();
            if !adopted && let Some(t) = was.terminated {
                c.last_state = Some(ContainerState {
                    terminated: Some(t),
                    ..Default::default()
                });
            }
            let started_at = match (&was.running, adopted) {
                (Some(r), true) => r.started_at.clone(),
                _ => Some(now()),
            };
            c.state = Some(ContainerState {
                running: Some(ContainerStateRunning { started_at }),
                ..Default::default()
            });
            c.container_id = Some(format!("crius://{id}"));
            if let Event::Started { image_ref, .. } = e
                && !image_ref.is_empty()
            {
                c.image_id = image_ref.clone();
            }
            c.restart_count = *attempt as i32;
            c.started = Some(true);
            c.ready = !probed.contains(name);
        }
        Event::Ready { name } => {
            if let Some(c) = statuses(status, name) {
                c.ready = true;
            }
        }
        Event::Readiness { name, ready } => {
            if let Some(c) = statuses(status, name)
                && c.state.as_ref().is_some_and(|s| s.running.is_some())
            {
                c.ready = *ready;
            }
        }
        Event::Exited {
            name, code, reason, ..
        } => {
            let Some(c) = statuses(status, name) else {
                return;
            };
            let started_at = c
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.clone());
            c.state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: *code,
                    reason: Some(reason.clone()),
                    started_at,
                    finished_at: Some(now()),
                    container_id: c.container_id.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            });
            c.ready = false;
            c.started = Some(false);
        }
        Event::Failed { name, error } => {
            if let Some(c) = statuses(status, name) {
                let reason = if error.starts_with("StartContainer") {
                    "RunContainerError"
                } else {
                    "CreateContainerError"
                };
                c.state = Some(waiting(reason, error));
                c.ready = false;
            }
        }
        Event::Restarting { name, .. } => {
            if let Some(c) = statuses(status, name) {
                let last = c.state.take().unwrap_or_default();
                if last.terminated.is_some() {
                    c.last_state = Some(last);
                }
                let message = format!("back-off restarting failed container {name}");
                c.state = Some(waiting("CrashLoopBackOff", &message));
            }
        }
        Event::Pulling(_)
        | Event::Stopping { .. }
        | Event::Resized { .. }
        | Event::ResizeFailed { .. }
        | Event::Note(_) => {}
    }
    refresh(pod);
}

fn waiting(reason: &str, message: &str) -> ContainerState {
    ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.into()),
            message: Some(message.into()),
        }),
        ..Default::default()
    }
}

/// The pod's end, from the engine's report: the phase, and each container's last run as the runtime said.
pub fn finished(pod: &mut Pod, report: &Report) {
    let Some(status) = pod.status.as_mut() else {
        return;
    };
    status.phase = Some(
        match report.phase {
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Stopped => "Failed",
        }
        .into(),
    );
    for r in &report.containers {
        let Some(c) = statuses(status, &r.name) else {
            continue;
        };
        c.ready = false;
        c.started = Some(false);
        if let Some(code) = r.exit_code {
            let old = c.state.take().unwrap_or_default();
            let old_t = old.terminated.unwrap_or_default();
            c.state = Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: code,
                    reason: Some(r.reason.clone()),
                    started_at: at_ns(r.started_at).or(old_t.started_at),
                    finished_at: at_ns(r.finished_at).or(old_t.finished_at).or_else(|| Some(now())),
                    container_id: c.container_id.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
    }
    refresh(pod);
}

/// The phase and the conditions, from the containers' states.
pub fn refresh(pod: &mut Pod) {
    let spec = pod.spec.clone().unwrap_or_default();
    let Some(status) = pod.status.as_mut() else {
        return;
    };
    let done = matches!(status.phase.as_deref(), Some("Succeeded" | "Failed"));
    let inits = status.init_container_statuses.clone().unwrap_or_default();
    let mains = status.container_statuses.clone().unwrap_or_default();
    let sidecar = |name: &str| {
        spec.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == name && c.restart_policy.as_deref() == Some("Always"))
    };
    let init_pending: Vec<&str> = inits
        .iter()
        .filter(|c| {
            let s = c.state.clone().unwrap_or_default();
            if sidecar(&c.name) {
                c.started != Some(true) && s.terminated.is_none()
            } else {
                s.terminated.is_none_or(|t| t.exit_code != 0)
            }
        })
        .map(|c| c.name.as_str())
        .collect();
    let initialized = init_pending.is_empty();
    let unready: Vec<&str> = mains
        .iter()
        .chain(inits.iter().filter(|c| sidecar(&c.name)))
        .filter(|c| !c.ready)
        .map(|c| c.name.as_str())
        .collect();
    let running = mains
        .iter()
        .any(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    if !done {
        status.phase = Some(
            if initialized && running {
                "Running"
            } else {
                "Pending"
            }
            .into(),
        );
    }
    let list = |names: &[&str]| format!("[{}]", names.join(" "));
    let init = if initialized {
        condition("Initialized", true, None, None)
    } else {
        condition(
            "Initialized",
            false,
            Some("ContainersNotInitialized"),
            Some(format!(
                "containers with incomplete status: {}",
                list(&init_pending)
            )),
        )
    };
    set_condition(status, init);
    for kind in ["ContainersReady", "Ready"] {
        let c = if done {
            condition(kind, false, Some("PodCompleted"), None)
        } else if unready.is_empty() {
            condition(kind, true, None, None)
        } else {
            condition(
                kind,
                false,
                Some("ContainersNotReady"),
                Some(format!("containers with unready status: {}", list(&unready))),
            )
        };
        set_condition(status, c);
    }
    if done {
        set_condition(status, condition("PodReadyToStartContainers", false, None, None));
    }
    // kubectl's order: scheduled first, ready last.
    if let Some(list) = &mut status.conditions {
        let rank = |t: &str| match t {
            "PodReadyToStartContainers" => 0,
            "Initialized" => 1,
            "Ready" => 2,
            "ContainersReady" => 3,
            "PodScheduled" => 4,
            _ => 5,
        };
        list.sort_by_key(|c| rank(&c.type_));
    }
}

/// Whether the container named `name` runs (for `logs -f`).
pub fn running(pod: &Pod, name: &str) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| status_of(s, name))
        .and_then(|c| c.state.as_ref())
        .is_some_and(|s| s.running.is_some())
}

/// A container's role in pod `pod`.
pub fn role(pod: &Pod, name: &str) -> Option<Role> {
    let spec = pod.spec.as_ref()?;
    if spec.containers.iter().any(|c| c.name == name) {
        return Some(Role::Main);
    }
    let c = spec.init_containers.iter().flatten().find(|c| c.name == name)?;
    Some(if c.restart_policy.as_deref() == Some("Always") {
        Role::Sidecar
    } else {
        Role::Init
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {
                "initContainers": [
                    {"name": "log", "image": "b", "restartPolicy": "Always"},
                    {"name": "migrate", "image": "b"}
                ],
                "containers": [{"name": "app", "image": "b"}]
            }
        }))
        .unwrap()
    }

    fn cond(p: &Pod, kind: &str) -> String {
        let s = p.status.as_ref().unwrap();
        let c = s.conditions.iter().flatten().find(|c| c.type_ == kind).unwrap();
        format!("{}:{}", c.status, c.reason.clone().unwrap_or_default())
    }

    fn started(name: &str, attempt: u32) -> Event {
        Event::Started {
            name: name.into(),
            role: Role::Main,
            attempt,
            id: format!("{name}-{attempt}"),
            log_path: String::new(),
            resources: None,
            image_ref: "sha256:1".into(),
        }
    }

    fn exited(name: &str, code: i32) -> Event {
        Event::Exited {
            name: name.into(),
            role: Role::Main,
            code,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
        }
    }

    #[test]
    fn a_pod_goes_from_pending_through_init_to_running_and_ready() {
        let mut p = pod();
        initial(&mut p, "node");
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&p, "Initialized"), "False:ContainersNotInitialized");
        for e in [started("log", 0), started("migrate", 0), exited("migrate", 0)] {
            on_event(&mut p, &e);
        }
        assert_eq!(cond(&p, "Initialized"), "True:");
        assert_eq!(p.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
        on_event(&mut p, &started("app", 0));
        let s = p.status.as_ref().unwrap();
        assert_eq!(s.container_statuses.as_ref().unwrap()[0].image_id, "sha256:1");
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&p, "Ready"), "True:");
        assert_eq!(cond(&p, "PodScheduled"), "True:");
        assert_eq!(s.conditions.as_ref().unwrap()[0].type_, "Initialized");
    }

    #[test]
    fn a_restart_keeps_the_last_state_and_counts() {
        let mut p = pod();
        initial(&mut p, "node");
        on_event(&mut p, &started("app", 0));
        on_event(&mut p, &exited("app", 3));
        on_event(
            &mut p,
            &Event::Restarting {
                name: "app".into(),
                after: std::time::Duration::from_secs(10),
            },
        );
        let c = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert_eq!(
            c.state
                .as_ref()
                .unwrap()
                .waiting
                .as_ref()
                .unwrap()
                .reason
                .as_deref(),
            Some("CrashLoopBackOff")
        );
        assert_eq!(
            c.last_state
                .as_ref()
                .unwrap()
                .terminated
                .as_ref()
                .unwrap()
                .exit_code,
            3
        );
        on_event(&mut p, &started("app", 1));
        let c = &p.status.as_ref().unwrap().container_statuses.as_ref().unwrap()[0];
        assert_eq!(c.restart_count, 1);
        assert!(c.ready);
        assert_eq!(c.container_id.as_deref(), Some("crius://app-1"));
        assert_eq!(cond(&p, "Ready"), "False:ContainersNotReady");
    }

    #[test]
    fn a_transition_time_moves_only_with_the_status() {
        let mut s = PodStatus::default();
        let mut c = condition("Ready", false, None, None);
        c.last_transition_time = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        set_condition(&mut s, c);
        set_condition(&mut s, condition("Ready", false, Some("X"), None));
        let got = &s.conditions.as_ref().unwrap()[0];
        assert_eq!(got.reason.as_deref(), Some("X"));
        assert_eq!(got.last_transition_time.as_ref().unwrap().0.as_second(), 0);
        set_condition(&mut s, condition("Ready", true, None, None));
        assert_ne!(
            s.conditions.as_ref().unwrap()[0]
                .last_transition_time
                .as_ref()
                .unwrap()
                .0
                .as_second(),
            0
        );
    }
}
