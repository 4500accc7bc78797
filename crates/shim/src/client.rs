//! Driving a shim: start one the way containerd does (`<shim> … start` in the bundle, read its address),
//! then call its Task API over ttrpc. criusd uses this; so do the tests.

use std::path::Path;
use std::process::{Command, Stdio};

use containerd_shim_protos as protos;
pub use protos::TaskClient;
use protos::ttrpc;

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
) -> Result<String, String> {
    let out = Command::new(shim)
        .args([
            "-namespace",
            namespace,
            "-address",
            address,
            "-publish-binary",
            "",
            "-id",
            id,
            "start",
        ])
        .env("TTRPC_ADDRESS", ttrpc_address)
        .current_dir(bundle)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("starting {}: {e}", shim.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || text.is_empty() {
        return Err(format!(
            "{} start for {id}: {}: {}{}",
            shim.display(),
            out.status,
            text,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(text)
}

/// Connects to a shim at `address` (`unix:///…`).
pub fn connect(address: &str) -> Result<TaskClient, String> {
    let c = ttrpc::Client::connect(address).map_err(|e| format!("connecting to shim {address}: {e}"))?;
    Ok(TaskClient::new(c))
}

/// A context with a deadline of `secs` seconds.
pub fn ctx(secs: u64) -> ttrpc::context::Context {
    ttrpc::context::with_timeout(secs as i64 * 1_000_000_000)
}

/// Runs `<shim> -id ID -bundle B delete` as containerd does after a shim died: cleans up the container and
/// returns its last known exit status.
pub fn delete_shim(
    shim: &Path,
    namespace: &str,
    address: &str,
    id: &str,
    bundle: &Path,
) -> Result<u32, String> {
    let out = Command::new(shim)
        .args(["-namespace", namespace, "-address", address, "-id", id, "-bundle"])
        .arg(bundle)
        .arg("delete")
        .current_dir(bundle)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {} delete: {e}", shim.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} delete {id}: {}",
            shim.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    use protos::protobuf::Message;
    let resp = protos::api::DeleteResponse::parse_from_bytes(&out.stdout)
        .map_err(|e| format!("{} delete {id}: bad response: {e}", shim.display()))?;
    Ok(resp.exit_status)
}
