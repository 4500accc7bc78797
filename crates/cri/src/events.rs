//! The events service criusd serves its shims (their `TTRPC_ADDRESS`, `<state>/events.sock`), through
//! `crius_shim::client::serve_events`: the shim crate's one-thread ttrpc server, handing over typed events. OOM
//! kills mark the container (ContainerStatus then says `OOMKilled`); exits are recorded with the container, so
//! they are known even once its shim is gone. Shims queue events while criusd is down and send them when it is
//! back, so nothing that happened meanwhile is lost.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::sync::Arc;

use crius_shim::client::{self, Event};

use crate::container::Containers;

/// Serves the events service on `path` (a stale socket replaced) from a thread of its own.
pub fn serve(path: &Path, containers: Arc<Containers>) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    // Root's alone (its directory is 0700 too); the server refuses a peer of another uid besides.
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    // Serves for criusd's life: the handle is let go.
    let _ = client::serve_events(listener, move |event| match event {
        Event::Oom { container_id } => {
            tracing::info!(container = %container_id, "OOM kill");
            containers.mark_oom(&container_id);
        }
        // An exec's exit is ExecSync's business, answered by its Wait.
        Event::Exit {
            container_id,
            exec_id,
            exit_status,
            exited_at_ns,
            ..
        } if exec_id.is_empty() => containers.mark_exit(&container_id, exit_status as i32, exited_at_ns),
        _ => {}
    })?;
    Ok(())
}
