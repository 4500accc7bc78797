//! The Deployment, ReplicaSet, StatefulSet and DaemonSet controllers (see [`super`]).

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;

impl Service {
    pub(super) fn replicas(&self, w: &Value) -> Option<Value> {
        let mut w = w.clone();
        let name = w.pointer("/metadata/name")?.as_str()?.to_string();
        let replicas = int(&w, "/spec/replicas").unwrap_or(1).max(0);
        let template = w.pointer("/spec/template").cloned().unwrap_or_default();
        let hash = template_hash(&template);
        let pods = self.pods_of(&w);
        let live: Vec<&(String, Pod)> = pods
            .iter()
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_none())
            .collect();
        // Pods that ended are replaced.
        self.remove_pods(
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
        let deployment = w["kind"] == "Deployment";
        let strategy = Strategy::of(&w, replicas);
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
            self.make_pod(&w, &template, pod, &[("pod-template-hash", hash.clone())]);
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
        self.remove_pods(extra);
        let all_ready = running.iter().filter(|(_, p)| ready(p)).count() as i64;
        let generation = int(&w, "/metadata/generation").unwrap_or(1);
        let st = &mut w["status"];
        st["replicas"] = (running.len() as i64).into();
        st["readyReplicas"] = all_ready.into();
        st["availableReplicas"] = all_ready.into();
        st["updatedReplicas"] = (new.len() as i64).into();
        st["observedGeneration"] = generation.into();
        if deployment {
            let available = all_ready >= replicas;
            w["status"]["conditions"] = json!([
                {"type": "Available", "status": if available { "True" } else { "False" },
                 "reason": if available { "MinimumReplicasAvailable" } else { "MinimumReplicasUnavailable" },
                 "message": if available { "Deployment has minimum availability." } else { "Deployment does not have minimum availability." }},
                {"type": "Progressing", "status": "True",
                 "reason": if new_ready >= replicas { "NewReplicaSetAvailable" } else { "ReplicaSetUpdated" },
                 "message": format!("ReplicaSet \"{name}-{hash}\" is progressing.")}
            ]);
        }
        Some(w)
    }

    pub(super) fn stateful(&self, w: &Value) -> Option<Value> {
        let mut w = w.clone();
        let name = w.pointer("/metadata/name")?.as_str()?.to_string();
        let namespace = w
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let replicas = int(&w, "/spec/replicas").unwrap_or(1).max(0);
        let template = w.pointer("/spec/template").cloned().unwrap_or_default();
        let pods = self.pods_of(&w);
        self.remove_pods(
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
                    self.make_pod(&w, &template, pod, &labels);
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
        self.remove_pods(extra.map(|(k, _)| k.clone()));
        let running = pods
            .iter()
            .filter(|(_, p)| !matches!(phase(p), "Succeeded" | "Failed"))
            .count() as i64;
        let r = pods.iter().filter(|(_, p)| ready(p)).count() as i64;
        let st = &mut w["status"];
        st["replicas"] = running.into();
        st["readyReplicas"] = r.into();
        st["currentReplicas"] = running.into();
        st["updatedReplicas"] = running.into();
        st["availableReplicas"] = r.into();
        Some(w)
    }

    pub(super) fn daemon(&self, w: &Value) -> Option<Value> {
        let mut w = w.clone();
        let name = w.pointer("/metadata/name")?.as_str()?.to_string();
        let template = w.pointer("/spec/template").cloned().unwrap_or_default();
        let pods = self.pods_of(&w);
        let live: Vec<_> = pods
            .iter()
            .filter(|(_, p)| p.metadata.deletion_timestamp.is_none())
            .collect();
        self.remove_pods(
            live.iter()
                .filter(|(_, p)| matches!(phase(p), "Succeeded" | "Failed"))
                .map(|(k, _)| k.clone()),
        );
        let running = live
            .iter()
            .filter(|(_, p)| !matches!(phase(p), "Succeeded" | "Failed"))
            .count() as i64;
        if running == 0 {
            self.make_pod(
                &w,
                &template,
                format!("{name}-{}", crius_pod::node::name_suffix()),
                &[],
            );
        }
        let r = live.iter().filter(|(_, p)| ready(p)).count() as i64;
        let st = &mut w["status"];
        st["desiredNumberScheduled"] = 1.into();
        st["currentNumberScheduled"] = running.max(1).into();
        st["updatedNumberScheduled"] = running.max(1).into();
        st["numberReady"] = r.into();
        st["numberAvailable"] = r.into();
        st["numberMisscheduled"] = 0.into();
        Some(w)
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
    fn of(w: &Value, replicas: i64) -> Strategy {
        if w.pointer("/spec/strategy/type").and_then(Value::as_str) == Some("Recreate") {
            return Strategy::Recreate;
        }
        let amount = |field: &str, up: bool| {
            let v = w.pointer(&format!("/spec/strategy/rollingUpdate/{field}"));
            match v {
                Some(Value::Number(n)) => n.as_i64().unwrap_or(0).max(0),
                Some(Value::String(s)) if s.ends_with('%') => {
                    let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(25).max(0);
                    let scaled = replicas * pct;
                    if up { (scaled + 99) / 100 } else { scaled / 100 }
                }
                _ => {
                    let scaled = replicas * 25;
                    if up { (scaled + 99) / 100 } else { scaled / 100 }
                }
            }
        };
        let (surge, unavailable) = (amount("maxSurge", true), amount("maxUnavailable", false));
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

    #[test]
    fn strategies_read_as_kubernetes_rounds_them() {
        let d = |strategy: Value| json!({"kind": "Deployment", "spec": {"strategy": strategy}});
        assert_eq!(
            Strategy::of(&d(json!({})), 4),
            Strategy::Rolling {
                surge: 1,
                unavailable: 1
            }
        );
        assert_eq!(
            Strategy::of(&d(json!({})), 1),
            Strategy::Rolling {
                surge: 1,
                unavailable: 0
            }
        );
        let r = json!({"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}});
        assert_eq!(
            Strategy::of(&d(r), 3),
            Strategy::Rolling {
                surge: 2,
                unavailable: 0
            }
        );
        let r = json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"}});
        assert_eq!(
            Strategy::of(&d(r), 4),
            Strategy::Rolling {
                surge: 0,
                unavailable: 1
            }
        );
        assert_eq!(
            Strategy::of(&d(json!({"type": "Recreate"})), 4),
            Strategy::Recreate
        );
    }
}
