//! What criusd's Prometheus endpoint shows of the CRI side. Image pulls: the image service counts each
//! pull it finishes (CRI PullImage and crius's own `Images.Pull`) into a [`Pulls`] handle, whose families
//! criusd registers (a service made without one counts into a handle nobody reads). Pods, containers and
//! shims by state: a [`Census`] taken from the records at scrape time ([`Node::census`]), no shim calls.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::node::Node;
use crate::store::container::State;

/// The outcome label of a pull.
type Outcome = [(&'static str, &'static str); 1];

/// Pulls counted by outcome, the bytes they fetched, and how long the successful ones took. Cheap to clone:
/// clones count into the same figures.
#[derive(Debug, Clone)]
pub struct Pulls {
    pulls: Family<Outcome, Counter>,
    bytes: Counter,
    seconds: Histogram,
}

impl Default for Pulls {
    fn default() -> Pulls {
        // Both outcomes are shown from the start, at 0.
        let pulls = Family::<Outcome, Counter>::default();
        for outcome in ["success", "failure"] {
            drop(pulls.get_or_create(&[("outcome", outcome)]));
        }
        Pulls {
            pulls,
            bytes: Counter::default(),
            // 50 ms to about 27 minutes: a local registry's small image to a large one over a slow link.
            seconds: Histogram::new(exponential_buckets(0.05, 2.0, 16)),
        }
    }
}

impl Pulls {
    /// Adds the three families to `registry` (named under its prefix: `crius_image_pulls_total`,
    /// `crius_image_pull_bytes_total`, `crius_image_pull_duration_seconds`).
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "image_pulls",
            "Image pulls finished, by outcome (success or failure)",
            self.pulls.clone(),
        );
        registry.register_with_unit(
            "image_pull",
            "Bytes fetched from registries by image pulls (blobs already held are not fetched again)",
            Unit::Bytes,
            self.bytes.clone(),
        );
        registry.register_with_unit(
            "image_pull_duration",
            "Time successful image pulls took",
            Unit::Seconds,
            self.seconds.clone(),
        );
    }

    /// A pull that fetched `bytes` in `took`.
    pub fn succeeded(&self, bytes: u64, took: std::time::Duration) {
        self.pulls.get_or_create(&[("outcome", "success")]).inc();
        self.bytes.inc_by(bytes);
        self.seconds.observe(took.as_secs_f64());
    }

    /// A pull that failed.
    pub fn failed(&self) {
        self.pulls.get_or_create(&[("outcome", "failure")]).inc();
    }
}

/// The node's pods, containers and shims by state, at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Census {
    /// Sandboxes READY and NOTREADY.
    pub pods: [(&'static str, u64); 2],
    /// Containers by CRI state: created, running, exited, unknown.
    pub containers: [(&'static str, u64); 4],
    /// Shims criusd is connected to, and pods whose shim is gone with containers in an unknown state.
    pub shims: [(&'static str, u64); 2],
}

impl Node {
    /// The census of pods, containers and shims, from the records.
    pub fn census(&self) -> Census {
        let sandboxes = self.pods.sandboxes.list();
        let ready = sandboxes.iter().filter(|s| s.record.ready).count() as u64;
        let mut containers = [("created", 0), ("running", 0), ("exited", 0), ("unknown", 0)];
        let mut lost = std::collections::HashSet::new();
        for c in self.containers.list_all() {
            let state = c.record.state();
            let i = match state {
                State::Created => 0,
                State::Running => 1,
                State::Exited => 2,
                State::Unknown => 3,
            };
            containers[i].1 += 1;
            if state == State::Unknown {
                lost.insert(c.record.sandbox_id.clone());
            }
        }
        Census {
            pods: [("ready", ready), ("notready", sandboxes.len() as u64 - ready)],
            containers,
            shims: [
                ("connected", self.containers.shims.connected() as u64),
                ("lost", lost.len() as u64),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pulls_are_counted_by_outcome_with_bytes_and_seconds() {
        let p = Pulls::default();
        let mut r = Registry::with_prefix("crius");
        p.clone().register(&mut r);
        p.succeeded(1000, std::time::Duration::from_millis(120));
        p.succeeded(24, std::time::Duration::from_millis(30));
        p.failed();
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &r).unwrap();
        for line in [
            "# TYPE crius_image_pulls_total counter",
            "crius_image_pulls_total{outcome=\"success\"} 2",
            "crius_image_pulls_total{outcome=\"failure\"} 1",
            "crius_image_pull_bytes_total 1024",
            "# TYPE crius_image_pull_duration_seconds histogram",
            "crius_image_pull_duration_seconds_count 2",
            "crius_image_pull_duration_seconds_bucket{le=\"0.05\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }
}
