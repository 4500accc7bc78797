//! Driving a shim: start one the way containerd does (`<shim> … start` in the bundle, read its address),
//! then call its Task API over ttrpc, and receive its task events ([`serve_events`]). criusd uses this; so do
//! the tests.

use std::collections::HashMap;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use containerd_shim_protos as protos;
use crius_common::sealed::Handed;
use protos::{api, ttrpc};

pub use crate::address::socket_address;
pub use crate::client_error::{Error, Result};
pub use crate::events::Event;
use crate::events::ns_of;
pub use crate::mounts::Mount;
use crate::reactor::Reactor;
use crate::server::Server;
pub use crate::stdio::{CAPPED_LOG_MAX, CAPPED_LOG_SCHEME, CRI_LOG_SCHEME, REOPEN_ANNOTATION};
pub use crate::task_client::TaskClient;

/// Starts (or joins, for a container of a pod whose shim runs) a shim for container `id` of the bundle at
/// `bundle`; returns the ttrpc address it serves on. `address` names the owner (it is part of the socket
/// name); `ttrpc_address` is where events go (empty: nowhere).
pub fn start_shim(
    shim: &Path,
    namespace: &str,
    address: &str,
    ttrpc_address: &str,
    id: &str,
    bundle: &Path,
) -> Result<String> {
    start_shim_with(
        shim,
        namespace,
        address,
        ttrpc_address,
        id,
        bundle,
        Extras {
            sealed: None,
            direct_exec: true,
        },
    )
}

/// What [`start_shim_with`] gives a shim besides its arguments.
#[derive(Clone, Copy)]
pub struct Extras<'a> {
    /// A sealed copy of its runtime (`crius_common::sealed`), open in this process at the number it names: the
    /// shim runs the runtime through it instead of having it copy itself at every call.
    pub sealed: Option<&'a Handed>,
    /// Whether execs in containers run by crius-runc start without a `crius-runc exec` command (the shim's
    /// direct exec; `CRIUS_SHIM_DIRECT_EXEC` in its environment).
    pub direct_exec: bool,
}

/// `crius-runc` next to the shim binary `shim`: the runtime such a shim runs by default (None: there is none).
pub fn default_runtime(shim: &Path) -> Option<PathBuf> {
    crate::runtime::beside(shim)
}

/// [`start_shim`], with `extras` ([`Extras`]).
pub fn start_shim_with(
    shim: &Path,
    namespace: &str,
    address: &str,
    ttrpc_address: &str,
    id: &str,
    bundle: &Path,
    extras: Extras<'_>,
) -> Result<String> {
    let sealed = extras.sealed;
    // posix_spawn, not std's Command: keeping the sealed copy open across the exec needs a pre_exec hook there,
    // which makes it fork criusd (`spawn`).
    let env = sealed.map(|h| h.to_env());
    let direct = if extras.direct_exec { "1" } else { "0" };
    let mut vars = vec![("TTRPC_ADDRESS", ttrpc_address), (crate::direct::ENV, direct)];
    if let Some(e) = &env {
        vars.push((crius_common::sealed::ENV, e));
    }
    let args = [
        "-namespace",
        namespace,
        "-address",
        address,
        "-publish-binary",
        "",
        "-id",
        id,
        "start",
    ];
    let out = crate::spawn::output(&crate::spawn::Spawn {
        program: shim,
        args: &args,
        env: &vars,
        dir: bundle,
        keep: sealed.map(|h| h.fd),
    })
    .map_err(|source| Error::Io {
        context: format!("starting {}", shim.display()),
        source,
    })?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || text.is_empty() {
        return Err(Error::Action {
            action: format!("{} start for {id}", shim.display()),
            output: format!(
                "{}: {}{}",
                out.status,
                text,
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        });
    }
    Ok(text)
}

/// Connects to a shim at `address` (`unix:///…`); the client is its Task API.
pub fn connect(address: &str) -> Result<TaskClient> {
    TaskClient::dial(address).map_err(|source| Error::Io {
        context: format!("connecting to shim {address}"),
        source,
    })
}

/// A context with a deadline of `secs` seconds.
pub fn ctx(secs: u64) -> ttrpc::context::Context {
    ttrpc::context::with_timeout(secs as i64 * 1_000_000_000)
}

/// How a container ended, as a shim's `delete` action reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exited {
    /// Its init's pid (0 if unknown).
    pub pid: u32,
    /// Its exit status: the exit code, or 128 + the signal; 137 when the shim cannot tell (the container died
    /// with its shim).
    pub exit_status: u32,
    /// When it ended, ns since the epoch (the time of the delete when the shim cannot tell).
    pub exited_at_ns: i64,
}

