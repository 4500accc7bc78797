//! The Deployment, ReplicaSet, StatefulSet and DaemonSet controllers (see [`super`]).

use k8s_openapi::api::apps::v1::{
    DaemonSet, DaemonSetStatus, Deployment, DeploymentCondition, DeploymentStatus, DeploymentStrategy,
    ReplicaSet, ReplicaSetStatus, StatefulSet, StatefulSetStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

/// The Deployment and ReplicaSet controllers, on the typed [`Deployment`] or [`ReplicaSet`].
pub(super) struct Replicas;

impl Controller for Replicas {
    fn reconcile(&self, s: &Workloads, w: &mut Kept) {
        let (meta, replicas, strategy, template) = match &w.object {
            Object::Deployment(d) => {
                let spec = d.spec.clone().unwrap_or_default();
                let replicas = i64::from(spec.replicas.unwrap_or(1).max(0));
                let strategy = Strategy::of(spec.strategy.as_ref(), replicas);
                (d.metadata.clone(), replicas, strategy, spec.template)
            }
            Object::ReplicaSet(r) => {
                let spec = r.spec.clone().unwrap_or_default();
                let replicas = i64::from(spec.replicas.unwrap_or(1).max(0));
                let template = spec.template.unwrap_or_default();
                (r.metadata.clone(), replicas, Strategy::Recreate, template)
            }
            _ => return,
        };
        let deployment = matches!(w.object, Object::Deployment(_));
        let Some(name) = meta.name.clone() else {
            return;
        };
        // The template as it was applied: its hash names the pods an older criusd made, so it is taken from the
        // applied JSON, not from a typed round trip that could add defaults.
        let raw = w.applied.get("spec").and_then(|s| s.get("template"));
        let hash = template_hash(raw.unwrap_or(&Value::Null));
        let pods = s.pods_of(&meta);
        let live: Vec<&(String, Pod)> = pods
            .iter()
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_none())
            .collect();
        // Pods that ended are replaced.
        s.remove_pods(
            live.iter()
                .filter(|(_, p)| matches!(phase(p), "Succeeded" | "Failed"))
                .map(|(k, _)| k.clone()),
        );
        let running: Vec<&&(String, Pod)> = live
            .iter()
            .filter(|(_, p)| !matches!(phase(p), "Succeeded" | "Failed"))
            .collect();
        let current = |p: &Pod| {
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("pod-template-hash"))
                == Some(&hash)
        };
        let (new, old): (Vec<_>, Vec<_>) = running.iter().map(|x| **x).partition(|(_, p)| current(p));
        let new_ready = new.iter().filter(|(_, p)| ready(p)).count() as i64;
        // Pods still terminating count against a surge, and a Recreate waits for the old ones to be gone.
        let terminating_old = pods
            .iter()
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_some() && !current(p))
            .count() as i64;
        let to_make = match strategy {
            _ if !deployment => replicas - new.len() as i64,
            Strategy::Recreate if !old.is_empty() || terminating_old > 0 => 0,
            Strategy::Recreate => replicas - new.len() as i64,
            Strategy::Rolling { surge, .. } => {
                let total = (new.len() + old.len()) as i64 + terminating_old;
                (replicas - new.len() as i64).min(replicas + surge - total)
            }
        };
        for _ in 0..to_make.max(0) {
            let pod = if deployment {
                format!("{name}-{hash}-{}", crius_pod::node::name_suffix())
            } else {
                format!("{name}-{}", crius_pod::node::name_suffix())
            };
            let labels = [("pod-template-hash", hash.clone())];
            if deployment {
                s.make_pod::<Deployment>(&meta, &template, pod, &labels);
            } else {
                s.make_pod::<ReplicaSet>(&meta, &template, pod, &labels);
            }
        }
        let mut extra: Vec<_> = new
            .iter()
            .skip(replicas as usize)
            .map(|(k, _)| k.clone())
            .collect();
        // The old template's pods go: all at once for Recreate; for a rolling update, the unready first, then
        // as many as keep `replicas - maxUnavailable` ready (a ReplicaSet: as the new ones become ready).
        let old_ready: Vec<_> = old.iter().filter(|(_, p)| ready(p)).collect();
        let old_unready = old.iter().filter(|(_, p)| !ready(p));
        match strategy {
            _ if !deployment => {
                let keep_old = (replicas - new_ready).max(0) as usize;
                extra.extend(old.iter().skip(keep_old).map(|(k, _)| k.clone()));
            }
            Strategy::Recreate => extra.extend(old.iter().map(|(k, _)| k.clone())),
            Strategy::Rolling { unavailable, .. } => {
                extra.extend(old_unready.map(|(k, _)| k.clone()));
                let may_go = (new_ready + old_ready.len() as i64 - (replicas - unavailable)).max(0) as usize;
                extra.extend(old_ready.iter().take(may_go).map(|(k, _)| k.clone()));
            }
        }
        s.remove_pods(extra);
        let all_ready = running.iter().filter(|(_, p)| ready(p)).count() as i64;
        let generation = meta.generation.unwrap_or(1);
        let count = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
        let all_ready = count(all_ready as usize);
        if let Object::ReplicaSet(r) = &mut w.object {
            r.status = Some(ReplicaSetStatus {
                replicas: count(running.len()),
                ready_replicas: Some(all_ready),
                available_replicas: Some(all_ready),
                observed_generation: Some(generation),
                ..Default::default()
            });
            // Not a ReplicaSet's field in Kubernetes; kept as criusd has always shown it.
            w.status_extra.insert("updatedReplicas".into(), new.len().into());
            return;
        }
        let available = i64::from(all_ready) >= replicas;
        let condition = |kind: &str, status: &str, reason: &str, message: String| DeploymentCondition {
            type_: kind.into(),
            status: status.into(),
            reason: Some(reason.into()),
            message: Some(message),
            ..Default::default()
        };
        let status = DeploymentStatus {
            replicas: Some(count(running.len())),
            ready_replicas: Some(all_ready),
            available_replicas: Some(all_ready),
            updated_replicas: Some(count(new.len())),
            observed_generation: Some(generation),
            conditions: Some(vec![
                if available {
                    condition(
                        "Available",
                        "True",
                        "MinimumReplicasAvailable",
                        "Deployment has minimum availability.".into(),
                    )
                } else {
                    condition(
                        "Available",
                        "False",
                        "MinimumReplicasUnavailable",
                        "Deployment does not have minimum availability.".into(),
                    )
                },
                condition(
                    "Progressing",
                    "True",
                    if new_ready >= replicas {
                        "NewReplicaSetAvailable"
                    } else {
                        "ReplicaSetUpdated"
                    },
                    format!("ReplicaSet \"{name}-{hash}\" is progressing."),
                ),
            ]),
            ..Default::default()
        };
        if let Object::Deployment(d) = &mut w.object {
            d.status = Some(status);
        }
    }
}

