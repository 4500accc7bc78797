//! The descriptor limit (`RLIMIT_NOFILE`) of criusd and of what runs under it. criusd raises its own soft limit
//! to the hard one at start, as containerd does: every client connection, port-forward and shim costs it a
//! descriptor, and the usual soft limit (1024) is the first thing a flood of connections exhausts. Its children
//! must not inherit the raise: the soft limit criusd started with is handed down in [`ENV`], and the shim puts it
//! back ([`restore_inherited`]) for itself and everything it runs, so a container without an `RLIMIT_NOFILE` of
//! its own gets what it got before the raise (Go programs, containerd among them, do the same for their children).

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// The environment variable that hands the soft limit criusd started with to its children.
pub const ENV: &str = "CRIUS_NOFILE_SOFT";

/// Raises this process's soft limit to its hard limit. Returns the soft limit it had, and the limits now.
pub fn raise() -> Result<(u64, (u64, u64)), String> {
    let (soft, hard) =
        getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit(RLIMIT_NOFILE): {e}"))?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
            .map_err(|e| format!("raising RLIMIT_NOFILE from {soft} to {hard}: {e}"))?;
    }
    let now = getrlimit(Resource::RLIMIT_NOFILE).map_err(|e| format!("getrlimit(RLIMIT_NOFILE): {e}"))?;
    Ok((soft, now))
}

/// The soft limit to put back, from [`ENV`]'s value `handed`, given the limits now: only a lower one.
fn to_restore(handed: Option<&str>, (soft, hard): (u64, u64)) -> Option<u64> {
    let v: u64 = handed?.trim().parse().ok()?;
    (v < soft && v <= hard).then_some(v)
}

/// Puts back the soft limit criusd handed down in [`ENV`], if it is lower than this process's (the shim calls
/// it first thing). Errors are ignored: the raised limit is kept.
pub fn restore_inherited() {
    let Ok(now) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return;
    };
    let handed = std::env::var(ENV).ok();
    if let Some(v) = to_restore(handed.as_deref(), now) {
        let _ = setrlimit(Resource::RLIMIT_NOFILE, v, now.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lower_valid_limit_is_put_back() {
        assert_eq!(to_restore(Some("1024"), (524288, 524288)), Some(1024));
        assert_eq!(to_restore(Some("1024"), (1024, 524288)), None);
        assert_eq!(to_restore(Some("4096"), (1024, 524288)), None);
        assert_eq!(to_restore(Some("x"), (524288, 524288)), None);
        assert_eq!(to_restore(None, (524288, 524288)), None);
    }
}
