//! Seccomp user notification: the listener of a filter with `SCMP_ACT_NOTIFY` rules goes to the seccomp agent
//! at `linux.seccomp.listenerPath`, as the runtime spec's `ContainerProcessState` says and runc hands it over:
//! a new connection to that unix socket, one message holding the state as JSON with the listener attached
//! (`SCM_RIGHTS`, named `seccompFd` in `fds`).
//!
//! ```text
//! container process: load filter ──"seccomp" + fd──► runtime ──connect(listenerPath), state + fd──► agent
//!                    (waits)      ◄──────"go"──────── runtime (its copy closed)
//! ```
//! The process waits for "go", so no system call of its own reaches the filter before the agent holds the
//! listener; the runtime keeps no copy, so once the agent closes it the notified calls fail with ENOSYS.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
use oci_spec::runtime::LinuxSeccomp;
use serde::Serialize;

use crate::{Result, err};

/// The name of the listener in the message's `fds`.
const SECCOMP_FD: &str = "seccompFd";

/// The message: the process the listener filters, and the container's state.
#[derive(Serialize)]
struct ProcessState<'a> {
    #[serde(rename = "ociVersion")]
    version: &'a str,
    fds: [&'static str; 1],
    pid: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    metadata: Option<&'a str>,
    state: &'a serde_json::Value,
}

/// The message for process `pid` of a container in `state` (its state document), under `profile`.
fn message(profile: &LinuxSeccomp, version: &str, pid: i32, state: &serde_json::Value) -> Result<Vec<u8>> {
    let m = ProcessState {
        version,
        fds: [SECCOMP_FD],
        pid,
        metadata: profile.listener_metadata().as_deref().filter(|m| !m.is_empty()),
        state,
    };
    serde_json::to_vec(&m).map_err(|e| err!("encoding the seccomp agent's message: {e}"))
}

/// Gives `listener` (of process `pid`, in a container in `state`, made from a spec of `version`) to the agent at
/// `profile`'s listenerPath.
pub fn send_to_agent(
    profile: &LinuxSeccomp,
    version: &str,
    pid: i32,
    state: &serde_json::Value,
    listener: &OwnedFd,
) -> Result<()> {
    let path = profile
        .listener_path()
        .as_ref()
        .ok_or_else(|| err!("linux.seccomp.listenerPath is not set"))?;
    let conn = UnixStream::connect(path).map_err(|e| {
        err!(
            "failed to connect with seccomp agent at {} (linux.seccomp.listenerPath): {e}",
            path.display()
        )
    })?;
    let bytes = message(profile, version, pid, state)?;
    let fds = [listener.as_raw_fd()];
    let sent = sendmsg::<()>(
        conn.as_raw_fd(),
        &[IoSlice::new(&bytes)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(|e| {
        err!(
            "sending the seccomp listener to the agent at {}: {e}",
            path.display()
        )
    })?;
    if sent != bytes.len() {
        return Err(err!(
            "sending the seccomp listener to the agent at {}: {sent} of {} bytes sent",
            path.display(),
            bytes.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_gets_the_state_and_the_listener() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("agent.sock");
        let agent = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let profile: LinuxSeccomp = serde_json::from_value(serde_json::json!({
            "defaultAction": "SCMP_ACT_ALLOW", "listenerPath": sock, "listenerMetadata": "bar"}))
        .unwrap();
        let state = serde_json::json!({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 42});
        let file: OwnedFd = tempfile::tempfile().unwrap().into();
        send_to_agent(&profile, "1.0.2", 42, &state, &file).unwrap();
        let (conn, _) = agent.accept().unwrap();
        let mut buf = [0u8; 4096];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 1]);
        let msg =
            nix::sys::socket::recvmsg::<()>(conn.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::empty())
                .unwrap();
        let fds: Vec<_> = msg.cmsgs().unwrap().collect();
        let n = msg.bytes;
        assert_eq!(fds.len(), 1);
        let doc: serde_json::Value = serde_json::from_slice(&buf[..n]).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&buf[..n]),
            r#"{"ociVersion":"1.0.2","fds":["seccompFd"],"pid":42,"metadata":"bar","state":{"id":"c1","ociVersion":"1.0.2","pid":42,"status":"creating"}}"#
        );
        assert_eq!(doc["state"]["id"], "c1");
        let gone: LinuxSeccomp = serde_json::from_value(serde_json::json!({
            "defaultAction": "SCMP_ACT_ALLOW", "listenerPath": dir.path().join("none.sock")}))
        .unwrap();
        let e = send_to_agent(&gone, "1.0.2", 42, &state, &file)
            .unwrap_err()
            .to_string();
        assert!(e.contains("failed to connect with seccomp agent"), "{e}");
    }
}
