//! The Job and CronJob controllers (see [`super`]).

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::*;

impl Service {
    pub(super) fn job(&self, w: &Value) -> Option<Value> {
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
            let pod = format!("{name}-{}", crius_pod::node::name_suffix());
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

    pub(super) fn cron_job(&self, w: &Value) -> Option<Value> {
        let mut w = w.clone();
        let name = w.pointer("/metadata/name")?.as_str()?.to_string();
        let namespace = w
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default")
            .to_string();
        let schedule = crate::cron::Schedule::parse(w.pointer("/spec/schedule")?.as_str()?).ok()?;
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
            tracing::warn!("pod service: CronJob {name}: job {job}: {e}");
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
}
