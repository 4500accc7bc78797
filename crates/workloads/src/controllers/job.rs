//! The Job and CronJob controllers (see [`super`]).

use k8s_openapi::api::batch::v1::{Job, JobCondition};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::object::object_key;

/// The Job controller, on the typed [`Job`].
pub(super) struct Jobs;

impl Controller for Jobs {
    fn reconcile(&self, s: &Workloads, w: &mut Kept) {
        let Object::Job(job) = &mut w.object else {
            return;
        };
        let (Some(name), Some(uid)) = (job.metadata.name.clone(), job.metadata.uid.clone()) else {
            return;
        };
        let namespace = job.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let spec = job.spec.clone().unwrap_or_default();
        let completions = i64::from(spec.completions.unwrap_or(1).max(1));
        let parallelism = i64::from(spec.parallelism.unwrap_or(1).max(0));
        let backoff_limit = i64::from(spec.backoff_limit.unwrap_or(6));
        let now = status::now();
        let pods = s.pods_of(&job.metadata);
        let live = |p: &Pod| p.metadata.deletion_timestamp.is_none();
        let succeeded = pods.iter().filter(|(_, p)| phase(p) == "Succeeded").count() as i64;
        let failed = pods.iter().filter(|(_, p)| phase(p) == "Failed").count() as i64;
        let active: Vec<&(String, Pod)> = pods
            .iter()
            .filter(|(_, p)| live(p) && !matches!(phase(p), "Succeeded" | "Failed"))
            .collect();
        let count = |n: i64| Some(i32::try_from(n).unwrap_or(i32::MAX));
        let st = job.status.get_or_insert_with(Default::default);
        let done = st
            .conditions
            .iter()
            .flatten()
            .any(|c| matches!(c.type_.as_str(), "Complete" | "Failed"));
        if done {
            let at = st.completion_time.clone().or_else(|| {
                st.conditions
                    .as_ref()
                    .and_then(|c| c.first())
                    .and_then(|c| c.last_transition_time.clone())
            });
            if let (Some(ttl), Some(at)) = (spec.ttl_seconds_after_finished, at)
                && now.0.as_second() >= at.0.as_second() + i64::from(ttl)
            {
                let _ = s.delete(Kind::Job, &namespace, &name, None);
            }
            st.active = count(active.len() as i64);
            return;
        }
        let started = st.start_time.get_or_insert_with(|| now.clone()).0;
        let over = spec
            .active_deadline_seconds
            .is_some_and(|d| now.0.as_second() >= started.as_second() + d);
        let cond = |kind: &str, reason: &str, message: &str| JobCondition {
            type_: kind.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            last_probe_time: Some(now.clone()),
            last_transition_time: Some(now.clone()),
        };
        let finish = if succeeded >= completions {
            st.completion_time = Some(now.clone());
            let m = "Reached expected number of succeeded pods";
            Some(vec![
                cond("SuccessCriteriaMet", "CompletionsReached", m),
                cond("Complete", "CompletionsReached", m),
            ])
        } else if failed > backoff_limit {
            let m = "Job has reached the specified backoff limit";
            Some(vec![
                cond("FailureTarget", "BackoffLimitExceeded", m),
                cond("Failed", "BackoffLimitExceeded", m),
            ])
        } else if over {
            let m = "Job was active longer than specified deadline";
            Some(vec![
                cond("FailureTarget", "DeadlineExceeded", m),
                cond("Failed", "DeadlineExceeded", m),
            ])
        } else {
            None
        };
        st.succeeded = count(succeeded);
        st.failed = count(failed);
        st.ready = count(active.iter().filter(|(_, p)| ready(p)).count() as i64);
        st.terminating = count(pods.iter().filter(|(_, p)| !live(p)).count() as i64);
        if let Some(conds) = finish {
            st.conditions = Some(conds);
            st.active = Some(0);
            s.remove_pods(active.iter().map(|(k, _)| k.clone()));
            return;
        }
        st.active = count(active.len() as i64);
        // A failed pod's replacement waits a back-off that doubles with each failure, as the Job controller's.
        if failed > 0 {
            let last = pods
                .iter()
                .filter(|(_, p)| phase(p) == "Failed")
                .filter_map(|(_, p)| finished_at(p))
                .max();
            let base = s.backoff.as_secs_f64();
            let wait = (base * 2f64.powi(failed as i32 - 1)).min(360.0);
            if last.is_some_and(|t| (now.0.as_millisecond() - t.as_millisecond()) as f64 / 1000.0 < wait) {
                return;
            }
        }
        let want = parallelism.min(completions - succeeded) - active.len() as i64;
        for _ in 0..want.max(0) {
            let pod = format!("{name}-{}", crius_pod::node::name_suffix());
            let labels = [
                ("batch.kubernetes.io/controller-uid", uid.clone()),
                ("batch.kubernetes.io/job-name", name.clone()),
                ("controller-uid", uid.clone()),
                ("job-name", name.clone()),
            ];
            s.make_pod::<Job>(&job.metadata, &spec.template, pod, &labels);
        }
        st.active = count(active.len() as i64 + want.max(0));
    }
}