/// The StatefulSet controller, on the typed [`StatefulSet`].
pub(super) struct StatefulSets;

impl Controller for StatefulSets {
    fn reconcile(&self, s: &Workloads, w: &mut Kept) {
        let Object::StatefulSet(set) = &mut w.object else {
            return;
        };
        let Some(name) = set.metadata.name.clone() else {
            return;
        };
        let namespace = set.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let spec = set.spec.clone().unwrap_or_default();
        let replicas = i64::from(spec.replicas.unwrap_or(1).max(0));
        let pods = s.pods_of(&set.metadata);
        s.remove_pods(
            pods.iter()
                .filter(|(_, p)| {
                    p.metadata.deletion_timestamp.is_none() && matches!(phase(p), "Succeeded" | "Failed")
                })
                .map(|(k, _)| k.clone()),
        );
        for i in 0..replicas {
            let pod = format!("{name}-{i}");
            let k = crate::key(&namespace, &pod);
            match pods.iter().find(|(pk, _)| *pk == k) {
                Some((_, p)) if ready(p) => continue,
                Some(_) => break,
                None => {
                    let labels = [
                        ("statefulset.kubernetes.io/pod-name", pod.clone()),
                        ("apps.kubernetes.io/pod-index", i.to_string()),
                    ];
                    s.make_pod::<StatefulSet>(&set.metadata, &spec.template, pod, &labels);
                    break;
                }
            }
        }
        let extra = pods.iter().filter(|(_, p)| {
            let n = p.metadata.name.clone().unwrap_or_default();
            n.rsplit_once('-')
                .and_then(|(_, i)| i.parse::<i64>().ok())
                .is_some_and(|i| i >= replicas)
        });
        s.remove_pods(extra.map(|(k, _)| k.clone()));
        let running = pods
            .iter()
            .filter(|(_, p)| !matches!(phase(p), "Succeeded" | "Failed"))
            .count() as i64;
        let r = pods.iter().filter(|(_, p)| ready(p)).count() as i64;
        let count = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
        set.status = Some(StatefulSetStatus {
            replicas: count(running),
            ready_replicas: Some(count(r)),
            current_replicas: Some(count(running)),
            updated_replicas: Some(count(running)),
            available_replicas: Some(count(r)),
            ..Default::default()
        });
    }
}

