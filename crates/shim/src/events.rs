//! Publishing task events to containerd's (or criusd's) events service over ttrpc
//! (`containerd.services.events.ttrpc.v1.Events/Forward` at `TTRPC_ADDRESS`). Events queue in memory and
//! are sent in order by one thread; while the endpoint is gone they wait and are retried, so a restarted
//! owner still learns what happened while it was down.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use containerd_shim_protos as protos;
use protos::events::task as ev;
use protos::protobuf::Message;
use protos::protobuf::well_known_types::{any::Any, timestamp::Timestamp};
use protos::ttrpc;

/// Events kept while nobody listens; the oldest go first beyond this.
const MAX_QUEUED: usize = 4096;

struct Queued {
    topic: &'static str,
    at: SystemTime,
    event: Any,
}

/// The publisher; cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    inner: Arc<(Mutex<VecDeque<Queued>>, Condvar)>,
    namespace: String,
}

/// A protobuf timestamp.
pub fn timestamp(t: SystemTime) -> Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
        ..Default::default()
    }
}

/// A message with its full protobuf type name, known without the reflection tables (building those costs a
/// long-lived shim memory for nothing).
pub trait Named: Message {
    /// `containerd.events.TaskExit`, …
    const TYPE: &'static str;
}

macro_rules! named {
    ($($t:ty => $n:literal),* $(,)?) => {
        $(impl Named for $t {
            const TYPE: &'static str = $n;
        })*
    };
}

named! {
    ev::TaskCreate => "containerd.events.TaskCreate",
    ev::TaskStart => "containerd.events.TaskStart",
    ev::TaskExit => "containerd.events.TaskExit",
    ev::TaskDelete => "containerd.events.TaskDelete",
    ev::TaskExecAdded => "containerd.events.TaskExecAdded",
    ev::TaskExecStarted => "containerd.events.TaskExecStarted",
    ev::TaskPaused => "containerd.events.TaskPaused",
    ev::TaskResumed => "containerd.events.TaskResumed",
    ev::TaskOOM => "containerd.events.TaskOOM",
    protos::cgroups_v2::metrics::Metrics => "io.containerd.cgroups.v2.Metrics",
}

/// Packs `m` into an Any named by its full protobuf type name, as containerd expects.
pub fn to_any<M: Named>(m: &M) -> Any {
    Any {
        type_url: M::TYPE.to_string(),
        value: m.write_to_bytes().unwrap_or_default(),
        ..Default::default()
    }
}

impl Publisher {
    /// Starts the sending thread for `address` (a unix socket path, `unix://` allowed); an empty address
    /// drops events (nobody to tell).
    pub fn start(address: &str, namespace: &str) -> Publisher {
        let p = Publisher {
            inner: Arc::new((Mutex::new(VecDeque::new()), Condvar::new())),
            namespace: namespace.to_string(),
        };
        if !address.is_empty() {
            let me = p.clone();
            let address = address.strip_prefix("unix://").unwrap_or(address).to_string();
            let _ = std::thread::Builder::new()
                .name("events".into())
                .stack_size(128 * 1024)
                .spawn(move || me.run(&address));
        }
        p
    }

    /// Queues `event` under `topic`.
    pub fn publish<M: Named>(&self, topic: &'static str, event: &M) {
        let mut q = self.inner.0.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= MAX_QUEUED {
            q.pop_front();
        }
        q.push_back(Queued {
            topic,
            at: SystemTime::now(),
            event: to_any(event),
        });
        self.inner.1.notify_all();
    }

    /// Waits (at most `limit`) until every queued event was sent.
    pub fn drain(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        while !self.inner.0.lock().unwrap_or_else(|p| p.into_inner()).is_empty()
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn run(&self, address: &str) {
        let mut client: Option<protos::EventsClient> = None;
        loop {
            let next = {
                let mut q = self.inner.0.lock().unwrap_or_else(|p| p.into_inner());
                while q.is_empty() {
                    q = self.inner.1.wait(q).unwrap_or_else(|p| p.into_inner());
                }
                let e = q.front().expect("not empty");
                (e.topic, e.at, e.event.clone())
            };
            if client.is_none() {
                client = ttrpc::Client::connect(&format!("unix://{address}"))
                    .ok()
                    .map(protos::EventsClient::new);
            }
            let sent = client
                .as_ref()
                .is_some_and(|c| self.forward(c, next.0, next.1, next.2));
            if sent {
                self.inner.0.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
            } else {
                // The endpoint is gone (its owner restarting): keep the event and try again shortly.
                client = None;
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }

    fn forward(&self, c: &protos::EventsClient, topic: &str, at: SystemTime, event: Any) -> bool {
        let envelope = protos::shim::event::Envelope {
            timestamp: Some(timestamp(at)).into(),
            namespace: self.namespace.clone(),
            topic: topic.to_string(),
            event: Some(event).into(),
            ..Default::default()
        };
        let req = protos::api::ForwardRequest {
            envelope: Some(envelope).into(),
            ..Default::default()
        };
        c.forward(ttrpc::context::with_timeout(5_000_000_000), &req)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protos::protobuf::MessageFull;

    fn same<M: Named + MessageFull>() {
        assert_eq!(M::TYPE, M::descriptor().full_name());
    }

    #[test]
    fn type_names_match_the_descriptors() {
        same::<ev::TaskCreate>();
        same::<ev::TaskStart>();
        same::<ev::TaskExit>();
        same::<ev::TaskDelete>();
        same::<ev::TaskExecAdded>();
        same::<ev::TaskExecStarted>();
        same::<ev::TaskPaused>();
        same::<ev::TaskResumed>();
        same::<ev::TaskOOM>();
        same::<protos::cgroups_v2::metrics::Metrics>();
    }
}