/// The CronJob controller, on the typed [`CronJob`].
pub(super) struct CronJobs;

impl Controller for CronJobs {
    fn reconcile(&self, s: &Workloads, w: &mut Kept) {
        let Object::CronJob(cron) = &mut w.object else {
            return;
        };
        let Some(name) = cron.metadata.name.clone() else {
            return;
        };
        let namespace = cron
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let Some(spec) = cron.spec.clone() else {
            return;
        };
        let Ok(schedule) = crate::cron::Schedule::parse(&spec.schedule) else {
            return;
        };
        if spec.suspend == Some(true) {
            return;
        }
        let now = status::now().0.as_second();
        let since = cron
            .status
            .as_ref()
            .and_then(|s| s.last_schedule_time.as_ref())
            .or(cron.metadata.creation_timestamp.as_ref())
            .map_or(now, |t| t.0.as_second());
        let Some(due) = schedule.last_between(since, now) else {
            return;
        };
        let job = format!("{name}-{}", due / 60);
        let uid = cron.metadata.uid.clone().unwrap_or_default();
        let template = spec.job_template;
        let mut meta = template.metadata.unwrap_or_default();
        meta.name = Some(job.clone());
        meta.namespace = Some(namespace.clone());
        meta.owner_references = Some(vec![OwnerReference {
            api_version: "batch/v1".into(),
            kind: "CronJob".into(),
            name: name.clone(),
            uid: uid.clone(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }]);
        let job_object = Job {
            metadata: meta,
            spec: template.spec,
            status: None,
        };
        let k = object_key(Kind::Job, &namespace, &job);
        // Its Job is applied as a manifest's would be.
        let made = serde_json::to_value(&job_object)
            .map_err(crate::Error::invalid)
            .and_then(|v| Kept::from_json(Kind::Job, v));
        // The lock is let go before the apply, which takes it.
        let made_before = s.store.objects().contains_key(&k);
        if !made_before && let Err(e) = made.and_then(|j| s.apply(j)) {
            tracing::warn!("pod service: CronJob {name}: job {job}: {e}");
        }
        let Ok(stamp) = k8s_openapi::jiff::Timestamp::from_second(due) else {
            return;
        };
        cron.status
            .get_or_insert_with(Default::default)
            .last_schedule_time = Some(Time(stamp));
        // Finished Jobs beyond the history limits go, oldest first.
        let keep_ok = spec.successful_jobs_history_limit.unwrap_or(3).max(0) as usize;
        let keep_failed = spec.failed_jobs_history_limit.unwrap_or(1).max(0) as usize;
        let mut jobs: Vec<(Option<k8s_openapi::jiff::Timestamp>, bool, String)> = s
            .store
            .objects()
            .values()
            .filter_map(|j| match &j.object {
                Object::Job(j) => Some(j.clone()),
                _ => None,
            })
            .filter(|j| {
                j.metadata
                    .owner_references
                    .as_ref()
                    .and_then(|o| o.first())
                    .is_some_and(|r| r.uid == uid)
            })
            .filter_map(|j| {
                let conds = j.status?.conditions?;
                let ok = conds.iter().any(|c| c.type_ == "Complete");
                let failed = conds.iter().any(|c| c.type_ == "Failed");
                (ok || failed).then(|| {
                    let t = j.metadata.creation_timestamp.map(|t| t.0);
                    (t, ok, j.metadata.name.unwrap_or_default())
                })
            })
            .collect();
        jobs.sort();
        for (ok, keep) in [(true, keep_ok), (false, keep_failed)] {
            let of: Vec<_> = jobs.iter().filter(|j| j.1 == ok).collect();
            for (_, _, n) in of.iter().take(of.len().saturating_sub(keep)) {
                let _ = s.delete(Kind::Job, &namespace, n, None);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A finished Job's record as an older criusd wrote it: its controller built the JSON by hand, times to the
    /// second as Kubernetes' Time writes them.
    const OLD_RECORD: &str = r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"creationTimestamp":"2026-11-30T10:00:00Z","generation":1,"name":"data-processing-job","namespace":"default","uid":"6f1c-old"},"spec":{"backoffLimit":2,"completions":1,"parallelism":1,"template":{"metadata":{"labels":{"app":"data"}},"spec":{"containers":[{"image":"busybox:1.36","name":"worker","command":["sh","-c","true"]}],"restartPolicy":"Never"}},"ttlSecondsAfterFinished":600},"status":{"active":0,"completionTime":"2026-11-30T10:00:05Z","conditions":[{"lastProbeTime":"2026-11-30T10:00:05Z","lastTransitionTime":"2026-11-30T10:00:05Z","message":"Reached expected number of succeeded pods","reason":"CompletionsReached","status":"True","type":"SuccessCriteriaMet"},{"lastProbeTime":"2026-11-30T10:00:05Z","lastTransitionTime":"2026-11-30T10:00:05Z","message":"Reached expected number of succeeded pods","reason":"CompletionsReached","status":"True","type":"Complete"}],"failed":0,"ready":0,"startTime":"2026-11-30T10:00:00Z","succeeded":1,"terminating":0}}"#;

    #[test]
    fn an_old_job_record_loads_as_the_typed_job_and_keeps_its_json() {
        let old: Value = serde_json::from_str(OLD_RECORD).unwrap();
        let kept = Kept::from_json(Kind::Job, old.clone()).unwrap();
        let Object::Job(job) = &kept.object else {
            panic!("not a Job")
        };
        let st = job.status.as_ref().unwrap();
        assert_eq!(st.succeeded, Some(1));
        assert_eq!(
            st.completion_time.as_ref().map(|t| t.0.to_string()),
            Some("2026-11-30T10:00:05Z".into())
        );
        assert_eq!(
            job.spec.as_ref().and_then(|s| s.ttl_seconds_after_finished),
            Some(600)
        );
        // Written back, it is the same JSON.
        assert_eq!(kept.to_json(), old);
        assert_eq!(serde_json::to_value(job).unwrap(), old);
    }

    #[test]
    fn an_old_cron_job_record_loads_as_the_typed_cron_job_and_keeps_its_json() {
        let old: Value = serde_json::from_str(
            r#"{"apiVersion":"batch/v1","kind":"CronJob","metadata":{"creationTimestamp":"2026-11-30T10:00:00Z","generation":1,"name":"tick","namespace":"default","uid":"c-1"},"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"image":"busybox:1.36","name":"t"}],"restartPolicy":"OnFailure"}}}},"schedule":"*/5 * * * *","successfulJobsHistoryLimit":2},"status":{"lastScheduleTime":"2026-11-30T10:05:00Z"}}"#,
        )
        .unwrap();
        let kept = Kept::from_json(Kind::CronJob, old.clone()).unwrap();
        let Object::CronJob(cron) = &kept.object else {
            panic!("not a CronJob")
        };
        let spec = cron.spec.as_ref().unwrap();
        assert_eq!(spec.schedule, "*/5 * * * *");
        assert_eq!(spec.successful_jobs_history_limit, Some(2));
        assert_eq!(kept.to_json(), old);
        assert_eq!(serde_json::to_value(cron).unwrap(), old);
    }

    /// A CronJob that is due makes its Job (kept in the store, as an apply would), whose controller then asks
    /// for its pod.
    #[test]
    fn a_due_cron_job_makes_its_job_and_the_job_its_pod() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path()).unwrap());
        let asked = Arc::new(super::super::tests::Asked::default());
        let workloads = Workloads::new(store.clone(), asked.clone(), Duration::from_secs(1));
        let since = status::now().0.as_second() - 150;
        let created = k8s_openapi::jiff::Timestamp::from_second(since)
            .unwrap()
            .to_string();
        let cron = serde_json::json!({"apiVersion": "batch/v1", "kind": "CronJob",
            "metadata": {"name": "tick", "namespace": "default", "uid": "c-1", "creationTimestamp": created},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": {
                "containers": [{"name": "t", "image": "busybox"}], "restartPolicy": "Never"}}}}}});
        let w = Kept::from_json(Kind::CronJob, cron).unwrap();
        store.objects().insert(w.key(), w);
        workloads.reconcile();
        let jobs: Vec<Kept> = store
            .objects()
            .values()
            .filter(|w| w.kind() == Kind::Job)
            .cloned()
            .collect();
        assert_eq!(jobs.len(), 1);
        let owner = &jobs[0].object.meta().owner_references.as_ref().unwrap()[0];
        assert_eq!((owner.kind.as_str(), owner.uid.as_str()), ("CronJob", "c-1"));
        let Some(Object::CronJob(c)) = store
            .objects()
            .get("CronJob/default/tick")
            .map(|w| w.object.clone())
        else {
            panic!("no CronJob")
        };
        assert!(c.status.and_then(|s| s.last_schedule_time).is_some());
        workloads.reconcile();
        let made = asked.made.lock().unwrap().clone();
        assert_eq!(made.len(), 1);
        let job_name = jobs[0].object.meta().name.clone().unwrap();
        assert_eq!(
            made[0].metadata.labels.as_ref().unwrap().get("job-name"),
            Some(&job_name)
        );
    }
}