/// The DaemonSet controller, on the typed [`DaemonSet`]: one pod, on this node.
pub(super) struct DaemonSets;

impl Controller for DaemonSets {
    fn reconcile(&self, s: &Workloads, w: &mut Kept) {
        let Object::DaemonSet(set) = &mut w.object else {
            return;
        };
        let Some(name) = set.metadata.name.clone() else {
            return;
        };
        let template = set.spec.clone().unwrap_or_default().template;
        let pods = s.pods_of(&set.metadata);
        let live: Vec<_> = pods
            .iter()
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_none())
            .collect();
        s.remove_pods(
            live.iter()
                .filter(|(_, p)| matches!(phase(p), "Succeeded" | "Failed"))
                .map(|(k, _)| k.clone()),
        );
        let running = live
            .iter()
            .filter(|(_, p)| !matches!(phase(p), "Succeeded" | "Failed"))
            .count() as i64;
        if running == 0 {
            s.make_pod::<DaemonSet>(
                &set.metadata,
                &template,
                format!("{name}-{}", crius_pod::node::name_suffix()),
                &[],
            );
        }
        let r = live.iter().filter(|(_, p)| ready(p)).count() as i64;
        let count = |n: i64| i32::try_from(n).unwrap_or(i32::MAX);
        set.status = Some(DaemonSetStatus {
            desired_number_scheduled: 1,
            current_number_scheduled: count(running.max(1)),
            updated_number_scheduled: Some(count(running.max(1))),
            number_ready: count(r),
            number_available: Some(count(r)),
            number_misscheduled: 0,
            ..Default::default()
        });
    }
}

/// A Deployment's `spec.strategy`: Recreate, or a rolling update within `maxSurge` pods over `replicas` and
/// `maxUnavailable` under it (each a number or a percentage of `replicas`, 25% by default, the surge rounded
/// up and the unavailable down, as Kubernetes does; both 0 would never move, so the unavailable is then 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strategy {
    Recreate,
    Rolling { surge: i64, unavailable: i64 },
}

