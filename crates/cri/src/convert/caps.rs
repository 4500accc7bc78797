//! A container's capabilities: the defaults (or, privileged, every one criusd holds) with the security
//! context's additions and drops, checked against criusd's bounding set.

use std::str::FromStr;

use crius_api::cri;
use oci_spec::runtime::{Capabilities, Capability};

use super::CALL;
use crate::error::{Error, Result};

/// The capabilities a container gets by default (containerd's and Docker's list).
pub const DEFAULT_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Every capability, by number (bit `n` of a capability set is `ALL_CAPS[n]`).
pub const ALL_CAPS: &[&str] = &[
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The names of the capabilities set in `mask` (a `CapBnd:` line's number).
pub fn names_of(mask: u64) -> Vec<String> {
    ALL_CAPS
        .iter()
        .enumerate()
        .filter(|(n, _)| mask & (1 << n) != 0)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// `net_admin` and `CAP_NET_ADMIN` alike, as kubelet passes on what a pod spec says.
fn norm(c: &str) -> String {
    let c = c.to_ascii_uppercase();
    if c.starts_with("CAP_") {
        c
    } else {
        format!("CAP_{c}")
    }
}

/// The container's capabilities, in order: the defaults (or, privileged, all of `bounding`), with the
/// security context's additions and drops. Adding one outside `bounding` is refused, naming it.
pub(crate) fn capabilities(
    sc: Option<&cri::LinuxContainerSecurityContext>,
    bounding: &[String],
) -> Result<Vec<String>> {
    let privileged = sc.is_some_and(|s| s.privileged);
    let mut caps: Vec<String> = if privileged {
        bounding.to_vec()
    } else {
        DEFAULT_CAPS
            .iter()
            .map(|c| c.to_string())
            .filter(|c| bounding.contains(c))
            .collect()
    };
    let Some(c) = sc.and_then(|s| s.capabilities.as_ref()) else {
        return Ok(caps);
    };
    for add in &c.add_capabilities {
        let name = norm(add);
        if add.eq_ignore_ascii_case("ALL") {
            caps = bounding.to_vec();
        } else if !bounding.contains(&name) {
            let why = if ALL_CAPS.contains(&name.as_str()) {
                "criusd itself does not hold it (not in its bounding set)"
            } else {
                "no such capability"
            };
            return Err(Error::invalid(
                CALL,
                format!("capability {name}"),
                format!("cannot be added: {why}"),
            ));
        } else if !caps.contains(&name) {
            caps.push(name);
        }
    }
    for drop in &c.drop_capabilities {
        if drop.eq_ignore_ascii_case("ALL") {
            caps.clear();
        } else {
            caps.retain(|c| *c != norm(drop));
        }
    }
    // Added after dropping ALL: `drop: [ALL], add: [NET_BIND_SERVICE]` keeps the additions.
    if c.drop_capabilities.iter().any(|d| d.eq_ignore_ascii_case("ALL")) {
        for add in c
            .add_capabilities
            .iter()
            .filter(|a| !a.eq_ignore_ascii_case("ALL"))
        {
            if !caps.contains(&norm(add)) {
                caps.push(norm(add));
            }
        }
    }
    Ok(caps)
}

/// The OCI set of `names`, each one of [`ALL_CAPS`] (as [`capabilities`] gives them: every name it keeps
/// is in the bounding set, which holds only names of `ALL_CAPS`).
pub(crate) fn set(names: &[String]) -> Result<Capabilities> {
    names
        .iter()
        .map(|n| {
            Capability::from_str(n.trim_start_matches("CAP_"))
                .map_err(|_| Error::invalid(CALL, format!("capability {n}"), "is not one oci-spec knows"))
        })
        .collect()
}