/// Runs `<shim> -id ID -bundle B delete` as containerd does after a shim died: cleans up the container and
/// returns its last known exit.
pub fn delete_shim(shim: &Path, namespace: &str, address: &str, id: &str, bundle: &Path) -> Result<Exited> {
    let out = Command::new(shim)
        .args(["-namespace", namespace, "-address", address, "-id", id, "-bundle"])
        .arg(bundle)
        .arg("delete")
        .current_dir(bundle)
        .stdin(Stdio::null())
        .output()
        .map_err(|source| Error::Io {
            context: format!("running {} delete", shim.display()),
            source,
        })?;
    let action = || format!("{} delete {id}", shim.display());
    if !out.status.success() {
        return Err(Error::Action {
            action: action(),
            output: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    use protos::protobuf::Message;
    let resp = api::DeleteResponse::parse_from_bytes(&out.stdout).map_err(|e| Error::Action {
        action: action(),
        output: format!("bad response: {e}"),
    })?;
    Ok(Exited {
        pid: resp.pid,
        exit_status: resp.exit_status,
        exited_at_ns: resp.exited_at.as_ref().map(ns_of).unwrap_or(0),
    })
}

/// The events service a shim publishes to, served by [`serve_events`]; dropping it leaves it serving.
pub struct EventServer {
    reactor: Arc<Reactor>,
    thread: std::thread::JoinHandle<()>,
}

impl EventServer {
    /// Stops serving (calls in progress finish) and waits for the server's loop to end.
    pub fn stop(self) {
        self.reactor.stop();
        let _ = self.thread.join();
    }
}

/// Decodes each forwarded envelope and hands its event to the sink.
struct Receiver<F> {
    sink: F,
}

impl<F: Fn(Event) + Send + Sync> protos::Events for Receiver<F> {
    fn forward(&self, _: &ttrpc::TtrpcContext, req: api::ForwardRequest) -> ttrpc::Result<api::Empty> {
        let env = req.envelope.unwrap_or_default();
        // Topics that are not task events here (checkpoints, other services') are acknowledged and dropped.
        if let Some(e) = env
            .event
            .as_ref()
            .and_then(|any| Event::from_wire(&env.topic, any))
        {
            (self.sink)(e);
        }
        Ok(api::Empty::new())
    }
}

/// Serves containerd's events service (`containerd.services.events.ttrpc.v1.Events/Forward`, what shims
/// publish to at their `TTRPC_ADDRESS`) on `listener`, from a thread of its own: the shim's one-thread
/// server, so a connection per shim costs no thread. Each task event goes to `sink`, on a worker thread (it
/// may block briefly; the shim waits for the answer before it sends its next event).
pub fn serve_events(
    listener: UnixListener,
    sink: impl Fn(Event) + Send + Sync + 'static,
) -> std::io::Result<EventServer> {
    let reactor = Reactor::new()?;
    let svc: Arc<dyn protos::Events + Send + Sync> = Arc::new(Receiver { sink });
    let server = Server::new(protos::create_events(svc), HashMap::new());
    server.listen(&reactor, listener)?;
    let r = reactor.clone();
    let thread = std::thread::Builder::new()
        .name("shim-events".into())
        .spawn(move || r.run())?;
    Ok(EventServer { reactor, thread })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publisher::{Publish, Publisher};
    use std::time::Duration;

    #[test]
    fn published_events_reach_the_sink_typed_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("events.sock");
        let (tx, rx) = std::sync::mpsc::channel();
        let server = serve_events(UnixListener::bind(&sock).unwrap(), move |e| {
            let _ = tx.send(e);
        })
        .unwrap();
        let publisher = Publisher::start(&format!("unix://{}", sock.display()), "test");
        let sent = [
            Event::Start {
                container_id: "c1".into(),
                pid: 7,
            },
            Event::Oom {
                container_id: "c1".into(),
            },
            Event::Exit {
                container_id: "c1".into(),
                exec_id: String::new(),
                pid: 7,
                exit_status: 137,
                exited_at_ns: 1_000_000_123,
            },
        ];
        for e in &sent {
            publisher.publish(e.clone());
        }
        publisher.drain(Duration::from_secs(10));
        let got: Vec<Event> = (0..sent.len())
            .map(|_| rx.recv_timeout(Duration::from_secs(10)).unwrap())
            .collect();
        assert_eq!(got, sent);
        server.stop();
    }
}