impl Strategy {
    fn of(strategy: Option<&DeploymentStrategy>, replicas: i64) -> Strategy {
        if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
            return Strategy::Recreate;
        }
        let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
        let amount = |v: Option<&IntOrString>, up: bool| {
            let pct = match v {
                Some(IntOrString::Int(n)) => return i64::from(*n).max(0),
                Some(IntOrString::String(s)) if s.ends_with('%') => {
                    s.trim_end_matches('%').parse().unwrap_or(25).max(0)
                }
                _ => 25,
            };
            let scaled = replicas * pct;
            if up { (scaled + 99) / 100 } else { scaled / 100 }
        };
        let surge = amount(rolling.and_then(|r| r.max_surge.as_ref()), true);
        let unavailable = amount(rolling.and_then(|r| r.max_unavailable.as_ref()), false);
        Strategy::Rolling {
            surge,
            unavailable: if surge == 0 && unavailable == 0 {
                1
            } else {
                unavailable
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    #[test]
    fn strategies_read_as_kubernetes_rounds_them() {
        let d = |strategy: Value| serde_json::from_value::<DeploymentStrategy>(strategy).unwrap();
        assert_eq!(
            Strategy::of(Some(&d(json!({}))), 4),
            Strategy::Rolling {
                surge: 1,
                unavailable: 1
            }
        );
        assert_eq!(
            Strategy::of(Some(&d(json!({}))), 1),
            Strategy::Rolling {
                surge: 1,
                unavailable: 0
            }
        );
        let r = json!({"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}});
        assert_eq!(
            Strategy::of(Some(&d(r)), 3),
            Strategy::Rolling {
                surge: 2,
                unavailable: 0
            }
        );
        let r = json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"}});
        assert_eq!(
            Strategy::of(Some(&d(r)), 4),
            Strategy::Rolling {
                surge: 0,
                unavailable: 1
            }
        );
        assert_eq!(
            Strategy::of(Some(&d(json!({"type": "Recreate"}))), 4),
            Strategy::Recreate
        );
    }

    /// Records as an older criusd wrote them (the seed Deployment has no selector) load as the typed objects,
    /// and their status reads back as the same JSON.
    #[test]
    fn old_workload_records_load_as_typed_objects() {
        let template = json!({"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}});
        let meta = |kind: &str| {
            json!({"name": kind.to_lowercase(), "namespace": "default", "uid": "u", "generation": 2,
            "creationTimestamp": "2026-11-30T10:00:00Z"})
        };
        let deploy = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("Deployment"),
            "spec": {"replicas": 2, "template": template},
            "status": {"replicas": 2, "readyReplicas": 2, "availableReplicas": 2, "updatedReplicas": 2,
                "observedGeneration": 2, "conditions": [
                    {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                     "message": "Deployment has minimum availability."}]}});
        let kept = |kind: Kind, v: &Value| Kept::from_json(kind, v.clone()).unwrap();
        let d = kept(Kind::Deployment, &deploy);
        let Object::Deployment(typed) = &d.object else {
            panic!("not a Deployment")
        };
        assert_eq!(typed.spec.as_ref().and_then(|s| s.replicas), Some(2));
        assert_eq!(d.to_json(), deploy);
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("StatefulSet"),
            "spec": {"replicas": 3, "serviceName": "db", "template": template},
            "status": {"replicas": 3, "readyReplicas": 1, "currentReplicas": 3, "updatedReplicas": 3,
                "availableReplicas": 1}});
        assert_eq!(kept(Kind::StatefulSet, &sts).to_json(), sts);
        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": meta("DaemonSet"),
            "spec": {"template": template},
            "status": {"desiredNumberScheduled": 1, "currentNumberScheduled": 1, "updatedNumberScheduled": 1,
                "numberReady": 1, "numberAvailable": 1, "numberMisscheduled": 0}});
        assert_eq!(kept(Kind::DaemonSet, &ds).to_json(), ds);
        let rs = json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": meta("ReplicaSet"),
            "spec": {"replicas": 1, "template": template},
            "status": {"replicas": 1, "readyReplicas": 1, "availableReplicas": 1, "updatedReplicas": 1,
                "observedGeneration": 2}});
        let set = kept(Kind::ReplicaSet, &rs);
        let Object::ReplicaSet(typed) = &set.object else {
            panic!("not a ReplicaSet")
        };
        assert_eq!(typed.status.as_ref().map(|s| s.replicas), Some(1));
        // Its updatedReplicas, which the typed status lacks, is kept.
        assert_eq!(set.to_json(), rs);
    }
}
