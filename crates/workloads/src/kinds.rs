//! The kinds the pod service keeps, by the names kubectl takes for them, and label selectors.

use crate::Error;

/// A kind of object the service keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// core/v1 Pod.
    Pod,
    /// batch/v1 Job.
    Job,
    /// batch/v1 CronJob.
    CronJob,
    /// apps/v1 Deployment.
    Deployment,
    /// apps/v1 ReplicaSet.
    ReplicaSet,
    /// apps/v1 StatefulSet.
    StatefulSet,
    /// apps/v1 DaemonSet.
    DaemonSet,
    /// core/v1 ConfigMap.
    ConfigMap,
    /// core/v1 Secret.
    Secret,
}

const ALL: [Kind; 9] = [
    Kind::Pod,
    Kind::Job,
    Kind::CronJob,
    Kind::Deployment,
    Kind::ReplicaSet,
    Kind::StatefulSet,
    Kind::DaemonSet,
    Kind::ConfigMap,
    Kind::Secret,
];

impl Kind {
    /// The kind as objects name it (`Deployment`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Pod => "Pod",
            Kind::Job => "Job",
            Kind::CronJob => "CronJob",
            Kind::Deployment => "Deployment",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::StatefulSet => "StatefulSet",
            Kind::DaemonSet => "DaemonSet",
            Kind::ConfigMap => "ConfigMap",
            Kind::Secret => "Secret",
        }
    }

    /// Its apiVersion.
    pub fn api_version(self) -> &'static str {
        match self {
            Kind::Pod | Kind::ConfigMap | Kind::Secret => "v1",
            Kind::Job | Kind::CronJob => "batch/v1",
            _ => "apps/v1",
        }
    }

    /// The resource name (`deployments`).
    pub fn plural(self) -> String {
        format!("{}s", self.name().to_lowercase())
    }

    /// kubectl's `kind.group` (`deployment.apps`, `pod`).
    pub fn qualified(self) -> String {
        match self.api_version().split_once('/') {
            Some((group, _)) => format!("{}.{group}", self.name().to_lowercase()),
            None => self.name().to_lowercase(),
        }
    }

    /// The kind an object names (`kind: Job`).
    pub fn of_object(kind: &str) -> Option<Kind> {
        ALL.into_iter().find(|k| k.name() == kind)
    }

    /// The kind kubectl's argument names: plural, singular, short (`po`, `deploy`, `rs`, `sts`, `ds`,
    /// `cj`, `cm`), or `kind.group`.
    pub fn parse(word: &str) -> Result<Kind, Error> {
        let w = word.to_lowercase();
        let w = w.split_once('.').map_or(w.as_str(), |(k, _)| k).to_string();
        let short = match w.as_str() {
            "po" => Some(Kind::Pod),
            "deploy" => Some(Kind::Deployment),
            "rs" => Some(Kind::ReplicaSet),
            "sts" => Some(Kind::StatefulSet),
            "ds" => Some(Kind::DaemonSet),
            "cj" => Some(Kind::CronJob),
            "cm" => Some(Kind::ConfigMap),
            _ => None,
        };
        short
            .or_else(|| {
                ALL.into_iter()
                    .find(|k| w == k.name().to_lowercase() || w == k.plural())
            })
            .ok_or_else(|| {
                Error::invalid(format!(
                    "the server doesn't have a resource type {word:?} (crius keeps pods, jobs, cronjobs, \
                     deployments, replicasets, statefulsets, daemonsets, configmaps and secrets)"
                ))
            })
    }
}

/// A label selector: `k=v`, `k==v`, `k!=v`, `k`, `!k`, comma-separated (all must hold).
#[derive(Debug, Default)]
pub struct Selector(Vec<(String, Op)>);

#[derive(Debug)]
enum Op {
    Is(String),
    Not(String),
    Has,
    Lacks,
}

impl Selector {
    /// Reads `text` (empty: everything).
    pub fn parse(text: &str) -> Result<Selector, Error> {
        let mut out = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let r = if let Some((k, v)) = part.split_once("!=") {
                (k, Op::Not(v.trim().into()))
            } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
                (k, Op::Is(v.trim().into()))
            } else if let Some(k) = part.strip_prefix('!') {
                (k, Op::Lacks)
            } else {
                (part, Op::Has)
            };
            let k = r.0.trim();
            if k.is_empty() || k.contains(' ') {
                return Err(Error::invalid(format!("unable to parse requirement: {part:?}")));
            }
            out.push((k.to_string(), r.1));
        }
        Ok(Selector(out))
    }

    /// Whether an object of labels `labels` matches.
    pub fn matches(&self, labels: Option<&std::collections::BTreeMap<String, String>>) -> bool {
        self.0.iter().all(|(k, op)| {
            let got = labels.and_then(|l| l.get(k)).map(String::as_str);
            match op {
                Op::Is(want) => got == Some(want),
                Op::Not(want) => got != Some(want),
                Op::Has => got.is_some(),
                Op::Lacks => got.is_none(),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_names_name_kinds() {
        for (w, k) in [
            ("pods", Kind::Pod),
            ("po", Kind::Pod),
            ("pod", Kind::Pod),
            ("deploy", Kind::Deployment),
            ("deployments.apps", Kind::Deployment),
            ("jobs", Kind::Job),
            ("Job", Kind::Job),
            ("cm", Kind::ConfigMap),
        ] {
            assert_eq!(Kind::parse(w).unwrap(), k, "{w}");
        }
        let e = tonic::Status::from(Kind::parse("services").unwrap_err());
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("\"services\""), "{}", e.message());
        assert_eq!(Kind::Deployment.qualified(), "deployment.apps");
        assert_eq!(Kind::Job.qualified(), "job.batch");
        assert_eq!(Kind::Pod.qualified(), "pod");
    }

    #[test]
    fn selectors_select_by_labels() {
        let v: std::collections::BTreeMap<String, String> = [("app", "web"), ("tier", "front")]
            .map(|(k, v)| (k.into(), v.into()))
            .into();
        for (s, want) in [
            ("", true),
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("tier", true),
            ("!tier", false),
            ("db", false),
            ("app=db", false),
        ] {
            assert_eq!(Selector::parse(s).unwrap().matches(Some(&v)), want, "{s}");
        }
        assert!(Selector::parse("a b=c").is_err());
    }
}
