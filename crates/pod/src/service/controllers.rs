//! The workload controllers of one node, each a reconciliation of what its object asks with the pods it
//! owns, run whenever a pod changes and every second:
//! - Job: pods until `completions` succeeded, at most `parallelism` at once; more than `backoffLimit`
//!   failures fail it (each new pod after a doubling back-off), as does running past
//!   `activeDeadlineSeconds`; `ttlSecondsAfterFinished` deletes it once finished;
//! - Deployment and ReplicaSet: `replicas` running pods of the current template, failed ones replaced, old
//!   templates' pods removed once the new ones are ready (the Deployment's ReplicaSet is not a separate
//!   object here); StatefulSet: `<name>-<ordinal>` in order, each once the one before is ready; DaemonSet:
//!   one pod on this one node;
//! - CronJob: a Job of its template at each time its schedule names, while criusd runs ([`super::cron`]).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::{Kind, Service, status};

/// Runs the controllers until criusd stops.
pub(super) async fn run(s: Service) {
    loop {
        tokio::select! {
            () = s.inner.wake.notified() => {}
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        if s.closing() {
            continue;
        }
        s.reconcile();
        s.retry_deferred();
    }
}

/// A pod's phase.
fn phase(p: &Pod) -> &str {
    p.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

fn ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

fn finished_at(p: &Pod) -> Option<k8s_openapi::jiff::Timestamp> {
    p.status
        .as_ref()?
        .container_statuses
        .iter()
        .flatten()
        .filter_map(|c| {
            c.state
                .as_ref()?
                .terminated
                .as_ref()?
                .finished_at
                .as_ref()
                .map(|t| t.0)
        })
        .max()
}

/// Kubernetes' short hash of a pod template (`pod-template-hash`).
fn template_hash(template: &Value) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in template.to_string().bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

fn int(v: &Value, p: &str) -> Option<i64> {
    v.pointer(p).and_then(Value::as_i64)
}

impl Service {
    fn reconcile(&self) {
        let workloads: Vec<Value> = self
            .lock()
            .others
            .iter()
            .filter(|(k, _)| !k.starts_with("ConfigMap/") && !k.starts_with("Secret/"))
            .map(|(_, v)| v.clone())
            .collect();
        for w in workloads {
            let kind = w.get("kind").and_then(Value::as_str).and_then(Kind::of_object);
            let next = match kind {
                Some(Kind::Job) => self.job(&w),
                Some(Kind::Deployment | Kind::ReplicaSet) => self.replicas(&w),
                Some(Kind::StatefulSet) => self.stateful(&w),
                Some(Kind::DaemonSet) => self.daemon(&w),
                Some(Kind::CronJob) => self.cron_job(&w),
                _ => None,
            };
            if let Some(next) = next
                && next != w
            {
                self.save_workload(next);
            }
        }
    }

    fn save_workload(&self, v: Value) {
        let (kind, namespace, name) = super::record::object_names(&v);
        let k = format!("{kind}/{namespace}/{name}");
        let mut o = self.lock();
        // Deleted meanwhile: not brought back.
        if !o.others.contains_key(&k) {
            return;
        }
        if let Err(e) = self.inner.records.save_object(&v) {
            tracing::warn!("pod service: {e}");
        }
        o.others.insert(k, v);
    }

    /// The pods workload `w` owns, by key.
    fn pods_of(&self, w: &Value) -> Vec<(String, Pod)> {
        let uid = w.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("");
        self.lock()
            .pods
            .iter()
            .filter(|(_, e)| {
                e.record
                    .pod
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.uid == uid)
            })
            .map(|(k, e)| (k.clone(), e.record.pod.clone()))
            .collect()
    }

    /// Makes a pod of `w`'s template (`template` under it) named `name`, with `labels` added.
    fn make_pod(&self, w: &Value, template: &Value, name: String, labels: &[(&str, String)]) {
        let (kind, namespace, _) = super::record::object_names(w);
        let mut meta = template.get("metadata").cloned().unwrap_or_else(|| json!({}));
        for (k, v) in labels {
            meta["labels"][*k] = v.clone().into();
        }
        meta["name"] = name.clone().into();
        meta["namespace"] = namespace.into();
        meta["ownerReferences"] = json!([{
            "apiVersion": w.get("apiVersion").cloned().unwrap_or_default(),
            "kind": kind,
            "name": w.pointer("/metadata/name").cloned().unwrap_or_default(),
            "uid": w.pointer("/metadata/uid").cloned().unwrap_or_default(),
            "controller": true,
            "blockOwnerDeletion": true,
        }]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": template.get("spec").cloned().unwrap_or_default()});
        match serde_json::from_value::<Pod>(pod) {
            Ok(p) => {
                if let Err(e) = self.create_pod(p) {
                    tracing::warn!("pod service: {kind} pod {name}: {}", e.message());
                }
            }
            Err(e) => tracing::warn!("pod service: {kind} pod {name}: {e}"),
        }
    }

    fn remove_pods(&self, keys: impl IntoIterator<Item = String>) {
        for k in keys {
            let _ = self.delete_pod(&k, None);
        }
    }

    fn job(&self, w: &Value) -> Option<Value> {
        let mut w = w.clone();
        let name = w.pointer("/metadata/name")?.as_str()?.to_string();
        let uid = w.pointer("/metadata/uid")?.as_str()?.to_string();
        let spec = w.get("spec").cloned().unwrap_or_default();
        let completions = int(&spec, "/completions").unwrap_or(1).max(1);
        let parallelism = int(&spec, "/parallelism").unwrap_or(1).max(0);
        let backoff_limit = int(&spec, "/backoffLimit").unwrap_or(6);
        let now = status::now();
        let pods = self.pods_of(&w);
        let live = |p: &Pod| p.metadata.deletion_timestamp.is_none();
        let succeeded = pods.iter().filter(|(_, p)| phase(p) == "Succeeded").count() as i64;
        let failed = pods.iter().filter(|(_, p)| phase(p) == "Failed").count() as i64;
        let active: Vec<&(String, Pod)> = pods
            .iter()
            .filter(|(_, p)| live(p) && !matches!(phase(p), "Succeeded" | "Failed"))
            .collect();
        let namespace = w
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let st = &mut w["status"];
        let done = st["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| matches!(c["type"].as_str(), Some("Complete" | "Failed")))
        });
        if done {
            let ttl = int(&spec, "/ttlSecondsAfterFinished");
            let at = st["completionTime"]
                .as_str()
                .or(st["conditions"][0]["lastTransitionTime"].as_str())
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
            if let (Some(ttl), Some(at)) = (ttl, at)
                && now.0.as_second() >= at.as_second() + ttl
            {
                let (me, ns) = (self.clone(), namespace);
                tokio::spawn(async move {
                    let _ = me.delete(Kind::Job, &ns, &name, None, false).await;
                });
            }
            st["active"] = (active.len() as i64).into();
            return Some(w);
        }
        if st["startTime"].is_null() {
            st["startTime"] = serde_json::to_value(&now).unwrap_or_default();
        }
        let started = st["startTime"]
            .as_str()
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok());
        let over = int(&spec, "/activeDeadlineSeconds")
            .zip(started)
            .is_some_and(|(d, s)| now.0.as_second() >= s.as_second() + d);
        let stamp = serde_json::to_value(&now).unwrap_or_default();
        let cond = |kind: &str, reason: &str, message: &str| {
            json!({"type": kind, "status": "True", "reason": reason, "message": message,
                "lastProbeTime": stamp, "lastTransitionTime": stamp})
        };
        let mut finish = None;
        if succeeded >= completions {
            finish = Some(vec![
                cond(
                    "SuccessCriteriaMet",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ),
                cond(
                    "Complete",
                    "CompletionsReached",
                    "Reached expected number of succeeded pods",
                ),
            ]);
            st["completionTime"] = stamp.clone();
        } else if failed > backoff_limit {
            finish = Some(vec![
                cond(
                    "FailureTarget",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ),
                cond(
                    "Failed",
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit",
                ),
            ]);
        } else if over {
            finish = Some(vec![
                cond(
                    "FailureTarget",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                ),
                cond(
                    "Failed",
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline",
                ),
            ]);
        }
        st["succeeded"] = succeeded.into();
        st["failed"] = failed.into();
        st["ready"] = (active.iter().filter(|(_, p)| ready(p)).count() as i64).into();
        st["terminating"] = (pods.iter().filter(|(_, p)| !live(p)).count() as i64).into();
        if let Some(conds) = finish {
            st["conditions"] = conds.into();
            st["active"] = 0.into();
            self.remove_pods(active.iter().map(|(k, _)| k.clone()));
            return Some(w);
        }
        st["active"] = (active.len() as i64).into();
        // A failed pod's replacement waits a back-off that doubles with each failure, as the Job controller's.
        if failed > 0 {
            let last = pods
                .iter()
                .filter(|(_, p)| phase(p) == "Failed")
                .filter_map(|(_, p)| finished_at(p))
                .max();
            let base = self.inner.settings.engine.backoff.as_secs_f64();
            let wait = (base * 2f64.powi(failed as i32 - 1)).min(360.0);
            if last.is_some_and(|t| (now.0.as_millisecond() - t.as_millisecond()) as f64 / 1000.0 < wait) {
                return Some(w);
            }
        }
        let want = parallelism.min(completions - succeeded) - active.len() as i64;
        let template = spec.get("template").cloned().unwrap_or_default();
        for _ in 0..want.max(0) {
            let pod = format!("{name}-{}", crate::node::name_suffix());
            let labels = [
                ("batch.kubernetes.io/controller-uid", uid.clone()),
                ("batch.kubernetes.io/job-name", name.clone()),
                ("controller-uid", uid.clone()),
                ("job-name", name.clone()),
            ];
            self.make_pod(&w, &template, pod, &labels);
        }
        w["status"]["active"] = (active.len() as i64 + want.max(0)).into();
        Some(w)
    }

    fn replicas(&self, w: &Value) -> Option<Value> {
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
        for _ in new.len() as i64..replicas {
            let pod = if deployment {
                format!("{name}-{hash}-{}", crate::node::name_suffix())
            } else {
                format!("{name}-{}", crate::node::name_suffix())
            };
            self.make_pod(&w, &template, pod, &[("pod-template-hash", hash.clone())]);
        }
        let mut extra: Vec<_> = new
            .iter()
            .skip(replicas as usize)
            .map(|(k, _)| k.clone())
            .collect();
        // The old template's pods go as the new ones become ready.
        let keep_old = (replicas - new_ready).max(0) as usize;
        extra.extend(old.iter().skip(keep_old).map(|(k, _)| k.clone()));
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

    fn stateful(&self, w: &Value) -> Option<Value> {
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
            let k = super::key(&namespace, &pod);
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

    fn daemon(&self, w: &Value) -> Option<Value> {
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
                format!("{name}-{}", crate::node::name_suffix()),
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

    fn cron_job(&self, w: &Value) -> Option<Value> {
        let mut w = w.clone();
        let name = w.pointer("/metadata/name")?.as_str()?.to_string();
        let namespace = w
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let schedule = super::cron::Schedule::parse(w.pointer("/spec/schedule")?.as_str()?).ok()?;
        if w.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true) {
            return Some(w);
        }
        let now = status::now().0.as_second();
        let since = w
            .pointer("/status/lastScheduleTime")
            .or(w.pointer("/metadata/creationTimestamp"))
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .map_or(now, |t| t.as_second());
        let Some(due) = schedule.last_between(since, now) else {
            return Some(w);
        };
        let job = format!("{name}-{}", due / 60);
        let uid = w.pointer("/metadata/uid").cloned().unwrap_or_default();
        let template = w.pointer("/spec/jobTemplate").cloned().unwrap_or_default();
        let mut meta = template.get("metadata").cloned().unwrap_or_else(|| json!({}));
        meta["name"] = job.clone().into();
        meta["namespace"] = namespace.clone().into();
        meta["ownerReferences"] = json!([{"apiVersion": "batch/v1", "kind": "CronJob", "name": name,
            "uid": uid, "controller": true, "blockOwnerDeletion": true}]);
        let job_object = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": template.get("spec").cloned().unwrap_or_default()});
        let k = format!("Job/{namespace}/{job}");
        if !self.lock().others.contains_key(&k)
            && let Err(e) = self.apply_object(Kind::Job, job_object)
        {
            tracing::warn!("pod service: CronJob {name}: job {job}: {}", e.message());
        }
        let stamp = k8s_openapi::jiff::Timestamp::from_second(due).ok()?;
        w["status"]["lastScheduleTime"] = stamp.to_string().into();
        // Finished Jobs beyond the history limits go, oldest first.
        let keep_ok = int(&w, "/spec/successfulJobsHistoryLimit").unwrap_or(3).max(0) as usize;
        let keep_failed = int(&w, "/spec/failedJobsHistoryLimit").unwrap_or(1).max(0) as usize;
        let mut jobs: Vec<(String, bool, String)> = self
            .lock()
            .others
            .values()
            .filter(|j| j["kind"] == "Job" && j.pointer("/metadata/ownerReferences/0/uid") == Some(&uid))
            .filter_map(|j| {
                let conds = j.pointer("/status/conditions")?.as_array()?;
                let ok = conds.iter().any(|c| c["type"] == "Complete");
                let failed = conds.iter().any(|c| c["type"] == "Failed");
                (ok || failed).then(|| {
                    let n = j
                        .pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    let t = j
                        .pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string();
                    (t, ok, n)
                })
            })
            .collect();
        jobs.sort();
        for (ok, keep) in [(true, keep_ok), (false, keep_failed)] {
            let of: Vec<_> = jobs.iter().filter(|j| j.1 == ok).collect();
            for (_, _, n) in of.iter().take(of.len().saturating_sub(keep)) {
                let (me, ns, n) = (self.clone(), namespace.clone(), n.clone());
                tokio::spawn(async move {
                    let _ = me.delete(Kind::Job, &ns, &n, None, false).await;
                });
            }
        }
        Some(w)
    }

    /// Sets the replicas of workload `kind namespace/name` (a Job's parallelism).
    pub fn scale(&self, kind: Kind, namespace: &str, name: &str, replicas: i32) -> Result<(), tonic::Status> {
        let namespace = super::ns(namespace);
        let k = format!("{}/{namespace}/{name}", kind.name());
        let field = match kind {
            Kind::Deployment | Kind::ReplicaSet | Kind::StatefulSet => "replicas",
            Kind::Job => "parallelism",
            _ => {
                return Err(tonic::Status::invalid_argument(format!(
                    "{} cannot be scaled (deployments, replicasets, statefulsets and jobs can)",
                    kind.plural()
                )));
            }
        };
        if replicas < 0 {
            return Err(tonic::Status::invalid_argument(format!(
                "replicas {replicas} is negative"
            )));
        }
        let mut v = self
            .lock()
            .others
            .get(&k)
            .cloned()
            .ok_or_else(|| tonic::Status::not_found(format!("{} {name:?} not found", kind.plural())))?;
        v["spec"][field] = replicas.into();
        if kind != Kind::Job && replicas as u64 > crate::manifest::MAX_REPLICAS {
            return Err(tonic::Status::invalid_argument(format!(
                "replicas {replicas} is more than the {} pods a node runs",
                crate::manifest::MAX_REPLICAS
            )));
        }
        self.save_workload(v);
        self.inner.wake.notify_one();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_hash_is_stable_and_follows_the_template() {
        let a = json!({"spec": {"containers": [{"name": "a", "image": "x:1"}]}});
        let b = json!({"spec": {"containers": [{"name": "a", "image": "x:2"}]}});
        assert_eq!(template_hash(&a), template_hash(&a));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
    }
}
