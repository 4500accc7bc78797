//! Publishing a shim's task events to containerd's (or criusd's) events service over ttrpc
//! (`containerd.services.events.ttrpc.v1.Events/Forward` at `TTRPC_ADDRESS`). Events queue in memory and
//! are sent in order by a sender thread (one connection, plain blocking calls) that stays [`LINGER`] after the
//! queue empties and then ends; while the endpoint is gone they wait and are retried, so a restarted owner
//! still learns what happened while it was down.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use containerd_shim_protos as protos;
use protos::protobuf::Message;
use protos::protobuf::well_known_types::any::Any;
use protos::ttrpc;

use crate::events::{Event, timestamp};
use crate::server::{TYPE_REQUEST, TYPE_RESPONSE, frame, take_frame};

/// Events kept while nobody listens; the oldest go first beyond this.
const MAX_QUEUED: usize = 4096;
/// How long one Forward call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the sender thread and its connection stay once the queue is empty. An exec's events (added,
/// started, exit, deleted) come a few milliseconds apart, and an exec probe's again a period later (kubelet's
/// default is 10 s): a thread and a connection per event cost both ends more than the events themselves.
const LINGER: Duration = Duration::from_secs(10);

/// Where the shim's task events go: the [`Publisher`] in a shim, a channel in the tests of what publishes.
pub(crate) trait Publish: Send + Sync {
    /// Reports `event`; never blocks on the receiver.
    fn publish(&self, event: Event);
}

struct Queued {
    topic: &'static str,
    at: SystemTime,
    event: Any,
}

#[derive(Default)]
struct Queue {
    events: VecDeque<Queued>,
    /// A sender thread is running.
    sending: bool,
}

/// The publisher; cheap to clone.
#[derive(Clone)]
pub(crate) struct Publisher {
    inner: Arc<(Mutex<Queue>, Condvar)>,
    namespace: String,
    /// The events service's socket; empty: events are dropped (nobody to tell).
    address: String,
}

impl Publish for Publisher {
    fn publish(&self, event: Event) {
        self.queue(&event);
    }
}

#[cfg(test)]
impl Publish for std::sync::mpsc::Sender<Event> {
    fn publish(&self, event: Event) {
        let _ = self.send(event);
    }
}

impl Publisher {
    /// A publisher to `address` (a unix socket path, `unix://` allowed); an empty address drops events.
    pub(crate) fn start(address: &str, namespace: &str) -> Publisher {
        Publisher {
            inner: Arc::new((Mutex::new(Queue::default()), Condvar::new())),
            namespace: namespace.to_string(),
            address: crate::address::without_scheme(address).to_string(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `event`, to be sent in order.
    fn queue(&self, event: &Event) {
        if self.address.is_empty() {
            return;
        }
        let (topic, event) = event.to_wire();
        let mut q = self.lock();
        if q.events.len() >= MAX_QUEUED {
            q.events.pop_front();
        }
        q.events.push_back(Queued {
            topic,
            at: SystemTime::now(),
            event,
        });
        // A lingering sender wakes for it.
        self.inner.1.notify_all();
        if !q.sending {
            let me = self.clone();
            q.sending = std::thread::Builder::new()
                .name("events".into())
                .stack_size(128 * 1024)
                .spawn(move || me.send_all())
                .is_ok();
        }
    }

    /// Waits (at most `limit`) until every queued event was sent.
    pub(crate) fn drain(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        let mut q = self.lock();
        while !q.events.is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return;
            }
            q = self
                .inner
                .1
                .wait_timeout(q, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// The sender thread: sends in order until the queue has been empty for [`LINGER`], then ends.
    fn send_all(&self) {
        let mut conn: Option<UnixStream> = None;
        let mut stream_id = 1u32;
        loop {
            let next = {
                let mut q = self.lock();
                if q.events.is_empty() {
                    self.inner.1.notify_all();
                    q = self
                        .inner
                        .1
                        .wait_timeout_while(q, LINGER, |q| q.events.is_empty())
                        .unwrap_or_else(|p| p.into_inner())
                        .0;
                }
                let Some(e) = q.events.front() else {
                    q.sending = false;
                    return;
                };
                (e.topic, e.at, e.event.clone())
            };
            if conn.is_none() {
                conn = UnixStream::connect(&self.address).ok().inspect(|c| {
                    let _ = c.set_read_timeout(Some(CALL_TIMEOUT));
                    let _ = c.set_write_timeout(Some(CALL_TIMEOUT));
                });
            }
            let sent = conn.as_mut().is_some_and(|c| {
                stream_id = stream_id.wrapping_add(2);
                self.forward(c, stream_id, next.0, next.1, next.2).is_ok()
            });
            if sent {
                self.lock().events.pop_front();
                self.inner.1.notify_all();
            } else {
                // The endpoint is gone (its owner restarting): keep the event and try again shortly.
                conn = None;
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }

    fn forward(
        &self,
        c: &mut UnixStream,
        id: u32,
        topic: &str,
        at: SystemTime,
        event: Any,
    ) -> Result<(), String> {
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
        let call = ttrpc::Request {
            service: "containerd.services.events.ttrpc.v1.Events".into(),
            method: "Forward".into(),
            payload: req.write_to_bytes().map_err(|e| e.to_string())?,
            timeout_nano: CALL_TIMEOUT.as_nanos() as i64,
            ..Default::default()
        };
        let bytes = call.write_to_bytes().map_err(|e| e.to_string())?;
        c.write_all(&frame(id, TYPE_REQUEST, &bytes))
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some((sid, kind, payload)) = take_frame(&mut buf).map_err(|e| e.to_string())? {
                if sid != id || kind != TYPE_RESPONSE {
                    continue;
                }
                let res = ttrpc::Response::parse_from_bytes(&payload).map_err(|e| e.to_string())?;
                let code = res.status.as_ref().map(|s| s.code.value()).unwrap_or(0);
                return if code == 0 {
                    Ok(())
                } else {
                    Err(format!("Forward: code {code}"))
                };
            }
            let n = c.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Err("the events service closed the connection".into());
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An events service that answers every Forward with success; counts the connections it accepted.
    fn sink(listener: UnixListener, conns: Arc<AtomicUsize>, forwarded: Arc<AtomicUsize>) {
        std::thread::spawn(move || {
            for c in listener.incoming() {
                let Ok(mut c) = c else { return };
                conns.fetch_add(1, Ordering::SeqCst);
                let forwarded = forwarded.clone();
                std::thread::spawn(move || {
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Ok(Some((id, _, _))) = take_frame(&mut buf) {
                            forwarded.fetch_add(1, Ordering::SeqCst);
                            let ok = ttrpc::Response::default().write_to_bytes().unwrap();
                            if c.write_all(&frame(id, TYPE_RESPONSE, &ok)).is_err() {
                                return;
                            }
                        }
                        match c.read(&mut chunk) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
    }

    #[test]
    fn events_apart_share_one_sender_and_one_connection() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("events.sock");
        let (conns, forwarded) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        sink(
            UnixListener::bind(&sock).unwrap(),
            conns.clone(),
            forwarded.clone(),
        );
        let publisher = Publisher::start(&sock.display().to_string(), "test");
        for n in 0..3 {
            publisher.publish(Event::Oom {
                container_id: format!("c{n}"),
            });
            publisher.drain(Duration::from_secs(10));
            // The queue is empty between two events, as between an exec's events.
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_eq!(forwarded.load(Ordering::SeqCst), 3);
        assert_eq!(conns.load(Ordering::SeqCst), 1);
        assert!(publisher.lock().sending, "the sender lingers");
    }
}
